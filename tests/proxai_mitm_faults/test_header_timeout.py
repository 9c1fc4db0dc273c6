"""An upstream that accepts the connection and never sends response headers: the client gets its
own protocol's 504 after ``proxai_header_timeout`` (through a real mitmdump), the flow is recorded,
and mitmproxy stays healthy."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from proxai_core import Protocol
from proxai_mitm.flow.record import FlowRecord

from .echo_upstream import Rig, client_path, http_request, request_body

pytestmark = pytest.mark.e2e

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"


@pytest.fixture(scope="module")
def rig():
    with Rig(save=True, options={"proxai_header_timeout": 2, "tcp_timeout": 60}, n_deltas=3,
             head_delay=30.0) as r:
        yield r


def _flow(rig, token: str, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for f in rig.m.flows():
            if token.encode() in (f.request.raw_content or b"") or token in json.dumps(f.metadata, default=str):
                return f
        time.sleep(0.1)
    raise AssertionError(f"no saved flow for {token}")


@pytest.mark.parametrize("client,upstream,stream", [(CHAT, None, True), (ANTH, CHAT, False), (RESP, ANTH, True),
                                                    (ANTH, None, False)])
def test_no_headers_gets_native_504(rig, client, upstream, stream):
    tok = f"nohead{client[:4]}{(upstream or 'none')[:4]}{int(stream)}"
    t0 = time.monotonic()
    r = asyncio.run(http_request("127.0.0.1", rig.port, client_path(client, upstream),
                                 json.dumps(request_body(client, tok, stream)).encode(),
                                 {"authorization": "Bearer sk-test-client-0001"}, timeout=20))
    took = time.monotonic() - t0
    assert r.error is None, r.error
    assert 1.5 < took < 8, took
    assert r.status == 504, (r.status, r.body[:300])
    body = json.loads(r.body)
    if Protocol(client) is Protocol.ANTHROPIC:
        assert body["type"] == "error" and body["error"]["type"] == "timeout_error"
    else:
        assert body["error"]["type"] == "timeout_error"
    assert "proxai_header_timeout" in r.body.decode()
    f = _flow(rig, tok)
    assert f.response is not None and f.response.status_code == 504
    rec = FlowRecord.of(f)
    if rec is not None and rec.stop is not None:
        assert rec.stop.reason in ("error", "interrupted", "timeout"), rec.stop


def test_mitmproxy_healthy_after_timeouts(rig):
    rig.up.head_delay = 0.0
    try:
        r = asyncio.run(http_request("127.0.0.1", rig.port, client_path(CHAT, None),
                                     json.dumps(request_body(CHAT, "afterhead", False)).encode(),
                                     {"authorization": "Bearer sk-test-client-0001"}, timeout=20))
        assert r.status == 200, r.body[:300]
    finally:
        rig.up.head_delay = 30.0
    assert "Traceback" not in rig.m.log and "crashed" not in rig.m.log


def test_option_validated():
    from mitmproxy import exceptions
    from mitmproxy.test import taddons

    from proxai_mitm.addons.idle import HeaderTimeout

    a = HeaderTimeout()
    with taddons.context(a) as tctx:
        tctx.configure(a, proxai_header_timeout=7)
        assert a.timeout == 7
        with pytest.raises(exceptions.OptionsError, match="proxai_header_timeout"):
            tctx.configure(a, proxai_header_timeout=-1)
