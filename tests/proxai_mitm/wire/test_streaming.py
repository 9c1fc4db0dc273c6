"""streaming.py: the stream callable's recording copies (pass-through keeps the upstream's bytes once)."""

from __future__ import annotations

import gzip

from mitmproxy.test import taddons

from proxai_core import Protocol
from proxai_mitm.wire.bodies import BodyLimit
from proxai_mitm.wire.streaming import StreamHandler

from ..helpers import ANTH, sse_bytes, stream_exchange


def _feed(h: StreamHandler, data: bytes, step: int = 50) -> None:
    for i in range(0, len(data), step):
        h(data[i:i + step])


def test_identity_pass_through_keeps_one_copy_with_its_timings():
    data = sse_bytes(ANTH, "tool")
    h = StreamHandler(stream_exchange(Protocol.ANTHROPIC, Protocol.ANTHROPIC), Protocol.ANTHROPIC, passthrough=True)
    _feed(h, data)
    h(b"")
    assert h.mirror and len(h.chunks) == 0
    assert h.client_bytes == data and h.upstream_bytes == data
    assert sum(n for _, n in h.chunk_times) == len(data) and len(h.chunk_times) > 1
    assert h.exchange.stop.reason.value == "tool_use"


def test_pass_through_ended_by_proxai_records_the_upstreams_bytes_without_the_frame():
    data = sse_bytes(ANTH, "text")
    part = data[: len(data) // 2]
    h = StreamHandler(stream_exchange(Protocol.ANTHROPIC, Protocol.ANTHROPIC), Protocol.ANTHROPIC, passthrough=True)
    _feed(h, part)
    h.idle_message = "upstream sent nothing for 2 s"
    h(b"")  # the idle watchdog's end of message
    assert h.client_bytes.startswith(part) and b"event: error" in h.client_bytes[len(part):]
    assert h.upstream_bytes == part and h.interrupted


def test_compressed_pass_through_keeps_the_decoded_upstream_copy():
    data = sse_bytes(ANTH, "text")
    wire = gzip.compress(data)
    with taddons.context(BodyLimit()):  # the stream decoder's per-chunk cap is an option
        h = StreamHandler(stream_exchange(Protocol.ANTHROPIC, Protocol.ANTHROPIC), Protocol.ANTHROPIC,
                          passthrough=True, content_encoding="gzip")
        _feed(h, wire, step=13)
        h(b"")
    assert not h.mirror and h.client_bytes == wire and h.upstream_bytes == data
