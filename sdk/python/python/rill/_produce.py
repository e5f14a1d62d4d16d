"""The tuned write path: a producer over the Rust SDK's (batching, retries,
idempotence, background sending)."""

from __future__ import annotations

from typing import Any, Generic, Iterable, List, Optional, Tuple, TypeVar, Union

from . import _native
from ._codec import Codec, RawCodec
from ._types import Headers, Message, Position, Positions, _u32

T = TypeVar("T")


def _message_triple(codec: Codec[Any], m: Any) -> Tuple[bytes, Any, Any]:
    """A message as the native module takes it: ``(value bytes, key, headers)``."""
    if isinstance(m, Message):
        return (codec.encode(m.value), m.key, m.headers)
    return (codec.encode(m), None, None)


class Producer(Generic[T]):
    """A producer; see :meth:`Topic.producer`. Await :meth:`init` before sending, and
    :meth:`shutdown` at the end (it flushes); or use it as an async context manager.

    In direct mode (the default) each send returns the record's position once the broker
    acknowledged it; concurrent sends to one partition join one batch. With
    ``background=True`` a send returns ``None`` once buffered.
    """

    def __init__(self, native: "_native.Producer", codec: Codec[T]) -> None:
        self._native = native
        self.codec = codec

    async def init(self) -> "Producer[T]":
        """Validates the options and starts the producer (an idempotent one gets its
        producer id from the broker). Again: nothing."""
        await self._native.init()
        return self

    async def send(
        self,
        value: T,
        *,
        key: Optional[Union[bytes, str]] = None,
        partition: Optional[int] = None,
        headers: Optional[Headers] = None,
    ) -> Optional[Position]:
        """Sends one message: with the producer's routing, to ``key``'s partition, or to
        ``partition`` (not both: ``InvalidArgumentError``). Its position in direct mode,
        ``None`` in background mode."""
        p = await self._native.send(
            self.codec.encode(value),
            key=key,
            partition=None if partition is None else _u32("partition", partition),
            headers=headers,
        )
        return None if p is None else Position(*p)

    async def send_batch(self, messages: Iterable[Union[T, Message[T]]]) -> Positions:
        """Sends many messages (values, or :class:`rill.Message` with a key or headers),
        each checked before anything is sent. Their positions in direct mode (a
        :class:`rill.Positions` sequence), an empty one in background mode."""
        codec = self.codec
        if type(codec) is RawCodec:
            # Bare `bytes` go as they are (the native side takes them as values).
            items = [m if type(m) is bytes else _message_triple(codec, m) for m in messages]
        else:
            items = [_message_triple(codec, m) for m in messages]
        return Positions(*await self._native.send_batch(items))

    async def flush(self) -> None:
        """Waits until everything buffered is sent (raises a failed background send)."""
        await self._native.flush()

    async def shutdown(self) -> None:
        """Flushes everything buffered and stops; later sends raise ``ShutdownError``."""
        await self._native.shutdown()

    async def __aenter__(self) -> "Producer[T]":
        return await self.init()

    async def __aexit__(self, *_: object) -> None:
        await self.shutdown()
