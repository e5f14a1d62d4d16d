"""Fixtures: a client over an embedded data directory and over a real `rill serve`.

The server is the binary at ``$RILL_BIN`` (default ``target/debug/rill`` of this
repository, built with ``cargo build -p rill-cli`` if missing), started on free
loopback ports with a fresh data directory per test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Iterator, List, Optional

import pytest

import rill

REPO = Path(__file__).resolve().parents[3]
LISTENING = re.compile(r"rill listening on (\S+)")
START_TIMEOUT_S = 60.0


def rill_bin() -> Path:
    """The `rill` binary, built if missing."""
    path = Path(os.environ.get("RILL_BIN", REPO / "target" / "debug" / "rill"))
    if not path.exists():
        subprocess.run(["cargo", "build", "-p", "rill-cli"], cwd=REPO, check=True)
    return path


@dataclass
class Server:
    """A running `rill serve`."""

    process: subprocess.Popen
    addr: str
    data: Path
    log: List[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"rill://{self.addr}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(data: Path, *extra: str) -> Server:
    """Starts `rill serve` on free loopback ports and waits for its address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RILL_")}
    env.setdefault("RUST_LOG", "warn")
    process = subprocess.Popen(
        [
            str(rill_bin()),
            "serve",
            "--data",
            str(data),
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            *extra,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stderr is not None
    log: List[str] = []
    found: List[str] = []
    ready = threading.Event()

    def read() -> None:
        # Keeps draining stderr so the server never blocks on a full pipe.
        assert process.stderr is not None
        for line in process.stderr:
            log.append(line)
            m = LISTENING.search(line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(START_TIMEOUT_S)
    if not found:
        process.kill()
        raise RuntimeError("rill serve did not start:\n" + "".join(log))
    return Server(process, found[0], data, log)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path / "server-data")
    yield s
    s.stop()


@pytest.fixture(params=["embedded", "server"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(mode: str, tmp_path: Path) -> AsyncIterator[rill.Client]:
    """A client over an embedded data directory or over a real server."""
    srv: Optional[Server] = None
    if mode == "embedded":
        c = await rill.open(tmp_path / "embedded-data")
    else:
        srv = start_server(tmp_path / "server-data")
        c = await rill.connect(srv.url)
    try:
        yield c
    finally:
        await c.close()
        if srv is not None:
            srv.stop()


def unique(prefix: str = "t") -> str:
    """A fresh name."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def python() -> str:
    """The interpreter running the tests, for subprocesses."""
    return sys.executable


def wait_until(predicate, timeout_s: float = 20.0, what: str = "a condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
