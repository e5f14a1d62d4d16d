"""A consumer group rebalances when a member dies: over TCP with the other member in a
process of its own (killed with SIGKILL), and embedded with a member dropped without
shutting down (its session expires)."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import rill
from conftest import Server, python, unique

PARTITIONS = 4
RECORDS = 60
MEMBER = Path(__file__).with_name("group_member.py")


async def publish(topic: rill.Topic) -> Dict[int, Set[int]]:
    """Publishes RECORDS keyed records; the offsets of each partition."""
    positions = await topic.publish_batch([rill.Message(f"r{i}", key=f"key-{i}") for i in range(RECORDS)])
    by_partition: Dict[int, Set[int]] = {p: set() for p in range(PARTITIONS)}
    for p in positions:
        by_partition[p.partition].add(p.offset)
    assert all(by_partition.values()), "every partition has records"
    return by_partition


async def settle(member: rill.GroupConsumer, want: Any, timeout_s: float = 30.0) -> List[int]:
    """Keeps the member reading (nothing to read yet) until `want(assignment)`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if want(member.assignment()):
            return member.assignment()
        try:
            await member.next_within(0.1)
            raise AssertionError("no records were published yet")
        except rill.TimeoutError:
            pass
    raise AssertionError(f"assignment never settled: {member.assignment()}")


async def drain(member: rill.GroupConsumer, seen: Set[Tuple[int, int]], quiet_s: float = 1.5) -> None:
    """Reads and commits until nothing arrived for `quiet_s` and all partitions are owned."""
    last = time.monotonic()
    while time.monotonic() - last < quiet_s or len(member.assignment()) < PARTITIONS:
        try:
            r = await member.next_within(0.1)
            seen.add(r.position)
            await member.commit(r)
            last = time.monotonic()
        except rill.TimeoutError:
            pass
        assert time.monotonic() - last < 60, "the survivor stopped making progress"


async def test_a_killed_member_s_partitions_move_to_the_survivor(server: Server) -> None:
    client = await rill.connect(server.url)
    stream, group = unique("s"), unique("workers")
    topic = client.stream(stream).topic("work")
    await topic.ensure(PARTITIONS)
    survivor = await topic.consumer_group(
        group, member_id="survivor", auto_commit="disabled", max_wait_ms=100, poll_interval_ms=5,
        session_timeout_ms=3000,
    ).init()
    assert survivor.assignment() == [0, 1, 2, 3], "alone, it owns every partition"

    victim = subprocess.Popen(
        [python(), str(MEMBER), server.url, stream, "work", group, "victim", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    events: List[Dict[str, Any]] = []

    def read() -> None:
        assert victim.stdout is not None
        for line in victim.stdout:
            events.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        mine = await settle(survivor, lambda a: 0 < len(a) < PARTITIONS)
        deadline = time.monotonic() + 30
        while not any(e.get("assignment") for e in events):
            assert time.monotonic() < deadline, f"the victim got no partitions: {events}"
            await asyncio.sleep(0.05)
        theirs = [e["assignment"] for e in events if "assignment" in e][-1]
        assert sorted(mine + theirs) == [0, 1, 2, 3], "the group split the partitions"

        by_partition = await publish(topic)
        seen: Set[Tuple[int, int]] = set()
        # Let the victim handle a few of its records, then kill it mid-stream.
        while sum("committed" in e for e in events) < 3:
            assert time.monotonic() < deadline + 30, "the victim handled nothing"
            try:
                r = await survivor.next_within(0.05)
                seen.add(r.position)
                await survivor.commit(r)
            except rill.TimeoutError:
                pass
        victim.kill()  # SIGKILL: no shutdown, no leave
        victim.wait(10)
        # Every line the victim wrote before it died, its last commits among them: the
        # reader ends at the end of its output.
        reader.join(10)
        committed = {tuple(e["committed"]) for e in events if "committed" in e}
        # The victim may die between its commit and the line saying so: what the group
        # stored for its partitions (before the survivor takes them over) counts too.
        stored = {
            gp.partition: gp.stored_offset or 0
            for gp in (await topic.describe_group(group)).partitions
            if gp.partition in theirs
        }
        handled = committed | {(p, o) for p, end in stored.items() for o in range(end)}

        await drain(survivor, seen)
        assert survivor.assignment() == [0, 1, 2, 3], "the survivor got every partition"
        everything = {(p, o) for p, offsets in by_partition.items() for o in offsets}
        assert everything <= seen | handled, "no record was lost"
        assert committed, "the victim handled records"
        # The victim's partitions resumed after its last commit: what it committed is
        # not read again by the survivor.
        for p in theirs:
            done = [o for q, o in committed if q == p]
            if done:
                assert (p, max(done)) not in seen
        description = await topic.describe_group(group)
        assert [m.id for m in description.members] == ["survivor"]
    finally:
        if victim.poll() is None:
            victim.kill()
        await survivor.shutdown()
        await client.close()


async def test_an_abandoned_member_s_session_expires_embedded(tmp_path: Path) -> None:
    client = await rill.open(tmp_path / "data")
    topic = client.stream(unique("s")).topic("work")
    await topic.ensure(PARTITIONS)
    options: Dict[str, Any] = dict(auto_commit="disabled", max_wait_ms=100, poll_interval_ms=5, session_timeout_ms=1000)
    survivor = await topic.consumer_group("g", member_id="survivor", **options).init()
    abandoned = await topic.consumer_group("g", member_id="abandoned", **options).init()
    mine = await settle(survivor, lambda a: 0 < len(a) < PARTITIONS)
    deadline = time.monotonic() + 20
    while sorted(mine + abandoned.assignment()) != [0, 1, 2, 3]:
        assert time.monotonic() < deadline, (mine, abandoned.assignment())
        try:
            await abandoned.next_within(0.05)
        except rill.TimeoutError:
            pass
        mine = survivor.assignment()
    theirs = abandoned.assignment()
    by_partition = await publish(topic)
    handled = set()
    while len(handled) < 2:
        r = await abandoned.next_within(10)
        await abandoned.commit(r)
        handled.add(r.position)
    # Dropped without shutdown: it stops heartbeating and never leaves.
    del abandoned
    gc.collect()

    seen: Set[Tuple[int, int]] = set()
    await drain(survivor, seen)
    assert survivor.assignment() == [0, 1, 2, 3]
    everything = {(p, o) for p, offsets in by_partition.items() for o in offsets}
    assert everything <= seen | handled
    assert not handled & seen, "committed records are not read again"
    assert theirs and all(any(q == p for q, _ in seen) for p in theirs)
    await survivor.shutdown()
    await client.close()
