"""Rill's Python SDK: a durable, partitioned event log, embedded in-process
(:func:`open`) or served by ``rill serve`` (:func:`connect`), with one API for both.

The SDK wraps the Rust SDK (``rill-client``), so routing, batching, retries,
idempotence and commit policies behave exactly as they do in Rust. Every call that
waits is a coroutine that runs without the GIL and never blocks the event loop::

    import rill

    client = await rill.open("./data")          # or await rill.connect("rill://127.0.0.1:7171")
    orders = client.stream("shop").topic("orders", cls=Order)
    await orders.ensure(partitions=2)
    await orders.publish(Order(id=1, total=99)).key(b"customer-7").send()
    async for record in orders.records("audit"):
        print(record.value)
    await client.close()
"""

from __future__ import annotations

import atexit
from typing import Optional, Union

from . import _native, errors
from ._client import Client, Publish, Stream, Topic, connect, open
from ._codec import Codec, JsonCodec, MsgPackCodec, RawCodec
from ._consume import Consumer, GroupConsumer, Reader
from ._produce import Producer
from ._types import (
    HEADER_TYPES,
    AutoSplit,
    DamagedRange,
    Fetched,
    GroupDescription,
    GroupMember,
    GroupPartition,
    HeaderValue,
    Headers,
    Message,
    PartitionInfo,
    Position,
    Positions,
    RangeChange,
    RangeInfo,
    Record,
    StreamInfo,
    TopicConfig,
    TopicDescription,
    TopicInfo,
    _u32,
)
from .errors import *  # noqa: F401,F403 - the exception classes are part of the API
from .errors import InvalidArgumentError

__version__: str = _native.VERSION

# Before the interpreter finalizes, no tokio thread may still be handing a result to
# Python: this stops new hand-overs and waits for those under way.
atexit.register(_native.quiesce)

#: The longest stream, topic, consumer or group name, in bytes.
NAME_LEN_MAX: int = _native.NAME_LEN_MAX

#: The default server URL.
DEFAULT_URL = "rill://127.0.0.1:7171"


def partition_for_key(key: Union[bytes, str], partitions: int) -> int:
    """The partition of ``key`` among ``partitions``: ``xxh3_64(key) % partitions``,
    as every Rill SDK and the broker compute it (``docs/PROTOCOL.md`` §6)."""
    if not isinstance(key, (bytes, bytearray, str)):
        raise InvalidArgumentError(f"a key is bytes or str, not {type(key).__name__}")
    return _native.partition_for_key(key, _u32("partitions", partitions))


def name_problem(name: str) -> Optional[str]:
    """Why ``name`` breaks the rule for stream, topic, consumer and group names (1 to
    255 bytes of ``[A-Za-z0-9._-]``, not ``.`` or ``..``), or ``None`` if it does not."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a name is a str, not {type(name).__name__}")
    return _native.name_problem(name)


__all__ = [
    "connect",
    "open",
    "Client",
    "Stream",
    "Topic",
    "Publish",
    "Reader",
    "Producer",
    "Consumer",
    "GroupConsumer",
    "Codec",
    "RawCodec",
    "JsonCodec",
    "MsgPackCodec",
    "Position",
    "Positions",
    "HeaderValue",
    "HEADER_TYPES",
    "Headers",
    "Message",
    "Record",
    "Fetched",
    "TopicConfig",
    "TopicDescription",
    "AutoSplit",
    "RangeInfo",
    "RangeChange",
    "PartitionInfo",
    "DamagedRange",
    "StreamInfo",
    "TopicInfo",
    "GroupDescription",
    "GroupMember",
    "GroupPartition",
    "partition_for_key",
    "name_problem",
    "NAME_LEN_MAX",
    "DEFAULT_URL",
    "errors",
    *errors.__all__,
]
