"""The examples run, embedded and against a server, and do what they say."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import List

import pytest

from conftest import Server, python

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(example: str, cwd: Path, *args: str) -> List[str]:
    done = subprocess.run(
        [python(), str(EXAMPLES / example), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture(params=["embedded", "server"])
def url_args(request: pytest.FixtureRequest, tmp_path: Path) -> List[str]:
    if request.param == "embedded":
        return []
    server: Server = request.getfixturevalue("server")
    return [server.url]


def test_quickstart(tmp_path: Path, url_args: List[str]) -> None:
    out = run("quickstart.py", tmp_path, *url_args)
    published = [l for l in out if l.startswith("published order")]
    read = [l for l in out if l.startswith("order ")]
    assert len(published) == 5 and len(read) == 5
    assert "order 3 of customer-1: total 30.00" in read
    # Run again: the saved cursor reads only the new orders.
    again = run("quickstart.py", tmp_path, *url_args)
    assert len([l for l in again if l.startswith("order ")]) == 5
    # One cursor file per target, so an embedded run and a server run never share one.
    cursors = sorted(p.name for p in tmp_path.glob("quickstart-cursor-python-*.json"))
    target = "embedded" if not url_args else url_args[0].split("://", 1)[1].replace(":", "_")
    assert cursors == [f"quickstart-cursor-python-{target}.json"]


def test_producer(tmp_path: Path, url_args: List[str]) -> None:
    out = run("producer.py", tmp_path, *url_args)
    assert re.fullmatch(r"sent 10000 records in \d+\.\d+s", out[0]), out
    assert out[1] == "background producer flushed"


def test_consumer(tmp_path: Path, url_args: List[str]) -> None:
    out = run("consumer.py", tmp_path, *url_args)
    assert out[:5] == [f"handling offset {i}: event {i}" for i in range(5)]
    assert out[-1] == "stored offset: 4"
    # Again: the stored offset wins, so only the five new events are handled.
    again = run("consumer.py", tmp_path, *url_args)
    assert again[:5] == [f"handling offset {i}: event {i - 5}" for i in range(5, 10)]
    assert again[-1] == "stored offset: 9"
