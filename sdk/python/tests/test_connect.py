"""Connecting to a server: credentials in the URL, the options, the SDK's URL checks."""

from __future__ import annotations

from pathlib import Path

import pytest

import rill
from conftest import start_server, unique

PASSWORD = "s3cret pw@:,"


async def test_credentials_in_the_url(tmp_path: Path) -> None:
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    srv = start_server(tmp_path / "data", "--auth", "--admin-password-file", str(pw))
    try:
        # Percent-encoded: the password holds a space, '@', ':' and ','.
        encoded = "s3cret%20pw%40%3A%2C"
        client = await rill.connect(f"rill://admin:{encoded}@{srv.addr}")
        topic = client.stream(unique("s")).topic("t")
        await topic.ensure(1)
        assert (await topic.publish(b"x").send()).offset == 0
        await client.close()

        options = await rill.connect(srv.url, user="admin", password=PASSWORD)
        assert any(s.name == topic.stream for s in await options.list_streams())
        await options.close()

        with pytest.raises(rill.UnauthenticatedError) as e:
            wrong = await rill.connect(f"rill://admin:wrong@{srv.addr}", init_retries=0)
            await wrong.list_streams()
        assert e.value.code == "UNAUTHENTICATED"
        assert "wrong" not in str(e.value)
        with pytest.raises(rill.UnauthenticatedError):
            anonymous = await rill.connect(srv.url, init_retries=0)
            await anonymous.list_streams()
    finally:
        srv.stop()


async def test_rills_speaks_tls_and_a_plaintext_server_fails_the_handshake(server) -> None:
    with pytest.raises(rill.ProtocolError, match="TLS"):
        await rill.connect(f"rills://{server.addr}", init_retries=0, connect_timeout_ms=2000)


async def test_default_stream_and_retry_options(server) -> None:
    client = await rill.connect(server.url, default_stream="shop", retries=2, backoff_ms=10, backoff_max_ms=20)
    assert client.default_stream == "shop"
    assert not client.is_embedded
    topic = client.topic("orders")
    assert topic.stream == "shop"
    await topic.ensure(1)
    assert [s.name for s in await client.list_streams()] == ["shop"]
    with pytest.raises(rill.InvalidArgumentError):
        await rill.connect(server.url, backoff_ms=100, backoff_max_ms=10)
    await client.close()
