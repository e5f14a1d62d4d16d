"""A named consumer in commit-after-success mode: the broker keeps the position, and an
offset is stored only after its record was handled, so a crash re-delivers instead of
losing.

python examples/consumer.py [rill://127.0.0.1:7171]
"""

import asyncio
import sys

import rill


async def main() -> None:
    if len(sys.argv) > 1:
        client = await rill.connect(sys.argv[1])
    else:
        client = await rill.open("./consumer-example-data")
    events = client.stream("shop").topic("events")
    await events.ensure(partitions=1)
    for i in range(5):
        await events.publish(f"event {i}").send()

    consumer = await events.consumer(
        "billing", 0, polling="next", auto_commit="disabled", max_wait_ms=500
    ).init()
    while True:
        try:
            record = await consumer.next_within(2)
        except rill.TimeoutError:
            break  # caught up
        print(f"handling offset {record.offset}: {record.value.decode()}")
        await consumer.commit(record)  # after handling succeeded
    print(f"stored offset: {consumer.last_stored_offset(0)}")
    await consumer.shutdown()
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
