from __future__ import annotations

import pytest

from mnemo_client import Mnemo, MnemoError, models

BIG = "\n".join(f"line {i}: {'ok' if i % 100 else 'ERROR disk full'}" for i in range(1, 2001))


def test_store_retrieve_grep_delete(mnemo: Mnemo, uid: str) -> None:
    stored = mnemo.memories.store(
        BIG, memory_type="command_output", metadata={"run": uid}, agent_id=f"agent-{uid}"
    )
    assert isinstance(stored, models.StoredMemory)
    assert stored.status == "created"
    assert stored.line_count == 2000
    assert stored.memory_key in stored.placeholder

    page = mnemo.memories.retrieve(stored.memory_key, line_start=100, line_count=2)
    assert isinstance(page.range, models.PageRange)
    assert page.content == "line 100: ERROR disk full\nline 101: ok\n"
    assert page.next is not None and page.next.line_start == 102
    assert page.totals.line_count == 2000

    assert mnemo.memories.read_all(stored.memory_key) == BIG
    pages = list(mnemo.memories.pages(stored.memory_key, line_count=700))
    assert [p.range.line_start for p in pages] == [1, 701, 1401]
    assert "".join(p.content for p in pages) == BIG

    grep = mnemo.memories.grep(stored.memory_key, "error DISK", ignore_case=True, context=1)
    assert grep.total_matches == 20
    assert grep.matches[0].line_number == 100
    assert isinstance(grep.matches[0], models.GrepMatch)
    assert grep.matches[0].before[0].line == "line 99: ok"

    mnemo.memories.delete(stored.memory_key)
    with pytest.raises(MnemoError) as e:
        mnemo.memories.retrieve(stored.memory_key)
    assert e.value.status == 404
    soft = mnemo.memories.retrieve(stored.memory_key, include_inactive=True, limit=10)
    assert soft.is_active is False
    mnemo.memories.delete(stored.memory_key, hard=True)
    with pytest.raises(MnemoError) as e:
        mnemo.memories.retrieve(stored.memory_key, include_inactive=True)
    assert e.value.status == 404


def test_store_under_key_is_idempotent(mnemo: Mnemo, uid: str) -> None:
    key = f"py.{uid}"
    first = mnemo.memories.store("hello world", key=key, description="greeting")
    again = mnemo.memories.store("hello world", key=key, description="greeting")
    changed = mnemo.memories.store("hello there", key=key)
    assert (first.status, again.status, changed.status) == ("created", "unchanged", "replaced")
    assert first.memory_key == key
    assert mnemo.memories.retrieve(key).content == "hello there"


def test_search_with_filters(mnemo: Mnemo, uid: str) -> None:
    word = f"zebra{uid}"
    mnemo.memories.store(f"the {word} crossed", metadata={"team": uid, "n": 1}, thread_id=uid)
    mnemo.memories.store(f"another {word} here", metadata={"team": "else"})
    results = mnemo.memories.search(word, limit=10)
    assert isinstance(results, models.MemorySearchResults)
    assert len(results.hits) == 2
    assert all(isinstance(h, models.MemorySearchHit) for h in results.hits)
    only = mnemo.memories.search(word, metadata={"team": uid})
    assert len(only.hits) == 1
    assert only.hits[0].snippet and word in only.hits[0].snippet
    by_thread = mnemo.memories.search(word, thread_id=uid, mode="keyword")
    assert [h.memory_key for h in by_thread.hits] == [only.hits[0].memory_key]


def test_capture_inline_and_stored(mnemo: Mnemo, uid: str) -> None:
    small = mnemo.memories.capture("3 passed", command="pytest", exit_code=0)
    assert isinstance(small, models.CaptureResult)
    assert small.stored is False and small.context == "3 passed" and small.memory is None
    big = mnemo.memories.capture(BIG, command=f"make {uid}", exit_code=2, threshold_tokens=50)
    assert big.stored is True
    assert isinstance(big.memory, models.StoredMemory)
    assert big.memory.placeholder in big.context


def test_list_follows_cursors(mnemo: Mnemo, uid: str) -> None:
    keys = {mnemo.memories.store(f"item {i}", thread_id=uid).memory_key for i in range(7)}
    page = mnemo.memories.list_page(thread_id=uid, limit=3)
    assert isinstance(page, models.MemoryList) and len(page.items) == 3 and page.next_cursor
    listed = list(mnemo.memories.list(thread_id=uid, page_size=3))
    assert {m.memory_key for m in listed} == keys
    assert len(listed) == 7
    assert all(isinstance(m, models.MemoryInfo) for m in listed)
    assert list(mnemo.memories.list(thread_id=f"none-{uid}")) == []


def test_another_user_sees_nothing(mnemo: Mnemo, other: Mnemo, uid: str) -> None:
    stored = mnemo.memories.store(f"secret {uid}", key=f"iso.{uid}")
    with pytest.raises(MnemoError) as e:
        other.memories.retrieve(stored.memory_key)
    assert e.value.status == 404
    assert other.memories.search(f"secret {uid}").hits == []
    assert me_differs(mnemo, other)


def me_differs(a: Mnemo, b: Mnemo) -> bool:
    ma, mb = a.me(), b.me()
    assert isinstance(ma, models.Me)
    return ma.tenant_id == mb.tenant_id and ma.user_id != mb.user_id
