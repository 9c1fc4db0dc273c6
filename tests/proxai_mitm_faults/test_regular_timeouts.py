"""Upstream faults in every proxy mode, through a real mitmdump: the client gets its own protocol's
error within the configured timeout, never a hang or mitmproxy's HTML page.

Modes: reverse, regular with absolute-form plain HTTP (``HTTP_PROXY``), regular with CONNECT + TLS
(``HTTPS_PROXY``, the client trusts the test CA; the routes send the requests to the loopback
upstream), upstream mode (absolute-form, through a second, plain mitmdump). Faults, chosen by the token in the prompt: ``nohead`` (the upstream never sends headers:
native 504 after ``proxai_header_timeout``), ``stall`` (a stream stops after its first text: an error
event after ``proxai_idle_timeout`` and a clean end), ``cut`` (a complete body cut mid-way: native
502, the flow annotated ``interrupted``).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import pytest

from proxai_mitm.flow.record import FlowRecord
from tests.mitm_harness import Mitmdump

from .echo_upstream import (
    PATHS,
    SHORT,
    TOKEN_RX,
    UPSTREAM_KEY,
    UPSTREAM_KEY_ENV,
    EchoUpstream,
    build_reply,
    proc_stat,
    request_body,
    routes_toml,
)

pytestmark = pytest.mark.e2e

CHAT, ANTH = "openai_chat_completions", "anthropic_messages"
TIMEOUT = 2  # proxai_header_timeout and proxai_idle_timeout, seconds
HOST = "api.proxai-faults.test"  # the CONNECT target; the routes send its requests to the upstream
HEADERS = {"authorization": "Bearer sk-test-client-0001", "x-api-key": "sk-test-client-0001"}


class FaultUpstream(EchoUpstream):
    """The echo upstream plus the faults named by the token's prefix."""

    async def _respond(self, rec: Any, writer: asyncio.StreamWriter) -> bool:
        m = TOKEN_RX.search(rec.body or b"")
        token = m.group(1).decode() if m else ""
        # a fault only on a real provider path: anything else gets the echo upstream's 404
        proto = next((p for p, path in PATHS.items() if rec.path.partition("?")[0] == path), None)
        if not token.startswith(("nohead", "stall", "cut")) or proto is None:
            return await super()._respond(rec, writer)
        self.requests.append(rec)
        if token.startswith("nohead"):
            await asyncio.sleep(30)
            return False
        if token.startswith("cut"):
            payload, ctype = build_reply(proto, token, 6, False)
            assert isinstance(payload, bytes)
            self._write_head(writer, 200, [("content-type", ctype), ("content-length", str(len(payload)))])
            writer.write(payload[: len(payload) // 2])
            await writer.drain()
            return False  # the connection closes mid-body
        events, ctype = build_reply(proto, token, 6, True)
        self._write_head(writer, 200, [("content-type", f"{ctype}; charset=utf-8"),
                                       ("transfer-encoding", "chunked")])
        first = next(i for i, ev in enumerate(events) if f"Echo {token}:".encode() in ev)
        for ev in events[:first + 1]:  # up to the first text
            writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
        await writer.drain()
        await asyncio.sleep(30)  # silence, connection open
        return False


@pytest.fixture(scope="module")
def upstream():
    up = FaultUpstream(n_deltas=6).start()
    yield up
    up.stop()


@pytest.fixture(scope="module", params=["reverse", "absolute", "connect", "upstream"])
def proxy(request, upstream, tmp_path_factory):
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(routes_toml(upstream.url))
    mode = f"reverse:{upstream.url}" if request.param == "reverse" else None
    outer = None
    if request.param == "upstream":  # through a plain mitmdump that streams every body on (cuts included)
        outer = Mitmdump(addon=None, save=False, options={"stream_large_bodies": "1"}).start()
        mode = f"upstream:{outer.url}"
    opts = {"proxai_config": str(routes), "proxai_header_timeout": TIMEOUT, "proxai_idle_timeout": TIMEOUT,
            "tcp_timeout": 60}
    m = Mitmdump(mode=mode, options=opts, env={UPSTREAM_KEY_ENV: UPSTREAM_KEY})
    m.start()
    m.kind = request.param  # type: ignore[attr-defined]
    yield m
    try:
        assert "Traceback" not in m.log and "crashed" not in m.log, m.log[-3000:]
    finally:
        m.cleanup()
        if outer is not None:
            outer.cleanup()


def _client(proxy: Mitmdump, upstream: EchoUpstream, path: str, http2: bool = False) -> tuple[httpx2.Client, str]:
    """An HTTP client and the URL of ``path`` for the proxy's mode."""
    kind = proxy.kind  # type: ignore[attr-defined]
    if kind == "reverse":
        return httpx2.Client(timeout=30), f"{proxy.url}{path}"
    if kind in ("absolute", "upstream"):
        return httpx2.Client(proxy=proxy.url, timeout=30), f"{upstream.url}{path}"
    return (httpx2.Client(proxy=proxy.url, verify=ssl.create_default_context(cafile=str(proxy.ca_path)), timeout=30, http2=http2),
            f"https://{HOST}{path}")


def _path(client: str, upstream: str) -> str:
    """Always routed (a CONNECT target is no real host): same protocol or translated."""
    return f"/to-{SHORT[upstream]}{PATHS[client]}"


def _post(proxy: Mitmdump, upstream: EchoUpstream, client: str, up_proto: str, token: str, stream: bool,
          http2: bool = False) -> tuple[int, bytes, float, str | None]:
    """(status, body, seconds, transport error) of one request."""
    c, url = _client(proxy, upstream, _path(client, up_proto), http2)
    t0 = time.monotonic()
    err = None
    status, body = 0, b""
    with c:
        try:
            with c.stream("POST", url, json=request_body(client, token, stream), headers=HEADERS) as r:
                status = r.status_code
                assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1"), r.http_version
                for part in r.iter_raw():
                    body += part
        except httpx2.HTTPError as e:
            err = f"{type(e).__name__}: {e}"
    return status, body, time.monotonic() - t0, err


def _record(proxy: Mitmdump, token: str, timeout: float = 10.0) -> FlowRecord:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for f in proxy.flows():
            if token.encode() in (f.request.raw_content or b""):
                rec = FlowRecord.of(f)
                if rec is not None:
                    return rec
        time.sleep(0.1)
    raise AssertionError(f"no saved flow for {token}")


def _native_error(client: str, body: bytes) -> dict:
    obj = json.loads(body)
    if client == ANTH:
        assert obj["type"] == "error" and obj["error"]["type"], obj
        return obj["error"]
    assert obj["error"]["type"], obj
    return obj["error"]


DIRECTIONS = [(CHAT, CHAT, False), (ANTH, CHAT, True), (CHAT, ANTH, True), (ANTH, ANTH, False)]


@pytest.mark.parametrize("client,up_proto,stream", DIRECTIONS)
def test_no_headers_native_504(proxy, upstream, client, up_proto, stream):
    tok = f"nohead{proxy.kind}{SHORT[client]}{SHORT[up_proto]}{int(stream)}"
    status, body, took, err = _post(proxy, upstream, client, up_proto, tok, stream)
    assert err is None, err
    assert status == 504, (status, body[:300])
    assert TIMEOUT - 0.5 < took < TIMEOUT + 4, took
    assert "proxai_header_timeout" in _native_error(client, body)["message"]
    rec = _record(proxy, tok)
    assert rec.stop is not None and rec.stop.reason in ("error", "interrupted", "timeout"), rec.stop


@pytest.mark.parametrize("client,up_proto", [(CHAT, CHAT), (ANTH, CHAT), (CHAT, ANTH), (ANTH, ANTH)])
def test_stalled_stream_ends_with_error_event(proxy, upstream, client, up_proto):
    tok = f"stall{proxy.kind}{SHORT[client]}{SHORT[up_proto]}"
    status, body, took, err = _post(proxy, upstream, client, up_proto, tok, True)
    assert err is None, err  # a clean end of the body, no transport error
    assert status == 200
    assert f"Echo {tok}:" in body.decode()  # what came before the stall reached the client
    assert b"proxai_idle_timeout" in body  # the native error event
    assert TIMEOUT - 0.5 < took < TIMEOUT + 4, took
    rec = _record(proxy, tok)
    assert rec.stop is not None and rec.stop.reason == "interrupted", rec.stop


@pytest.mark.parametrize("client,up_proto", [(CHAT, CHAT), (ANTH, CHAT), (CHAT, ANTH), (ANTH, ANTH)])
def test_cut_body_native_502(proxy, upstream, client, up_proto):
    tok = f"cut{proxy.kind}{SHORT[client]}{SHORT[up_proto]}"
    status, body, took, err = _post(proxy, upstream, client, up_proto, tok, False)
    assert err is None, err
    assert status == 502, (status, body[:300])
    assert b"<html" not in body.lower()
    assert "broke off" in _native_error(client, body)["message"]
    assert took < 3, took
    rec = _record(proxy, tok)
    assert rec.stop is not None and rec.stop.reason == "interrupted", rec.stop


def test_healthy_after_faults(proxy, upstream):
    tok = f"fine{proxy.kind}"
    status, body, _, err = _post(proxy, upstream, ANTH, CHAT, tok, False)
    assert err is None and status == 200, (err, status, body[:300])
    assert tok in body.decode()


@pytest.mark.parametrize("proxy", ["connect"], indirect=True)  # HTTP/2 is negotiated inside the TLS tunnel
@pytest.mark.parametrize("fault", ["nohead", "stall", "cut"])
def test_http2_client_in_the_tunnel(proxy, upstream, fault):
    """The same faults for an HTTP/2 client inside the CONNECT tunnel (the HTTP/1 upstream's
    connection is another one)."""
    tok = f"{fault}h2"
    status, body, took, err = _post(proxy, upstream, ANTH, CHAT, tok, fault == "stall", http2=True)
    assert err is None, err
    assert status == {"nohead": 504, "stall": 200, "cut": 502}[fault], (status, body[:300])
    assert took < TIMEOUT + 4, took
    if fault == "stall":
        assert f"Echo {tok}:" in body.decode() and b"proxai_idle_timeout" in body
    else:
        assert _native_error(ANTH, body)["message"]
    assert _record(proxy, tok).stop is not None


@pytest.mark.parametrize("proxy", ["connect"], indirect=True)  # one mode is enough for the soak
def test_memory_flat_over_many_faults(proxy, upstream):
    """400 faulty requests through the CONNECT tunnel (cut bodies, every tenth one without headers),
    8 at a time: each is answered natively, and the proxy's RSS grows by less than 64 MB."""
    assert proxy.proc is not None
    pid = proxy.proc.pid

    def one(i: int) -> int:
        fault = "nohead" if i % 10 == 0 else "cut"
        status, body, _, err = _post(proxy, upstream, CHAT, ANTH if i % 2 else CHAT, f"{fault}mem{i}", False)
        assert err is None and b"<html" not in body.lower(), (err, body[:200])
        return status

    with ThreadPoolExecutor(8) as ex:  # warm-up: imports, certificates, caches
        list(ex.map(one, range(1, 17)))
    time.sleep(0.5)
    base = proc_stat(pid)["rss_mb"]
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        statuses = list(ex.map(one, range(100, 500)))
    took = time.monotonic() - t0
    after = proc_stat(pid)
    print(f"\n400 faults in {took:.1f} s: proxy RSS {base:.0f} -> {after['rss_mb']:.0f} MB "
          f"(VmHWM {after['hwm_mb']:.0f} MB)")
    assert statuses.count(504) == 40 and statuses.count(502) == 360, statuses
    assert after["rss_mb"] - base < 64


def test_reach_finds_nothing_outside_a_live_connection():
    """No proxy server, or a flow no connection handler holds: None (the callers fall back to
    mitmproxy's own behaviour), never an exception."""
    from mitmproxy.test import taddons, tflow

    from proxai_mitm.wire import reach

    with taddons.context():
        assert reach.find(tflow.tflow()) is None
