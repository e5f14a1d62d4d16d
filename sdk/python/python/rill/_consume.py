"""Reading: cursor readers (the caller keeps the position), named consumers and
consumer-group members (the broker keeps it)."""

from __future__ import annotations

from typing import Any, AsyncIterator, Dict, Generic, List, Optional, TypeVar

from . import _native
from ._codec import Codec, decode_record
from ._types import Position, Record, _position_of, _seconds, _u32

T = TypeVar("T")


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

    @property
    def name(self) -> str:
        """The reader's name."""
        return self._native.name

    async def next(self) -> Optional[Record[T]]:
        """The next record, ``None`` once caught up."""
        # A record fetched already comes without an awaitable of its own.
        raw = self._native.try_next()
        if raw is None:
            raw = await self._native.next()
        return None if raw is None else decode_record(self.codec, raw)

    def offsets(self) -> Dict[int, int]:
        """Per partition, the next offset after the records handed out: save it, and
        resume with ``topic.records(name, offsets=saved)``."""
        return dict(self._native.offsets())

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

    async def init(self) -> "Any":
        """Builds the consumer (a group member joins its group). Again: nothing."""
        await self._native.init()
        return self

    async def next(self) -> Optional[Record[T]]:
        """The next record, waiting for one; ``None`` after :meth:`shutdown` (which also
        ends a ``next()`` that waits). Asking for the next record says the caller is
        done with the one before: the commit policy may store it now."""
        # A record fetched already, with nothing to store first, comes without an
        # awaitable of its own.
        raw = self._native.try_next()
        if raw is None:
            raw = await self._native.next()
        return None if raw is None else decode_record(self.codec, raw)

    async def next_within(self, timeout: float) -> Record[T]:
        """Like :meth:`next`, raising ``rill.TimeoutError`` if no record arrives within
        ``timeout`` seconds (no record is lost), and ``ShutdownError`` after shutdown."""
        raw = self._native.try_next()
        if raw is None:
            raw = await self._native.next_within(_seconds("timeout", timeout))
        record: Record[T] = decode_record(self.codec, raw)
        return record

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
