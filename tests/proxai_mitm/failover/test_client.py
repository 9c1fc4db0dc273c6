"""The attempt client: keep-alive reuse, a closed kept-alive connection replaced, failures by kind."""

from __future__ import annotations

import asyncio
import socket

import pytest

from proxai_mitm.failover.client import Pool, UpstreamError, tls_context
from tests.fake_upstream import FakeUpstream

PATH = "/v1/models"


@pytest.fixture(scope="module")
def fake():
    f = FakeUpstream().start()
    yield f
    f.stop()


def test_connections_are_kept_alive_and_reused(fake):
    async def go():
        pool = Pool()
        seen = []
        for _ in range(3):
            conn, head = await pool.request("http", "127.0.0.1", fake.port, "GET", PATH,
                                            [(b"host", b"127.0.0.1")], b"", 5)
            body = b"".join([c async for c in conn.body(5)])
            assert head.status_code == 200 and b'"data"' in body
            seen.append(id(conn))
            pool.release(conn)
        pool.close()
        return seen

    seen = asyncio.run(go())
    assert len(set(seen)) == 1


def test_a_kept_alive_connection_closed_meanwhile_is_replaced_once(fake):
    async def go():
        pool = Pool()
        conn, _ = await pool.request("http", "127.0.0.1", fake.port, "GET", PATH, [(b"host", b"x")], b"", 5)
        _ = [c async for c in conn.body(5)]
        pool.release(conn)
        conn.writer.transport.abort()  # as if the upstream had closed it while idle
        await asyncio.sleep(0)
        conn2, head = await pool.request("http", "127.0.0.1", fake.port, "GET", PATH, [(b"host", b"x")], b"", 5)
        pool.close()
        return conn2 is not conn, head.status_code

    assert asyncio.run(go()) == (True, 200)


def test_failures_say_their_kind():
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)

    async def kind(scheme: str, p: int, timeout: float) -> str:
        pool = Pool(tls_context())
        try:
            await pool.request(scheme, "127.0.0.1", p, "GET", "/", [(b"host", b"x")], b"", timeout)
        except UpstreamError as e:
            return e.kind
        return "answered"

    try:
        assert asyncio.run(kind("http", port, 2)) == "connect"
        assert asyncio.run(kind("http", silent.getsockname()[1], 0.3)) == "timeout"
    finally:
        silent.close()


def test_insecure_tls_checks_nothing():
    import ssl

    assert tls_context(insecure=True).verify_mode is ssl.CERT_NONE
    assert tls_context().verify_mode is ssl.CERT_REQUIRED
