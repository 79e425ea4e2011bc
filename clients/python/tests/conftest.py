"""Fixtures: clients of the live mnemo that ``MNEMO_URL`` names (``scripts/test.d/python``
starts one), as the user of ``MNEMO_TOKEN``, another user of the same tenant
(``MNEMO_TOKEN_OTHER``) and a read-only token (``MNEMO_TOKEN_READONLY``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from mnemo_client import Mnemo, RetryPolicy

URL = os.environ.get("MNEMO_URL")

if not URL:
    pytest.skip("MNEMO_URL is not set: no live mnemo to test against", allow_module_level=True)


def _token(name: str) -> str:
    token = os.environ.get(name)
    if not token:
        pytest.skip(f"{name} is not set")
    return token


@pytest.fixture(scope="session")
def url() -> str:
    assert URL
    return URL


@pytest.fixture(scope="session")
def token() -> str:
    return _token("MNEMO_TOKEN")


@pytest.fixture
def mnemo(url: str, token: str) -> Iterator[Mnemo]:
    with Mnemo(url, token, retry=RetryPolicy(max_retries=2, base_delay=0.05)) as client:
        yield client


@pytest.fixture
def other(url: str) -> Iterator[Mnemo]:
    with Mnemo(url, _token("MNEMO_TOKEN_OTHER")) as client:
        yield client


@pytest.fixture
def readonly(url: str) -> Iterator[Mnemo]:
    with Mnemo(url, _token("MNEMO_TOKEN_READONLY")) as client:
        yield client


@pytest.fixture
def uid() -> str:
    """A fresh suffix, so that tests never see each other's data."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
