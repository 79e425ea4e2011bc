"""The tool registry through the client and the LangChain tools built from it."""

from __future__ import annotations

import pytest

from mnemo_client import AsyncMnemo, Mnemo, MnemoError, ToolResult

EXPECTED = {"store_memory", "retrieve_memory", "search_memory", "manage_long_term_memory"}


def test_list_in_every_format(mnemo: Mnemo) -> None:
    openai = mnemo.tools.list("openai")
    assert all(t["type"] == "function" for t in openai)
    names = {t["function"]["name"] for t in openai}
    assert EXPECTED <= names
    assert all(t["function"]["parameters"]["type"] == "object" for t in openai)
    anthropic = mnemo.tools.list("anthropic")
    assert {t["name"] for t in anthropic} == names
    assert all("input_schema" in t for t in anthropic)
    mcp = mnemo.tools.list("mcp")
    assert {t["name"] for t in mcp} == names


def test_call_store_and_retrieve(mnemo: Mnemo, uid: str) -> None:
    stored = mnemo.tools.call("store_memory", {"content": f"tool output {uid}\n" * 50})
    assert isinstance(stored, ToolResult) and not stored.is_error
    assert "[MemoryRef:" in str(stored.content)
    key = stored.structured["memory_key"]
    assert mnemo.memories.retrieve(key).content.startswith(f"tool output {uid}")


def test_unknown_tool_and_bad_arguments(mnemo: Mnemo, readonly: Mnemo) -> None:
    with pytest.raises(MnemoError) as e:
        mnemo.tools.call("no_such_tool", {})
    assert e.value.status == 404
    with pytest.raises(MnemoError) as e:
        mnemo.tools.call("store_memory", {"content": 42})
    assert e.value.status == 422 and e.value.field
    with pytest.raises(MnemoError) as e:
        readonly.tools.call("store_memory", {"content": "x"})
    assert e.value.status == 403


def test_langchain_tools(mnemo: Mnemo, uid: str) -> None:
    from mnemo_client.langchain import mnemo_tools

    tools = {t.name: t for t in mnemo_tools(mnemo)}
    assert EXPECTED <= set(tools)
    store = tools["store_memory"]
    assert "content" in store.args
    content, artifact = store.func(content=f"langchain tool {uid}")  # type: ignore[misc]
    assert "[MemoryRef:" in content
    assert mnemo.memories.retrieve(artifact["memory_key"]).content == f"langchain tool {uid}"
    message = store.invoke(
        {
            "type": "tool_call",
            "id": "call_1",
            "name": "store_memory",
            "args": {"content": f"again {uid}"},
        }
    )
    assert "[MemoryRef:" in message.content and message.artifact["memory_key"]


@pytest.mark.anyio
async def test_langchain_tools_async(url: str, token: str, uid: str) -> None:
    from mnemo_client.langchain import amnemo_tools

    async with AsyncMnemo(url, token) as client:
        tools = {t.name: t for t in await amnemo_tools(client)}
        result = await tools["search_memory"].ainvoke({"query": f"nothing-{uid}"})
        assert isinstance(result, str)
