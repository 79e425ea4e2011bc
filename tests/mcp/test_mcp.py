"""mnemo's MCP server (``/mcp``) through the official MCP Python SDK: the handshake, the tool
and resource listings, a large output stored, searched, paged and grepped, long-term notes,
"where was I?" on a task, isolation between users, scopes, and the OAuth challenge (RFC 9728)
that sends clients without a token to the protected-resource metadata."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult, TextContent

from conftest import HANDSHAKE, STATELESS

TOOLS = {
    "store_memory",
    "retrieve_memory",
    "grep_memory",
    "search_memory",
    "capture_output",
    "manage_long_term_memory",
    "task_register",
    "task_update",
    "task_query",
    "append_step",
    "memory_search",
    "artifact_read",
    "recall",
}
TEMPLATES = {"mnemo://notes/{agent}", "mnemo://memories/{key}", "mnemo://tasks/{task_id}"}

# Raw HTTP (no SDK): what a client sends before it has a session, or without a token.
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": HANDSHAKE,
        "capabilities": {},
        "clientInfo": {"name": "mnemo-tests", "version": "0"},
    },
}


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Calls a tool that must succeed; returns its structured result."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, f"{name} failed: {text_of(result)}"
    assert [block.type for block in result.content] == ["text"], result.content
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def field(result: dict[str, Any], name: str) -> Any:
    """``result[name]``, failing with the names the result has instead."""
    assert name in result, f"no `{name}` in the result; it has {sorted(result)}"
    return result[name]


async def call_failing(client: Client, name: str, arguments: dict[str, Any]) -> CallToolResult:
    """Calls a tool that must fail as a tool (``isError``), not as a protocol error."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} should have failed: {text_of(result)}"
    assert text_of(result), "an error result explains itself"
    return result


async def read_text(client: Client, uri: str) -> str:
    result = await client.read_resource(uri)
    assert result.contents, uri
    texts = [getattr(item, "text", None) for item in result.contents]
    assert all(isinstance(text, str) for text in texts), result.contents
    return "\n".join(texts)


def build_log(word: str) -> list[str]:
    """A 5,000-line build log with ``word`` on line 3777 only."""
    lines = [
        f"2026-11-21T10:{i // 60 % 60:02d}:{i % 60:02d}Z INFO worker-{i % 7} step {i:05d} ok"
        for i in range(1, 5001)
    ]
    lines[3776] = f"2026-11-21T11:02:57Z ERROR worker-3 step 03777 {word} refused the connection"
    return lines


# --- handshake and listings ----------------------------------------------------------------


@pytest.mark.anyio
async def test_initialize_lists_tools_and_templates(connect, token: str) -> None:
    async with connect(token) as client:
        assert client.protocol_version == HANDSHAKE
        info = client.server_info
        assert info is not None and info.name and info.version, info
        capabilities = client.server_capabilities
        assert capabilities.tools is not None and capabilities.resources is not None

        tools = (await client.list_tools()).tools
        names = {tool.name for tool in tools}
        assert TOOLS <= names, f"missing tools: {sorted(TOOLS - names)}"
        for tool in tools:
            assert tool.description, tool.name
            assert isinstance(tool.input_schema, dict), tool.name
            assert tool.input_schema.get("type") == "object", (tool.name, tool.input_schema)
        store = next(tool for tool in tools if tool.name == "store_memory")
        assert "content" in store.input_schema.get("required", []), store.input_schema

        templates = (await client.list_resource_templates()).resource_templates
        uris = {template.uri_template for template in templates}
        assert TEMPLATES <= uris, f"missing templates: {sorted(TEMPLATES - uris)}"


@pytest.mark.anyio
async def test_auto_negotiates_the_stateless_era(connect, token: str) -> None:
    async with connect(token, mode="auto") as client:
        assert client.protocol_version == STATELESS
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert TOOLS <= names


# --- a large output: store, search, page, grep ----------------------------------------------


@pytest.mark.anyio
async def test_large_output_round_trip(connect_era, token: str, uid: str) -> None:
    word = "quokkamarmalade"
    lines = build_log(word)
    key = f"mcp-build-{uid}"
    async with connect_era(token) as client:
        result = await client.call_tool(
            "store_memory",
            {
                "content": "\n".join(lines) + "\n",
                "description": "nightly build log",
                "key": key,
                "memory_type": "command_output",
            },
        )
        assert not result.is_error, text_of(result)
        stored = result.structured_content
        assert isinstance(stored, dict)
        assert stored["memory_key"] == key
        assert stored["status"] == "created"
        assert stored["line_count"] == 5000
        placeholder = stored["placeholder"]
        assert re.fullmatch(rf"\[MemoryRef: {re.escape(key)} - .+\]", placeholder), placeholder
        assert placeholder in text_of(result)

        found = await call(client, "search_memory", {"query": word, "limit": 10})
        results = field(found, "hits")
        hits = [hit["memory_key"] for hit in results]
        assert key in hits, found
        hit = results[hits.index(key)]
        assert hit["placeholder"] == placeholder

        page = await call(
            client, "retrieve_memory", {"key": key, "line_start": 2500, "line_count": 10}
        )
        assert page["content"].splitlines() == lines[2499:2509], page["content"]

        grep = await call(client, "grep_memory", {"key": key, "pattern": word, "context": 1})
        assert grep["total_matches"] == 1, grep
        match = grep["matches"][0]
        assert match["line_number"] == 3777
        assert match["line"] == lines[3776]

        # The first page as a resource, and a line range through the URI's query.
        first = await read_text(client, f"mnemo://memories/{key}")
        assert lines[0] in first
        ranged = await read_text(client, f"mnemo://memories/{key}?line_start=4000&line_count=2")
        assert lines[3999] in ranged and lines[4000] in ranged and lines[0] not in ranged

        # Arguments the tool refuses are a tool error the model can read, not a protocol error.
        await call_failing(client, "retrieve_memory", {"key": key, "line_start": 0})
        missing = await call_failing(client, "retrieve_memory", {"key": f"mcp-nothing-{uid}"})
        assert "not found" in text_of(missing).lower() or "404" in text_of(missing)


# --- long-term notes ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_notes_append_read_and_resource(connect_era, token: str, uid: str) -> None:
    agent = f"mcp-{uid}"
    async with connect_era(token) as client:
        appended = await call(
            client,
            "manage_long_term_memory",
            {"agent_name": agent, "operation": "append", "content": "# About Ann\n- prefers tea"},
        )
        assert appended["agent_name"] == agent
        assert appended["changed"] is True
        assert appended["version"] == 1
        assert "prefers tea" in appended["notes"]
        assert appended["outcome"]

        read = await call(
            client, "manage_long_term_memory", {"agent_name": agent, "operation": "read"}
        )
        assert read["version"] == 1
        assert "- prefers tea" in read["notes"]

        assert "- prefers tea" in await read_text(client, f"mnemo://notes/{agent}")


# --- task memory ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_task_where_was_i(connect_era, token: str, uid: str) -> None:
    message = f"Step 1 done, image built as v1.2.{uid[:4]}"
    async with connect_era(token) as client:
        task = await call(
            client,
            "task_register",
            {
                "name": f"Deploy coursefolio {uid}",
                "plan": ["Build Docker image", "Push image to registry"],
                "original_user_task": "deploy the site",
            },
        )
        task_id = field(task, "id")
        assert uuid.UUID(task_id)

        updated = await call(client, "task_update", {"task_id": task_id, "message": message})
        assert updated["task_id"] == task_id

        answered = await call(client, "task_update", {"task_id": task_id, "query": "where was I?"})
        assert message in answered["answer"], answered["answer"]
        assert "Push image to registry" in answered["answer"], answered["answer"]

        queried = await call(client, "task_query", {"task_id": task_id, "query": "where was I?"})
        assert message in queried["answer"] and queried["digest"], queried

        digest = await read_text(client, f"mnemo://tasks/{task_id}")
        assert message in digest, digest


# --- the other tools ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_other_tools(connect_era, token: str, uid: str) -> None:
    word = f"wombat{uid}"
    async with connect_era(token) as client:
        output = "\n".join(f"test {i} of {word} passed" for i in range(400))
        captured = await call(
            client,
            "capture_output",
            {"content": output, "command": "cargo test", "threshold_tokens": 50},
        )
        assert "MemoryRef:" in json.dumps(captured), captured

        task = await call(client, "task_register", {"name": f"Migrate the database {uid}"})
        task_id = field(task, "id")
        await call(
            client,
            "append_step",
            {
                "task_id": task_id,
                "agent_name": "planner",
                "parts": [{"type": "text", "text": f"checked the {word} schema"}],
            },
        )
        await call(client, "memory_search", {"query": word, "task_id": task_id, "limit": 5})
        await call(client, "recall", {"query": word, "limit": 5})
        missing = f"mnemo://tasks/{task_id}/artifacts/{uuid.uuid4()}"
        await call_failing(client, "artifact_read", {"uri": missing})


# --- isolation and scopes -------------------------------------------------------------------


@pytest.mark.anyio
async def test_another_user_sees_nothing(
    connect_era, token: str, other_token: str, uid: str
) -> None:
    secret = f"alice-secret-{uid}"
    key = f"mcp-private-{uid}"
    async with connect_era(token) as alice:
        await call(alice, "store_memory", {"content": f"password hint: {secret}\n", "key": key})
        assert secret in await read_text(alice, f"mnemo://memories/{key}")

    async with connect_era(other_token) as bob:
        for name, arguments in [
            ("retrieve_memory", {"key": key}),
            ("grep_memory", {"key": key, "pattern": "hint"}),
        ]:
            result = await call_failing(bob, name, arguments)
            assert secret not in text_of(result)
            assert secret not in json.dumps(result.structured_content)
        found = await call(bob, "search_memory", {"query": secret})
        assert key not in json.dumps(found)

        with pytest.raises(MCPError) as refused:
            await bob.read_resource(f"mnemo://memories/{key}")
        assert secret not in str(refused.value)


@pytest.mark.anyio
async def test_read_only_token_cannot_write(connect_era, readonly_token: str, uid: str) -> None:
    async with connect_era(readonly_token) as client:
        result = await call_failing(
            client, "store_memory", {"content": "should not be stored\n", "key": f"mcp-ro-{uid}"}
        )
        text = text_of(result)
        assert "memory:write" in text or "403" in text, text
        # Reading still works.
        await call(client, "search_memory", {"query": "anything"})


def post_raw(url: str, body: dict[str, Any], **headers: str) -> httpx2.Response:
    return httpx2.post(
        f"{url}/mcp",
        json=body,
        headers={"Accept": ACCEPT, "Content-Type": "application/json", **headers},
        timeout=30,
    )


def rpc_messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an answer, plain JSON or server-sent events."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    return [response.json()]


def test_session_belongs_to_its_user(url: str, token: str, other_token: str) -> None:
    opened = post_raw(url, INITIALIZE, Authorization=f"Bearer {token}")
    assert opened.status_code == 200, opened.text
    session = opened.headers.get("mcp-session-id")
    assert session, "a 2025-11-25 handshake opens a session"
    headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": HANDSHAKE}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert post_raw(url, initialized, Authorization=f"Bearer {token}", **headers).is_success
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}

    stolen = post_raw(url, listing, Authorization=f"Bearer {other_token}", **headers)
    if stolen.is_success:
        for message in rpc_messages(stolen):
            assert "result" not in message, "another user used alice's session"

    own = post_raw(url, listing, Authorization=f"Bearer {token}", **headers)
    assert own.status_code == 200, own.text
    (answer,) = [m for m in rpc_messages(own) if m.get("id") == 2]
    assert TOOLS <= {tool["name"] for tool in answer["result"]["tools"]}

    closed = httpx2.delete(
        f"{url}/mcp", headers={"Authorization": f"Bearer {token}", **headers}, timeout=30
    )
    assert closed.status_code < 500, closed.text


# --- no token: the OAuth challenge (RFC 9728) -----------------------------------------------


def test_no_token_gets_the_resource_metadata(url: str) -> None:
    for response in [
        post_raw(url, INITIALIZE),
        post_raw(url, INITIALIZE, Authorization="Bearer not-a-token"),
        httpx2.get(f"{url}/mcp", headers={"Accept": "text/event-stream"}, timeout=30),
    ]:
        assert response.status_code == 401, (response.request.method, response.text)
        challenge = response.headers.get("www-authenticate", "")
        assert challenge.startswith("Bearer"), challenge
        assert "resource_metadata=" in challenge, challenge

    challenge = post_raw(url, INITIALIZE).headers["www-authenticate"]
    found = re.search(r'resource_metadata="([^"]+)"', challenge)
    assert found, challenge
    metadata_url = found.group(1)
    assert metadata_url == f"{url}/.well-known/oauth-protected-resource", metadata_url

    # No token needed for the metadata; the path-suffixed form (RFC 9728 section 3.1, which MCP
    # clients try first for a resource at /mcp) answers the same.
    for where in [metadata_url, f"{url}/.well-known/oauth-protected-resource/mcp"]:
        response = httpx2.get(where, timeout=30)
        assert response.status_code == 200, (where, response.text)
        assert response.headers["content-type"].startswith("application/json")
        metadata = response.json()
        assert metadata["resource"] == f"{url}/mcp", metadata
        assert isinstance(metadata["authorization_servers"], list), metadata
        assert metadata["bearer_methods_supported"] == ["header"], metadata
        assert {"memory:read", "memory:write"} <= set(metadata["scopes_supported"]), metadata
