"""Rill's exceptions: one class per error kind of the Rust SDK.

Every exception the SDK raises is a :class:`RillError`. Errors the broker answered with
are :class:`ServerError` subclasses, one per protocol error code (``docs/PROTOCOL.md``
§5), whose ``code`` is the code's name (``"TOPIC_NOT_FOUND"``). Errors of the client
itself (bad input, a lost connection, a timeout, ...) have ``code`` ``None``, like
``ClientError::code`` in Rust.

Each exception has:

* ``code``: the protocol error code's name, or ``None``;
* ``kind``: the Rust ``ClientError`` variant (``"Server"``, ``"InvalidArgument"``, ...);
* ``transient``: whether the same call may succeed later (the SDK already retried it
  within its retry budget);
* ``message``: the text, as ``str(error)``.
"""

from __future__ import annotations

import builtins
from typing import Dict, Optional, Type

__all__ = [
    "RillError",
    "ServerError",
    "UnspecifiedError",
    "InternalError",
    "InvalidRequestError",
    "UnknownKindError",
    "UnsupportedVersionError",
    "FrameTooLargeError",
    "InvalidNameError",
    "StreamNotFoundError",
    "TopicNotFoundError",
    "PartitionNotFoundError",
    "StreamExistsError",
    "TopicExistsError",
    "InvalidBatchError",
    "BatchTooLargeError",
    "RecordTooLargeError",
    "OffsetBeforeStartError",
    "OffsetBeyondEndError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "StorageFailureError",
    "ServerTimeoutError",
    "NotOwnerError",
    "RebalancingError",
    "MigratingError",
    "BusyError",
    "InvalidConfigError",
    "OffsetNotFoundError",
    "ShuttingDownError",
    "GroupNotFoundError",
    "NotMemberError",
    "StaleGenerationError",
    "NotAssignedError",
    "UnknownProducerIdError",
    "TimestampOutOfRangeError",
    "GroupNotEmptyError",
    "NotLeaderError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "UnknownCodeError",
    "DataLossError",
    "ConnectionError",
    "IndeterminateError",
    "ProtocolError",
    "InvalidUrlError",
    "InvalidArgumentError",
    "EncodeError",
    "DecodeError",
    "MalformedBatchError",
    "CorruptError",
    "TimeoutError",
    "EmbeddedError",
    "ShutdownError",
    "ClosedError",
    "PoisonedError",
    "BufferFullError",
    "EpochsExhaustedError",
    "BackgroundError",
    "PanicError",
    "SERVER_ERRORS",
    "server_error_class",
]


class RillError(Exception):
    """The base of every exception of the Rill SDK."""

    #: The protocol error code's name (``"TOPIC_NOT_FOUND"``), or ``None`` for an error
    #: of the client itself.
    code: Optional[str] = None
    #: The Rust ``ClientError`` variant this error mirrors.
    kind: str = "Unknown"
    #: Whether the same call may succeed later.
    transient: bool = False

    def __init__(self, message: str = "", **fields: object) -> None:
        super().__init__(message)
        self.message = message
        for name, value in fields.items():
            setattr(self, name, value)

    def __str__(self) -> str:
        return self.message


# ---- errors the broker answered with --------------------------------------------------


class ServerError(RillError):
    """The broker answered with an error code (``ClientError::Server``).

    ``offset`` is, for offset errors, the log start (below start) or end (beyond end).
    ``wire_code`` is the code's number on the wire.
    """

    kind = "Server"
    offset: Optional[int] = None
    wire_code: Optional[int] = None


# One class per protocol error code, named after it.
class UnspecifiedError(ServerError):
    """``ERROR_CODE_UNSPECIFIED``: An answer without a code."""

    code = "ERROR_CODE_UNSPECIFIED"


class InternalError(ServerError):
    """``INTERNAL``: A broker-side bug or catalog I/O failure."""

    code = "INTERNAL"


class InvalidRequestError(ServerError):
    """``INVALID_REQUEST``: A malformed frame or control message."""

    code = "INVALID_REQUEST"


class UnknownKindError(ServerError):
    """``UNKNOWN_KIND``: The server does not know this request kind (it is older)."""

    code = "UNKNOWN_KIND"


class UnsupportedVersionError(ServerError):
    """``UNSUPPORTED_VERSION``: The frame's protocol version is not spoken."""

    code = "UNSUPPORTED_VERSION"


class FrameTooLargeError(ServerError):
    """``FRAME_TOO_LARGE``: A frame over the server's max_frame_bytes."""

    code = "FRAME_TOO_LARGE"


class InvalidNameError(ServerError):
    """``INVALID_NAME``: A stream, topic, group, member or consumer name breaks the name rules."""

    code = "INVALID_NAME"


class StreamNotFoundError(ServerError):
    """``STREAM_NOT_FOUND``: No such stream."""

    code = "STREAM_NOT_FOUND"


class TopicNotFoundError(ServerError):
    """``TOPIC_NOT_FOUND``: No such topic."""

    code = "TOPIC_NOT_FOUND"


class PartitionNotFoundError(ServerError):
    """``PARTITION_NOT_FOUND``: The partition is not below the topic's partition count."""

    code = "PARTITION_NOT_FOUND"


class StreamExistsError(ServerError):
    """``STREAM_EXISTS``: The stream exists."""

    code = "STREAM_EXISTS"


class TopicExistsError(ServerError):
    """``TOPIC_EXISTS``: The topic exists (or exists with other options)."""

    code = "TOPIC_EXISTS"


class InvalidBatchError(ServerError):
    """``INVALID_BATCH``: The payload is not exactly one valid batch."""

    code = "INVALID_BATCH"


class BatchTooLargeError(ServerError):
    """``BATCH_TOO_LARGE``: A batch over the server's max_batch_bytes."""

    code = "BATCH_TOO_LARGE"


class RecordTooLargeError(ServerError):
    """``RECORD_TOO_LARGE``: A record over the topic's max_record_bytes."""

    code = "RECORD_TOO_LARGE"


class OffsetBeforeStartError(ServerError):
    """``OFFSET_BEFORE_START``: An offset below the log start (retention deleted it)."""

    code = "OFFSET_BEFORE_START"


class OffsetBeyondEndError(ServerError):
    """``OFFSET_BEYOND_END``: An offset beyond the log end."""

    code = "OFFSET_BEYOND_END"


class OutOfOrderSequenceError(ServerError):
    """``OUT_OF_ORDER_SEQUENCE``: An idempotent batch neither next nor a recent duplicate."""

    code = "OUT_OF_ORDER_SEQUENCE"


class ProducerFencedError(ServerError):
    """``PRODUCER_FENCED``: A higher epoch of this producer id exists in the partition."""

    code = "PRODUCER_FENCED"


class StorageFailureError(ServerError):
    """``STORAGE_FAILURE``: Disk I/O failed, or the partition is failed or damaged."""

    code = "STORAGE_FAILURE"


class ServerTimeoutError(ServerError):
    """``TIMEOUT``: The broker timed the request out."""

    code = "TIMEOUT"
    transient = True


class NotOwnerError(ServerError):
    """``NOT_OWNER``: The partition is led elsewhere."""

    code = "NOT_OWNER"
    transient = True


class RebalancingError(ServerError):
    """``REBALANCING``: The consumer group is rebalancing."""

    code = "REBALANCING"
    transient = True


class MigratingError(ServerError):
    """``MIGRATING``: A key range is moving."""

    code = "MIGRATING"
    transient = True


class BusyError(ServerError):
    """``BUSY``: The server is at its connection or descriptor limit."""

    code = "BUSY"
    transient = True


class InvalidConfigError(ServerError):
    """``INVALID_CONFIG``: Topic options out of range."""

    code = "INVALID_CONFIG"


class OffsetNotFoundError(ServerError):
    """``OFFSET_NOT_FOUND``: No offset is stored."""

    code = "OFFSET_NOT_FOUND"


class ShuttingDownError(ServerError):
    """``SHUTTING_DOWN``: The server is stopping, or the partition closed under the request."""

    code = "SHUTTING_DOWN"
    transient = True


class GroupNotFoundError(ServerError):
    """``GROUP_NOT_FOUND``: The group does not exist."""

    code = "GROUP_NOT_FOUND"


class NotMemberError(ServerError):
    """``NOT_MEMBER``: The member is not in the group (it left, or its session expired)."""

    code = "NOT_MEMBER"


class StaleGenerationError(ServerError):
    """``STALE_GENERATION``: A group request from an earlier session of the member."""

    code = "STALE_GENERATION"


class NotAssignedError(ServerError):
    """``NOT_ASSIGNED``: The member does not own the partition now."""

    code = "NOT_ASSIGNED"


class UnknownProducerIdError(ServerError):
    """``UNKNOWN_PRODUCER_ID``: The partition has no state for this idempotent producer."""

    code = "UNKNOWN_PRODUCER_ID"


class TimestampOutOfRangeError(ServerError):
    """``TIMESTAMP_OUT_OF_RANGE``: The batch's timestamps reach too far beyond the broker's clock."""

    code = "TIMESTAMP_OUT_OF_RANGE"


class GroupNotEmptyError(ServerError):
    """``GROUP_NOT_EMPTY``: An admin request that needs a group without live members."""

    code = "GROUP_NOT_EMPTY"


class NotLeaderError(ServerError):
    """``NOT_LEADER``: In a cluster, this node does not lead the partition."""

    code = "NOT_LEADER"
    transient = True


class UnauthenticatedError(ServerError):
    """``UNAUTHENTICATED``: The server requires authentication and the connection has none, or it failed."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(ServerError):
    """``PERMISSION_DENIED``: The authenticated user lacks a permission the request needs."""

    code = "PERMISSION_DENIED"


class UnknownCodeError(ServerError):
    """``UNKNOWN``: A code this version of the SDK does not know (a newer server); see wire_code."""

    code = "UNKNOWN"


class DataLossError(ServerError):
    """``DATA_LOSS``: records of a partition are lost on the server
    (``ClientError::DataLoss``).

    Readers and consumers raise this once and go on reading at ``to_offset``; it is
    ``None`` while the end of the damaged range is unknown. ``partition`` and
    ``from_offset`` name where the range starts.
    """

    code = "DATA_LOSS"
    kind = "DataLoss"
    partition: Optional[int] = None
    from_offset: Optional[int] = None
    to_offset: Optional[int] = None


#: The exception class of each protocol error code name.
SERVER_ERRORS: Dict[str, Type[ServerError]] = {
    cls.code: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, ServerError) and cls.code is not None
}


def server_error_class(code: str) -> Type[ServerError]:
    """The exception class of a protocol error code name (``UnknownCodeError`` if none)."""
    return SERVER_ERRORS.get(code, UnknownCodeError)


# ---- errors of the client itself -----------------------------------------------------


class ConnectionError(RillError, builtins.ConnectionError):
    """The connection failed and the retry budget is spent (``ClientError::Connection``).

    ``addr`` is the server address. Also a builtin ``ConnectionError``.
    """

    kind = "Connection"
    transient = True
    addr: Optional[str] = None


class IndeterminateError(RillError):
    """A write's outcome is unknown and it is not safe to send again: the records may or
    may not be stored; read the partition to find out."""

    kind = "Indeterminate"


class ProtocolError(RillError):
    """The server sent something that is not valid protocol."""

    kind = "Protocol"


class InvalidArgumentError(RillError, ValueError, TypeError):
    """An argument is invalid (a name, a zero duration, a key together with a partition,
    a value of the wrong type, ...); nothing was sent. Also a ``ValueError`` and a
    ``TypeError``."""

    kind = "InvalidArgument"


class InvalidUrlError(InvalidArgumentError):
    """The URL is not ``rill://[USER:PASSWORD@]HOST:PORT`` (or ``rills://``)."""

    kind = "InvalidUrl"
    url: Optional[str] = None


class EncodeError(RillError, ValueError):
    """A value could not be encoded by the topic's codec."""

    kind = "Encode"


class DecodeError(RillError, ValueError):
    """A record's value could not be decoded; reading continues after it.

    ``partition`` and ``offset`` say which record; ``reason`` what the codec said.
    """

    kind = "Decode"
    partition: Optional[int] = None
    offset: Optional[int] = None
    reason: Optional[str] = None


class MalformedBatchError(RillError):
    """A batch from the server whose header cannot be read: where it ends is unknown
    (``ClientError::InvalidBatch``)."""

    kind = "InvalidBatch"


class CorruptError(RillError):
    """A served batch fails its checksum or checks: records ``from_offset..to_offset`` of
    ``partition`` are skipped; readers and consumers go on at ``to_offset``."""

    kind = "Corrupt"
    partition: Optional[int] = None
    from_offset: Optional[int] = None
    to_offset: Optional[int] = None


class TimeoutError(RillError, builtins.TimeoutError):
    """No record arrived within the time given to ``next_within``. Also a builtin
    ``TimeoutError``; ``timeout`` is the time given, in seconds."""

    kind = "Timeout"
    timeout: Optional[float] = None


class EmbeddedError(RillError):
    """The embedded broker failed (to open a data directory, say: another process may
    have it open). ``broker_code`` is the broker's error code name."""

    kind = "Embedded"
    broker_code: Optional[str] = None


class ShutdownError(RillError):
    """The producer or consumer was shut down."""

    kind = "Shutdown"


class ClosedError(RillError):
    """The client was closed: open or connect a new one."""

    kind = "Closed"


class PoisonedError(RillError):
    """A panic left state in doubt (a producer's sequence numbers, a group member's
    partitions): create a new producer or consumer."""

    kind = "Poisoned"


class BufferFullError(RillError):
    """The background producer's buffer is full."""

    kind = "BufferFull"


class EpochsExhaustedError(RillError):
    """The idempotent producer used up its epochs in ``partition``: build a new one."""

    kind = "EpochsExhausted"
    partition: Optional[int] = None


class BackgroundError(RillError):
    """A background send failed; reported on the next call of the producer."""

    kind = "Background"


class PanicError(RillError):
    """A bug in the SDK: Rust code panicked. The call failed; nothing else is known."""

    kind = "Panic"
