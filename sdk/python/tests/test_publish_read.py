"""Publish and read back: values, keys, every header type, codecs, cursors."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import List

import pydantic
import pytest

import rill
from conftest import unique


@dataclasses.dataclass
class Order:
    id: int
    total: float
    customer: str = "c"


class Payment(pydantic.BaseModel):
    id: int
    amount: float
    tags: List[str] = []


# Every header type with values at the edges of its range.
ALL_HEADERS = [
    ("s", rill.HeaderValue.str("héllo")),
    ("b", rill.HeaderValue.bytes(b"\x00\xff")),
    ("t", rill.HeaderValue.bool(True)),
    ("f", ("bool", False)),
    ("i8", rill.HeaderValue.int8(-128)),
    ("i16", rill.HeaderValue.int16(32767)),
    ("i32", rill.HeaderValue.int32(-(2**31))),
    ("i64", rill.HeaderValue.int64(2**63 - 1)),
    ("i128", rill.HeaderValue.int128(-(2**127))),
    ("u8", rill.HeaderValue.uint8(255)),
    ("u16", ("uint16", 7)),
    ("u32", rill.HeaderValue.uint32(2**32 - 1)),
    ("u64", rill.HeaderValue.uint64(2**64 - 1)),
    ("u128", rill.HeaderValue.uint128(2**128 - 1)),
    ("f32", rill.HeaderValue.float32(1.5)),
    ("f64", rill.HeaderValue.float64(-2.25e300)),
    ("s", "second header of the same name"),
]

EXPECTED_HEADERS = [
    (n, rill.HeaderValue(*v) if isinstance(v, tuple) else rill.HeaderValue("str", v))
    for n, v in ALL_HEADERS
]


async def read_all(reader: rill.Reader) -> list:
    return [r async for r in reader]


async def test_raw_round_trip_with_keys_partitions_and_every_header_type(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("events")
    config = await topic.ensure(partitions=3)
    assert config.partitions == 3
    assert config.durability == "always"

    keyed = await topic.publish(b"keyed").key(b"order-17").headers(ALL_HEADERS).send()
    assert keyed.partition == rill.partition_for_key(b"order-17", 3)
    pinned = await topic.publish("text value").partition(2).send()
    assert pinned == rill.Position(2, 0 if keyed.partition != 2 else 1)

    records = await read_all(topic.records("round-trip"))
    by_value = {r.value: r for r in records}
    assert set(by_value) == {b"keyed", b"text value"}
    r = by_value[b"keyed"]
    assert r.key == b"order-17"
    assert r.position == keyed
    assert r.headers == EXPECTED_HEADERS
    assert r.header("u16") == ("uint16", 7)
    assert r.header("s") == rill.HeaderValue("str", "héllo")
    assert r.header("missing") is None
    assert r.timestamp_us > 1_600_000_000_000_000
    assert by_value[b"text value"].key is None
    assert by_value[b"text value"].headers == []


async def test_batch_and_producer_carry_keys_and_headers(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("events")
    await topic.ensure(partitions=4)
    positions = await topic.publish_batch(
        [b"plain", rill.Message(b"keyed", key="k0", headers=ALL_HEADERS)]
    )
    assert positions[1].partition == rill.partition_for_key("k0", 4) == 3
    producer = await topic.producer(batch_length=10, linger_ms=5).init()
    at = await producer.send(b"from-producer", headers=dict(ALL_HEADERS[:-1]), key=b"account-42")
    assert at is not None and at.partition == rill.partition_for_key(b"account-42", 4)
    sent = await producer.send_batch([b"x", rill.Message(b"y", key=b"a")])
    assert len(sent) == 2 and sent[1].partition == rill.partition_for_key(b"a", 4)
    await producer.shutdown()

    records = {r.value: r for r in await read_all(topic.records("check"))}
    assert records[b"keyed"].headers == EXPECTED_HEADERS
    assert records[b"keyed"].key == b"k0"
    # A dict keeps one value per name: the last "s" is not in it.
    assert records[b"from-producer"].headers == EXPECTED_HEADERS[:-1]
    assert records[b"from-producer"].key == b"account-42"
    assert records[b"y"].position == sent[1]


async def test_json_dataclass_and_pydantic_and_msgpack(client: rill.Client) -> None:
    stream = client.stream(unique("shop"))
    orders = stream.topic("orders", cls=Order)
    await orders.ensure(partitions=2)
    await orders.publish(Order(id=1, total=99)).send()
    await orders.publish(Order(id=2, total=12.5, customer="é")).key(b"c").send()
    values = sorted((r.value for r in await read_all(orders.records("o"))), key=lambda o: o.id)
    assert values == [Order(1, 99, "c"), Order(2, 12.5, "é")]

    # The bytes are what the Rust SDK's JSON codec writes: compact serde_json.
    raw = stream.topic("orders")
    stored = sorted([r.value for r in await read_all(raw.records("raw"))])
    assert b'{"id":1,"total":99,"customer":"c"}' in stored

    payments = stream.topic("payments", cls=Payment)
    await payments.ensure(1)
    await payments.publish(Payment(id=7, amount=1.25, tags=["a"])).send()
    [p] = await read_all(payments.records("p"))
    assert p.value == Payment(id=7, amount=1.25, tags=["a"])

    packed = stream.topic("packed", cls=Order, codec="msgpack")
    await packed.ensure(1)
    await packed.publish(Order(3, 1.0)).send()
    [m] = await read_all(packed.records("m"))
    assert m.value == Order(3, 1.0)
    [raw_m] = await read_all(stream.topic("packed").records("raw"))
    assert raw_m.value[0] == 0x83  # a fixmap of three named fields, as rmp-serde writes
    assert rill.MsgPackCodec().decode(raw_m.value) == {"id": 3, "total": 1.0, "customer": "c"}

    plain = stream.topic("plain", codec="msgpack")
    await plain.ensure(1)
    await plain.publish({"bytes": b"\x01", "list": [1, None, True]}).send()
    [pm] = await read_all(plain.records("pm"))
    assert pm.value == {"bytes": b"\x01", "list": [1, None, True]}


async def test_a_value_that_fails_to_decode_is_raised_with_its_position_and_reading_goes_on(
    client: rill.Client,
) -> None:
    stream = client.stream(unique("s"))
    raw = stream.topic("orders")
    await raw.ensure(1)
    await raw.publish(b"not json").send()
    await raw.publish(b'{"id": 5, "total": 1}').send()
    reader = stream.topic("orders", cls=Order).records("typed")
    with pytest.raises(rill.DecodeError) as e:
        await reader.next()
    assert (e.value.partition, e.value.offset) == (0, 0)
    assert isinstance(e.value, ValueError)
    nxt = await reader.next()
    assert nxt is not None and nxt.value == Order(5, 1) and nxt.offset == 1
    assert await reader.next() is None
    assert reader.offsets() == {0: 2}


async def test_encoding_a_value_of_the_wrong_class_fails_and_sends_nothing(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("orders", cls=Order)
    await topic.ensure(1)
    with pytest.raises(rill.EncodeError):
        await topic.publish(Payment(id=1, amount=1)).send()
    with pytest.raises(rill.EncodeError):
        await client.stream(topic.stream).topic("orders", codec="json").publish({"x": object()}).send()
    with pytest.raises(rill.InvalidArgumentError):
        await client.stream(topic.stream).topic("orders").publish(12).send()
    assert await topic.end_offset(0) == 0


async def test_cursor_save_and_restore(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("log", cls=Order)
    await topic.ensure(partitions=2)
    for i in range(10):
        await topic.publish(Order(i, i)).key(f"k{i}").send()

    reader = topic.records("log-example")
    assert reader.offsets() == {}
    first = [await reader.next() for _ in range(4)]
    assert all(r is not None for r in first)
    saved = json.loads(json.dumps(reader.offsets()))  # as a caller would keep it
    assert sum(reader.offsets().values()) == 4

    resumed = topic.records("log-example", offsets=saved)
    assert resumed.offsets() == {int(p): o for p, o in saved.items()}
    rest = await read_all(resumed)
    seen = sorted(r.value.id for r in first) + sorted(r.value.id for r in rest)
    assert sorted(seen) == list(range(10)), "every record exactly once"
    assert set(r.position for r in first).isdisjoint(r.position for r in rest)

    # Caught up: None, until more records arrive.
    assert await resumed.next() is None
    await topic.publish(Order(10, 10)).partition(1).send()
    late = await resumed.next()
    assert late is not None and late.value == Order(10, 10)
    ends = {p.partition: p.next_offset for p in (await topic.describe()).partitions}
    assert resumed.offsets() == ends


async def test_publish_is_awaitable_and_batches_keep_input_order(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(partitions=3)
    at = await topic.publish(b"direct")
    assert isinstance(at, rill.Position)
    keys = [f"key-{i}" for i in range(20)]
    positions = await topic.publish_batch([rill.Message(k.encode(), key=k) for k in keys])
    assert [p.partition for p in positions] == [rill.partition_for_key(k, 3) for k in keys]
    fetched = {}
    for p in range(3):
        f = await topic.fetch(p, 0)
        fetched.update({r.position: r.value for r in f.records})
    for k, pos in zip(keys, positions):
        assert fetched[pos] == k.encode()


async def test_concurrent_publishes_do_not_block_the_event_loop(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(2)
    consumer = await topic.consumer("waiter", 0, max_wait_ms=2000).init()
    waiting = asyncio.ensure_future(consumer.next())
    ticks = 0
    start = asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - start < 0.3:
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks >= 10, "the event loop ran while a consumer waited for records"
    assert not waiting.done()
    await asyncio.gather(*(topic.publish(str(i)).partition(0).send() for i in range(20)))
    record = await asyncio.wait_for(waiting, 10)
    assert record is not None and record.partition == 0
    await consumer.shutdown()


async def test_a_background_producer_buffers_and_keeps_per_key_order(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(partitions=3)
    producer = await topic.producer(
        background=True, shards=2, buffer_messages=64, backpressure="block", linger_ms=2
    ).init()
    for i in range(300):
        assert await producer.send(f"{i}", key=f"user-{i % 5}") is None, "buffered, no position"
    assert await producer.send_batch([rill.Message(b"last", key=b"user-0")]) == []
    await producer.flush()
    await producer.shutdown()
    with pytest.raises(rill.ShutdownError):
        await producer.send(b"late")
    records = await read_all(topic.records("bg"))
    assert len(records) == 301
    for k in range(5):
        values = [r.value for r in records if r.key == f"user-{k}".encode()]
        expected = [str(i).encode() for i in range(k, 300, 5)] + ([b"last"] if k == 0 else [])
        assert values == expected, "one key keeps its order"
        assert {r.partition for r in records if r.key == f"user-{k}".encode()} == {
            rill.partition_for_key(f"user-{k}", 3)
        }
