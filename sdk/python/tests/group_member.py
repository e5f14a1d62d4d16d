"""A consumer-group member in a process of its own, for test_group.py.

Usage: python group_member.py URL STREAM TOPIC GROUP MEMBER_ID DELAY_S

Prints one JSON line per event: {"assignment": [...]} when it changes, {"committed":
[partition, offset]} after each record it handled and committed (commit after success).
Runs until killed.
"""

import asyncio
import json
import sys

import rill


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


async def main(url: str, stream: str, topic_name: str, group: str, member_id: str, delay_s: float) -> None:
    client = await rill.connect(url)
    topic = client.stream(stream).topic(topic_name)
    consumer = await topic.consumer_group(
        group,
        member_id=member_id,
        auto_commit="disabled",
        max_wait_ms=100,
        poll_interval_ms=5,
        session_timeout_ms=3000,
    ).init()
    last = None
    while True:
        try:
            record = await consumer.next_within(0.1)
            await asyncio.sleep(delay_s)  # "handling" it
            await consumer.commit(record)
            say(committed=[record.partition, record.offset])
        except rill.TimeoutError:
            pass
        except rill.NotAssignedError:
            pass  # the partition moved meanwhile: its next owner reads it again
        assignment = consumer.assignment()
        if assignment != last:
            say(assignment=assignment)
            last = assignment


if __name__ == "__main__":
    url, stream, topic_name, group, member_id, delay = sys.argv[1:7]
    asyncio.run(main(url, stream, topic_name, group, member_id, float(delay)))
