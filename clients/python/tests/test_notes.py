from __future__ import annotations

import pytest

from mnemo_client import Mnemo, MnemoError, models


def test_notes_operations_versions_and_etags(mnemo: Mnemo, other: Mnemo, uid: str) -> None:
    agent = f"agent-{uid}"
    empty = mnemo.notes.read(agent)
    assert isinstance(empty, models.Notes)
    assert (empty.notes, empty.version) == ("", 0)

    first = mnemo.notes.operate("overwrite", agent=agent, content="# About Ann\n", if_match=0)
    assert isinstance(first, models.NotesOperationResponse)
    assert first.version == 1 and first.changed
    appended = mnemo.notes.append("- prefers tea", agent=agent, if_match=first.version)
    assert appended.notes == "# About Ann\n- prefers tea\n" and appended.version == 2
    assert mnemo.notes.read(agent, if_none_match=2) is None  # 304: unchanged
    assert mnemo.notes.read(agent, if_none_match=1).version == 2  # type: ignore[union-attr]

    with pytest.raises(MnemoError) as stale:
        mnemo.notes.prepend("x", agent=agent, if_match=1)
    assert stale.value.status == 412
    assert stale.value.problem["current_version"] == 2

    section = mnemo.notes.replace_section(
        "## Preferences", "- answers in French", agent=agent, upsert=True
    )
    assert "## Preferences\n- answers in French\n" in section.notes
    removed = mnemo.notes.delete_section("Preferences", agent=agent)
    assert "Preferences" not in removed.notes
    with pytest.raises(MnemoError) as missing:
        mnemo.notes.delete_section("Nowhere", agent=agent)
    assert missing.value.status == 404

    written = mnemo.notes.write("replaced\n", agent=agent, if_match=removed.version)
    assert written.notes == "replaced\n"
    cleared = mnemo.notes.clear(agent=agent)
    assert cleared.notes == ""

    revisions = list(mnemo.notes.revisions(agent, page_size=2))
    assert [r.version for r in revisions] == list(range(cleared.version, 0, -1))
    assert all(isinstance(r, models.RevisionSummary) for r in revisions)
    one = mnemo.notes.revision(2, agent=agent)
    assert one.notes == "# About Ann\n- prefers tea\n"
    restored = mnemo.notes.restore(2, agent=agent, if_match=cleared.version)
    assert restored.notes == one.notes and restored.version == cleared.version + 1

    assert other.notes.read(agent).version == 0  # type: ignore[union-attr]


def test_notes_bad_operation_is_422_with_field(mnemo: Mnemo, uid: str) -> None:
    with pytest.raises(MnemoError) as e:
        mnemo.notes.operate("append", agent=f"agent-{uid}")  # no content
    assert e.value.status == 422
    assert e.value.field == "content"
