"""LangGraph integration (``pip install mnemo-client[langgraph]``): ``MnemoStore``, a
``BaseStore`` that keeps a graph's long-term memory in mnemo.

How items map onto mnemo memories (one memory per item, in the token's own tenant and user):

- memory key: ``<prefix>.<id>``, where ``id`` is the first 40 hex digits of the SHA-256 of the
  JSON array ``[namespace, key]`` (mnemo keys are short and ``[A-Za-z0-9._:-]``; namespaces and
  keys are any strings);
- content: the value as JSON, so the service's search (keyword, semantic or hybrid, whatever it
  runs) matches the words of the value; ``memory_type``: ``langgraph``;
- metadata: ``{"langgraph": {"store": prefix, "id": id, "ns": {"0": label0, "1": label1, ...},
  "depth": len(namespace), "key": key, "value": value, "updated_at": ...}}``. Namespace prefixes
  and equality filters on the value become one metadata containment filter; the other filter
  operators (``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``) are applied to the results.

``put(..., value=None)`` (``delete``) hard-deletes the memory. ``index`` and ``ttl`` are
accepted and ignored: mnemo indexes every memory, and keeps it until deleted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Generator, Iterable
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from ._async import AsyncMnemo
from ._errors import MnemoError
from ._sync import Mnemo
from .models import MemoryInfo

__all__ = ["MnemoStore"]

MEMORY_TYPE = "langgraph"
_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}

# A call on the client, as the operation handlers yield it: (resource, method, args, kwargs).
Call = tuple[str, str, tuple[Any, ...], dict[str, Any]]


class MnemoStore(BaseStore):
    """LangGraph long-term memory in mnemo.

    ``client`` (a ``Mnemo``) serves ``batch`` and the blocking methods, ``async_client`` (an
    ``AsyncMnemo``) serves ``abatch`` and the ``a*`` methods; without an async client they run
    the blocking ones in a thread. ``prefix`` separates stores that share one account.
    """

    supports_ttl = False

    def __init__(
        self,
        client: Mnemo | None = None,
        *,
        async_client: AsyncMnemo | None = None,
        prefix: str = "lg",
    ) -> None:
        if client is None and async_client is None:
            raise ValueError("MnemoStore needs a client or an async_client")
        if not re.fullmatch(r"[A-Za-z0-9_:-]{1,64}", prefix):
            raise ValueError("prefix: 1 to 64 of [A-Za-z0-9_:-]")
        self.client = client
        self.async_client = async_client
        self.prefix = prefix

    # -- the two entry points ----------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self.client is None:
            raise RuntimeError("this store has only an async client: use abatch")
        results = []
        for op in ops:
            gen = self._op(op)
            try:
                call = next(gen)
                while True:
                    call = gen.send(self._run_sync(call))
            except StopIteration as done:
                results.append(done.value)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        if self.async_client is None:
            return await asyncio.to_thread(self.batch, list(ops))
        results = []
        for op in ops:
            gen = self._op(op)
            try:
                call = next(gen)
                while True:
                    call = gen.send(await self._run_async(call))
            except StopIteration as done:
                results.append(done.value)
        return results

    def _run_sync(self, call: Call) -> Any:
        resource, method, args, kwargs = call
        try:
            return getattr(getattr(self.client, resource), method)(*args, **kwargs)
        except MnemoError as e:
            return e

    async def _run_async(self, call: Call) -> Any:
        resource, method, args, kwargs = call
        try:
            return await getattr(getattr(self.async_client, resource), method)(*args, **kwargs)
        except MnemoError as e:
            return e

    # -- the mapping -------------------------------------------------------------------------

    def _id(self, namespace: tuple[str, ...], key: str) -> str:
        raw = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()[:40]

    def _filter(
        self,
        namespace_prefix: tuple[str, ...] = (),
        *,
        id: str | None = None,
        value: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        inner: dict[str, Any] = {"store": self.prefix}
        if id is not None:
            inner["id"] = id
        if namespace_prefix:
            inner["ns"] = {str(i): label for i, label in enumerate(namespace_prefix)}
        if value:
            inner["value"] = value
        return {"langgraph": inner}

    def _item(self, info: MemoryInfo, score: float | None = None) -> Item | SearchItem | None:
        meta = (info.metadata or {}).get("langgraph")
        if not isinstance(meta, dict):
            return None
        ns = meta.get("ns") or {}
        namespace = tuple(ns[str(i)] for i in range(int(meta.get("depth", len(ns)))))
        created = _time(info.created_at)
        updated = _time(meta.get("updated_at")) or created
        kw = dict(
            namespace=namespace,
            key=meta.get("key", ""),
            value=meta.get("value") or {},
            created_at=created,
            updated_at=updated,
        )
        if score is not None:
            return SearchItem(**kw, score=score)
        return Item(**kw)

    # -- the operations, as generators of client calls ---------------------------------------

    def _op(self, op: Op) -> Generator[Call, Any, Result]:
        if isinstance(op, GetOp):
            return (yield from self._get(op.namespace, op.key))
        if isinstance(op, PutOp):
            return (yield from self._put(op))
        if isinstance(op, SearchOp):
            return (yield from self._search(op))
        if isinstance(op, ListNamespacesOp):
            return (yield from self._list_namespaces(op))
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _lookup(self, id: str) -> Generator[Call, Any, MemoryInfo | None]:
        page = yield ("memories", "list_page", (), {"metadata": self._filter(id=id), "limit": 1})
        _raise(page)
        return page.items[0] if page.items else None

    def _get(self, namespace: tuple[str, ...], key: str) -> Generator[Call, Any, Item | None]:
        info = yield from self._lookup(self._id(namespace, key))
        return self._item(info) if info is not None else None

    def _put(self, op: PutOp) -> Generator[Call, Any, None]:
        id = self._id(op.namespace, op.key)
        memory_key = f"{self.prefix}.{id}"
        if op.value is None:
            result = yield ("memories", "delete", (memory_key,), {"hard": True})
            if isinstance(result, MnemoError) and result.status != 404:
                raise result
            return None
        meta = self._filter(op.namespace, id=id)["langgraph"]
        meta.update(
            depth=len(op.namespace),
            key=op.key,
            value=op.value,
            updated_at=datetime.now(timezone.utc).isoformat(),
        )
        result = yield (
            "memories",
            "store",
            (json.dumps(op.value, ensure_ascii=False, sort_keys=True),),
            {"key": memory_key, "memory_type": MEMORY_TYPE, "metadata": {"langgraph": meta}},
        )
        _raise(result)
        return None

    def _search(self, op: SearchOp) -> Generator[Call, Any, list[SearchItem]]:
        equal, rest = _split_filter(op.filter or {})
        metadata = self._filter(op.namespace_prefix, value=equal)
        wanted = op.offset + op.limit
        found: list[SearchItem] = []
        if op.query:
            # Fetch more than asked when some filters run here, so that enough remain.
            limit = min(100, wanted * (3 if rest else 1))
            results = yield (
                "memories",
                "search",
                (op.query,),
                {"metadata": metadata, "memory_type": MEMORY_TYPE, "limit": limit},
            )
            _raise(results)
            seen = set()
            for hit in results.hits or []:
                if hit.memory_key in seen or not hit.memory_key.startswith(self.prefix + "."):
                    continue
                seen.add(hit.memory_key)
                info = yield from self._lookup(hit.memory_key[len(self.prefix) + 1 :])
                item = self._item(info, score=hit.score) if info is not None else None
                if item is not None and _matches(item.value, rest):
                    found.append(item)  # type: ignore[arg-type]
                if len(found) >= wanted:
                    break
        else:
            cursor = None
            while len(found) < wanted:
                page = yield (
                    "memories",
                    "list_page",
                    (),
                    {"metadata": metadata, "limit": 200, "cursor": cursor},
                )
                _raise(page)
                for info in page.items or []:
                    item = self._item(info)
                    if item is not None and _matches(item.value, rest):
                        found.append(SearchItem(**_fields(item)))
                cursor = page.next_cursor
                if not cursor:
                    break
        return found[op.offset : wanted]

    def _list_namespaces(self, op: ListNamespacesOp) -> Generator[Call, Any, list[tuple[str, ...]]]:
        namespaces: set[tuple[str, ...]] = set()
        cursor = None
        while True:
            page = yield (
                "memories",
                "list_page",
                (),
                {"metadata": self._filter(), "limit": 200, "cursor": cursor},
            )
            _raise(page)
            for info in page.items or []:
                item = self._item(info)
                if item is None:
                    continue
                ns = item.namespace
                if all(
                    _ns_matches(ns, c.match_type, tuple(c.path)) for c in op.match_conditions or ()
                ):
                    namespaces.add(ns[: op.max_depth] if op.max_depth is not None else ns)
            cursor = page.next_cursor
            if not cursor:
                break
        ordered = sorted(namespaces)
        return ordered[op.offset : op.offset + op.limit]


def _raise(result: Any) -> None:
    if isinstance(result, MnemoError):
        raise result


def _fields(item: Item) -> dict[str, Any]:
    return dict(
        namespace=item.namespace,
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _time(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return datetime.now(timezone.utc)


def _split_filter(filter: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Equality conditions (sent to the service) and operator conditions (checked here)."""
    equal: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for field, cond in filter.items():
        if isinstance(cond, dict) and cond and all(k.startswith("$") for k in cond):
            if set(cond) == {"$eq"}:
                equal[field] = cond["$eq"]
            else:
                rest[field] = cond
        else:
            equal[field] = cond
    return equal, rest


def _matches(value: dict[str, Any], rest: dict[str, Any]) -> bool:
    for field, cond in rest.items():
        actual = value.get(field)
        for op, expected in cond.items():
            check = _OPERATORS.get(op)
            if check is None:
                raise ValueError(f"unsupported filter operator {op}")
            try:
                if not check(actual, expected):
                    return False
            except TypeError:
                return False
    return True


def _ns_matches(ns: tuple[str, ...], match_type: str, path: tuple[str, ...]) -> bool:
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=False))
