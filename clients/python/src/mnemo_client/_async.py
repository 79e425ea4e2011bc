"""The client and its resources (``_sync.py`` is generated from this file by dropping
``async``/``await``, so both behave the same)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx

from . import models as m
from ._model import Model
from ._tool_result import ToolResult
from ._transport import (
    AsyncTransport,
    Request,
    RetryPolicy,
    TokenSource,
    drop_none,
    new_idempotency_key,
)

T = TypeVar("T", bound=Model)
Message = Mapping[str, Any] | m.IncomingMessage
ToolFormat = Literal["openai", "anthropic", "mcp"]
DEFAULT_AGENT = "assistant"


def _seg(value: str | int) -> str:
    return quote(str(value), safe="")


def _etag(version: int | str | None) -> str | None:
    if version is None:
        return None
    if isinstance(version, int):
        return f'"{version}"'
    return version


def _plain(value: Any) -> Any:
    """A request body value: models become JSON objects without their unset members."""
    if isinstance(value, Model):
        return {k: _plain(v) for k, v in value.to_dict().items() if v is not None}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class _Resource:
    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def _call(self, req: Request) -> httpx.Response:
        return await self._t.send(req)

    async def _model(self, req: Request, model: type[T]) -> T:
        response = await self._t.send(req)
        return model.from_dict(response.json())

    def _write(
        self, method: str, path: str, body: Any, key: str | None = None, **kw: Any
    ) -> Request:
        """A write that the service makes idempotent with a key: one key per call, the same on
        every retry of it."""
        return Request(method, path, json=body, idempotency_key=key or new_idempotency_key(), **kw)

    async def _pages(
        self, path: str, params: dict[str, Any], page: type[Any]
    ) -> AsyncIterator[Any]:
        cursor = params.pop("cursor", None)
        while True:
            result = await self._model(
                Request("GET", path, params={**params, "cursor": cursor}), page
            )
            for item in result.items or []:
                yield item
            cursor = result.next_cursor
            if not cursor:
                return


class AsyncMemories(_Resource):
    """Detail memory: big outputs stored once, referred to by placeholder, read a page at a
    time, grepped and searched."""

    async def store(
        self,
        content: str,
        *,
        key: str | None = None,
        description: str | None = None,
        memory_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.StoredMemory:
        """Stores ``content``: under ``key`` (``PUT``, replacing what was there) or under a
        generated key (``POST``, with an idempotency key)."""
        body = drop_none(
            {
                "content": content,
                "description": description,
                "memory_type": memory_type,
                "metadata": _plain(metadata),
                "agent_id": agent_id,
                "thread_id": thread_id,
            }
        )
        if key is not None:
            req = Request("PUT", f"/api/memories/{_seg(key)}", json=body)
            return await self._model(req, m.StoredMemory)
        req = self._write("POST", "/api/memories", body, idempotency_key)
        return await self._model(req, m.StoredMemory)

    async def retrieve(
        self,
        key: str,
        *,
        offset: int | None = None,
        limit: int | None = None,
        line_start: int | None = None,
        line_count: int | None = None,
        include_inactive: bool | None = None,
    ) -> m.MemoryPage:
        """One page: by bytes (``offset``/``limit``) or by lines (``line_start``/``line_count``)."""
        params = {
            "offset": offset,
            "limit": limit,
            "line_start": line_start,
            "line_count": line_count,
            "include_inactive": include_inactive,
        }
        req = Request("GET", f"/api/memories/{_seg(key)}", params=params)
        return await self._model(req, m.MemoryPage)

    async def pages(
        self,
        key: str,
        *,
        line_count: int | None = None,
        limit: int | None = None,
        include_inactive: bool | None = None,
    ) -> AsyncIterator[m.MemoryPage]:
        """Every page of a memory from the start, following each page's ``next``."""
        params: dict[str, Any] = {"line_start": 1, "line_count": line_count}
        if limit is not None or line_count is None:
            params = {"offset": 0, "limit": limit}
        while True:
            page = await self.retrieve(key, include_inactive=include_inactive, **params)
            yield page
            if page.next is None:
                return
            params = {
                k: v
                for k, v in page.next.to_dict().items()
                if k in ("offset", "limit", "line_start", "line_count") and v is not None
            }

    async def read_all(self, key: str, *, include_inactive: bool | None = None) -> str:
        """The whole content, read page by page."""
        parts = []
        async for page in self.pages(key, include_inactive=include_inactive):
            parts.append(page.content)
        return "".join(parts)

    async def grep(
        self,
        key: str,
        pattern: str,
        *,
        context: int | None = None,
        max_matches: int | None = None,
        ignore_case: bool | None = None,
        include_inactive: bool | None = None,
    ) -> m.GrepResult:
        """Lines of a memory matching a regular expression, with line numbers and context."""
        params = {
            "pattern": pattern,
            "context": context,
            "max_matches": max_matches,
            "ignore_case": ignore_case,
            "include_inactive": include_inactive,
        }
        req = Request("GET", f"/api/memories/{_seg(key)}/grep", params=params)
        return await self._model(req, m.GrepResult)

    async def search(
        self,
        query: str,
        *,
        mode: m.SearchMode | None = None,
        limit: int | None = None,
        agent_id: str | None = None,
        thread_id: str | None = None,
        memory_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        include_inactive: bool | None = None,
    ) -> m.MemorySearchResults:
        """Memories matching ``query`` by words, meaning or both; ``metadata`` is an object the
        memory's metadata must contain."""
        filters = drop_none(
            {
                "agent_id": agent_id,
                "thread_id": thread_id,
                "memory_type": memory_type,
                "metadata": _plain(metadata),
                "created_after": created_after,
                "created_before": created_before,
                "include_inactive": include_inactive,
            }
        )
        body = drop_none({"query": query, "mode": mode, "limit": limit, "filters": filters or None})
        req = Request("POST", "/api/memories/search", json=body, safe=True)
        return await self._model(req, m.MemorySearchResults)

    async def capture(
        self,
        content: str,
        *,
        command: str | None = None,
        exit_code: int | None = None,
        duration_ms: int | None = None,
        key: str | None = None,
        memory_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        thread_id: str | None = None,
        threshold_tokens: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.CaptureResult:
        """A tool output for the model's context: inline when small, else stored and replaced
        by its placeholder (``context``)."""
        body = drop_none(
            {
                "content": content,
                "command": command,
                "exit_code": exit_code,
                "duration_ms": duration_ms,
                "key": key,
                "memory_type": memory_type,
                "metadata": _plain(metadata),
                "agent_id": agent_id,
                "thread_id": thread_id,
                "threshold_tokens": threshold_tokens,
            }
        )
        req = self._write("POST", "/api/memories/capture", body, idempotency_key)
        return await self._model(req, m.CaptureResult)

    async def list_page(
        self,
        *,
        agent_id: str | None = None,
        thread_id: str | None = None,
        memory_type: str | None = None,
        metadata: Mapping[str, Any] | str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        include_inactive: bool | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.MemoryList:
        """One page of memories, newest first, without content."""
        req = Request(
            "GET",
            "/api/memories",
            params=_list_params(
                agent_id,
                thread_id,
                memory_type,
                metadata,
                created_after,
                created_before,
                include_inactive,
                limit,
                cursor,
            ),
        )
        return await self._model(req, m.MemoryList)

    async def list(
        self,
        *,
        agent_id: str | None = None,
        thread_id: str | None = None,
        memory_type: str | None = None,
        metadata: Mapping[str, Any] | str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        include_inactive: bool | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.MemoryInfo]:
        """Every memory matching the filters, newest first, following ``next_cursor``."""
        params = _list_params(
            agent_id,
            thread_id,
            memory_type,
            metadata,
            created_after,
            created_before,
            include_inactive,
            page_size,
            None,
        )
        async for item in self._pages("/api/memories", params, m.MemoryList):
            yield item

    async def delete(self, key: str, *, hard: bool = False) -> None:
        """Soft delete (hidden, readable with ``include_inactive``) or, with ``hard``, gone."""
        params = {"hard": True} if hard else None
        await self._call(Request("DELETE", f"/api/memories/{_seg(key)}", params=params))


def _list_params(
    agent_id: str | None,
    thread_id: str | None,
    memory_type: str | None,
    metadata: Mapping[str, Any] | str | None,
    created_after: str | None,
    created_before: str | None,
    include_inactive: bool | None,
    limit: int | None,
    cursor: str | None,
) -> dict[str, Any]:
    if metadata is not None and not isinstance(metadata, str):
        metadata = json.dumps(_plain(metadata), separators=(",", ":"))
    return {
        "agent_id": agent_id,
        "thread_id": thread_id,
        "memory_type": memory_type,
        "metadata": metadata,
        "created_after": created_after,
        "created_before": created_before,
        "include_inactive": include_inactive,
        "limit": limit,
        "cursor": cursor,
    }


class AsyncNotes(_Resource):
    """Long-term notes: one Markdown document per agent, versioned. Every write takes
    ``if_match`` (the version it is based on, an ``int`` or an ETag; ``"*"`` for any): a stale
    one raises ``MnemoError`` 412 with ``problem["current_version"]``."""

    def _path(self, agent: str) -> str:
        return f"/api/agents/{_seg(agent)}/notes"

    async def read(
        self, agent: str = DEFAULT_AGENT, *, if_none_match: int | str | None = None
    ) -> m.Notes | None:
        """The notes (version 0 and empty when never written); ``None`` when ``if_none_match``
        names the current version."""
        headers = {"If-None-Match": _etag(if_none_match)} if if_none_match is not None else None
        response = await self._call(Request("GET", self._path(agent), headers=headers))  # type: ignore[arg-type]
        if response.status_code == 304:
            return None
        return m.Notes.from_dict(response.json())

    async def operate(
        self,
        operation: m.Operation,
        *,
        agent: str = DEFAULT_AGENT,
        content: str | None = None,
        section_header: str | None = None,
        upsert: bool | None = None,
        if_match: int | str | None = None,
        idempotency_key: str | None = None,
    ) -> m.NotesOperationResponse:
        """One ``manage_long_term_memory`` operation: ``read``, ``overwrite``, ``append``,
        ``prepend``, ``replace_section_by_header``, ``delete_section_by_header`` or
        ``delete_all_notes``."""
        body = drop_none(
            {
                "operation": operation,
                "content": content,
                "section_header": section_header,
                "upsert": upsert,
            }
        )
        req = self._write("POST", self._path(agent) + "/operations", body, idempotency_key)
        if if_match is not None:
            req.headers = {"If-Match": _etag(if_match)}  # type: ignore[dict-item]
        return await self._model(req, m.NotesOperationResponse)

    async def append(
        self, content: str, *, agent: str = DEFAULT_AGENT, if_match: int | str | None = None
    ) -> m.NotesOperationResponse:
        return await self.operate("append", agent=agent, content=content, if_match=if_match)

    async def prepend(
        self, content: str, *, agent: str = DEFAULT_AGENT, if_match: int | str | None = None
    ) -> m.NotesOperationResponse:
        return await self.operate("prepend", agent=agent, content=content, if_match=if_match)

    async def replace_section(
        self,
        section_header: str,
        content: str,
        *,
        agent: str = DEFAULT_AGENT,
        upsert: bool = False,
        if_match: int | str | None = None,
    ) -> m.NotesOperationResponse:
        return await self.operate(
            "replace_section_by_header",
            agent=agent,
            section_header=section_header,
            content=content,
            upsert=upsert or None,
            if_match=if_match,
        )

    async def delete_section(
        self, section_header: str, *, agent: str = DEFAULT_AGENT, if_match: int | str | None = None
    ) -> m.NotesOperationResponse:
        return await self.operate(
            "delete_section_by_header",
            agent=agent,
            section_header=section_header,
            if_match=if_match,
        )

    async def write(
        self, notes: str, *, agent: str = DEFAULT_AGENT, if_match: int | str | None = None
    ) -> m.NotesOperationResponse:
        """Replaces the whole notes (``PUT``)."""
        headers = {"If-Match": _etag(if_match)} if if_match is not None else None
        req = Request("PUT", self._path(agent), json={"notes": notes}, headers=headers)  # type: ignore[arg-type]
        return await self._model(req, m.NotesOperationResponse)

    async def clear(
        self, *, agent: str = DEFAULT_AGENT, if_match: int | str | None = None
    ) -> m.NotesOperationResponse:
        """Empties the notes (the revisions keep the text)."""
        headers = {"If-Match": _etag(if_match)} if if_match is not None else None
        req = Request("DELETE", self._path(agent), headers=headers)  # type: ignore[arg-type]
        return await self._model(req, m.NotesOperationResponse)

    async def revisions_page(
        self, agent: str = DEFAULT_AGENT, *, limit: int | None = None, cursor: str | None = None
    ) -> m.RevisionPage:
        req = Request(
            "GET", self._path(agent) + "/revisions", params={"limit": limit, "cursor": cursor}
        )
        return await self._model(req, m.RevisionPage)

    async def revisions(
        self, agent: str = DEFAULT_AGENT, *, page_size: int | None = None
    ) -> AsyncIterator[m.RevisionSummary]:
        """Every kept revision, newest first."""
        async for item in self._pages(
            self._path(agent) + "/revisions", {"limit": page_size}, m.RevisionPage
        ):
            yield item

    async def revision(self, version: int, *, agent: str = DEFAULT_AGENT) -> m.Revision:
        req = Request("GET", f"{self._path(agent)}/revisions/{int(version)}")
        return await self._model(req, m.Revision)

    async def restore(
        self,
        version: int,
        *,
        agent: str = DEFAULT_AGENT,
        if_match: int | str | None = None,
        idempotency_key: str | None = None,
    ) -> m.NotesOperationResponse:
        """A kept revision's text becomes the notes, as a new version."""
        req = self._write(
            "POST", f"{self._path(agent)}/revisions/{int(version)}/restore", None, idempotency_key
        )
        if if_match is not None:
            req.headers = {"If-Match": _etag(if_match)}  # type: ignore[dict-item]
        return await self._model(req, m.NotesOperationResponse)


class AsyncChat(_Resource):
    """Conversation memory: archived sessions, compiled context, the model with memory."""

    async def archive(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        agent_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.ArchiveResponse:
        """Archives a batch of the visible conversation. Messages (``id``, ``sender`` ``user`` or
        ``ai``, ``text``, ``timestamp``; ``edited_at``, ``deleted``) may be sent again: unchanged
        they count as duplicates, changed they update the stored message."""
        body = drop_none(
            {
                "session_id": session_id,
                "messages_batch": _plain(list(messages)),
                "agent_id": agent_id,
            }
        )
        req = self._write("POST", "/api/chat/session/archive_messages", body, idempotency_key)
        return await self._model(req, m.ArchiveResponse)

    async def context(
        self,
        session_id: str,
        new_messages: Sequence[Message] | None = None,
        *,
        agent_id: str | None = None,
    ) -> m.ContextResponse:
        """The working memory of a turn (notes, summary, recent window, recalled memories) as
        chat messages, storing ``new_messages`` first. Needs no model."""
        body = drop_none(
            {
                "session_id": session_id,
                "new_messages": _plain(list(new_messages)) if new_messages is not None else None,
                "agent_id": agent_id,
            }
        )
        return await self._model(Request("POST", "/api/chat/context", json=body), m.ContextResponse)

    async def chat(
        self,
        session_id: str,
        new_messages: Sequence[Message],
        *,
        agent_id: str | None = None,
    ) -> m.ChatResponse:
        """One turn with the configured model, which may use the memory tools."""
        body = drop_none(
            {
                "session_id": session_id,
                "new_messages": _plain(list(new_messages)),
                "agent_id": agent_id,
            }
        )
        return await self._model(Request("POST", "/api/chat", json=body), m.ChatResponse)

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        mode: m.SearchMode | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
    ) -> m.ChatSearchResults:
        """Messages matching ``query`` across the caller's sessions."""
        body = drop_none(
            {
                "query": query,
                "session_id": session_id,
                "agent_id": agent_id,
                "mode": mode,
                "limit": limit,
                "after": after,
                "before": before,
            }
        )
        req = Request("POST", "/api/chat/search", json=body, safe=True)
        return await self._model(req, m.ChatSearchResults)

    async def sessions_page(
        self, *, agent_id: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> m.SessionPage:
        params = {"agent_id": agent_id, "limit": limit, "cursor": cursor}
        return await self._model(Request("GET", "/api/chat/sessions", params=params), m.SessionPage)

    async def sessions(
        self, *, agent_id: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[m.Session]:
        """Every session, most recently active first."""
        params = {"agent_id": agent_id, "limit": page_size}
        async for item in self._pages("/api/chat/sessions", params, m.SessionPage):
            yield item

    async def session(self, session_id: str) -> m.Session:
        req = Request("GET", f"/api/chat/sessions/{_seg(session_id)}")
        return await self._model(req, m.Session)

    async def delete_session(self, session_id: str) -> None:
        await self._call(Request("DELETE", f"/api/chat/sessions/{_seg(session_id)}"))

    async def messages_page(
        self,
        session_id: str,
        *,
        order: Literal["asc", "desc"] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.MessagePage:
        params = {"order": order, "limit": limit, "cursor": cursor}
        req = Request("GET", f"/api/chat/sessions/{_seg(session_id)}/messages", params=params)
        return await self._model(req, m.MessagePage)

    async def messages(
        self,
        session_id: str,
        *,
        order: Literal["asc", "desc"] | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.StoredMessage]:
        """Every message of a session, oldest first (``order="desc"``: newest first)."""
        path = f"/api/chat/sessions/{_seg(session_id)}/messages"
        async for item in self._pages(path, {"order": order, "limit": page_size}, m.MessagePage):
            yield item


class AsyncTasks(_Resource):
    """Task memory: registered tasks with plans, progress, history and a "where was I?"."""

    def _path(self, task_id: str, rest: str = "") -> str:
        return f"/api/tasks/{_seg(task_id)}{rest}"

    async def register(
        self,
        name: str,
        *,
        plan: Sequence[str | Mapping[str, Any]] | None = None,
        original_user_task: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> m.TaskDetail:
        """Registers a task, with a plan of step titles (or step/stage objects) if given."""
        body = drop_none(
            {
                "name": name,
                "plan": _plain(list(plan)) if plan is not None else None,
                "original_user_task": original_user_task,
                "metadata": _plain(metadata),
            }
        )
        return await self._model(
            self._write("POST", "/api/tasks", body, idempotency_key), m.TaskDetail
        )

    async def update(
        self,
        task_id: str,
        *,
        message: str | None = None,
        status: m.Status | None = None,
        query: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.UpdateResult:
        """The ``task_update`` tool: a progress message, a status, and/or a question."""
        body = drop_none({"message": message, "status": status, "query": query})
        req = self._write("POST", self._path(task_id, "/update"), body, idempotency_key)
        return await self._model(req, m.UpdateResult)

    async def query(self, task_id: str, query: str) -> m.QueryAnswer:
        """ "Where was I?": the digest of a task, and an answer to ``query``."""
        req = Request("POST", self._path(task_id, "/query"), json={"query": query}, safe=True)
        return await self._model(req, m.QueryAnswer)

    async def get(self, task_id: str) -> m.TaskDetail:
        return await self._model(Request("GET", self._path(task_id)), m.TaskDetail)

    async def patch(
        self,
        task_id: str,
        *,
        status: m.Status | None = None,
        phase: m.Phase | None = None,
        name: str | None = None,
        final_answer: str | None = None,
        error_summary: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> m.TaskDetail:
        body = drop_none(
            {
                "status": status,
                "phase": phase,
                "name": name,
                "final_answer": final_answer,
                "error_summary": _plain(error_summary),
                "metadata": _plain(metadata),
            }
        )
        return await self._model(Request("PATCH", self._path(task_id), json=body), m.TaskDetail)

    async def delete(self, task_id: str) -> None:
        await self._call(Request("DELETE", self._path(task_id)))

    async def list_page(
        self,
        *,
        status: m.Status | None = None,
        phase: m.Phase | None = None,
        include_archived: bool | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.TaskPage:
        params = {
            "status": status,
            "phase": phase,
            "include_archived": include_archived,
            "limit": limit,
            "cursor": cursor,
        }
        return await self._model(Request("GET", "/api/tasks", params=params), m.TaskPage)

    async def list(
        self,
        *,
        status: m.Status | None = None,
        phase: m.Phase | None = None,
        include_archived: bool | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.Task]:
        """Every task, newest first."""
        params = {
            "status": status,
            "phase": phase,
            "include_archived": include_archived,
            "limit": page_size,
        }
        async for item in self._pages("/api/tasks", params, m.TaskPage):
            yield item

    async def search_page(
        self,
        query: str,
        *,
        task_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        mode: m.SearchMode | None = None,
    ) -> m.TaskSearchPage:
        """Search over one task's history (``task_id``) or over every task, by words, meaning or
        both (``mode``)."""
        path = self._path(task_id, "/search") if task_id else "/api/tasks/search"
        body = drop_none({"query": query, "limit": limit, "cursor": cursor, "mode": mode})
        return await self._model(Request("POST", path, json=body, safe=True), m.TaskSearchPage)

    async def search(
        self,
        query: str,
        *,
        task_id: str | None = None,
        page_size: int | None = None,
        mode: m.SearchMode | None = None,
    ) -> AsyncIterator[m.TaskSearchHit]:
        """Every hit of a history search, following ``next_cursor``."""
        cursor = None
        while True:
            page = await self.search_page(
                query, task_id=task_id, limit=page_size, cursor=cursor, mode=mode
            )
            for hit in page.hits or []:
                yield hit
            cursor = page.next_cursor
            if not cursor:
                return

    async def put_plan(
        self,
        task_id: str,
        plan: Sequence[str | Mapping[str, Any]],
        *,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.Plan:
        """A replan: plan version N+1 (earlier versions are kept)."""
        body = drop_none({"plan": _plain(list(plan)), "reason": reason})
        req = self._write("PUT", self._path(task_id, "/plan"), body, idempotency_key)
        return await self._model(req, m.Plan)

    async def plans(self, task_id: str) -> m.PlanVersions:
        return await self._model(Request("GET", self._path(task_id, "/plans")), m.PlanVersions)

    async def plan(self, task_id: str, version: int) -> m.Plan:
        req = Request("GET", self._path(task_id, f"/plans/{int(version)}"))
        return await self._model(req, m.Plan)

    async def set_item_status(self, task_id: str, ordinal: int, status: m.ItemStatus) -> m.PlanItem:
        """Sets the status of step ``ordinal`` of the active plan."""
        req = Request(
            "PATCH", self._path(task_id, f"/items/{int(ordinal)}"), json={"status": status}
        )
        return await self._model(req, m.PlanItem)

    async def add_action(
        self,
        task_id: str,
        ordinal: int,
        action_type: m.ActionType,
        summary: str,
        *,
        status: m.ActionStatus | None = None,
        input_data: Any = None,
        output_data: Any = None,
        idempotency_key: str | None = None,
    ) -> m.Action:
        body = drop_none(
            {
                "action_type": action_type,
                "summary": summary,
                "status": status,
                "input_data": _plain(input_data),
                "output_data": _plain(output_data),
            }
        )
        path = self._path(task_id, f"/items/{int(ordinal)}/actions")
        return await self._model(self._write("POST", path, body, idempotency_key), m.Action)

    async def actions(
        self, task_id: str, ordinal: int, *, page_size: int | None = None
    ) -> AsyncIterator[m.Action]:
        path = self._path(task_id, f"/items/{int(ordinal)}/actions")
        async for item in self._pages(path, {"limit": page_size}, m.ActionPage):
            yield item

    async def patch_action(
        self,
        task_id: str,
        action_id: str,
        *,
        status: m.ActionStatus | None = None,
        summary: str | None = None,
        output_data: Any = None,
    ) -> m.Action:
        body = drop_none({"status": status, "summary": summary, "output_data": _plain(output_data)})
        req = Request("PATCH", self._path(task_id, f"/actions/{_seg(action_id)}"), json=body)
        return await self._model(req, m.Action)

    async def add_action_log(
        self,
        task_id: str,
        action_id: str,
        log_type: str,
        content: str,
        *,
        idempotency_key: str | None = None,
    ) -> m.ActionLog:
        path = self._path(task_id, f"/actions/{_seg(action_id)}/logs")
        body = {"log_type": log_type, "content": content}
        return await self._model(self._write("POST", path, body, idempotency_key), m.ActionLog)

    async def action_logs(
        self, task_id: str, action_id: str, *, page_size: int | None = None
    ) -> AsyncIterator[m.ActionLog]:
        path = self._path(task_id, f"/actions/{_seg(action_id)}/logs")
        async for item in self._pages(path, {"limit": page_size}, m.ActionLogPage):
            yield item

    async def add_events(
        self,
        task_id: str,
        events: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> m.Appended:
        """Appends execution-log events (``step_narrative``, ``status``, ``tool_name``, ...)."""
        body = {"events": _plain(list(events))}
        req = self._write("POST", self._path(task_id, "/events"), body, idempotency_key)
        return await self._model(req, m.Appended)

    async def events(
        self,
        task_id: str,
        *,
        status: m.EventStatus | None = None,
        tool_name: str | None = None,
        sub_task_id: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.Event]:
        params = {
            "status": status,
            "tool_name": tool_name,
            "sub_task_id": sub_task_id,
            "limit": page_size,
        }
        async for item in self._pages(self._path(task_id, "/events"), params, m.EventPage):
            yield item

    async def add_message(
        self,
        task_id: str,
        content: str,
        *,
        role: m.Role | None = None,
        msg_type: m.MsgType | None = None,
        idempotency_key: str | None = None,
    ) -> m.TaskMessage | m.StuckSuppressed:
        """Appends a message; a ``stuck`` message inside its cooldown answers
        ``StuckSuppressed``."""
        body = drop_none({"content": content, "role": role, "msg_type": msg_type})
        req = self._write("POST", self._path(task_id, "/messages"), body, idempotency_key)
        response = await self._call(req)
        if response.status_code == 200:
            return m.StuckSuppressed.from_dict(response.json())
        return m.TaskMessage.from_dict(response.json())

    async def messages(
        self, task_id: str, *, page_size: int | None = None
    ) -> AsyncIterator[m.TaskMessage]:
        async for item in self._pages(
            self._path(task_id, "/messages"), {"limit": page_size}, m.TaskMessagePage
        ):
            yield item

    async def add_snapshot(
        self,
        task_id: str,
        label: str,
        content: str,
        *,
        is_summarized: bool | None = None,
        timestamp: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.Snapshot:
        body = drop_none(
            {
                "label": label,
                "content": content,
                "is_summarized": is_summarized,
                "timestamp": timestamp,
            }
        )
        req = self._write("POST", self._path(task_id, "/snapshots"), body, idempotency_key)
        return await self._model(req, m.Snapshot)

    async def snapshots(
        self, task_id: str, *, page_size: int | None = None
    ) -> AsyncIterator[m.Snapshot]:
        async for item in self._pages(
            self._path(task_id, "/snapshots"), {"limit": page_size}, m.SnapshotPage
        ):
            yield item

    async def append_step(
        self,
        task_id: str,
        agent_name: str,
        parts: Sequence[Mapping[str, Any]],
        *,
        step_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.Step:
        """Appends a step: ``parts`` of ``{"type": "text", "text"}``, ``{"type": "tool_call",
        "tool_call_id", "tool_name", "arguments"}``, ``{"type": "tool_result", "tool_call_id",
        "output"}``, ..."""
        body = drop_none(
            {"agent_name": agent_name, "parts": _plain(list(parts)), "step_id": step_id}
        )
        req = self._write("POST", self._path(task_id, "/steps"), body, idempotency_key)
        return await self._model(req, m.Step)

    async def steps_page(
        self,
        task_id: str,
        *,
        recent: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.StepPage:
        """A page of steps, or the last ``recent`` ones."""
        params = {"recent": recent, "limit": limit, "cursor": cursor}
        return await self._model(
            Request("GET", self._path(task_id, "/steps"), params=params), m.StepPage
        )

    async def steps(self, task_id: str, *, page_size: int | None = None) -> AsyncIterator[m.Step]:
        async for item in self._pages(
            self._path(task_id, "/steps"), {"limit": page_size}, m.StepPage
        ):
            yield item

    async def upload_artifact(
        self,
        task_id: str,
        data: bytes,
        *,
        name: str | None = None,
        content_type: str = "application/octet-stream",
        idempotency_key: str | None = None,
    ) -> m.Artifact:
        req = Request(
            "POST",
            self._path(task_id, "/artifacts"),
            params={"name": name},
            content=data,
            headers={"Content-Type": content_type},
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        return await self._model(req, m.Artifact)

    async def artifacts(
        self, task_id: str, *, page_size: int | None = None
    ) -> AsyncIterator[m.Artifact]:
        async for item in self._pages(
            self._path(task_id, "/artifacts"), {"limit": page_size}, m.ArtifactPage
        ):
            yield item

    async def read_artifact(
        self, task_id: str, artifact_id: str, *, start: int | None = None, end: int | None = None
    ) -> bytes:
        """An artifact's bytes; with ``start`` (and ``end``, inclusive) only that range."""
        headers = None
        if start is not None:
            headers = {"Range": f"bytes={start}-{'' if end is None else end}"}
        req = Request(
            "GET", self._path(task_id, f"/artifacts/{_seg(artifact_id)}"), headers=headers
        )
        return (await self._call(req)).content

    async def delete_artifact(self, task_id: str, artifact_id: str) -> None:
        await self._call(Request("DELETE", self._path(task_id, f"/artifacts/{_seg(artifact_id)}")))

    async def get_config(self, task_id: str) -> m.TaskConfigSnapshot:
        return await self._model(
            Request("GET", self._path(task_id, "/config")), m.TaskConfigSnapshot
        )

    async def put_config(self, task_id: str, config: Mapping[str, Any]) -> m.TaskConfigSnapshot:
        """Stores the task's configuration snapshot, once."""
        req = Request("PUT", self._path(task_id, "/config"), json=_plain(config))
        return await self._model(req, m.TaskConfigSnapshot)

    async def create_wait(
        self,
        task_id: str,
        target_type: str,
        target_id: str,
        criteria: str,
        *,
        poll_interval: float | None = None,
        timeout_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.Wait:
        body = drop_none(
            {
                "target_type": target_type,
                "target_id": target_id,
                "criteria": criteria,
                "poll_interval": poll_interval,
                "timeout_seconds": timeout_seconds,
            }
        )
        req = self._write("POST", self._path(task_id, "/waits"), body, idempotency_key)
        return await self._model(req, m.Wait)

    async def waits(self, task_id: str, *, page_size: int | None = None) -> AsyncIterator[m.Wait]:
        async for item in self._pages(
            self._path(task_id, "/waits"), {"limit": page_size}, m.WaitPage
        ):
            yield item

    async def get_wait(self, task_id: str, wait_id: str) -> m.Wait:
        return await self._model(
            Request("GET", self._path(task_id, f"/waits/{_seg(wait_id)}")), m.Wait
        )

    async def resolve_wait(
        self, task_id: str, wait_id: str, status: m.WaitEnd, *, result_message: str | None = None
    ) -> m.Wait:
        body = drop_none({"status": status, "result_message": result_message})
        req = Request("PATCH", self._path(task_id, f"/waits/{_seg(wait_id)}"), json=body)
        return await self._model(req, m.Wait)

    async def export(self, task_id: str) -> bytes:
        """The task as a ``.tar.gz`` archive."""
        return (await self._call(Request("GET", self._path(task_id, "/export")))).content

    async def import_archive(
        self, archive: bytes, *, keep_id: bool | None = None, idempotency_key: str | None = None
    ) -> m.ImportResult:
        """Recreates a task from an archive made by ``export``."""
        req = Request(
            "POST",
            "/api/tasks/import",
            params={"keep_id": keep_id},
            content=archive,
            headers={"Content-Type": "application/gzip"},
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        return await self._model(req, m.ImportResult)


class AsyncAccount(_Resource):
    """The caller's own account: who it is, export, import, erasure."""

    async def me(self) -> m.Me:
        return await self._model(Request("GET", "/api/me"), m.Me)

    async def export(self) -> bytes:
        """Everything of the caller as one ``.tar.gz``."""
        return (await self._call(Request("GET", "/api/me/export"))).content

    async def import_archive(self, archive: bytes) -> m.AccountImportResult:
        req = Request(
            "POST", "/api/me/import", content=archive, headers={"Content-Type": "application/gzip"}
        )
        return await self._model(req, m.AccountImportResult)

    async def erase(self, *, confirm: str) -> m.Erased:
        """Hard-deletes everything of the caller; ``confirm`` must be the caller's user id."""
        req = Request("DELETE", "/api/me/data", params={"confirm": confirm})
        return await self._model(req, m.Erased)


class AsyncTools(_Resource):
    """The agent tools of the service, with their function-calling schemas."""

    async def list(self, format: ToolFormat = "openai") -> list[dict[str, Any]]:
        """The tool schemas in a vendor's shape: ``openai`` (``{type: "function", function:
        {name, description, parameters}}``), ``anthropic`` (``{name, description,
        input_schema}``) or ``mcp`` (``{name, description, inputSchema}``)."""
        response = await self._call(Request("GET", "/api/tools", params={"format": format}))
        data = response.json()
        if isinstance(data, Mapping) and "tools" in data:
            data = data["tools"]
        return list(data)

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Runs one tool under the caller's token. A tool's own failure is ``is_error`` in the
        result; an unknown tool (404), bad arguments (422) or a missing scope (403) raise."""
        body = {"name": name, "arguments": _plain(arguments or {})}
        return await self._model(Request("POST", "/api/tools/call", json=body), ToolResult)


class AsyncMnemo:
    """A client of one mnemo service.

    ``token`` is a JWT, or a function returning one (called before every request, so it can
    refresh; after a 401 it is asked once more). ``retry`` says how transient failures are
    retried (see ``RetryPolicy``). Use it as a context manager, or call ``aclose()``.
    """

    def __init__(
        self,
        base_url: str,
        token: TokenSource,
        *,
        timeout: float | httpx.Timeout = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._own_client = http_client is None
        self._http = http_client or httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=timeout, headers=dict(headers or {})
        )
        self._transport = AsyncTransport(self._http, token, retry or RetryPolicy())
        self.memories = AsyncMemories(self._transport)
        self.notes = AsyncNotes(self._transport)
        self.chat = AsyncChat(self._transport)
        self.tasks = AsyncTasks(self._transport)
        self.account = AsyncAccount(self._transport)
        self.tools = AsyncTools(self._transport)

    async def recall(
        self,
        query: str,
        *,
        kinds: Sequence[m.Kind] | None = None,
        mode: m.SearchMode | None = None,
        limit: int | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        after: str | None = None,
        before: str | None = None,
    ) -> m.RecallResults:
        """One search across memories, messages, notes and task history, ranked together."""
        filters = drop_none(
            {"agent_id": agent_id, "session_id": session_id, "after": after, "before": before}
        )
        body = drop_none(
            {
                "query": query,
                "kinds": list(kinds) if kinds is not None else None,
                "mode": mode,
                "limit": limit,
                "filters": filters or None,
            }
        )
        req = Request("POST", "/api/recall", json=body, safe=True)
        return m.RecallResults.from_dict((await self._transport.send(req)).json())

    async def me(self) -> m.Me:
        """Who the token speaks for (tenant, user, scopes)."""
        return await self.account.me()

    async def aclose(self) -> None:
        if self._own_client:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncMnemo:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
