"""Value codecs: raw bytes (a topic without ``cls`` or ``codec``), JSON (the default
with ``cls``) and MessagePack, written and read by the Rust SDK's own codecs
(``rill_client::Json``, ``rill_client::MsgPack``), so Python and Rust agree byte for
byte. ``cls`` may be a dataclass or a pydantic model; values of other types (``dict``,
``list``, ``str``, numbers, ``bool``, ``None``) pass as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generic, List, Optional, Tuple, Type, TypeVar, Union

from . import _native
from ._types import HeaderValue, Record
from .errors import DecodeError, EncodeError, InvalidArgumentError

T = TypeVar("T")


class Codec(Generic[T]):
    """Turns values into record bytes and back. Subclass it for a codec of your own:
    ``encode`` raises :class:`~rill.EncodeError` for a value it cannot write, ``decode``
    any exception for bytes that are not a value (readers raise it as a
    :class:`~rill.DecodeError` carrying the record's position)."""

    #: The codec's name, for messages.
    name: str = "codec"

    def encode(self, value: T) -> bytes:
        """The bytes of ``value``."""
        raise NotImplementedError

    def decode(self, data: bytes) -> T:
        """The value of ``data``."""
        raise NotImplementedError


class RawCodec(Codec[bytes]):
    """Values are bytes (``bytes``, ``bytearray``, or ``str`` as UTF-8); records read
    back as ``bytes``."""

    name = "raw"

    def encode(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, str):
            return value.encode()
        raise InvalidArgumentError(
            f"a raw topic takes bytes, bytearray or str values, not {type(value).__name__}; "
            "give the topic a cls or a codec for other values"
        )

    def decode(self, data: bytes) -> bytes:
        return data


def _is_pydantic(cls: type) -> bool:
    return callable(getattr(cls, "model_validate", None)) and callable(getattr(cls, "model_dump", None))


class _Structured(Codec[T]):
    """A codec of plain values, dataclasses and pydantic models."""

    _encode: Callable[[Any], bytes]
    _decode: Callable[[bytes], Any]

    def __init__(self, cls: Optional[Type[T]] = None) -> None:
        if cls is not None and not isinstance(cls, type):
            raise InvalidArgumentError(f"cls must be a class, not {type(cls).__name__}")
        if cls is not None and not (dataclasses.is_dataclass(cls) or _is_pydantic(cls)):
            raise InvalidArgumentError(
                f"cls must be a dataclass or a pydantic model, not {cls.__name__}"
            )
        self.cls = cls

    def _plain(self, value: Any) -> Any:
        cls = self.cls
        if cls is not None and not isinstance(value, cls):
            raise EncodeError(
                f"the topic's values are {cls.__name__}, not {type(value).__name__}"
            )
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        if _is_pydantic(type(value)):
            return value.model_dump(mode="json")
        return value

    def encode(self, value: T) -> bytes:
        return type(self)._encode(self._plain(value))

    def decode(self, data: bytes) -> T:
        plain = type(self)._decode(data)
        cls = self.cls
        if cls is None:
            return plain  # type: ignore[no-any-return]
        if _is_pydantic(cls):
            return cls.model_validate(plain)  # type: ignore[attr-defined,no-any-return]
        if not isinstance(plain, dict):
            raise ValueError(f"a {cls.__name__} is an object, not {type(plain).__name__}")
        return cls(**plain)


class JsonCodec(_Structured[T]):
    """JSON, as ``rill_client::Json`` writes it (``serde_json``: compact)."""

    name = "json"
    _encode = staticmethod(_native.encode_json)
    _decode = staticmethod(_native.decode_json)


class MsgPackCodec(_Structured[T]):
    """MessagePack, as ``rill_client::MsgPack`` writes it (structs as maps)."""

    name = "msgpack"
    _encode = staticmethod(_native.encode_msgpack)
    _decode = staticmethod(_native.decode_msgpack)


def codec_for(cls: Optional[type], codec: Union[None, str, Codec[Any]]) -> Codec[Any]:
    """The codec of a topic given ``cls`` and ``codec`` (``"json"``, ``"msgpack"``,
    ``"raw"`` or a :class:`Codec`)."""
    if isinstance(codec, Codec):
        if cls is not None:
            raise InvalidArgumentError("give a cls or a Codec instance, not both")
        return codec
    if codec is None:
        return RawCodec() if cls is None else JsonCodec(cls)
    if codec == "json":
        return JsonCodec(cls)
    if codec == "msgpack":
        return MsgPackCodec(cls)
    if codec == "raw":
        if cls is not None:
            raise InvalidArgumentError("a raw topic takes no cls")
        return RawCodec()
    raise InvalidArgumentError(
        f"codec must be \"json\", \"msgpack\", \"raw\" or a rill.Codec, not {codec!r}"
    )


def decode_record(codec: Codec[Any], raw: Tuple[Any, ...]) -> Any:
    """A ``Record`` from the native tuple, its value decoded; a value that fails to
    decode raises ``DecodeError`` with the record's position."""
    partition, offset, timestamp_us, key, headers, data = raw
    if type(codec) is not RawCodec:
        data = _decode_value(codec, partition, offset, data)
    return Record(
        partition,
        offset,
        timestamp_us,
        key,
        [(name, HeaderValue(t, v)) for name, (t, v) in headers] if headers else [],
        data,
    )


def decode_records(codec: Codec[Any], raws: List[Tuple[Any, ...]]) -> Tuple[List[Any], int]:
    """The ``Record`` of each native tuple in turn, up to the first whose value fails to
    decode: the records and how many tuples they used (``len(raws)`` unless one
    failed; then ``decode_record`` of the tuple after them raises its error)."""
    out: List[Any] = []
    append = out.append
    if type(codec) is RawCodec:
        for partition, offset, timestamp_us, key, headers, data in raws:
            if headers:
                headers = [(name, HeaderValue(t, v)) for name, (t, v) in headers]
            append(Record(partition, offset, timestamp_us, key, headers, data))
        return out, len(raws)
    for raw in raws:
        try:
            append(decode_record(codec, raw))
        except DecodeError:
            break
    return out, len(out)


def _decode_value(codec: Codec[Any], partition: int, offset: int, data: bytes) -> Any:
    try:
        return codec.decode(data)
    except Exception as e:  # noqa: BLE001 - any failure of a codec is a decode error
        reason = e.reason if isinstance(e, DecodeError) and e.reason else str(e)
        raise DecodeError(
            f"record {partition}:{offset} could not be decoded: {reason}",
            partition=partition,
            offset=offset,
            reason=reason,
        ) from e
