from __future__ import annotations

import asyncio

import pytest

from mnemo_client import AsyncMnemo, MnemoError, models

pytestmark = pytest.mark.anyio


async def test_async_client_round_trip(url: str, token: str, uid: str) -> None:
    async def current() -> str:  # an async token source
        return token

    async with AsyncMnemo(url, current) as mnemo:
        me = await mnemo.me()
        assert me.user_id == "py-alice"
        stored = await asyncio.gather(
            *(mnemo.memories.store(f"async {i} {uid}", thread_id=uid) for i in range(5))
        )
        assert len({s.memory_key for s in stored}) == 5
        listed = [m.memory_key async for m in mnemo.memories.list(thread_id=uid, page_size=2)]
        assert sorted(listed) == sorted(s.memory_key for s in stored)
        page = await mnemo.memories.retrieve(stored[0].memory_key)
        assert isinstance(page, models.MemoryPage) and page.content.startswith("async")
        task = await mnemo.tasks.register(f"async {uid}", plan=["a", "b"])
        update = await mnemo.tasks.update(task.id, status="completed")
        assert update.status == "completed"
        notes = await mnemo.notes.append("- async", agent=f"a-{uid}")
        assert notes.version == 1
        hits = await mnemo.recall(f"async {uid}", kinds=["memory"])
        assert hits.hits
        with pytest.raises(MnemoError) as e:
            await mnemo.memories.retrieve(f"missing-{uid}")
        assert e.value.status == 404
