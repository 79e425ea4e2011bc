from __future__ import annotations

import pytest

from mnemo_client import Mnemo, MnemoError, models


def test_recall_across_kinds(mnemo: Mnemo, other: Mnemo, uid: str) -> None:
    word = f"walrus{uid}"
    stored = mnemo.memories.store(f"notes on the {word} migration")
    mnemo.chat.archive(
        f"r-{uid}",
        [
            {
                "id": "a",
                "sender": "user",
                "text": f"I saw a {word}",
                "timestamp": "2026-01-01T00:00:00Z",
            }
        ],
    )
    results = mnemo.recall(word, limit=10)
    assert isinstance(results, models.RecallResults)
    kinds = {h.kind for h in results.hits}
    assert kinds == {"memory", "message"}
    assert stored.memory_key in {h.memory_key for h in results.hits}
    only = mnemo.recall(word, kinds=["message"])
    assert {h.kind for h in only.hits} == {"message"}
    assert other.recall(word).hits == []


def test_me_and_export(mnemo: Mnemo, readonly: Mnemo) -> None:
    me = mnemo.me()
    assert me.user_id == "py-alice" and me.tenant_id == "py"
    assert set(readonly.account.me().scopes) == {"memory:read"}
    archive = mnemo.account.export()
    assert archive[:2] == b"\x1f\x8b"  # gzip


def test_missing_scope_is_403(readonly: Mnemo) -> None:
    with pytest.raises(MnemoError) as e:
        readonly.memories.store("nope")
    assert e.value.status == 403
    assert e.value.request_id


def test_erase_needs_confirmation(mnemo: Mnemo) -> None:
    with pytest.raises(MnemoError) as e:
        mnemo.account.erase(confirm="someone-else")
    assert e.value.status in (400, 422)
