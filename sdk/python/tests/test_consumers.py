"""Named consumers and group members: every start variant, every commit policy's store
points, commit-after-success, next_within, shutdown."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional

import pytest

import rill
from conftest import unique

# Short waits so that a consumer that caught up answers quickly.
FAST: Dict[str, Any] = {"max_wait_ms": 100, "poll_interval_ms": 5}


async def topic_with(client: rill.Client, n: int, partitions: int = 1) -> rill.Topic:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(partitions)
    for i in range(n):
        await topic.publish(f"r{i}").partition(0).send()
    return topic


def make(topic: rill.Topic, kind: str, name: str, **options: Any) -> Any:
    """A named consumer of partition 0 or a group member (the only one, so it owns
    partition 0), with these options."""
    options = {**FAST, **options}
    if kind == "named":
        return topic.consumer(name, 0, **options)
    return topic.consumer_group(name, session_timeout_ms=5000, **options)


async def stored(topic: rill.Topic, kind: str, name: str) -> Optional[int]:
    """The offset the broker has stored as consumed for `name` (not what the consumer
    believes)."""
    if kind == "named":
        return await topic.stored_offset(name, 0)
    try:
        group = await topic.describe_group(name)
    except rill.GroupNotFoundError:
        return None  # no member left and no offset stored
    nxt = group.partitions[0].stored_offset
    return None if nxt is None else nxt - 1


@pytest.fixture(params=["named", "group"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---- where a consumer starts ---------------------------------------------------------


async def test_every_start_variant(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 5)
    records = [r async for r in topic.records("all")]
    third_ts = records[2].timestamp_us

    async def first_offset(**options: Any) -> int:
        c = await make(topic, kind, unique("c"), auto_commit="disabled", **options).init()
        try:
            r = await c.next_within(10)
            return r.offset
        finally:
            await c.shutdown()

    assert await first_offset(polling="first") == 0
    assert await first_offset(polling="last") == 4
    # end: only what is appended after the start.
    c = await make(topic, kind, unique("c"), auto_commit="disabled", polling="end").init()
    try:
        with pytest.raises(rill.TimeoutError):
            await c.next_within(0.3)
        await topic.publish(b"later").partition(0).send()
        assert (await c.next_within(10)).offset == 5
    finally:
        await c.shutdown()
    assert await first_offset(polling="next") == 0, "next with nothing stored: the beginning"
    assert await first_offset(polling="offset", offset=3) == 3
    assert await first_offset(offset=2) == 2, "offset= alone means polling=\"offset\""
    assert await first_offset(polling="timestamp", timestamp_micros=third_ts) == 2
    if kind == "named":
        assert await first_offset() == 0, "the named default is next: the beginning"
    else:
        assert await first_offset() == 0, "the group default is first"


async def test_a_stored_offset_wins_unless_replay_is_allowed(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 6)
    name = unique("c")
    # Store offset 2 as consumed through a first consumer.
    c = await make(topic, kind, name, auto_commit="disabled", polling="first").init()
    for _ in range(3):
        r = await c.next_within(10)
    await c.commit(r)
    await c.shutdown()
    assert await stored(topic, kind, name) == 2

    async def first_offset(**options: Any) -> int:
        c = await make(topic, kind, name, auto_commit="disabled", **options).init()
        try:
            return (await c.next_within(10)).offset
        finally:
            await c.shutdown()

    assert await first_offset(polling="next") == 3
    assert await first_offset(polling="first") == 3, "a stored offset wins over polling"
    assert await first_offset(polling="last") == 3
    assert await first_offset(polling="first", allow_replay=True) == 0
    assert await first_offset(polling="offset", offset=1, allow_replay=True) == 1
    assert await first_offset(polling="last", allow_replay=True) == 5


# ---- commit policies -----------------------------------------------------------------

LONG_MS = 60_000

# Per policy, over 6 records read in polls of 3: the offset stored (as the consumer
# knows it) after each of the 6 `next()` calls that hand out records, then after one
# more call that finds nothing (the caller is done with the last record), then what the
# broker has after shutdown. These mirror the Rust SDK's own unit test of the policies.
POLICIES = [
    (dict(auto_commit="disabled"), [None] * 6, None, None),
    (dict(auto_commit="polling"), [None, None, None, 2, 2, 2], 5, 5),
    (dict(auto_commit="all"), [None, None, None, 2, 2, 2], 5, 5),
    (dict(auto_commit="each"), [None, 0, 1, 2, 3, 4], 5, 5),
    (dict(auto_commit="every", commit_every=2), [None, None, 1, 1, 3, 3], 5, 5),
    (dict(auto_commit="interval", commit_interval_ms=LONG_MS), [None] * 6, None, 5),
    (dict(auto_commit="interval_or_polling", commit_interval_ms=LONG_MS), [None, None, None, 2, 2, 2], 5, 5),
    (dict(auto_commit="interval_or_all", commit_interval_ms=LONG_MS), [None, None, None, 2, 2, 2], 5, 5),
    (dict(auto_commit="interval_or_each", commit_interval_ms=LONG_MS), [None, 0, 1, 2, 3, 4], 5, 5),
    (
        dict(auto_commit="interval_or_every", commit_interval_ms=LONG_MS, commit_every=2),
        [None, None, 1, 1, 3, 3],
        5,
        5,
    ),
]


@pytest.mark.parametrize("options,after_each,after_done,after_shutdown", POLICIES,
                         ids=[p[0]["auto_commit"] for p in POLICIES])
async def test_every_commit_policy_stores_where_it_says(
    client: rill.Client,
    kind: str,
    options: Dict[str, Any],
    after_each: List[Optional[int]],
    after_done: Optional[int],
    after_shutdown: Optional[int],
) -> None:
    topic = await topic_with(client, 6)
    name = unique("c")
    c = await make(topic, kind, name, batch_length=3, polling="first", **options).init()
    seen = []
    for i in range(6):
        r = await c.next_within(10)
        assert r.offset == i
        seen.append(c.last_stored_offset(0))
        assert c.last_consumed_offset(0) == i
    assert seen == after_each
    # Long enough for the store a policy makes at this call, even on a loaded machine.
    with pytest.raises(rill.TimeoutError):
        await c.next_within(1.0)
    assert c.last_stored_offset(0) == after_done
    assert await stored(topic, kind, name) == after_done, "the broker has what the consumer says"
    await c.shutdown()
    assert await stored(topic, kind, name) == after_shutdown


async def test_interval_policies_store_on_the_timer(client: rill.Client, kind: str) -> None:
    for options in (
        dict(auto_commit="interval", commit_interval_ms=50),
        dict(auto_commit="interval_or_every", commit_interval_ms=50, commit_every=100),
    ):
        topic = await topic_with(client, 4)
        name = unique("c")
        c = await make(topic, kind, name, polling="first", **options).init()
        await c.next_within(10)
        await c.next_within(10)
        assert c.last_stored_offset(0) is None
        await asyncio.sleep(0.1)
        await c.next_within(10)  # done with record 1, and the interval passed
        assert c.last_stored_offset(0) == 1, options
        assert await stored(topic, kind, name) == 1
        await c.shutdown()
        assert await stored(topic, kind, name) == 2, "shutdown stores the last record handed out"


async def test_commit_after_success_resumes_after_the_last_commit(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 5)
    name = unique("workers")
    c = await make(topic, kind, name, auto_commit="disabled", polling="first", allow_replay=False).init()
    handled = []
    async for message in c:
        handled.append(message.offset)
        if message.offset == 2:
            break  # "crash" while handling 2: it was never committed
        await c.commit(message)
    await c.shutdown()
    assert await stored(topic, kind, name) == 1
    again = await make(topic, kind, name, auto_commit="disabled").init()
    r = await again.next_within(10)
    assert r.offset == 2, "the record not committed is delivered again"
    await again.store_offset(0, 4)
    assert again.last_stored_offset(0) == 4
    await again.shutdown()
    assert await stored(topic, kind, name) == 4


async def test_delete_offset(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 3)
    name = unique("c")
    c = await make(topic, kind, name, auto_commit="each", polling="first").init()
    await c.next_within(10)
    await c.next_within(10)
    assert await stored(topic, kind, name) == 0
    await c.delete_offset(0)
    assert await stored(topic, kind, name) is None
    await c.shutdown()


async def test_shutdown_ends_a_waiting_next_and_later_calls(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 0)
    c = await make(topic, kind, unique("c"), max_wait_ms=1000).init()
    waiting = asyncio.ensure_future(c.next())
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await asyncio.wait_for(c.shutdown(), 10)
    assert await asyncio.wait_for(waiting, 10) is None
    assert await c.next() is None
    with pytest.raises(rill.ShutdownError):
        await c.next_within(1)
    await c.shutdown()  # again: nothing


async def test_next_within_times_out_with_a_typed_error_and_loses_nothing(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 0)
    c = await make(topic, kind, unique("c")).init()
    with pytest.raises(rill.TimeoutError) as e:
        await c.next_within(0.2)
    assert isinstance(e.value, TimeoutError) and e.value.timeout == pytest.approx(0.2)
    await topic.publish(b"late").partition(0).send()
    r = await c.next_within(10)
    assert r.value == b"late" and r.offset == 0
    await c.shutdown()


async def test_a_consumer_must_be_initialized(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 1)
    c = make(topic, kind, unique("c"))
    with pytest.raises(rill.InvalidArgumentError, match="init"):
        await c.next()
    async with c:
        assert (await c.next_within(10)).offset == 0
    with pytest.raises(rill.ShutdownError):
        await c.init()


async def test_group_member_reports_and_describe(client: rill.Client) -> None:
    topic = await topic_with(client, 2, partitions=2)
    group = unique("g")
    c = await topic.consumer_group(group, member_id="member-a", **FAST).init()
    assert c.member_id == "member-a"
    assert c.assignment() == [0, 1]
    assert c.position(0) == 0
    await c.report({"handled": 7})
    await c.next_within(10)
    description = await topic.describe_group(group)
    assert [m.id for m in description.members] == ["member-a"]
    assert sorted(description.members[0].owned) == [0, 1]
    await c.shutdown()
    assert (await topic.describe_group(group)).members == []


async def test_cancelling_a_waiting_next_loses_no_record(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 0)
    c = await make(topic, kind, unique("c"), max_wait_ms=1000).init()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(c.next(), 0.2)  # cancels the awaitable: the task is aborted
    await topic.publish(b"after").partition(0).send()
    r = await c.next_within(10)
    assert (r.offset, r.value) == (0, b"after")
    await c.shutdown()


def test_awaitables_need_a_running_event_loop() -> None:
    with pytest.raises(RuntimeError):
        rill._native.open("/nonexistent-dir-for-a-test")


# ---- poll(): a fetched batch at once ---------------------------------------------------


@pytest.mark.parametrize("options", [p[0] for p in POLICIES], ids=[p[0]["auto_commit"] for p in POLICIES])
async def test_poll_hands_out_every_record_once_and_stores_a_poll_only_after_it(
    client: rill.Client, kind: str, options: Dict[str, Any]
) -> None:
    topic = await topic_with(client, 12)
    name = unique("c")
    c = await make(topic, kind, name, batch_length=4, polling="first", **options).init()
    offsets: List[int] = []
    while len(offsets) < 12:
        batch = await c.poll(timeout=10)
        assert batch, "a poll with a timeout returns records while there are some"
        assert len(batch) <= 4, "at most one fetch of the partition"
        stored_now = c.last_stored_offset(0)
        assert stored_now is None or stored_now < batch[0].offset, (
            f"stored {stored_now} while the caller has not finished poll {[r.offset for r in batch]}"
        )
        assert await stored(topic, kind, name) == stored_now, "the broker has what the consumer says"
        offsets += [r.offset for r in batch]
        assert [r.value for r in batch] == [f"r{r.offset}".encode() for r in batch]
    assert offsets == list(range(12)), "every record once, in order"
    assert await c.poll(timeout=1.0) == [], "caught up: nothing within the timeout"
    await c.shutdown()
    # Every policy but `disabled` stores the last record by shutdown at the latest.
    assert await stored(topic, kind, name) == (None if options["auto_commit"] == "disabled" else 11)
    assert await c.poll() == [] and await c.poll(timeout=1) == [], "after shutdown: empty"


async def test_poll_and_next_mix_in_order(client: rill.Client, kind: str) -> None:
    topic = await topic_with(client, 10)
    c = await make(topic, kind, unique("c"), batch_length=4, polling="first").init()
    got = [(await c.next_within(10)).offset]
    got += [r.offset for r in await c.poll(max_records=2)]
    got.append((await c.next_within(10)).offset)
    while len(got) < 10:
        got += [r.offset for r in await c.poll(timeout=10)]
    assert got == list(range(10))
    with pytest.raises(rill.InvalidArgumentError, match="max_records"):
        await c.poll(max_records=0)
    await c.shutdown()


async def test_poll_raises_a_decode_error_after_the_records_before_it(client: rill.Client, kind: str) -> None:
    raw = client.stream(unique("s")).topic("t")
    await raw.ensure(1)
    for v in (b'{"n": 0}', b'{"n": 1}', b"not json", b'{"n": 3}'):
        await raw.publish(v).partition(0).send()
    typed = client.stream(raw.stream).topic("t", codec="json")
    c = await make(typed, kind, unique("c"), batch_length=10, polling="first").init()
    assert [r.value for r in await c.poll(timeout=10)] == [{"n": 0}, {"n": 1}]
    with pytest.raises(rill.DecodeError) as e:
        await c.poll(timeout=10)
    assert (e.value.partition, e.value.offset) == (0, 2)
    assert [(r.offset, r.value) for r in await c.poll(timeout=10)] == [(3, {"n": 3})]
    await c.shutdown()

    reader = typed.records("typed")
    assert [r.offset for r in await reader.poll()] == [0, 1]
    assert reader.offsets() == {0: 2}, "what poll holds back counts as not read"
    with pytest.raises(rill.DecodeError):
        await reader.poll()
    assert [r.offset for r in await reader.poll()] == [3]
    assert await reader.poll() == []


async def test_reader_poll_and_next_resume_exactly_from_offsets(client: rill.Client) -> None:
    topic = client.stream(unique("s")).topic("t")
    await topic.ensure(2)
    await topic.publish_batch([rill.Message(f"v{i}".encode(), key=f"k{i}") for i in range(300)])
    every = sorted([(r.partition, r.offset) async for r in topic.records("all")])
    assert len(every) == 300

    reader = topic.records("part", max_bytes=2048)  # a few records per fetch
    first = [(r.partition, r.offset) for r in await reader.poll(max_records=3)]
    for _ in range(20):
        r = await reader.next()
        assert r is not None
        first.append((r.partition, r.offset))
    saved = reader.offsets()
    rest = []
    async for r in topic.records("resumed", offsets=saved):
        rest.append((r.partition, r.offset))
    assert sorted(first + rest) == every, "nothing lost or read twice across the save"
    while batch := await reader.poll(max_records=7):
        assert len(batch) <= 7
        first += [(r.partition, r.offset) for r in batch]
    assert sorted(first) == every
    assert await reader.next() is None
