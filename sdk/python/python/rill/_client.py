"""The client, streams and topics: connect or open, admin, publish."""

from __future__ import annotations

import os
from typing import Any, Dict, Generator, Generic, Iterable, List, Optional, Type, TypeVar, Union, overload

from . import _native
from ._codec import Codec, RawCodec, codec_for, decode_record
from ._consume import Consumer, GroupConsumer, Reader
from ._produce import Producer, _message_triple
from ._types import (
    AutoSplit,
    Fetched,
    RangeChange,
    Headers,
    Message,
    Position,
    Positions,
    StreamInfo,
    TopicConfig,
    TopicDescription,
    TopicInfo,
    GroupDescription,
    _config,
    _description,
    _group,
    _range_change,
    _opt,
    _i64,
    _str,
    _u32,
    _u64,
)
from .errors import InvalidArgumentError

T = TypeVar("T")


async def connect(
    url: str = "rill://127.0.0.1:7171",
    *,
    default_stream: Optional[str] = None,
    connect_timeout_ms: Optional[int] = None,
    init_retries: Optional[int] = None,
    init_interval_ms: Optional[int] = None,
    retries: Optional[int] = None,
    backoff_ms: Optional[int] = None,
    backoff_max_ms: Optional[int] = None,
    user: Optional[str] = None,
    password: Optional[str] = None,
    token: Optional[str] = None,
    tls_ca_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    tls_cert_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    tls_key_file: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> "Client":
    """Connects to a server (``rill serve``).

    ``url`` is ``rill://[USER:PASSWORD@]HOST:PORT`` (several nodes of a cluster
    comma-separated), or ``rills://...`` for TLS (trusting the public roots, or
    ``tls_ca_file``). Credentials in the URL win over ``user``/``password``/``token``.
    Connecting waits for a server that is starting (``init_retries`` more attempts,
    ``init_interval_ms`` apart; default 3 and 1000); once connected, requests retry
    transient errors ``retries`` times (default 8) with back-off from ``backoff_ms``
    (50) doubling to ``backoff_max_ms`` (2000).
    """
    native = await _native.connect(
        _str("url", url),
        default_stream=_opt(_str, "default_stream", default_stream),
        connect_timeout_ms=_opt(_u64, "connect_timeout_ms", connect_timeout_ms),
        init_retries=_opt(_u32, "init_retries", init_retries),
        init_interval_ms=_opt(_u64, "init_interval_ms", init_interval_ms),
        retries=_opt(_u32, "retries", retries),
        backoff_ms=_opt(_u64, "backoff_ms", backoff_ms),
        backoff_max_ms=_opt(_u64, "backoff_max_ms", backoff_max_ms),
        user=_opt(_str, "user", user),
        password=_opt(_str, "password", password),
        token=_opt(_str, "token", token),
        tls_ca_file=_path(tls_ca_file),
        tls_cert_file=_path(tls_cert_file),
        tls_key_file=_path(tls_key_file),
    )
    return Client(native)


async def open(
    path: Union[str, "os.PathLike[str]"],
    *,
    default_stream: Optional[str] = None,
    retries: Optional[int] = None,
    backoff_ms: Optional[int] = None,
    backoff_max_ms: Optional[int] = None,
) -> "Client":
    """Opens a data directory with an in-process broker: the same API as
    :func:`connect`, no server. One process at a time may open a directory."""
    if path is None:
        raise InvalidArgumentError("open needs the path of a data directory")
    native = await _native.open(
        _path(path) or "",
        default_stream=_opt(_str, "default_stream", default_stream),
        retries=_opt(_u32, "retries", retries),
        backoff_ms=_opt(_u64, "backoff_ms", backoff_ms),
        backoff_max_ms=_opt(_u64, "backoff_max_ms", backoff_max_ms),
    )
    return Client(native)


def _path(p: Any) -> Optional[str]:
    if p is None:
        return None
    if isinstance(p, (str, os.PathLike)):
        return str(os.fspath(p))
    raise InvalidArgumentError(f"a path must be a str or os.PathLike, not {type(p).__name__}")


class Client:
    """A Rill client: one handle for every stream, over TCP or an embedded broker.

    Use it as an async context manager to close it at the end::

        async with await rill.open("./data") as client: ...
    """

    def __init__(self, native: "_native.Client") -> None:
        self._native = native

    def stream(self, name: str) -> "Stream":
        """A stream by name."""
        return Stream(self, _str("a stream name", name))

    @overload
    def topic(self, name: str) -> "Topic[bytes]": ...
    @overload
    def topic(self, name: str, cls: Type[T], codec: Optional[str] = None) -> "Topic[T]": ...
    @overload
    def topic(self, name: str, *, codec: Union[str, Codec[T]]) -> "Topic[T]": ...

    def topic(self, name: str, cls: Any = None, codec: Any = None) -> "Topic[Any]":
        """A topic of the default stream; see :meth:`Stream.topic`."""
        return self.stream(self.default_stream).topic(name, cls, codec)

    @property
    def default_stream(self) -> str:
        """The stream :meth:`topic` uses (default ``"default"``)."""
        return self._native.default_stream

    @property
    def is_embedded(self) -> bool:
        """Whether this client runs an embedded broker."""
        return self._native.is_embedded

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._native.is_closed

    async def close(self) -> None:
        """Closes the client for every user of it: the connection, or the embedded
        broker (synced, its directory let go). Later calls raise ``ClosedError``."""
        await self._native.close()

    async def create_stream(self, name: str, if_missing: bool = False) -> bool:
        """Creates a stream; with ``if_missing`` an existing one is fine. Whether it
        was created."""
        return await self._native.create_stream(_str("a stream name", name), bool(if_missing))

    async def delete_stream(self, name: str) -> None:
        """Deletes a stream and all its topics."""
        await self._native.delete_stream(_str("a stream name", name))

    async def list_streams(self) -> List[StreamInfo]:
        """Streams with their topic counts."""
        return [StreamInfo(n, t) for n, t in await self._native.list_streams()]

    async def list_topics(self, stream: Optional[str] = None) -> List[TopicInfo]:
        """Topics of a stream, or of every stream."""
        topics = await self._native.list_topics(_opt(_str, "a stream name", stream))
        return [TopicInfo(s, n, _config(c)) for s, n, c in topics]

    async def describe_topic(self, stream: str, topic: str) -> TopicDescription:
        """A topic's options and partitions."""
        return _description(
            await self._native.describe_topic(_str("a stream name", stream), _str("a topic name", topic))
        )

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return repr(self._native)


class Stream:
    """A stream by name."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    @overload
    def topic(self, name: str) -> "Topic[bytes]": ...
    @overload
    def topic(self, name: str, cls: Type[T], codec: Optional[str] = None) -> "Topic[T]": ...
    @overload
    def topic(self, name: str, *, codec: Union[str, Codec[T]]) -> "Topic[T]": ...

    def topic(self, name: str, cls: Any = None, codec: Any = None) -> "Topic[Any]":
        """A topic of this stream. Its values are raw bytes without ``cls`` or
        ``codec``; with ``cls`` (a dataclass or a pydantic model) they are JSON, or
        MessagePack with ``codec="msgpack"``; ``codec="json"`` alone takes plain values
        (dicts, lists, ...); ``codec`` may also be a :class:`rill.Codec`."""
        native = self.client._native.topic(self.name, _str("a topic name", name))
        return Topic(self.client, native, codec_for(cls, codec))

    async def ensure(self) -> bool:
        """Creates the stream if it is missing; whether it was created."""
        return await self.client.create_stream(self.name, if_missing=True)

    async def create(self) -> None:
        """Creates the stream; an existing one is ``StreamExistsError``."""
        await self.client.create_stream(self.name, if_missing=False)

    async def delete(self) -> None:
        """Deletes the stream and its topics."""
        await self.client.delete_stream(self.name)

    async def topics(self) -> List[TopicInfo]:
        """The stream's topics."""
        return await self.client.list_topics(self.name)

    def __repr__(self) -> str:
        return f"Stream({self.name!r})"


class Topic(Generic[T]):
    """A topic of a stream, its values written and read by its codec."""

    def __init__(self, client: Client, native: "_native.Topic", codec: Codec[T]) -> None:
        self.client = client
        self._native = native
        self.codec = codec

    @property
    def stream(self) -> str:
        """The stream's name."""
        return self._native.stream

    @property
    def name(self) -> str:
        """The topic's name."""
        return self._native.name

    # ---- admin -----------------------------------------------------------------------

    async def ensure(self, partitions: int) -> TopicConfig:
        """Creates the stream and the topic with ``partitions`` partitions if missing.
        An existing topic with another partition count is an error that says so."""
        return _config(await self._native.ensure(_u32("partitions", partitions)))

    async def create(
        self,
        *,
        partitions: Optional[int] = None,
        retention_ms: Optional[int] = None,
        retention_bytes: Optional[int] = None,
        segment_bytes: Optional[int] = None,
        durability: Optional[str] = None,
        max_record_bytes: Optional[int] = None,
        replicas: Optional[int] = None,
        if_missing: bool = False,
        elastic: bool = False,
        auto_split: Optional[AutoSplit] = None,
    ) -> TopicConfig:
        """Creates the topic (and its stream) with options; unset ones take the broker's
        defaults. ``durability`` is ``"always"``, ``"interval:MS"`` or ``"never"``.
        With ``if_missing`` an existing topic whose options agree is fine.

        ``elastic`` makes its partitions key ranges (``partitions`` of them at first)
        that split and merge online without moving a key out of order (docs/RANGES.md);
        publishes and producers route by range, and a reader reads a range only after
        its parents, as do named consumers (of partition 0) and consumer groups.
        ``auto_split`` turns on the broker's automatic policy (elastic topics only)."""
        if auto_split is not None and not isinstance(auto_split, AutoSplit):
            raise InvalidArgumentError(f"auto_split must be a rill.AutoSplit, not {type(auto_split).__name__}")
        return _config(
            await self._native.create(
                partitions=_opt(_u32, "partitions", partitions),
                retention_ms=_opt(_u64, "retention_ms", retention_ms),
                retention_bytes=_opt(_u64, "retention_bytes", retention_bytes),
                segment_bytes=_opt(_u64, "segment_bytes", segment_bytes),
                durability=_opt(_str, "durability", durability),
                max_record_bytes=_opt(_u32, "max_record_bytes", max_record_bytes),
                replicas=_opt(_u32, "replicas", replicas),
                if_missing=bool(if_missing),
                elastic=bool(elastic),
                auto_split=_u64("auto_split.bytes_per_s", auto_split.bytes_per_s) if auto_split else None,
                auto_split_window_ms=_opt(_u64, "auto_split.window_ms", auto_split.window_ms) if auto_split else None,
                auto_split_cooldown_ms=(
                    _opt(_u64, "auto_split.cooldown_ms", auto_split.cooldown_ms) if auto_split else None
                ),
            )
        )

    async def split_range(self, range: Optional[int] = None, at: Optional[int] = None) -> RangeChange:
        """Splits an open range of an elastic topic in two: ``range`` (``None``: the
        busiest) is sealed where it ends, and two ranges take its keys below and from
        routing hash ``at`` (``None``: its middle)."""
        return _range_change(
            await self._native.split_range(_opt(_u32, "range", range), _opt(_u64, "at", at))
        )

    async def merge_ranges(self, first: int, second: int) -> RangeChange:
        """Merges two neighbouring open ranges of an elastic topic into one."""
        return _range_change(await self._native.merge_ranges(_u32("first", first), _u32("second", second)))

    async def delete(self) -> None:
        """Deletes the topic, its data and its stored offsets."""
        await self._native.delete()

    async def describe(self) -> TopicDescription:
        """Options and per-partition offsets."""
        return _description(await self._native.describe())

    async def partitions(self) -> int:
        """The number of partitions (cached after the first look-up)."""
        return await self._native.partitions()

    async def first_offset(self, partition: int) -> int:
        """The first stored offset of a partition."""
        return await self._native.first_offset(_u32("partition", partition))

    async def end_offset(self, partition: int) -> int:
        """The offset the next record of a partition will get."""
        return await self._native.end_offset(_u32("partition", partition))

    async def offset_for_time(self, partition: int, timestamp_us: int) -> int:
        """The first offset of a partition at or after ``timestamp_us`` (the end if none)."""
        return await self._native.offset_for_time(
            _u32("partition", partition), _i64("timestamp_us", timestamp_us)
        )

    # ---- publish ---------------------------------------------------------------------

    def publish(self, value: T) -> "Publish[T]":
        """A single-record publish of ``value``: set ``.key()``, ``.partition()`` or
        ``.header()``, then ``await .send()`` (or await the publish itself)."""
        return Publish(self, value)

    async def publish_batch(self, messages: Iterable[Union[T, "Message[T]"]]) -> Positions:
        """Publishes many messages (values, or :class:`rill.Message` with a key or
        headers) in one round trip per partition: keyed ones to their key's partition,
        unkeyed ones all to one. Their positions in input order (a
        :class:`rill.Positions` sequence)."""
        codec = self.codec
        if type(codec) is RawCodec:
            # Bare `bytes` go as they are (the native side takes them as values).
            items = [m if type(m) is bytes else _message_triple(codec, m) for m in messages]
        else:
            items = [_message_triple(codec, m) for m in messages]
        return Positions(*await self._native.publish_batch(items))

    # ---- read ------------------------------------------------------------------------

    def records(
        self,
        name: str,
        offsets: Optional[Dict[Any, int]] = None,
        *,
        max_bytes: Optional[int] = None,
    ) -> Reader[T]:
        """A cursor reader whose position the caller keeps: it starts at the beginning,
        or at ``offsets`` (``{partition: next_offset}``, as ``reader.offsets()`` gave),
        and ``next()`` returns ``None`` once it caught up with the tail it saw."""
        if offsets is not None:
            if not isinstance(offsets, dict):
                raise InvalidArgumentError(f"offsets must be a dict, not {type(offsets).__name__}")
            # Keys may be strings, as a cursor saved as JSON has them.
            offsets = {
                _u32("a partition", int(p) if isinstance(p, str) and p.isdigit() else p): _u64("an offset", o)
                for p, o in offsets.items()
            }
        native = self._native.records(_str("a reader name", name), offsets, _opt(_u32, "max_bytes", max_bytes))
        return Reader(native, self.codec)

    async def fetch(
        self, partition: int, offset: int, *, max_bytes: int = 1 << 20, max_wait_ms: int = 0
    ) -> Fetched[T]:
        """One fetch from a partition: records from ``offset`` (at most ``max_bytes``,
        at least one batch), waiting up to ``max_wait_ms`` for some to arrive."""
        records, next_offset, log_start, log_end = await self._native.fetch(
            _u32("partition", partition),
            _u64("offset", offset),
            max_bytes=_u32("max_bytes", max_bytes),
            max_wait_ms=_u64("max_wait_ms", max_wait_ms),
        )
        return Fetched([decode_record(self.codec, r) for r in records], next_offset, log_start, log_end)

    def producer(self, **options: Any) -> Producer[T]:
        """A producer (await ``init()`` before sending). Options, with the Rust SDK's
        defaults: ``batch_length`` (1000), ``linger_ms`` (0), ``max_batch_bytes``
        (1 MiB), ``retries`` (3) and ``retry_interval_ms`` (1000), ``max_in_flight``
        (8), ``idempotence`` (True), ``key`` or ``partition`` (fixed routing; default
        balanced), and ``background=True`` with ``shards`` (4), ``sharding``
        (``"ordered"`` | ``"balanced"``), ``buffer_messages`` (100000),
        ``backpressure`` (``"block"`` | ``"block_for"`` with
        ``backpressure_timeout_ms`` | ``"fail"``)."""
        return Producer(self._native.producer(**options), self.codec)

    def consumer(self, name: str, partition: int, **options: Any) -> Consumer[T]:
        """A named consumer of one partition whose offset the broker stores (await
        ``init()`` first). Options as :meth:`consumer_group` has them, plus
        ``max_bytes``; ``polling`` defaults to ``"next"``."""
        native = self._native.consumer(_str("a consumer name", name), _u32("partition", partition), **options)
        return Consumer(native, self.codec)

    def consumer_group(self, group: str, **options: Any) -> GroupConsumer[T]:
        """A member of consumer group ``group`` (await ``init()`` to join).

        Options, with the Rust SDK's defaults: ``batch_length`` (1000),
        ``poll_interval_ms`` (100), ``max_wait_ms`` (1000, long polling),
        ``polling`` — where a partition without a stored offset starts: ``"first"``
        (default), ``"last"`` (the last record), ``"end"`` (only records appended
        after the start), ``"next"``, ``"offset"`` with ``offset=N``,
        ``"timestamp"`` with ``timestamp_micros=T`` — and ``allow_replay`` (honour
        ``polling`` even where an offset is stored); ``auto_commit``: ``"disabled"``,
        ``"interval"``, ``"polling"`` (default), ``"interval_or_polling"``, ``"all"``,
        ``"interval_or_all"``, ``"each"``, ``"interval_or_each"``, ``"every"``,
        ``"interval_or_every"``, with ``commit_interval_ms`` for the ``interval`` ones
        and ``commit_every`` for the ``every`` ones; ``polling_retry_interval_ms``
        (1000); ``member_id``; ``session_timeout_ms`` (10000); ``create_group`` (True).
        """
        return GroupConsumer(self._native.consumer_group(_str("a group name", group), **options), self.codec)

    # ---- offsets and groups ------------------------------------------------------------

    async def stored_offset(self, name: str, partition: int) -> Optional[int]:
        """The last offset of ``partition`` stored as consumed by named consumer ``name``."""
        return await self._native.stored_offset(_str("a consumer name", name), _u32("partition", partition))

    async def store_offset(self, name: str, partition: int, offset: int) -> None:
        """Stores the record at ``offset`` of ``partition`` as consumed by ``name``."""
        await self._native.store_offset(
            _str("a consumer name", name), _u32("partition", partition), _u64("offset", offset)
        )

    async def describe_group(self, group: str) -> GroupDescription:
        """A consumer group's members, assignment, stored offsets and lag."""
        return _group(await self._native.describe_group(_str("a group name", group)))

    async def delete_group_offset(self, group: str, partition: int) -> bool:
        """Deletes group ``group``'s stored offset of ``partition`` (the group must have
        no live members); whether one was stored."""
        return await self._native.delete_group_offset(_str("a group name", group), _u32("partition", partition))

    def __repr__(self) -> str:
        return f"Topic(stream={self.stream!r}, name={self.name!r}, codec={self.codec.name!r})"


class Publish(Generic[T]):
    """A single-record publish; see :meth:`Topic.publish`. Nothing is sent until
    :meth:`send` is awaited."""

    def __init__(self, topic: Topic[T], value: T) -> None:
        self._topic = topic
        self._value = value
        self._key: Any = None
        self._partition: Optional[int] = None
        self._headers: List[Any] = []

    def key(self, key: Union[bytes, str]) -> "Publish[T]":
        """Routes by key: the same key always lands in the same partition, in order. A
        key together with :meth:`partition`, or an empty key, makes ``send`` fail with
        ``InvalidArgumentError`` without sending anything."""
        self._key = key
        return self

    def partition(self, partition: int) -> "Publish[T]":
        """Sends to this partition."""
        self._partition = _u32("partition", partition)
        return self

    def header(self, name: str, value: Any) -> "Publish[T]":
        """Adds a typed header (a :class:`HeaderValue`, a ``(type, value)`` tuple, or a
        plain ``str``, ``bytes``, ``bool`` or ``float``)."""
        self._headers.append((name, value))
        return self

    def headers(self, headers: Headers) -> "Publish[T]":
        """Adds headers: a dict, or ``(name, value)`` pairs."""
        items = headers.items() if isinstance(headers, dict) else headers
        self._headers.extend(items)
        return self

    async def send(self) -> Position:
        """Sends the record: one round trip. Where it was stored."""
        value = self._topic.codec.encode(self._value)
        p = await self._topic._native.publish(
            value, key=self._key, partition=self._partition, headers=self._headers
        )
        return Position(*p)

    def __await__(self) -> Generator[Any, None, Position]:
        return self.send().__await__()
