from __future__ import annotations

import pytest

from mnemo_client import Mnemo, MnemoError, models


def _msg(i: int, text: str, sender: str = "user") -> dict:
    return {
        "id": f"m{i}",
        "sender": sender,
        "text": text,
        "timestamp": f"2026-01-02T10:00:{i:02d}Z",
    }


def test_archive_messages_sessions_and_delete(mnemo: Mnemo, other: Mnemo, uid: str) -> None:
    session = f"s-{uid}"
    batch = [_msg(i, f"message {i} about kayak{uid}", "user" if i % 2 else "ai") for i in range(12)]
    archived = mnemo.chat.archive(session, batch, agent_id="assistant")
    assert isinstance(archived, models.ArchiveResponse)
    assert (archived.new, archived.duplicates) == (12, 0)
    again = mnemo.chat.archive(session, batch[:3])
    assert (again.new, again.duplicates) == (0, 3)
    gone = mnemo.chat.archive(session, [models.IncomingMessage(id="m0", deleted=True)])
    assert gone.deleted == 1

    messages = list(mnemo.chat.messages(session, page_size=5))
    assert [m.id for m in messages] == [f"m{i}" for i in range(1, 12)]
    assert all(isinstance(m, models.StoredMessage) for m in messages)
    newest = list(mnemo.chat.messages(session, order="desc", page_size=4))
    assert newest[0].id == "m11"
    page = mnemo.chat.messages_page(session, limit=5)
    assert len(page.items) == 5 and page.next_cursor

    info = mnemo.chat.session(session)
    assert isinstance(info, models.Session) and info.session_id == session
    assert info.message_count and info.message_count >= 11
    assert session in {s.session_id for s in mnemo.chat.sessions(page_size=1)}
    assert session not in {s.session_id for s in other.chat.sessions()}

    found = mnemo.chat.search(f"kayak{uid}", session_id=session, limit=3)
    assert isinstance(found, models.ChatSearchResults)
    assert len(found.hits) == 3 and found.has_more
    assert other.chat.search(f"kayak{uid}").hits == []

    mnemo.chat.delete_session(session)
    with pytest.raises(MnemoError) as e:
        mnemo.chat.session(session)
    assert e.value.status == 404


def test_context_and_chat(mnemo: Mnemo, uid: str) -> None:
    session = f"c-{uid}"
    mnemo.notes.append("- lives in Lyon", agent="assistant")
    ctx = mnemo.chat.context(session, [_msg(1, "hello there")])
    assert isinstance(ctx, models.ContextResponse)
    assert ctx.new == 1
    assert all(isinstance(m, models.ChatMessage) for m in ctx.messages)
    assert any("Lyon" in (m.content or "") for m in ctx.messages)
    assert ctx.messages[-1].content == "hello there"

    reply = mnemo.chat.chat(session, [_msg(2, "what do you know?")])
    assert isinstance(reply, models.ChatResponse)
    assert reply.reply.text == "Noted."  # the stand-in model of the test run
    assert [m.id for m in mnemo.chat.messages(session)][:2] == ["m1", "m2"]
