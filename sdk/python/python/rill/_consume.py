"""Reading: cursor readers (the caller keeps the position), named consumers and
consumer-group members (the broker keeps it)."""

from __future__ import annotations

from collections import deque
from typing import Any, AsyncIterator, Deque, Dict, Generic, List, Optional, Tuple, TypeVar

from . import _native
from ._codec import Codec, decode_record, decode_records
from ._types import Position, Record, _position_of, _seconds, _u32
from .errors import InvalidArgumentError, ShutdownError
from .errors import TimeoutError as RillTimeoutError

T = TypeVar("T")

#: Most records one ``poll()`` returns unless told otherwise.
POLL_MAX = 10_000

RawRecord = Tuple[Any, ...]


def _poll_max(max_records: int) -> int:
    if isinstance(max_records, bool) or not isinstance(max_records, int) or not 1 <= max_records <= 1_000_000:
        raise InvalidArgumentError(f"max_records is an int from 1 to 1000000, not {max_records!r}")
    return max_records


def _take(held: Deque[RawRecord], n: int, native: Any) -> List[RawRecord]:
    """Up to ``n`` records: those in ``held`` first, else what ``native`` has fetched."""
    if held:
        return [held.popleft() for _ in range(min(n, len(held)))]
    taken: List[RawRecord] = native.try_take(n)
    return taken


def _decoded(codec: Codec[T], raws: List[RawRecord], held: Deque[RawRecord]) -> List[Record[T]]:
    """The records of ``raws`` up to one whose value fails to decode. That one and the
    rest go back to the front of ``held``: its ``DecodeError`` is raised now if it is
    the first, else by the call after."""
    records, used = decode_records(codec, raws)
    if used == len(raws):
        return records
    held.extendleft(reversed(raws[used + (0 if records else 1):]))
    if not records:
        decode_record(codec, raws[0])  # raises its DecodeError
    return records


class Reader(Generic[T]):
    """A cursor over every partition of a topic; see :meth:`Topic.records`.

    ``await next()`` returns records until the reader caught up with the tail it saw,
    then ``None`` (a later call looks at the tails again); ``async for`` stops there.
    A value that fails to decode raises ``DecodeError`` (with its position) and reading
    goes on after it; so do ``DataLossError`` and ``CorruptError`` for records that
    cannot be delivered.
    """

    def __init__(self, native: "_native.Reader", codec: Codec[T]) -> None:
        self._native = native
        self.codec = codec
        # Records taken from the native reader and not handed out yet: `next()` takes
        # a fetched batch at once; `offsets()` counts these as not read.
        self._held: Deque[RawRecord] = deque()

    @property
    def name(self) -> str:
        """The reader's name."""
        return self._native.name

    async def next(self) -> Optional[Record[T]]:
        """The next record, ``None`` once caught up."""
        held = self._held
        if not held:
            # A batch fetched already comes without an awaitable of its own.
            held.extend(self._native.try_take(POLL_MAX))
            if not held:
                raw = await self._native.next()
                return None if raw is None else decode_record(self.codec, raw)
        record: Record[T] = decode_record(self.codec, held.popleft())
        return record

    async def poll(self, max_records: int = POLL_MAX) -> List[Record[T]]:
        """What is there now, up to ``max_records``: the rest of a fetch, or one fetch
        of the next partition (so at most about one batch per partition); ``[]`` once
        caught up. Raises what :meth:`next` raises; a ``DecodeError`` comes after the
        records before it (by the next call), and reading goes on after it."""
        n = _poll_max(max_records)
        held = self._held
        raws = _take(held, n, self._native)
        if not raws:
            raw = await self._native.next()
            if raw is None:
                return []
            raws = [raw]
            raws += self._native.try_take(n - 1)
        return _decoded(self.codec, raws, held)

    def offsets(self) -> Dict[int, int]:
        """Per partition, the next offset after the records handed out: save it, and
        resume with ``topic.records(name, offsets=saved)``."""
        offsets = dict(self._native.offsets())
        seen = set()
        for raw in self._held:
            if raw[0] not in seen:
                seen.add(raw[0])
                offsets[raw[0]] = raw[1]
        return offsets

    def __aiter__(self) -> AsyncIterator[Record[T]]:
        return self

    async def __anext__(self) -> Record[T]:
        record = await self.next()
        if record is None:
            raise StopAsyncIteration
        return record


class _Consumer(Generic[T]):
    """What named consumers and group members share."""

    _native: Any

    def __init__(self, native: Any, codec: Codec[T]) -> None:
        self._native = native
        self.codec = codec
        # What `poll()` took and holds back after a value that failed to decode.
        self._held: Deque[RawRecord] = deque()

    async def init(self) -> "Any":
        """Builds the consumer (a group member joins its group). Again: nothing."""
        await self._native.init()
        return self

    async def next(self) -> Optional[Record[T]]:
        """The next record, waiting for one; ``None`` after :meth:`shutdown` (which also
        ends a ``next()`` that waits). Asking for the next record says the caller is
        done with the one before: the commit policy may store it now."""
        if self._held:
            held: Record[T] = decode_record(self.codec, self._held.popleft())
            return held
        # A record fetched already, with nothing to store first, comes without an
        # awaitable of its own.
        raw = self._native.try_next()
        if raw is None:
            raw = await self._native.next()
        return None if raw is None else decode_record(self.codec, raw)

    async def next_within(self, timeout: float) -> Record[T]:
        """Like :meth:`next`, raising ``rill.TimeoutError`` if no record arrives within
        ``timeout`` seconds (no record is lost), and ``ShutdownError`` after shutdown."""
        if self._held:
            held: Record[T] = decode_record(self.codec, self._held.popleft())
            return held
        raw = self._native.try_next()
        if raw is None:
            raw = await self._native.next_within(_seconds("timeout", timeout))
        record: Record[T] = decode_record(self.codec, raw)
        return record

    async def poll(self, max_records: int = POLL_MAX, timeout: Optional[float] = None) -> List[Record[T]]:
        """Up to ``max_records`` records at once: what was fetched already, else it
        waits for the next fetch (for ``timeout`` seconds at most, then ``[]``; no
        timeout waits as :meth:`next` does). ``[]`` after :meth:`shutdown`.

        Asking for the next poll (or record) says the caller is done with every record
        of the poll before: the commit policy may store them now, and never stores a
        record of a poll before the next call. ``commit()`` still takes any record of
        it. A ``DecodeError`` is raised after the records before it (by the next
        call); the records after it count as handed out already, as the whole poll
        does at ``shutdown()``."""
        n = _poll_max(max_records)
        wait = None if timeout is None else _seconds("timeout", timeout)
        held = self._held
        raws = _take(held, n, self._native)
        if not raws:
            if wait is None:
                raw = await self._native.next()
                if raw is None:
                    return []
            else:
                try:
                    raw = await self._native.next_within(wait)
                except (RillTimeoutError, ShutdownError):
                    return []
            raws = [raw]
            raws += self._native.try_take(n - 1)
        return _decoded(self.codec, raws, held)

    async def commit(self, record: Any) -> None:
        """Stores ``record`` (a :class:`Record`, a :class:`Position`, a ``(partition,
        offset)`` pair or a ``DecodeError``) as consumed: a restart resumes after it.
        The record handed out last counts as handled from then on."""
        p = _position_of(record)
        await self._native.commit(p.partition, p.offset)

    async def store_offset(self, partition: int, offset: int) -> None:
        """Stores the record at ``offset`` of ``partition`` as consumed."""
        await self.commit(Position(partition, offset))

    async def delete_offset(self, partition: int) -> None:
        """Deletes the stored offset of ``partition``."""
        await self._native.delete_offset(_u32("partition", partition))

    def last_consumed_offset(self, partition: int) -> Optional[int]:
        """The offset of the last record handed out of ``partition``. While a ``next()``
        waits in another task, as of the call before it."""
        offset: Optional[int] = self._native.last_consumed_offset(_u32("partition", partition))
        return offset

    def last_stored_offset(self, partition: int) -> Optional[int]:
        """The last offset of ``partition`` stored as consumed, as this consumer knows
        it. While a ``next()`` waits in another task, as of the call before it."""
        offset: Optional[int] = self._native.last_stored_offset(_u32("partition", partition))
        return offset

    async def shutdown(self) -> None:
        """Stops: the record handed out last counts as handled and the final offset is
        stored as the policy says (a group member also leaves its group)."""
        await self._native.shutdown()

    def __aiter__(self) -> AsyncIterator[Record[T]]:
        return self

    async def __anext__(self) -> Record[T]:
        record = await self.next()
        if record is None:
            raise StopAsyncIteration
        return record

    async def __aenter__(self) -> Any:
        return await self.init()

    async def __aexit__(self, *_: object) -> None:
        await self.shutdown()


class Consumer(_Consumer[T]):
    """A named consumer of one partition; see :meth:`Topic.consumer`."""

    _native: "_native.Consumer"

    @property
    def name(self) -> str:
        """The consumer's name."""
        return self._native.name

    @property
    def partition(self) -> int:
        """The partition it reads."""
        return self._native.partition


class GroupConsumer(_Consumer[T]):
    """A member of a consumer group; see :meth:`Topic.consumer_group`. The broker
    assigns it partitions and moves them as members join, leave or go silent."""

    _native: "_native.GroupConsumer"

    @property
    def group(self) -> str:
        """The group's name."""
        return self._native.group

    @property
    def member_id(self) -> str:
        """This member's id (empty before :meth:`init`)."""
        return self._native.member_id

    def assignment(self) -> List[int]:
        """The partitions this member owns now (while a ``next()`` waits in another
        task, as of the call before it)."""
        return list(self._native.assignment())

    def position(self, partition: int) -> Optional[int]:
        """The offset the member reads ``partition`` from next, if it owns it."""
        return self._native.position(_u32("partition", partition))

    async def report(self, metrics: Dict[str, int]) -> None:
        """Numbers this member reports about itself with each heartbeat (names of
        ``[a-z0-9_]``), shown by ``describe_group``."""
        await self._native.report(dict(metrics))
