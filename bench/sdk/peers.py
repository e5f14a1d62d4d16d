"""What a Python user would pick instead of Rill, producing the same shape as bench.py:
redis-py with pipelined XADD (BATCH per round trip) into a Redis stream, or nats-py
publishing asynchronously to a JetStream stream (file storage), BATCH in flight then
waiting for their acks. One JSON line, the fields of bench.py.

Usage: peers.py redis|nats HOST:PORT --messages N --size BYTES --batch N
(needs `redis` and `nats-py`; bench/sdks.sh installs them into a scratch directory)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time


async def redis_produce(addr: str, n: int, size: int, batch: int) -> float:
    import redis.asyncio as redis

    host, port = addr.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    key = f"bench-{os.getpid()}-{time.time_ns()}"
    value = os.urandom(size)
    start = time.perf_counter()
    sent = 0
    while sent < n:
        pipe = r.pipeline(transaction=False)
        for _ in range(min(batch, n - sent)):
            pipe.xadd(key, {"v": value})
        await pipe.execute()
        sent += min(batch, n - sent)
    seconds = time.perf_counter() - start
    await r.delete(key)
    await r.aclose()
    return seconds


async def nats_produce(addr: str, n: int, size: int, batch: int) -> float:
    import nats

    nc = await nats.connect(f"nats://{addr}")
    js = nc.jetstream()
    name = f"bench-{os.getpid()}-{time.time_ns()}"
    await js.add_stream(name=name, subjects=[name])
    value = os.urandom(size)
    start = time.perf_counter()
    sent = 0
    while sent < n:
        acks = [await js.publish_async(name, value) for _ in range(min(batch, n - sent))]
        await asyncio.gather(*acks)
        sent += len(acks)
    seconds = time.perf_counter() - start
    await js.delete_stream(name)
    await nc.close()
    return seconds


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=["redis", "nats"])
    ap.add_argument("addr")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1000)
    a = ap.parse_args()
    run = redis_produce if a.peer == "redis" else nats_produce
    seconds = await run(a.addr, a.messages, a.size, a.batch)
    print(json.dumps({
        "sdk": f"python-{a.peer}",
        "workload": "produce",
        "records": a.messages,
        "size": a.size,
        "seconds": seconds,
        "records_per_s": a.messages / seconds,
        "mb_per_s": a.messages * a.size / seconds / 1e6,
    }), flush=True)


asyncio.run(main())
