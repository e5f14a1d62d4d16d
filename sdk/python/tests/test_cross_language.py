"""Python and Rust agree: records published from Python are read by the `rill` CLI (the
Rust SDK) with the same partitions, offsets, keys, headers and values, and records the
CLI publishes are read by Python the same way; keyed ones land where
`rill.partition_for_key` says in both.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from typing import Any, Dict, List

import rill
from conftest import Server, rill_bin, unique

PARTITIONS = 3


def cli(server: Server, *args: str, stdin: str = "") -> str:
    """Runs the `rill` CLI against `server` and returns its standard output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RILL_")}
    done = subprocess.run(
        [str(rill_bin()), "--server", server.url, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_records_published_from_python_read_the_same_from_rust(server: Server) -> None:
    client = await rill.connect(server.url)
    stream, name = unique("s"), unique("t")
    topic = client.stream(stream).topic(name)
    await topic.ensure(partitions=PARTITIONS)
    sent: List[Dict[str, Any]] = []
    for i in range(12):
        key = f"account-{i % 5}".encode()
        at = await (
            topic.publish(f"value-{i}".encode())
            .key(key)
            .header("source", "python")
            .header("n", rill.HeaderValue.int64(-i))
            .header("small", rill.HeaderValue.uint16(i + 7))
            .header("ok", i % 2 == 0)
            .header("raw", bytes([0, 255, i]))
            .header("ratio", 0.25 * i)
            .send()
        )
        assert at.partition == rill.partition_for_key(key, PARTITIONS)
        sent.append(
            {
                "partition": at.partition,
                "offset": at.offset,
                "key": key.decode(),
                "headers": {
                    "source": "python",
                    "n": -i,
                    "small": i + 7,
                    "ok": i % 2 == 0,
                    "raw": base64.b64encode(bytes([0, 255, i])).decode(),
                    "ratio": 0.25 * i,
                },
                # Every header in order, typed; 64-bit integers as decimal strings.
                "header_list": [
                    {"name": "source", "type": "str", "value": "python"},
                    {"name": "n", "type": "i64", "value": str(-i)},
                    {"name": "small", "type": "u16", "value": i + 7},
                    {"name": "ok", "type": "bool", "value": i % 2 == 0},
                    {"name": "raw", "type": "bytes", "value": base64.b64encode(bytes([0, 255, i])).decode()},
                    {"name": "ratio", "type": "f64", "value": 0.25 * i},
                ],
                "value": f"value-{i}",
            }
        )
    await client.close()

    lines = cli(server, "consume", f"{stream}/{name}", "--format", "json").splitlines()
    read = [json.loads(line) for line in lines]
    assert len(read) == len(sent)
    for record in read:
        record.pop("timestamp_us")
    by_position = {(r["partition"], r["offset"]): r for r in read}
    for expected in sent:
        assert by_position[(expected["partition"], expected["offset"])] == expected


async def test_records_published_from_rust_read_the_same_from_python(server: Server) -> None:
    stream, name = unique("s"), unique("t")
    target = f"{stream}/{name}"
    cli(server, "topic", "create", target, "--partitions", str(PARTITIONS))
    lines = "".join(f"customer-{i % 4}:order {i}\n" for i in range(10))
    cli(server, "produce", target, "--key-sep", ":", "--header", "origin=rust", stdin=lines)

    client = await rill.connect(server.url)
    reader = client.stream(stream).topic(name).records(unique("cursor"))
    got = []
    while (record := await reader.next()) is not None:
        got.append(record)
    await client.close()

    assert len(got) == 10
    for record in got:
        assert record.key is not None
        assert record.partition == rill.partition_for_key(record.key, PARTITIONS)
        assert record.header("origin") == ("str", "rust")
        i = int(record.value.decode().removeprefix("order "))
        assert record.key == f"customer-{i % 4}".encode()
    # Per key, the CLI's line order is the append order.
    for c in range(4):
        key = f"customer-{c}".encode()
        mine = [int(r.value.decode().split()[1]) for r in got if r.key == key]
        assert mine == sorted(mine) and mine == [i for i in range(10) if i % 4 == c]

