from __future__ import annotations

import pytest
from langgraph.store.base import Item, SearchItem

from mnemo_client import AsyncMnemo, Mnemo
from mnemo_client.langgraph import MnemoStore


def test_store_put_get_search_delete(mnemo: Mnemo, other: Mnemo, uid: str) -> None:
    store = MnemoStore(mnemo, prefix=f"t{uid}")
    ns = ("users", "ann", "memories")
    store.put(ns, "m1", {"text": f"likes hiking{uid} in the Alps", "kind": "hobby", "n": 1})
    store.put(ns, "m2", {"text": f"hates hiking{uid} in the rain", "kind": "dislike", "n": 2})
    store.put(("users", "bob", "memories"), "m1", {"text": f"bob hiking{uid}", "kind": "hobby"})
    store.put(("users", "ann", "prefs"), "lang", {"text": "French", "n": 3})

    item = store.get(ns, "m1")
    assert isinstance(item, Item)
    assert item.value["kind"] == "hobby" and item.namespace == ns and item.key == "m1"
    assert store.get(ns, "missing") is None

    store.put(ns, "m1", {"text": f"loves hiking{uid} in the Alps", "kind": "hobby", "n": 1})
    assert store.get(ns, "m1").value["text"].startswith("loves")  # type: ignore[union-attr]

    ann = store.search(("users", "ann"), limit=10)
    assert {(i.namespace, i.key) for i in ann} == {
        (ns, "m1"),
        (ns, "m2"),
        (("users", "ann", "prefs"), "lang"),
    }
    assert all(isinstance(i, SearchItem) for i in ann)
    assert len(store.search(("users",), limit=2)) == 2
    assert len(store.search(("users",), limit=10, offset=3)) == 1

    hobbies = store.search(("users",), filter={"kind": "hobby"})
    assert {(i.namespace[1], i.key) for i in hobbies} == {("ann", "m1"), ("bob", "m1")}
    big = store.search(("users", "ann"), filter={"n": {"$gte": 2}})
    assert {i.key for i in big} == {"m2", "lang"}

    found = store.search(("users", "ann"), query=f"hiking{uid}")
    assert {i.key for i in found} == {"m1", "m2"}
    assert all(i.score is not None for i in found)
    rain = store.search(("users",), query=f"hiking{uid}", filter={"kind": "dislike"})
    assert [i.key for i in rain] == ["m2"]

    assert store.list_namespaces(prefix=("users",)) == [
        ("users", "ann", "memories"),
        ("users", "ann", "prefs"),
        ("users", "bob", "memories"),
    ]
    assert store.list_namespaces(max_depth=2) == [("users", "ann"), ("users", "bob")]
    assert store.list_namespaces(suffix=("prefs",)) == [("users", "ann", "prefs")]

    assert MnemoStore(other, prefix=f"t{uid}").get(ns, "m1") is None  # another user

    store.delete(ns, "m1")
    assert store.get(ns, "m1") is None
    assert {i.key for i in store.search(ns)} == {"m2"}
    store.delete(ns, "m1")  # deleting again is fine

    results = store.batch([])
    assert results == []


@pytest.mark.anyio
async def test_store_async(url: str, token: str, uid: str) -> None:
    async with AsyncMnemo(url, token) as client:
        store = MnemoStore(async_client=client, prefix=f"a{uid}")
        await store.aput(("docs",), "d1", {"title": f"gardening{uid} tips"})
        got = await store.aget(("docs",), "d1")
        assert got is not None and got.value["title"] == f"gardening{uid} tips"
        hits = await store.asearch(("docs",), query=f"gardening{uid}")
        assert [h.key for h in hits] == ["d1"]
        await store.adelete(("docs",), "d1")
        assert await store.aget(("docs",), "d1") is None
