from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from mnemo_client import AsyncMnemo, Mnemo
from mnemo_client.langchain import MnemoChatMessageHistory


def test_history_round_trip(mnemo: Mnemo, other: Mnemo, uid: str) -> None:
    history = MnemoChatMessageHistory(f"lc-{uid}", mnemo, agent_id="assistant")
    assert history.messages == []
    history.add_user_message("I am Ann, I like tea")
    history.add_ai_message("Noted, Ann.")
    history.add_messages([HumanMessage("And coffee?"), AIMessage("Also noted.")])
    got = history.messages
    assert [type(m) for m in got] == [HumanMessage, AIMessage, HumanMessage, AIMessage]
    assert [m.content for m in got] == [
        "I am Ann, I like tea",
        "Noted, Ann.",
        "And coffee?",
        "Also noted.",
    ]
    assert all(m.id for m in got)
    # Stored in mnemo, where the rest of the service sees the conversation.
    assert mnemo.chat.session(f"lc-{uid}").agent_id == "assistant"
    assert mnemo.chat.search("coffee", session_id=f"lc-{uid}").hits
    assert MnemoChatMessageHistory(f"lc-{uid}", other).messages == []
    with pytest.raises(ValueError):
        history.add_messages([SystemMessage("not archivable")])
    history.clear()
    assert history.messages == []
    history.clear()  # clearing a missing session is fine


@pytest.mark.anyio
async def test_history_async(url: str, token: str, uid: str) -> None:
    async with AsyncMnemo(url, token) as client:
        history = MnemoChatMessageHistory(f"alc-{uid}", async_client=client)
        await history.aadd_messages([HumanMessage("hi"), AIMessage("hello")])
        got = await history.aget_messages()
        assert [m.content for m in got] == ["hi", "hello"]
        await history.aclear()
        assert await history.aget_messages() == []


def test_tool_built_from_an_openai_schema(mnemo: Mnemo) -> None:
    """The conversion alone (the live calls are in test_tools.py)."""
    from mnemo_client.langchain import _tool

    schema = {
        "type": "function",
        "function": {
            "name": "grep_memory",
            "description": "Grep a stored memory.",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string"}, "pattern": {"type": "string"}},
                "required": ["key", "pattern"],
            },
        },
    }
    tool = _tool(schema, client=mnemo)
    assert tool.name == "grep_memory" and tool.description == "Grep a stored memory."
    assert set(tool.args) == {"key", "pattern"}
    assert tool.response_format == "content_and_artifact"
    assert tool.func is not None and tool.coroutine is None
