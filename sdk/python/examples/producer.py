"""The tuned write path: an idempotent producer sending keyed batches, then a
background producer with bounded buffering.

python examples/producer.py [rill://127.0.0.1:7171]
"""

import asyncio
import sys
import time

import rill


async def main() -> None:
    if len(sys.argv) > 1:
        client = await rill.connect(sys.argv[1])
    else:
        client = await rill.open("./producer-example-data")
    events = client.stream("shop").topic("events")
    await events.ensure(partitions=4)

    # Direct mode: each send returns once the broker acknowledged; retries can never
    # duplicate a batch (idempotence is on by default).
    producer = await events.producer(batch_length=1000, retries=5, retry_interval_ms=200).init()
    started = time.monotonic()
    batch = [
        rill.Message(f"event {i}", key=f"user-{i % 100}", headers={"kind": "click"})
        for i in range(10_000)
    ]
    positions = await producer.send_batch(batch)
    print(f"sent {len(positions)} records in {time.monotonic() - started:.3f}s")
    await producer.shutdown()

    # Background mode: send returns once buffered; shards batch and send, keeping
    # per-partition order; a full buffer waits up to 1 s.
    background = await events.producer(
        linger_ms=5,
        background=True,
        backpressure="block_for",
        backpressure_timeout_ms=1000,
    ).init()
    for i in range(10_000):
        await background.send(f"late event {i}", key=f"user-{i % 100}")
    await background.shutdown()  # flushes everything buffered
    print("background producer flushed")
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
