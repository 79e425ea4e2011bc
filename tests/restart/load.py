#!/usr/bin/env python3
"""Write load across a PostgreSQL restart (run by scripts/test.d/restart; standard library only).

    load.py URL TOKEN -- RESTART_COMMAND...

CLIENTS threads PUT memories under keys of their own as fast as they can. After WARMUP seconds
the restart command runs (it returns once PostgreSQL accepts connections again); the load goes on
until the service has answered normally for STEADY seconds in a row (at most DEADLINE seconds
after the restart). Then every acknowledged write is read back.

Fails (exit 1) on any 500 or other unexpected answer, a 503 without Retry-After, a transport
error (mnemo itself is never restarted), an acknowledged write that does not read back, or a
service that does not recover within RECOVERY_LIMIT seconds of PostgreSQL being back. Prints the
figures, then `restart: N passed, N failed` over those checks.
"""

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

CLIENTS = int(os.environ.get("RESTART_CLIENTS", "24"))
WARMUP = float(os.environ.get("RESTART_WARMUP_SECS", "3"))
STEADY = float(os.environ.get("RESTART_STEADY_SECS", "3"))
DEADLINE = float(os.environ.get("RESTART_DEADLINE_SECS", "30"))
RECOVERY_LIMIT = float(os.environ.get("RESTART_RECOVERY_LIMIT_SECS", "5"))
TIMEOUT = 15


class Client:
    """One keep-alive connection, reopened after a transport error."""

    def __init__(self, base, token):
        self.url = urllib.parse.urlsplit(base)
        self.token = token
        self.conn = None

    def request(self, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=TIMEOUT)
        headers = {"authorization": f"Bearer {self.token}"}
        if body is not None:
            headers["content-type"] = "application/json"
            body = json.dumps(body).encode()
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
            data = response.read()
            return response.status, response.getheader("retry-after"), data
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


def main():
    base, token = sys.argv[1], sys.argv[2]
    restart = sys.argv[sys.argv.index("--") + 1 :]
    lock = threading.Lock()
    acked = {}  # key -> content
    answers = []  # (time, status, has_retry_after)
    transport_errors = []
    stop = threading.Event()

    def writer(n):
        client = Client(base, token)
        i = 0
        while not stop.is_set():
            i += 1
            key = f"restart-{n}-{i}"
            content = f"write {i} of client {n}"
            try:
                status, retry_after, _ = client.request(
                    "PUT", f"/api/memories/{key}", {"content": content}
                )
            except (OSError, http.client.HTTPException) as err:
                with lock:
                    transport_errors.append(f"{key}: {err!r}")
                time.sleep(0.05)
                continue
            with lock:
                answers.append((time.monotonic(), status, retry_after is not None))
                if status in (200, 201):
                    acked[key] = content
            if status == 503:
                time.sleep(0.02)  # what a client told to retry would do, briefly

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(CLIENTS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(WARMUP)
    restart_at = time.monotonic()
    subprocess.run(restart, check=True, stdout=subprocess.DEVNULL)
    back_at = time.monotonic()

    # Load on until STEADY seconds without a failure, or the deadline.
    while time.monotonic() < back_at + DEADLINE:
        time.sleep(0.2)
        now = time.monotonic()
        with lock:
            failures = [a for a in answers if a[1] not in (200, 201)]
            recent = [a for a in answers if a[0] >= now - STEADY]
        last_failure = max((a[0] for a in failures), default=restart_at)
        if now - max(last_failure, back_at) >= STEADY and recent:
            break
    stop.set()
    for t in threads:
        t.join(TIMEOUT + 5)
    ended = time.monotonic()

    statuses = {}
    for _, status, _ in answers:
        statuses[status] = statuses.get(status, 0) + 1
    unavailable = [a for a in answers if a[1] == 503]
    without_retry_after = [a for a in unavailable if not a[2]]
    unexpected = {s: c for s, c in statuses.items() if s not in (200, 201, 503)}
    failures = [a for a in answers if a[1] not in (200, 201)]
    last_failure = max((a[0] for a in failures), default=None)
    # Normal again: the first acknowledged write after the last failure (or after PostgreSQL came
    # back, when no request failed at all).
    settled = max(last_failure or back_at, back_at)
    first_ok = min(
        (a[0] for a in answers if a[1] in (200, 201) and a[0] >= settled), default=None
    )
    recovery = None if first_ok is None else first_ok - back_at
    # The longest stretch without an acknowledged write, around the restart.
    ack_times = sorted(a[0] for a in answers if a[1] in (200, 201))
    gap = max((b - a for a, b in zip(ack_times, ack_times[1:])), default=0.0)

    # Every acknowledged write reads back, by a few readers at once.
    keys = sorted(acked)
    missing = []

    def reader(part):
        client = Client(base, token)
        for key in part:
            try:
                status, _, data = client.request("GET", f"/api/memories/{key}")
            except (OSError, http.client.HTTPException) as err:
                with lock:
                    missing.append(f"{key}: {err!r}")
                continue
            ok = status == 200 and json.loads(data).get("content") == acked[key]
            if not ok:
                with lock:
                    missing.append(f"{key}: {status} {data[:200]!r}")

    readers = [threading.Thread(target=reader, args=(keys[i::8],)) for i in range(8)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()

    print(f"restart: {CLIENTS} clients, {ended - started:.1f} s of load, PostgreSQL restart took "
          f"{back_at - restart_at:.1f} s")
    print(f"restart: {len(acked)} writes acknowledged, {len(unavailable)} answered 503 "
          f"({len(without_retry_after)} without Retry-After), {statuses.get(500, 0)} answered 500, "
          f"other answers {unexpected or 'none'}, {len(transport_errors)} transport errors")
    if failures:
        first = min(a[0] for a in failures)
        print(f"restart: failures from {first - restart_at:+.2f} s to {last_failure - restart_at:+.2f} s "
              f"after the restart began")
    print("restart: answering normally again "
          + ("never" if recovery is None else f"{recovery:.2f} s after PostgreSQL was back"))
    print(f"restart: the longest stretch without an acknowledged write was {gap:.2f} s")
    print(f"restart: {len(keys) - len(missing)} of {len(keys)} acknowledged writes read back")

    checks = [
        ("no 500 and no other unexpected answer", not unexpected),
        ("every 503 carries Retry-After", not without_retry_after),
        ("no transport error", not transport_errors),
        ("every acknowledged write reads back", not missing),
        (f"normal again within {RECOVERY_LIMIT:g} s", recovery is not None and recovery <= RECOVERY_LIMIT),
        ("writes acknowledged before and after the restart",
         any(a[0] < restart_at and a[1] in (200, 201) for a in answers)
         and any(a[0] > back_at and a[1] in (200, 201) for a in answers)),
    ]
    for name, ok in checks:
        print(f"restart: {'ok  ' if ok else 'FAIL'} {name}")
    for line in (transport_errors + missing)[:10]:
        print(f"restart:   {line}")
    failed = sum(1 for _, ok in checks if not ok)
    print(f"restart: {len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
