"""Bounded and never blocking, through a real mitmdump with the addon (loopback only).

- compression bombs of the four encodings, in requests and in responses: answered natively, the
  proxy's peak memory (VmHWM) grows by less than 64 MB;
- a 20 MB request recorded with ``-w`` while a small request runs next to it: the small one
  completes in under 0.5 s.

The endless-stream row (60 s) is in test_endless_stream.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib

import brotli
import pytest

from proxai_mitm.wire.bodies import DEFAULT_LIMIT
from tests.fake_upstream import Reply

from .echo_upstream import Rig, client_path, http_request, proc_stat, request_body

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd

pytestmark = pytest.mark.e2e

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
ENCODINGS = ("gzip", "deflate", "br", "zstd")
MB = 1024 * 1024
_BOMBS: dict[tuple[str, int], bytes] = {}


def bomb(coding: str, size: int, block: bytes = b"\0") -> bytes:
    """``size`` bytes of one repeated byte, compressed in 1 MiB steps (the test stays small)."""
    key = (coding, size)
    if key not in _BOMBS:
        chunk = block * MB
        if coding == "br":
            c = brotli.Compressor(quality=5)
            _BOMBS[key] = b"".join(c.process(chunk) for _ in range(size // MB)) + c.finish()
        else:
            c = {"gzip": lambda: zlib.compressobj(9, wbits=31), "deflate": lambda: zlib.compressobj(9),
                 "zstd": zstd.ZstdCompressor}[coding]()
            _BOMBS[key] = b"".join(c.compress(chunk) for _ in range(size // MB)) + c.flush()
    return _BOMBS[key]


@pytest.fixture(scope="module")
def rig():
    with Rig(save=True, n_deltas=4) as r:
        yield r


def post(rig, path: str, body: bytes, headers: dict, timeout: float = 60.0):
    return asyncio.run(http_request("127.0.0.1", rig.port, path, body, headers, timeout=timeout))


def _native(client: str, body: bytes) -> dict:
    obj = json.loads(body)
    if client == ANTH:
        assert obj["type"] == "error" and obj["error"]["message"], obj
    else:
        assert obj["error"]["message"], obj
    return obj


def _hwm(rig) -> float:
    return proc_stat(rig.pid)["hwm_mb"]


@pytest.fixture(scope="module")
def baseline(rig):
    """Peak memory after a few ordinary requests (imports and caches warmed)."""
    for client in (CHAT, RESP, ANTH):
        r = post(rig, client_path(client, ANTH if client != ANTH else CHAT),
                 json.dumps(request_body(client, f"warm{client[-4:]}", True)).encode(), {"x-api-key": "k-1234567890"})
        assert r.status == 200
    return _hwm(rig)


@pytest.mark.parametrize("coding", ENCODINGS)
@pytest.mark.parametrize("client,upstream", [(CHAT, ANTH), (ANTH, None)])
def test_request_bomb_native_413_bounded(rig, baseline, coding, client, upstream):
    size = 1024 * MB if coding == "gzip" else 256 * MB  # gzip: ~1 MB on the wire, the case
    body = bomb(coding, size, b"{")
    t0 = time.monotonic()
    r = post(rig, client_path(client, upstream), body,
             {"content-type": "application/json", "content-encoding": coding, "x-api-key": "k-1234567890"})
    took = time.monotonic() - t0
    assert r.status == 413, (r.status, r.body[:300])
    err = _native(client, r.body)
    assert "too large" in json.dumps(err)
    assert took < 10, took
    grown = _hwm(rig) - baseline
    assert grown < 64, f"peak memory grew {grown:.0f} MB"


@pytest.mark.parametrize("coding", ENCODINGS)
def test_response_bomb_native_502_bounded(rig, baseline, coding):
    """A translated complete response whose body is a bomb: the client's native 502, memory bounded."""
    rig.up.on("/v1/messages", Reply(status=200, headers=[("content-type", "application/json"),
                                                         ("content-encoding", coding)],
                                    body=bomb(coding, 256 * MB), times=1))
    r = post(rig, client_path(CHAT, ANTH), json.dumps(request_body(CHAT, f"rbomb{coding}", False)).encode(),
             {"authorization": "Bearer k-1234567890"})
    assert r.status == 502, (r.status, r.body[:300])
    _native(CHAT, r.body)
    grown = _hwm(rig) - baseline
    assert grown < 64, f"peak memory grew {grown:.0f} MB"


@pytest.mark.parametrize("coding", ENCODINGS)
def test_stream_bomb_ends_with_native_error_bounded(rig, baseline, coding):
    """An event stream whose content-encoding is a bomb: no chunk inflates past the cap; the client
    gets its protocol's error event, memory bounded."""
    rig.up.on("/v1/messages", Reply(status=200, headers=[("content-type", "text/event-stream"),
                                                         ("content-encoding", coding)],
                                    body=bomb(coding, 256 * MB), times=1))
    r = post(rig, client_path(CHAT, ANTH), json.dumps(request_body(CHAT, f"sbomb{coding}", True)).encode(),
             {"authorization": "Bearer k-1234567890"})
    assert r.error is None, r.error
    assert r.status == 200
    assert b'"error"' in r.body and len(r.body) < 64 * 1024, r.body[:300]
    grown = _hwm(rig) - baseline
    assert grown < 64, f"peak memory grew {grown:.0f} MB"


def test_pass_through_response_bomb_is_left_compressed(rig, baseline):
    """Pass-through: the proxy does not inflate the body; the client gets the upstream's bytes."""
    body = bomb("gzip", 256 * MB)
    rig.up.on("/v1/chat/completions", Reply(status=200, headers=[("content-type", "application/json"),
                                                                 ("content-encoding", "gzip")],
                                            body=body, times=1))
    r = post(rig, client_path(CHAT, None), json.dumps(request_body(CHAT, "pbomb", False)).encode(),
             {"authorization": "Bearer k-1234567890"})
    assert r.status == 200 and r.body == body
    assert _hwm(rig) - baseline < 64


def test_mitmproxy_alive_after_bombs(rig):
    r = post(rig, client_path(ANTH, CHAT), json.dumps(request_body(ANTH, "afterbombs", False)).encode(),
             {"x-api-key": "k-1234567890"})
    assert r.status == 200, r.body[:300]
    assert "Traceback" not in rig.m.log
    assert DEFAULT_LIMIT == 32 * MB


# ----------------------------------------------------------------------------- never blocking
def test_big_recorded_request_does_not_block_a_small_one(rig):
    """A 20 MB translated request while recording with -w (redaction included), and a small
    request started just after it: the small one completes in under 0.5 s."""
    filler = "lorem ipsum dolor sit amet sk-proj-notakey " * (20 * MB // 43)
    big = request_body(CHAT, "bigreq", False)
    big["messages"].insert(0, {"role": "user", "content": filler})
    big_raw = json.dumps(big).encode()
    assert len(big_raw) >= 20 * MB
    small_raw = json.dumps(request_body(ANTH, "smallreq", False)).encode()

    async def run():
        big_task = asyncio.create_task(http_request("127.0.0.1", rig.port, client_path(CHAT, ANTH), big_raw,
                                                    {"authorization": "Bearer k-1234567890"}, timeout=120))
        # start the small one once the big body is in the proxy (its upload takes a moment)
        await asyncio.sleep(0.6)
        t0 = time.monotonic()
        small = await http_request("127.0.0.1", rig.port, client_path(ANTH, CHAT), small_raw,
                                   {"x-api-key": "k-1234567890"}, timeout=60)
        small_took = time.monotonic() - t0
        big_res = await big_task
        return big_res, small, small_took

    for _attempt in range(2):  # a shared 2-core machine: one retry for scheduling noise
        big_res, small, small_took = asyncio.run(run())
        assert big_res.status == 200 and small.status == 200, (big_res.body[:200], small.body[:200])
        if small_took < 0.5:
            break
    print(f"\nsmall request next to a 20 MB recorded one: {small_took:.3f} s")
    assert small_took < 0.5, small_took
