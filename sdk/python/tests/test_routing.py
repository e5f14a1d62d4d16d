"""The key-routing test vectors of docs/PROTOCOL.md §6, through the Python API."""

from __future__ import annotations

import pytest

import rill
from conftest import unique

# key, partitions, partition: every row of the table in docs/PROTOCOL.md §6.
VECTORS = [
    (b"", 1, 0),
    (b"order-17", 1, 0),
    (b"order-17", 12, 6),
    (b"k0", 4, 3),
    (b"a", 3, 1),
]


@pytest.mark.parametrize("key,partitions,partition", VECTORS)
def test_partition_for_key_matches_the_protocol_vectors(key: bytes, partitions: int, partition: int) -> None:
    assert rill.partition_for_key(key, partitions) == partition
    assert rill.partition_for_key(key.decode(), partitions) == partition, "a str key is its UTF-8"


def test_partition_for_key_refuses_bad_input() -> None:
    with pytest.raises(rill.InvalidArgumentError):
        rill.partition_for_key(b"k", 0)
    with pytest.raises(rill.InvalidArgumentError):
        rill.partition_for_key(b"k", -1)
    with pytest.raises(rill.InvalidArgumentError):
        rill.partition_for_key(7, 3)  # type: ignore[arg-type]


async def test_published_keys_land_where_the_vectors_say(client: rill.Client) -> None:
    stream = client.stream(unique("s"))
    for key, partitions, partition in VECTORS:
        if not key:
            continue  # an empty key is refused by every write path
        topic = stream.topic(f"p{partitions}")
        await topic.ensure(partitions)
        at = await topic.publish(b"v").key(key).send()
        assert at.partition == partition, (key, partitions)
        producer = await topic.producer().init()
        sent = await producer.send(b"v", key=key)
        assert sent is not None and sent.partition == partition
        [batched] = await topic.publish_batch([rill.Message(b"v", key=key)])
        assert batched.partition == partition
        await producer.shutdown()
