"""HTTP with the service's conventions: bearer token (fixed or refreshed), problem errors,
idempotency keys, and retries with exponential backoff and jitter where they are safe."""

from __future__ import annotations

import asyncio
import email.utils
import inspect
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from ._errors import MnemoError

TokenSource = str | Callable[[], str] | Callable[[], Awaitable[str]]
"""A token, or a function returning the current one (called before every attempt)."""

RETRY_STATUSES = frozenset({429, 503})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a request again.

    Retried: answers 429 and 503 (waiting what ``Retry-After`` says, at most ``max_delay``) and
    transport errors (connection refused or reset, timeouts), but only for requests that cannot
    take effect twice: GET, PUT and DELETE, read-only POSTs (searches, recall), and writes that
    carry an ``Idempotency-Key`` (which the service answers from its record when the first
    attempt did land). Waits grow as ``base_delay * 2**attempt`` with full jitter.
    """

    max_retries: int = 3
    base_delay: float = 0.25
    max_delay: float = 8.0

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            after = retry_after(response.headers.get("retry-after"))
            if after is not None:
                return min(after, self.max_delay)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


def retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class Request:
    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] | None = None
    idempotency_key: str | None = None
    """Sent as ``Idempotency-Key``; the same value on every attempt."""
    safe: bool = False
    """Taking effect twice is harmless (read-only POSTs): retried like GETs."""

    def retryable(self) -> bool:
        return self.safe or self.method in IDEMPOTENT_METHODS or self.idempotency_key is not None


def new_idempotency_key() -> str:
    return f"mnemo-py-{uuid.uuid4()}"


def clean_params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    out: dict[str, Any] = {}
    for k, v in params.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else v
    return out


def drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


class _Base:
    def __init__(self, token: TokenSource, retry: RetryPolicy) -> None:
        self._token = token
        self.retry = retry

    def _headers(self, req: Request, token: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {token}"}
        if req.idempotency_key is not None:
            headers["Idempotency-Key"] = req.idempotency_key
        if req.headers:
            headers.update(req.headers)
        return headers

    def _build(self, client: httpx.Client | httpx.AsyncClient, req: Request, token: str):
        return client.build_request(
            req.method,
            req.path,
            params=clean_params(req.params),
            json=req.json if req.content is None else None,
            content=req.content,
            headers=self._headers(req, token),
        )


class SyncTransport(_Base):
    def __init__(self, client: httpx.Client, token: TokenSource, retry: RetryPolicy) -> None:
        super().__init__(token, retry)
        self.client = client

    def token(self) -> str:
        token = self._token() if callable(self._token) else self._token
        if inspect.isawaitable(token):
            raise TypeError("Mnemo needs a token function that returns a str (not a coroutine)")
        return token  # type: ignore[return-value]

    def send(self, req: Request) -> httpx.Response:
        attempt = 0
        refreshed = False
        while True:
            response: httpx.Response | None = None
            try:
                response = self.client.send(self._build(self.client, req, self.token()))
            except httpx.TransportError as e:
                if not req.retryable() or attempt >= self.retry.max_retries:
                    raise MnemoError.from_transport(e) from e
            else:
                if response.status_code < 400:
                    return response
                if response.status_code == 401 and callable(self._token) and not refreshed:
                    refreshed = True  # a refreshing token source gets one more try
                    continue
                if (
                    response.status_code not in RETRY_STATUSES
                    or not req.retryable()
                    or attempt >= self.retry.max_retries
                ):
                    raise MnemoError.from_response(response)
            time.sleep(self.retry.delay(attempt, response))
            attempt += 1


class AsyncTransport(_Base):
    def __init__(self, client: httpx.AsyncClient, token: TokenSource, retry: RetryPolicy) -> None:
        super().__init__(token, retry)
        self.client = client

    async def token(self) -> str:
        token = self._token() if callable(self._token) else self._token
        if inspect.isawaitable(token):
            token = await token
        return token  # type: ignore[return-value]

    async def send(self, req: Request) -> httpx.Response:
        attempt = 0
        refreshed = False
        while True:
            response: httpx.Response | None = None
            try:
                request = self._build(self.client, req, await self.token())
                response = await self.client.send(request)
            except httpx.TransportError as e:
                if not req.retryable() or attempt >= self.retry.max_retries:
                    raise MnemoError.from_transport(e) from e
            else:
                if response.status_code < 400:
                    return response
                if response.status_code == 401 and callable(self._token) and not refreshed:
                    refreshed = True
                    continue
                if (
                    response.status_code not in RETRY_STATUSES
                    or not req.retryable()
                    or attempt >= self.retry.max_retries
                ):
                    raise MnemoError.from_response(response)
            await asyncio.sleep(self.retry.delay(attempt, response))
            attempt += 1
