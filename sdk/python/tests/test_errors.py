"""Bad input is a typed exception (never a panic, never a silent success); broker
errors map to one class per error code."""

from __future__ import annotations

from pathlib import Path

import pytest

import rill
from conftest import unique


async def test_invalid_names_are_refused(client: rill.Client) -> None:
    with pytest.raises(rill.InvalidNameError) as e:
        await client.stream("bad name").topic("t").ensure(1)
    assert e.value.code == "INVALID_NAME"
    assert isinstance(e.value, rill.ServerError) and isinstance(e.value, rill.RillError)
    assert e.value.wire_code == 6
    with pytest.raises(rill.InvalidNameError):
        await client.stream(unique("s")).topic("a/b").ensure(1)
    with pytest.raises(rill.InvalidNameError):
        await client.stream(unique("s")).topic("x" * 256).ensure(1)
    with pytest.raises(rill.InvalidNameError):
        await client.create_stream("..")
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(1)
    with pytest.raises(rill.InvalidNameError):
        await topic.consumer("no spaces", 0).init()
    with pytest.raises(rill.InvalidNameError):
        await topic.consumer_group("no/slash").init()
    assert rill.name_problem("ok-name_1.2") is None
    assert rill.name_problem("") == "is empty"
    assert "255" in (rill.name_problem("x" * 256) or "")


async def test_missing_stream_topic_and_partition(client: rill.Client) -> None:
    stream = unique("s")
    with pytest.raises(rill.StreamNotFoundError):
        await client.stream(stream).topic("t").publish(b"x").send()
    assert await client.stream(stream).ensure() is True
    assert await client.stream(stream).ensure() is False
    missing = client.stream(stream).topic("missing")
    with pytest.raises(rill.TopicNotFoundError) as e:
        await missing.publish(b"x").send()
    assert e.value.code == "TOPIC_NOT_FOUND" and not e.value.transient
    with pytest.raises(rill.TopicNotFoundError):
        await missing.describe()
    with pytest.raises(rill.TopicNotFoundError):
        await missing.records("r").next()
    with pytest.raises(rill.StreamNotFoundError):
        await client.delete_stream(unique("nope"))
    topic = client.stream(stream).topic("t")
    await topic.ensure(2)
    with pytest.raises(rill.PartitionNotFoundError):
        await topic.publish(b"x").partition(2).send()
    with pytest.raises(rill.TopicExistsError) as exists:
        await topic.ensure(3)
    assert "partition" in str(exists.value)
    with pytest.raises(rill.StreamExistsError):
        await client.stream(stream).create()


async def test_a_key_together_with_a_partition_sends_nothing(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(2)
    with pytest.raises(rill.InvalidArgumentError, match="key or an explicit partition"):
        await topic.publish(b"x").key(b"k").partition(1).send()
    with pytest.raises(rill.InvalidArgumentError):
        await topic.publish(b"x").partition(1).key(b"k").send()
    with pytest.raises(rill.InvalidArgumentError, match="empty"):
        await topic.publish(b"x").key(b"").send()
    producer = await topic.producer().init()
    with pytest.raises(rill.InvalidArgumentError):
        await producer.send(b"x", key=b"k", partition=0)
    with pytest.raises(rill.InvalidArgumentError):
        await producer.send_batch([b"ok", rill.Message(b"x", key=b"")])
    pinned = await topic.producer(partition=1).init()
    with pytest.raises(rill.InvalidArgumentError):
        await pinned.send(b"x", key=b"k")
    with pytest.raises(rill.InvalidArgumentError):
        topic.producer(partition=1, key=b"k")
    await producer.shutdown()
    await pinned.shutdown()
    with pytest.raises(rill.ShutdownError):
        await producer.send(b"after")
    assert [await topic.end_offset(p) for p in (0, 1)] == [0, 0], "nothing was sent"


async def test_bad_headers_are_refused_before_sending(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(1)
    bad = [
        {"n": ("uint8", 256)},
        {"n": ("uint8", -1)},
        {"n": ("int8", 128)},
        {"n": ("uint128", 2**128)},
        {"n": ("int64", 1.5)},
        {"n": ("int32", True)},
        {"n": ("bool", 1)},
        {"n": ("str", b"bytes")},
        {"n": ("bytes", "str")},
        {"n": ("float32", 1e300)},
        {"n": ("float64", "x")},
        {"n": ("u16", 1)},
        {"n": ("uint16",)},
        {"n": 7},
        {"n": None},
        {3: "name not a str"},
        "not headers",
        [("a", "b", "c")],
    ]
    for headers in bad:
        with pytest.raises(rill.InvalidArgumentError):
            await topic.publish(b"x").headers(headers).send()  # type: ignore[arg-type]
    with pytest.raises(rill.InvalidArgumentError):
        await topic.publish(b"x").header("n" * 300, "too long a name").send()
    assert await topic.end_offset(0) == 0


async def test_bad_options_are_refused(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(1)
    bad_consumer_options = [
        dict(auto_commit="sometimes"),
        dict(auto_commit="every"),
        dict(auto_commit="every", commit_every=0),
        dict(auto_commit="interval", commit_interval_ms=0),
        dict(auto_commit="interval"),
        dict(auto_commit="each", commit_every=3),
        dict(commit_interval_ms=10),
        dict(polling="somewhere"),
        dict(polling="offset"),
        dict(polling="timestamp"),
        dict(polling="first", offset=3),
        dict(offset=1, timestamp_micros=2),
        dict(batch_length=-1),
        dict(batch_length="many"),
        dict(batch_length=True),
        dict(allow_replay="yes"),
        dict(no_such_option=1),
    ]
    for options in bad_consumer_options:
        with pytest.raises(rill.InvalidArgumentError):
            topic.consumer_group("g", **options)
        with pytest.raises(rill.InvalidArgumentError):
            topic.consumer("c", 0, **options)
    with pytest.raises(rill.InvalidArgumentError):
        await topic.consumer_group("g", batch_length=0).init()
    with pytest.raises(rill.InvalidArgumentError):
        await topic.consumer("c", 0, poll_interval_ms=0).init()
    with pytest.raises(rill.InvalidArgumentError):
        topic.consumer_group("g", max_bytes=10)  # a named consumer's option only
    for options in (
        dict(batch_length=0),
        dict(max_batch_bytes=10),
        dict(max_in_flight=0),
    ):
        with pytest.raises(rill.InvalidArgumentError):
            await topic.producer(**options).init()
    for options in (
        dict(lingering=5),
        dict(shards=2),
        dict(background=True, sharding="random"),
        dict(background=True, backpressure="block_for"),
        dict(background=True, backpressure="fail", backpressure_timeout_ms=5),
        dict(linger_ms=-5),
    ):
        with pytest.raises(rill.InvalidArgumentError):
            topic.producer(**options)
    for call in (
        lambda: topic.consumer("c", -1),
        lambda: topic.records("r", offsets={0: -1}),
        lambda: topic.records("r", offsets=[0]),
        lambda: topic.publish(b"x").partition(2**32),
        lambda: client.stream(3),  # type: ignore[arg-type]
        lambda: client.stream("s").topic("t", cls=dict),
        lambda: client.stream("s").topic("t", codec="yaml"),
    ):
        with pytest.raises(rill.InvalidArgumentError):
            call()
    with pytest.raises(rill.InvalidArgumentError):
        await topic.ensure(0)
    with pytest.raises(rill.InvalidArgumentError):
        await topic.create(partitions=1, durability="sometimes")
    with pytest.raises(rill.InvalidArgumentError):
        await topic.consumer("c", 0).next_within(-1)
    c = await topic.consumer("c", 0).init()
    with pytest.raises(rill.InvalidArgumentError):
        await c.next_within(float("nan"))
    with pytest.raises(rill.InvalidArgumentError):
        await c.commit("not a record")
    with pytest.raises(rill.InvalidArgumentError):
        await c.commit(rill.Position(1, 0))  # another partition
    await c.shutdown()


async def test_topic_options_round_trip(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    config = await topic.create(
        partitions=3,
        retention_ms=3_600_000,
        retention_bytes=1 << 30,
        segment_bytes=1 << 20,
        durability="interval:50",
        max_record_bytes=4096,
    )
    assert config == rill.TopicConfig(3, 3_600_000, 1 << 30, 1 << 20, "interval:50", 4096)
    with pytest.raises(rill.RecordTooLargeError):
        await topic.publish(b"x" * 5000).send()
    [info] = await client.stream(topic.stream).topics()
    assert (info.name, info.config) == ("t", config)
    assert rill.StreamInfo(topic.stream, 1) in await client.list_streams()
    assert any(t.stream == topic.stream for t in await client.list_topics())
    description = await client.describe_topic(topic.stream, "t")
    assert [p.partition for p in description.partitions] == [0, 1, 2]
    assert all(p.failure is None and p.damaged == [] for p in description.partitions)
    await topic.delete()
    assert await client.stream(topic.stream).topics() == []
    await client.stream(topic.stream).delete()
    assert all(s.name != topic.stream for s in await client.list_streams())


async def test_a_closed_client_refuses_every_call(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(1)
    await client.close()
    assert client.is_closed
    with pytest.raises(rill.ClosedError):
        await topic.publish(b"x").send()
    with pytest.raises(rill.ClosedError):
        await client.list_streams()
    await client.close()  # again: nothing


async def test_a_data_directory_is_opened_by_one_client_at_a_time(tmp_path: Path) -> None:
    first = await rill.open(tmp_path / "data")
    with pytest.raises(rill.EmbeddedError) as e:
        await rill.open(tmp_path / "data")
    assert e.value.kind == "Embedded"
    await first.close()
    again = await rill.open(tmp_path / "data")
    assert again.is_embedded
    await again.close()
    with pytest.raises(rill.InvalidArgumentError):
        await rill.open(42)  # type: ignore[arg-type]


async def test_bad_urls_and_unreachable_servers() -> None:
    for url in ("http://127.0.0.1:1", "rill://nohost", "rill://h:99999", "rill://alice@h:1", "rill://:pw@h:1"):
        with pytest.raises(rill.InvalidUrlError) as e:
            await rill.connect(url)
        assert isinstance(e.value, ValueError)
        assert "pw" not in str(e.value)
    with pytest.raises(rill.ConnectionError) as c:
        await rill.connect("rill://127.0.0.1:1", init_retries=0, connect_timeout_ms=500)
    assert isinstance(c.value, ConnectionError) and c.value.transient
    with pytest.raises(rill.InvalidArgumentError):
        await rill.connect("rill://127.0.0.1:1", user="a")
    with pytest.raises(rill.InvalidArgumentError):
        await rill.connect("rill://127.0.0.1:1", tls_ca_file="/x")  # TLS options on rill://


def test_every_error_code_has_its_class() -> None:
    codes = [
        "ERROR_CODE_UNSPECIFIED", "INTERNAL", "INVALID_REQUEST", "UNKNOWN_KIND",
        "UNSUPPORTED_VERSION", "FRAME_TOO_LARGE", "INVALID_NAME", "STREAM_NOT_FOUND",
        "TOPIC_NOT_FOUND", "PARTITION_NOT_FOUND", "STREAM_EXISTS", "TOPIC_EXISTS",
        "INVALID_BATCH", "BATCH_TOO_LARGE", "RECORD_TOO_LARGE", "OFFSET_BEFORE_START",
        "OFFSET_BEYOND_END", "OUT_OF_ORDER_SEQUENCE", "PRODUCER_FENCED", "STORAGE_FAILURE",
        "TIMEOUT", "NOT_OWNER", "REBALANCING", "MIGRATING", "BUSY", "INVALID_CONFIG",
        "OFFSET_NOT_FOUND", "SHUTTING_DOWN", "GROUP_NOT_FOUND", "NOT_MEMBER",
        "STALE_GENERATION", "NOT_ASSIGNED", "UNKNOWN_PRODUCER_ID", "TIMESTAMP_OUT_OF_RANGE",
        "DATA_LOSS", "GROUP_NOT_EMPTY", "NOT_LEADER", "UNAUTHENTICATED", "PERMISSION_DENIED",
    ]
    classes = {rill.errors.server_error_class(c) for c in codes}
    assert len(classes) == len(codes), "one class per code"
    for c in codes:
        cls = rill.errors.server_error_class(c)
        assert cls.code == c and issubclass(cls, rill.ServerError)
    transient = {c for c in codes if rill.errors.server_error_class(c).transient}
    assert transient == {"TIMEOUT", "NOT_OWNER", "NOT_LEADER", "REBALANCING", "MIGRATING", "BUSY", "SHUTTING_DOWN"}
    assert rill.errors.server_error_class("SOMETHING_NEW") is rill.UnknownCodeError
