"""LangChain integration (``pip install mnemo-client[langchain]``).

- ``MnemoChatMessageHistory``: a ``BaseChatMessageHistory`` kept in a mnemo chat session, so
  ``RunnableWithMessageHistory`` (or any LangChain memory) stores its conversation in mnemo,
  where recall, chat search and ``/api/chat/context`` see it.
- ``mnemo_tools(client)``: the service's agent tools (``GET /api/tools``) as LangChain
  ``StructuredTool``s, run through ``POST /api/tools/call`` under the client's token.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool

from ._async import AsyncMnemo
from ._errors import MnemoError
from ._sync import Mnemo
from .models import StoredMessage

__all__ = ["MnemoChatMessageHistory", "mnemo_tools"]


def _to_incoming(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Human messages are archived with sender ``user``, AI messages with ``ai`` (the two
    senders the archive takes); each keeps its ``id`` (one is generated when it has none) and
    gets a timestamp a microsecond after the previous one, so a batch keeps its order."""
    now = datetime.now(timezone.utc)
    out = []
    for i, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            sender = "user"
        elif isinstance(message, AIMessage):
            sender = "ai"
        else:
            raise ValueError(
                f"mnemo archives human and AI messages only, not {type(message).__name__}"
            )
        if not message.id:
            message.id = str(uuid.uuid4())
        stamp = (now + timedelta(microseconds=i)).isoformat().replace("+00:00", "Z")
        out.append({"id": message.id, "sender": sender, "text": message.text, "timestamp": stamp})
    return out


def _from_stored(message: StoredMessage) -> BaseMessage:
    if message.sender == "user":
        return HumanMessage(content=message.text, id=message.id)
    if message.sender == "tool":
        return ToolMessage(
            content=message.text, tool_call_id=message.tool_call_id or "", id=message.id
        )
    return AIMessage(content=message.text, id=message.id)


class MnemoChatMessageHistory(BaseChatMessageHistory):
    """The messages of one mnemo chat session.

    ``client`` may be a ``Mnemo`` (for the blocking methods) and ``async_client`` an
    ``AsyncMnemo`` (for ``aget_messages``/``aadd_messages``/``aclear``); without an async
    client the async methods run the blocking ones in a thread. ``agent_id`` is used when the
    session is created. ``clear()`` deletes the session with its messages.
    """

    def __init__(
        self,
        session_id: str,
        client: Mnemo | None = None,
        *,
        async_client: AsyncMnemo | None = None,
        agent_id: str | None = None,
        page_size: int = 500,
    ) -> None:
        if client is None and async_client is None:
            raise ValueError("MnemoChatMessageHistory needs a client or an async_client")
        self.session_id = session_id
        self.client = client
        self.async_client = async_client
        self.agent_id = agent_id
        self.page_size = page_size

    def _sync(self) -> Mnemo:
        if self.client is None:
            raise RuntimeError("this history has only an async client: use the a* methods")
        return self.client

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        try:
            stored = list(self._sync().chat.messages(self.session_id, page_size=self.page_size))
        except MnemoError as e:
            if e.status == 404:
                return []
            raise
        return [_from_stored(m) for m in stored]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            self._sync().chat.archive(
                self.session_id, _to_incoming(messages), agent_id=self.agent_id
            )

    def clear(self) -> None:
        try:
            self._sync().chat.delete_session(self.session_id)
        except MnemoError as e:
            if e.status != 404:
                raise

    async def aget_messages(self) -> list[BaseMessage]:
        if self.async_client is None:
            return await super().aget_messages()
        out = []
        try:
            async for m in self.async_client.chat.messages(
                self.session_id, page_size=self.page_size
            ):
                out.append(_from_stored(m))
        except MnemoError as e:
            if e.status == 404:
                return []
            raise
        return out

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if self.async_client is None:
            return await super().aadd_messages(messages)
        if messages:
            await self.async_client.chat.archive(
                self.session_id, _to_incoming(messages), agent_id=self.agent_id
            )

    async def aclear(self) -> None:
        if self.async_client is None:
            return await super().aclear()
        try:
            await self.async_client.chat.delete_session(self.session_id)
        except MnemoError as e:
            if e.status != 404:
                raise


def mnemo_tools(client: Mnemo | AsyncMnemo) -> list[StructuredTool]:
    """The service's agent tools as LangChain tools, built from their OpenAI-format schemas.

    Each tool answers ``(content, artifact)``: the text for the model and the structured
    result. A tool that reports an error (``is_error``) gives its text back to the model
    rather than raising, so the model can correct the call. With an ``AsyncMnemo`` the tools
    are async (``ainvoke``); with a ``Mnemo`` they block.
    """
    if isinstance(client, AsyncMnemo):
        raise TypeError("for an AsyncMnemo use amnemo_tools (an async function)")
    return [_tool(schema, client=client) for schema in client.tools.list("openai")]


async def amnemo_tools(client: AsyncMnemo) -> list[StructuredTool]:
    """``mnemo_tools`` for an ``AsyncMnemo``: the tools run with ``ainvoke``."""
    return [_tool(schema, aclient=client) for schema in await client.tools.list("openai")]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # MCP-style content blocks
        return "\n".join(
            str(block.get("text", "")) if isinstance(block, dict) else str(block)
            for block in content
        )
    return "" if content is None else str(content)


def _tool(
    schema: dict[str, Any], *, client: Mnemo | None = None, aclient: AsyncMnemo | None = None
) -> StructuredTool:
    function = schema.get("function", schema)
    name = function["name"]
    parameters = function.get("parameters") or {"type": "object", "properties": {}}

    def run(**arguments: Any) -> tuple[str, Any]:
        assert client is not None
        result = client.tools.call(name, arguments)
        return _text(result.content), result.structured

    async def arun(**arguments: Any) -> tuple[str, Any]:
        assert aclient is not None
        result = await aclient.tools.call(name, arguments)
        return _text(result.content), result.structured

    return StructuredTool.from_function(
        func=run if client is not None else None,
        coroutine=arun if aclient is not None else None,
        name=name,
        description=function.get("description", ""),
        args_schema=parameters,
        infer_schema=False,
        response_format="content_and_artifact",
    )
