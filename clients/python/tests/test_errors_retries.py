"""The problem exception, retries and idempotency keys. Faults are injected by a small proxy in
front of the live service (it answers 503 or 429 in its place, or forwards a request and then
loses the answer); every request it forwards is served by the real mnemo."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from mnemo_client import Mnemo, MnemoError, RetryPolicy

FAST = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05)


class FaultProxy:
    """Forwards to ``upstream``; ``plan`` is a list of what to do with the next requests:
    ``"503"`` / ``"429"`` answer that status (``Retry-After: <retry_after>``) without
    forwarding, ``"lose"`` forwards and then answers 503 as if the answer was lost."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.plan: list[str] = []
        self.retry_after = "0"
        self.seen: list[tuple[str, str, str | None]] = []
        self.upstream_answers: list[int] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                proxy.seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))
                action = proxy.plan.pop(0) if proxy.plan else "forward"
                if action in ("503", "429"):
                    return self._answer(int(action), b'{"title":"busy"}', proxy.retry_after)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                req = urllib.request.Request(
                    proxy.upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        status, data, rheaders = r.status, r.read(), r.headers
                except urllib.error.HTTPError as e:
                    status, data, rheaders = e.code, e.read(), e.headers
                proxy.upstream_answers.append(status)
                if action == "lose":
                    return self._answer(503, b"{}", "0")
                self.send_response(status)
                for k, v in rheaders.items():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, status: int, body: bytes, retry_after: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/problem+json")
                self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(url: str) -> Iterator[FaultProxy]:
    p = FaultProxy(url)
    yield p
    p.close()


def test_problem_exception_carries_the_problem(mnemo: Mnemo) -> None:
    with pytest.raises(MnemoError) as e:
        mnemo.memories.search("x", limit=1000)
    err = e.value
    assert err.status == 422
    assert err.field == "limit"
    assert err.title and err.detail
    assert err.request_id and err.request_id == err.headers.get("x-request-id")
    assert err.problem["status"] == 422 and err.problem["instance"] == "/api/memories/search"
    assert err.body.startswith("{")
    assert isinstance(err, Exception) and "422" in str(err)


def test_unauthenticated_is_401(url: str) -> None:
    with Mnemo(url, "not-a-jwt") as bad, pytest.raises(MnemoError) as e:
        bad.me()
    assert e.value.status == 401
    assert "Bearer" in e.value.headers.get("www-authenticate", "")


def test_token_function_is_called_and_refreshed_after_401(url: str, token: str) -> None:
    tokens = iter(["expired-token", token, token])
    calls = []

    def source() -> str:
        calls.append(1)
        return next(tokens)

    with Mnemo(url, source) as client:
        assert client.me().user_id == "py-alice"
        client.me()
    assert len(calls) == 3  # the bad one, its refresh, then one for the second call


def test_get_retries_on_503_and_429(proxy: FaultProxy, token: str) -> None:
    proxy.plan = ["503", "429"]
    with Mnemo(proxy.url, token, retry=FAST) as client:
        assert client.me().user_id == "py-alice"
    assert len(proxy.seen) == 3


def test_retry_after_is_honoured(proxy: FaultProxy, token: str) -> None:
    proxy.plan = ["429"]
    proxy.retry_after = "1"
    policy = RetryPolicy(max_retries=1, base_delay=0.0, max_delay=5)
    with Mnemo(proxy.url, token, retry=policy) as client:
        started = time.monotonic()
        client.me()
        assert time.monotonic() - started >= 0.95


def test_gives_up_after_max_retries(proxy: FaultProxy, token: str) -> None:
    proxy.plan = ["503"] * 10
    with Mnemo(proxy.url, token, retry=RetryPolicy(max_retries=2, base_delay=0.01)) as client:
        with pytest.raises(MnemoError) as e:
            client.me()
    assert e.value.status == 503
    assert len(proxy.seen) == 3


def test_lost_answer_is_replayed_not_written_twice(
    proxy: FaultProxy, mnemo: Mnemo, token: str, uid: str
) -> None:
    proxy.plan = ["lose"]
    with Mnemo(proxy.url, token, retry=FAST) as client:
        stored = client.memories.store(f"once {uid}", thread_id=uid)
    assert proxy.upstream_answers == [201, 201]  # the second is the service's replay
    keys = [k for (_, _, k) in proxy.seen]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]
    assert [m.memory_key for m in mnemo.memories.list(thread_id=uid)] == [stored.memory_key]


def test_each_call_gets_its_own_key(proxy: FaultProxy, token: str, uid: str) -> None:
    with Mnemo(proxy.url, token, retry=FAST) as client:
        client.memories.capture("a", thread_id=uid)
        client.memories.capture("a", thread_id=uid)
        client.memories.capture("a", thread_id=uid, idempotency_key=f"mine-{uid}")
    keys = [k for (_, _, k) in proxy.seen]
    assert keys[0] != keys[1] and keys[2] == f"mine-{uid}"


def test_unkeyed_write_is_not_retried(proxy: FaultProxy, token: str, uid: str) -> None:
    proxy.plan = ["503"]
    with Mnemo(proxy.url, token, retry=FAST) as client, pytest.raises(MnemoError) as e:
        client.chat.chat(f"s-{uid}", [])
    assert e.value.status == 503
    assert len(proxy.seen) == 1


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_connection_errors_retry_only_where_safe(token: str) -> None:
    attempts: list[httpx.Request] = []
    base = f"http://127.0.0.1:{_closed_port()}"
    http = httpx.Client(base_url=base, event_hooks={"request": [attempts.append]})
    with Mnemo(base, token, retry=FAST, http_client=http) as client:
        with pytest.raises(MnemoError) as e:
            client.me()
        assert e.value.status == 0
        assert len(attempts) == 4
        attempts.clear()
        with pytest.raises(MnemoError):
            client.memories.store("x")
        assert len(attempts) == 4
        assert len({r.headers["idempotency-key"] for r in attempts}) == 1
        attempts.clear()
        with pytest.raises(MnemoError):
            client.chat.chat("s", [])
        assert len(attempts) == 1
    http.close()
