#!/usr/bin/env python3
"""Slow-header clients against a running mnemo: what they cost and whether it comes back.

Opens CONNECTIONS connections spread over SOURCES loopback source addresses (127.0.0.2, ...,
so that the per-address cap does not stop them first), each sending a request head one header
line per second and never finishing it. Meanwhile a well-behaved client asks `/healthz` once a
second from 127.0.0.1. Prints, from /proc, the server's resident memory and open descriptors
before, at the peak and after the server has cut the slow clients off, how many slow connections
the server took and how long it kept them, and the health checks' latencies. Asserts nothing.

    python3 bench/slow-clients.py --port 8080 --pid "$(pgrep -f 'mnemo serve')" \
        --connections 12000 --sources 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def slow_client(host: str, port: int, source: str, stats: dict, stop: asyncio.Event) -> None:
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(source, 0)), 10
        )
    except (OSError, asyncio.TimeoutError):
        stats["refused"] += 1
        return
    stats["open"] += 1
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
        await writer.drain()
        n = 0
        while not stop.is_set():
            # The server closing the connection ends the read at once.
            try:
                data = await asyncio.wait_for(reader.read(1024), 1.0)
                if not data:
                    break
            except asyncio.TimeoutError:
                pass
            n += 1
            writer.write(f"X-Slow-{n}: {'a' * 32}\r\n".encode())
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        stats["open"] -= 1
        stats["lifetimes"].append(time.monotonic() - started)
        writer.close()


async def health(host: str, port: int, stop: asyncio.Event, latencies: list, failures: list) -> None:
    while not stop.is_set():
        started = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(64), 5)
            writer.close()
            if answer.startswith(b"HTTP/1.1 200"):
                latencies.append((time.monotonic() - started) * 1000)
            else:
                failures.append(answer[:20])
        except (OSError, asyncio.TimeoutError) as e:
            failures.append(type(e).__name__)
        await asyncio.sleep(1)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the mnemo server's process id")
    ap.add_argument("--connections", type=int, default=12000)
    ap.add_argument("--sources", type=int, default=60, help="loopback source addresses")
    ap.add_argument("--hold", type=float, default=20, help="seconds the slow clients keep trying")
    ap.add_argument("--after", type=float, default=20, help="seconds watched after they stop")
    args = ap.parse_args()

    pid = args.pid
    before = (rss_mib(pid), fds(pid))
    stats = {"open": 0, "refused": 0, "lifetimes": []}
    stop, health_stop = asyncio.Event(), asyncio.Event()
    latencies: list[float] = []
    failures: list = []
    checker = asyncio.create_task(health(args.host, args.port, health_stop, latencies, failures))
    sources = [f"127.0.0.{2 + i % args.sources}" for i in range(args.connections)]
    started = time.monotonic()
    clients = []
    for i, source in enumerate(sources):
        clients.append(asyncio.create_task(slow_client(args.host, args.port, source, stats, stop)))
        if i % 500 == 499:
            await asyncio.sleep(0.05)
    peak_rss, peak_fds, peak_open = before[0], before[1], 0
    while time.monotonic() - started < args.hold:
        await asyncio.sleep(0.5)
        peak_rss = max(peak_rss, rss_mib(pid))
        peak_fds = max(peak_fds, fds(pid))
        peak_open = max(peak_open, stats["open"])
    stop.set()
    await asyncio.gather(*clients)
    ended = time.monotonic()
    after = []
    while time.monotonic() - ended < args.after:
        await asyncio.sleep(5)
        after.append((round(time.monotonic() - ended), rss_mib(pid), fds(pid)))
    health_stop.set()
    await checker

    lifetimes = sorted(stats["lifetimes"])
    print(f"slow clients: {args.connections} from {args.sources} addresses, "
          f"{stats['refused']} refused at connect, at most {peak_open} open at once")
    if lifetimes:
        print(f"slow-client lifetime s: p50 {statistics.median(lifetimes):.1f}, "
              f"max {lifetimes[-1]:.1f}")
    print(f"server RSS MiB: before {before[0]:.0f}, peak {peak_rss:.0f}, "
          + ", ".join(f"+{t}s {r:.0f}" for t, r, _ in after))
    print(f"server open fds: before {before[1]}, peak {peak_fds}, "
          + ", ".join(f"+{t}s {n}" for t, _, n in after))
    if latencies:
        latencies.sort()
        print(f"/healthz from 127.0.0.1 during the run: {len(latencies)} ok, "
              f"p50 {statistics.median(latencies):.1f} ms, max {latencies[-1]:.1f} ms, "
              f"{len(failures)} failed {failures[:3]}")
    else:
        print(f"/healthz from 127.0.0.1 during the run: none ok, {len(failures)} failed {failures[:3]}")


if __name__ == "__main__":
    asyncio.run(main())
