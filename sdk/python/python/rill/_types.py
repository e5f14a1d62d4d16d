"""Plain values of the SDK: positions, typed headers, messages, records, and what the
admin calls answer."""

from __future__ import annotations

import dataclasses
import math
from typing import (
    Any,
    Dict,
    Generic,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from . import _native
from .errors import InvalidArgumentError

T = TypeVar("T")

#: The header value types, as ``HeaderValue.type`` names them: one per variant of the
#: Rust SDK's ``Value``.
HEADER_TYPES: Tuple[str, ...] = tuple(_native.HEADER_TYPES)


class Position(NamedTuple):
    """Where a record is: its partition and its offset in it."""

    partition: int
    offset: int


class Positions(Sequence[Position]):
    """The positions of a batch's records, in input order: a read-only sequence of
    :class:`Position` made on access (so a batch whose positions nobody reads costs no
    object per record). Equal to any sequence of the same positions."""

    __slots__ = ("_partitions", "_offsets")

    def __init__(self, partitions: bytes, offsets: bytes) -> None:
        self._partitions = memoryview(partitions).cast("I")
        self._offsets = memoryview(offsets).cast("Q")

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, i: int) -> Position: ...

    @overload
    def __getitem__(self, i: slice) -> List[Position]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[Position, List[Position]]:
        if isinstance(i, slice):
            return list(map(Position, self._partitions[i], self._offsets[i]))
        return Position(self._partitions[i], self._offsets[i])

    def __iter__(self) -> Iterator[Position]:
        return map(Position, self._partitions, self._offsets)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (str, bytes)) or not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Positions({list(self)!r})"


class HeaderValue(NamedTuple):
    """A typed header value: ``type`` is one of :data:`HEADER_TYPES`.

    It is a ``(type, value)`` tuple, so ``HeaderValue("uint16", 7) == ("uint16", 7)``;
    headers may be given either way. The class methods name each type::

        headers={"attempt": HeaderValue.uint8(3), "source": "web", "raw": b"\\x00"}

    A plain ``str``, ``bytes``, ``bool`` or ``float`` header value is ``str``,
    ``bytes``, ``bool`` or ``float64``; an ``int`` must say its type.
    """

    type: str
    value: Any

    @classmethod
    def str(cls, value: str) -> "HeaderValue":
        """A UTF-8 string."""
        return cls("str", value)

    @classmethod
    def bytes(cls, value: bytes) -> "HeaderValue":
        """Bytes."""
        return cls("bytes", value)

    @classmethod
    def bool(cls, value: bool) -> "HeaderValue":
        """A boolean."""
        return cls("bool", value)

    @classmethod
    def int8(cls, value: int) -> "HeaderValue":
        """A signed 8-bit integer."""
        return cls("int8", value)

    @classmethod
    def int16(cls, value: int) -> "HeaderValue":
        """A signed 16-bit integer."""
        return cls("int16", value)

    @classmethod
    def int32(cls, value: int) -> "HeaderValue":
        """A signed 32-bit integer."""
        return cls("int32", value)

    @classmethod
    def int64(cls, value: int) -> "HeaderValue":
        """A signed 64-bit integer."""
        return cls("int64", value)

    @classmethod
    def int128(cls, value: int) -> "HeaderValue":
        """A signed 128-bit integer."""
        return cls("int128", value)

    @classmethod
    def uint8(cls, value: int) -> "HeaderValue":
        """An unsigned 8-bit integer."""
        return cls("uint8", value)

    @classmethod
    def uint16(cls, value: int) -> "HeaderValue":
        """An unsigned 16-bit integer."""
        return cls("uint16", value)

    @classmethod
    def uint32(cls, value: int) -> "HeaderValue":
        """An unsigned 32-bit integer."""
        return cls("uint32", value)

    @classmethod
    def uint64(cls, value: int) -> "HeaderValue":
        """An unsigned 64-bit integer."""
        return cls("uint64", value)

    @classmethod
    def uint128(cls, value: int) -> "HeaderValue":
        """An unsigned 128-bit integer."""
        return cls("uint128", value)

    @classmethod
    def float32(cls, value: float) -> "HeaderValue":
        """A 32-bit float (stored as the nearest one)."""
        return cls("float32", value)

    @classmethod
    def float64(cls, value: float) -> "HeaderValue":
        """A 64-bit float."""
        return cls("float64", value)


#: Headers as the SDK takes them: a dict of name to value, or ``(name, value)`` pairs
#: (which may repeat a name). A value is a :class:`HeaderValue` (or a ``(type, value)``
#: tuple), or a plain ``str``, ``bytes``, ``bool`` or ``float``.
Headers = Union[Dict[str, Any], Iterable[Tuple[str, Any]]]


@dataclasses.dataclass
class Message(Generic[T]):
    """A message to publish with a key or headers, for ``publish_batch`` and
    ``send_batch`` (a plain value there is a message without either)."""

    value: T
    key: Optional[Union[bytes, str]] = None
    headers: Optional[Headers] = None


@dataclasses.dataclass
class Record(Generic[T]):
    """A record read from a partition. ``value`` is decoded by the topic's codec (raw
    ``bytes`` on a topic without one). A plain (slotted, not frozen) dataclass, as
    aiokafka's ``ConsumerRecord`` is: readers make one per record, and a frozen one
    costs more than twice as much to make."""

    __slots__ = ("partition", "offset", "timestamp_us", "key", "headers", "value")

    partition: int
    offset: int
    #: Append time, microseconds since the Unix epoch.
    timestamp_us: int
    key: Optional[bytes]
    #: Typed headers, in order.
    headers: List[Tuple[str, HeaderValue]]
    value: T

    @property
    def position(self) -> Position:
        """Where the record is."""
        return Position(self.partition, self.offset)

    def header(self, name: str) -> Optional[HeaderValue]:
        """The first header named ``name``."""
        for n, v in self.headers:
            if n == name:
                return v
        return None


@dataclasses.dataclass(frozen=True)
class AutoSplit:
    """An elastic topic's automatic policy (docs/RANGES.md §7): the broker splits an
    open range written faster than ``bytes_per_s`` over a whole window and merges cold
    neighbours, never touching a range younger than the cooldown."""

    bytes_per_s: int
    window_ms: Optional[int] = None
    cooldown_ms: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    """A topic's options as the broker keeps them."""

    partitions: int
    #: Delete data older than this (``None``: kept until deleted by size or by hand).
    retention_ms: Optional[int]
    #: Per partition: delete the oldest data beyond this many bytes.
    retention_bytes: Optional[int]
    segment_bytes: int
    #: ``"always"``, ``"interval:MS"`` or ``"never"``.
    durability: str
    max_record_bytes: int
    #: An elastic topic (docs/RANGES.md): its partitions are key ranges that split and
    #: merge; ``partitions`` counts every range, sealed or open.
    elastic: bool = False
    #: An elastic topic's automatic policy, or ``None`` when off.
    auto_split: Optional[AutoSplit] = None


@dataclasses.dataclass(frozen=True)
class RangeInfo:
    """A key range of an elastic topic: its partition number, the routing hashes it
    covers (``lo`` to ``hi``, inclusive), the ranges it came from, and where it was
    sealed (``None`` while it is open), and an open range's write rate in bytes per
    second over the last 10 s the server watched (``None`` when sealed or not watched
    yet)."""

    id: int
    lo: int
    hi: int
    parents: List[int]
    sealed_at: Optional[int]
    bytes_per_s: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class RangeChange:
    """What a split or a merge did: each range sealed with its seal offset, the ranges
    opened, and the topic's range epoch afterwards."""

    sealed: List[Tuple[int, int]]
    opened: List[int]
    range_epoch: int


@dataclasses.dataclass(frozen=True)
class DamagedRange:
    """Records a partition cannot serve: their bytes are damaged or missing."""

    from_offset: int
    to_offset: Optional[int]
    segment: str
    position: int
    reason: str
    accepted: bool


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    """One partition's offsets, size and health."""

    partition: int
    first_offset: int
    next_offset: int
    size_bytes: int
    segments: int
    #: Why the partition refuses appends, or ``None`` while it takes them.
    failure: Optional[str]
    damaged: List[DamagedRange]


@dataclasses.dataclass(frozen=True)
class TopicDescription:
    """A topic with the state of each partition."""

    stream: str
    name: str
    config: TopicConfig
    partitions: List[PartitionInfo]
    #: An elastic topic's ranges by id (empty for a plain topic).
    ranges: List[RangeInfo] = dataclasses.field(default_factory=list)
    #: How many splits and merges made them.
    range_epoch: int = 0


@dataclasses.dataclass(frozen=True)
class StreamInfo:
    """A stream and how many topics it has."""

    name: str
    topics: int


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    """A topic of a stream with its options."""

    stream: str
    name: str
    config: TopicConfig


@dataclasses.dataclass(frozen=True)
class GroupMember:
    """A member of a consumer group."""

    id: str
    owned: List[int]
    revoking: List[int]
    metrics: Dict[str, int]


@dataclasses.dataclass(frozen=True)
class GroupPartition:
    """A partition as a consumer group sees it."""

    partition: int
    #: The group's stored next offset (``None``: none stored).
    stored_offset: Optional[int]
    log_end: int
    lag: int
    owner: Optional[str]


@dataclasses.dataclass(frozen=True)
class GroupDescription:
    """A consumer group: members, assignment, stored offsets and lag."""

    generation: int
    members: List[GroupMember]
    partitions: List[GroupPartition]


@dataclasses.dataclass(frozen=True)
class Fetched(Generic[T]):
    """The answer of ``Topic.fetch``."""

    records: List[Record[T]]
    next_offset: int
    log_start: int
    log_end: int


# ---- from the native module's plain values ---------------------------------------------


def _config(d: Dict[str, Any]) -> TopicConfig:
    auto = d.get("auto_split")
    return TopicConfig(**{**d, "auto_split": AutoSplit(**auto) if auto else None})


def _range_change(d: Dict[str, Any]) -> RangeChange:
    return RangeChange([tuple(s) for s in d["sealed"]], list(d["opened"]), d["range_epoch"])


def _description(d: Dict[str, Any]) -> TopicDescription:
    partitions = [
        PartitionInfo(**{**p, "damaged": [DamagedRange(**r) for r in p["damaged"]]})
        for p in d["partitions"]
    ]
    ranges = [RangeInfo(**r) for r in d.get("ranges", [])]
    return TopicDescription(
        d["stream"], d["name"], _config(d["config"]), partitions, ranges, d.get("range_epoch", 0)
    )


def _group(d: Dict[str, Any]) -> GroupDescription:
    return GroupDescription(
        d["generation"],
        [GroupMember(**m) for m in d["members"]],
        [GroupPartition(**p) for p in d["partitions"]],
    )


# ---- checks of arguments ---------------------------------------------------------------

_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be in {lo}..={hi}, not {value}")
    return value


def _u32(name: str, value: Any) -> int:
    return _int(name, value, 0, _U32_MAX)


def _u64(name: str, value: Any) -> int:
    return _int(name, value, 0, _U64_MAX)


def _i64(name: str, value: Any) -> int:
    return _int(name, value, _I64_MIN, _I64_MAX)


def _opt(check: Any, name: str, value: Any) -> Any:
    return None if value is None else check(name, value)


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{name} must be a finite number of seconds >= 0, not {value}")
    return float(value)


def _position_of(what: Any) -> Position:
    """The position of a record, a position, a ``(partition, offset)`` pair, or an
    exception naming a record (``DecodeError``)."""
    if isinstance(what, tuple) and len(what) == 2:
        partition, offset = what
    else:
        partition = getattr(what, "partition", None)
        offset = getattr(what, "offset", None)
        if partition is None or offset is None:
            raise InvalidArgumentError(
                f"a record, a Position or a (partition, offset) pair, not {type(what).__name__}"
            )
    return Position(_u32("partition", partition), _u64("offset", offset))
