"""Fixtures: MCP clients (the official Python SDK, streamable HTTP) of the live mnemo that
``MNEMO_URL`` names (``scripts/test.d/mcp`` starts one), with the bearer token of a user
(``MNEMO_TOKEN``), of another user of the same tenant (``MNEMO_TOKEN_OTHER``) or a read-only one
(``MNEMO_TOKEN_READONLY``). Tests that take ``era`` run once per protocol era: the 2025-11-25
handshake (``initialize``, an ``Mcp-Session-Id`` session) and the stateless 2026-07-28."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HANDSHAKE = "2025-11-25"
STATELESS = "2026-07-28"

Connect = Callable[..., AbstractAsyncContextManager[Client]]


def _token(name: str) -> str:
    token = os.environ.get(name)
    if not token:
        pytest.skip(f"{name} is not set")
    return token


@pytest.fixture(scope="session")
def url() -> str:
    url = os.environ.get("MNEMO_URL")
    if not url:
        pytest.skip("MNEMO_URL is not set: no live mnemo to test against")
    return url.rstrip("/")


@pytest.fixture(scope="session")
def token() -> str:
    return _token("MNEMO_TOKEN")


@pytest.fixture(scope="session")
def other_token() -> str:
    return _token("MNEMO_TOKEN_OTHER")


@pytest.fixture(scope="session")
def readonly_token() -> str:
    return _token("MNEMO_TOKEN_READONLY")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def uid() -> str:
    """A fresh suffix, so that tests never see each other's data."""
    return uuid.uuid4().hex[:12]


@pytest.fixture(params=[HANDSHAKE, STATELESS])
def era(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def connect(url: str) -> Connect:
    """``connect(token, mode=...)``: an entered ``mcp.Client`` on ``/mcp`` sending
    ``Authorization: Bearer <token>``. ``mode`` is the SDK's: ``"legacy"`` (the initialize
    handshake), ``"auto"`` (probe, then fall back) or a stateless version to adopt directly."""

    @asynccontextmanager
    async def open_client(token: str, mode: str = "legacy") -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {token}"}
        timeout = httpx2.Timeout(30, read=120)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            # No client-side cache: every list and read must reach the server.
            async with Client(transport, mode=mode, cache=None, read_timeout_seconds=120) as client:
                yield client

    return open_client


@pytest.fixture
def connect_era(connect: Connect, era: str) -> Callable[[str], AbstractAsyncContextManager[Client]]:
    """``connect`` in the era the test runs in."""
    mode = "legacy" if era == HANDSHAKE else era
    return lambda token: connect(token, mode=mode)
