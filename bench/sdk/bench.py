"""Throughput of the Python SDK against a running server, one JSON line per run.

Usage: bench.py produce|consume|group URL --messages N --size BYTES --batch N
  produce: one producer, `send_batch` of BATCH records of SIZE bytes, awaited in turn,
           into a fresh one-partition topic; a tenth more records first, untimed, as
           the warm-up part of `rill bench produce`;
  consume: publishes that topic first (not timed, with a tenth more as a warm-up part,
           as `rill bench consume` does), then one cursor reads it with `poll()`; the
           clock starts with the first batch after the warm-up part;
  group:   the same, read by one consumer-group member's `poll()` (commit policy:
           the default).
Prints {"sdk":"python","workload":..,"records":N,"seconds":F,"records_per_s":F,"mb_per_s":F}
(MB = 10^6 bytes of record values), the fields `rill bench --json` has.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import rill


def report(workload: str, records: int, size: int, seconds: float) -> None:
    print(json.dumps({
        "sdk": "python",
        "workload": workload,
        "records": records,
        "size": size,
        "seconds": seconds,
        "records_per_s": records / seconds,
        "mb_per_s": records * size / seconds / 1e6,
    }), flush=True)


async def produce(topic: "rill.Topic[bytes]", n: int, size: int, batch: int, warm: int = 0) -> float:
    """Sends `warm` records untimed (a warm-up part), then `n` timed; returns the seconds
    of the timed part."""
    value = os.urandom(size)
    values = [value] * batch

    async def send(count: int) -> None:
        sent = 0
        while sent < count:
            await producer.send_batch(values[: min(batch, count - sent)])
            sent += min(batch, count - sent)

    producer = topic.producer(batch_length=batch)
    await producer.init()
    await send(warm)
    start = time.perf_counter()
    await send(n)
    seconds = time.perf_counter() - start
    await producer.shutdown()
    return seconds


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["produce", "consume", "group"])
    ap.add_argument("url")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1000)
    a = ap.parse_args()
    client = await rill.connect(a.url)
    topic = client.stream("sdk-bench").topic(f"py-{a.workload}-{os.getpid()}-{time.time_ns()}")
    # As `rill bench` makes its topic: one partition, durability never.
    await topic.create(partitions=1, durability="never")
    if a.workload == "produce":
        # A tenth more first, untimed, as `rill bench produce` warms up.
        seconds = await produce(topic, a.messages, a.size, a.batch, warm=a.messages // 10)
        report("produce", a.messages, a.size, seconds)
    else:
        # As `rill bench consume` does: a warm-up part is read first; the clock starts
        # with the first batch after it and counts the records from there.
        warm = a.messages // 10
        total = warm + a.messages
        await produce(topic, total, a.size, a.batch)
        seen, start, at_start = 0, 0.0, 0
        if a.workload == "consume":
            reader = topic.records("bench")
            while batch := await reader.poll():
                if seen < warm <= seen + len(batch):
                    start, at_start = time.perf_counter(), seen + len(batch)
                seen += len(batch)
        else:
            consumer = topic.consumer_group("bench", batch_length=a.batch, polling="first")
            await consumer.init()
            while seen < total:
                batch = await consumer.poll(timeout=30)
                assert batch, "no record within 30 s"
                if seen < warm <= seen + len(batch):
                    start, at_start = time.perf_counter(), seen + len(batch)
                seen += len(batch)
            await consumer.shutdown()
        seconds = time.perf_counter() - start
        assert seen == total, (seen, total)
        report(a.workload, seen - at_start, a.size, seconds)
    await topic.delete()
    await client.close()


asyncio.run(main())
