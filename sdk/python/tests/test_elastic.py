"""Elastic topics through the Python API (docs/RANGES.md), over both transports: created
with their ranges, split and merged while records are published and produced by key,
and read back by a cursor, a named consumer and a consumer group with every key's records
in order; the automatic policy's options round-trip."""

from __future__ import annotations

from typing import Any

import pytest

import rill
from conftest import unique

KEYS = [f"k{i}".encode() for i in range(12)]


async def read_in_key_order(reader: Any, sent: list) -> None:
    """Takes as many records as were sent from `reader`: each sent one once, each key's
    in the order sent."""
    got = []
    while len(got) < len(sent):
        got.append((await reader.next_within(5.0)).value)
    last: dict = {}
    for v in got:
        key, n = v.decode().split("/")
        assert last.get(key, -1) < int(n), (key, n)
        last[key] = int(n)
    assert sorted(got) == sorted(sent)


async def test_an_elastic_topic_splits_and_merges_under_publishes_in_key_order(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("e")
    config = await topic.create(partitions=2, elastic=True, durability="never")
    assert config.elastic and config.partitions == 2 and config.auto_split is None
    d = await topic.describe()
    assert [(r.id, r.parents, r.sealed_at) for r in d.ranges] == [(0, [], None), (1, [], None)]
    assert d.ranges[0].lo == 0 and d.ranges[1].hi == (1 << 64) - 1 and d.range_epoch == 0

    sent = []

    async def publish_round(n: int) -> None:
        for key in KEYS:
            value = f"{key.decode()}/{n}".encode()
            await topic.publish(value).key(key).send()
            sent.append(value)

    producer = await topic.producer(batch_length=8, linger_ms=2).init()

    async def produce_round(n: int) -> None:
        for key in KEYS:
            value = f"{key.decode()}/{n}".encode()
            await producer.send(value, key=key)
            sent.append(value)

    await publish_round(0)
    change = await topic.split_range(0)
    assert change == rill.RangeChange([(0, change.sealed[0][1])], [2, 3], 1)
    assert change.sealed[0][1] > 0
    await produce_round(1)
    change = await topic.split_range(at=3 << 62)  # the busiest open range, at a chosen hash
    assert change.range_epoch == 2 and len(change.opened) == 2
    await publish_round(2)
    d = await topic.describe()
    opened = sorted((r for r in d.ranges if r.sealed_at is None), key=lambda r: r.lo)
    change = await topic.merge_ranges(opened[0].id, opened[1].id)
    assert change.range_epoch == 3 and len(change.sealed) == 2 and len(change.opened) == 1
    await produce_round(3)
    await producer.shutdown()

    d = await topic.describe()
    assert d.config.elastic and d.range_epoch == 3 and len(d.ranges) == d.config.partitions
    for r in d.ranges:
        if r.sealed_at is not None:
            assert d.partitions[r.id].next_offset == r.sealed_at, r
            assert r.bytes_per_s is None, r  # a sealed range takes no writes
        else:
            assert r.bytes_per_s is None or r.bytes_per_s >= 0, r
    # A cursor reads every record once, each key's in the order sent.
    read = [r async for r in topic.records("check")]
    assert sorted(r.value for r in read) == sorted(sent)
    last: dict = {}
    for r in read:
        key, n = r.value.decode().split("/")
        assert last.get(key, -1) < int(n), (key, n, r.position)
        last[key] = int(n)
        assert r.key == key.encode()
    assert any(r.partition >= 2 for r in read)

    # A named consumer reads every range too, parents first.
    consumer = await topic.consumer("c", 0).init()
    await read_in_key_order(consumer, sent)
    await consumer.shutdown()
    # So does a consumer group: a child range is handed out once the group stored its
    # parents' seals.
    group = await topic.consumer_group("g", session_timeout_ms=5000).init()
    await read_in_key_order(group, sent)
    await group.shutdown()
    description = await topic.describe_group("g")
    for r in d.ranges:
        if r.sealed_at:
            assert description.partitions[r.id].stored_offset == r.sealed_at, r


async def test_the_automatic_policy_round_trips_and_bad_options_are_refused(client: rill.Client) -> None:
    stream = client.stream(unique("s"))
    config = await stream.topic("auto").create(
        elastic=True, auto_split=rill.AutoSplit(50_000, window_ms=2_000)
    )
    assert config.auto_split == rill.AutoSplit(50_000, 2_000, 300_000)
    with pytest.raises(rill.InvalidConfigError, match="auto_split"):
        await stream.topic("plain").create(auto_split=rill.AutoSplit(1))
    with pytest.raises(rill.InvalidConfigError, match="auto_split"):
        await stream.topic("short").create(elastic=True, auto_split=rill.AutoSplit(1, window_ms=10))
    with pytest.raises(rill.InvalidArgumentError):
        await stream.topic("x").create(elastic=True, auto_split=50_000)  # type: ignore[arg-type]
    await stream.topic("plain2").create()
    with pytest.raises(rill.InvalidRequestError, match="not an elastic topic"):
        await stream.topic("plain2").split_range()
