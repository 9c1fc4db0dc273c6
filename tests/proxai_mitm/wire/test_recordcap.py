"""Recording caps: a stream's recording copies keep the head plus a visible note; StopInfo and
usage still come from the whole stream."""

from __future__ import annotations

import json

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons

from proxai_core import Protocol
from proxai_mitm.flow.record import FlowRecord
from proxai_mitm.wire import recordcap, streaming
from proxai_mitm.wire.recordcap import CappedBuffer, RecordLimit, truncation_note
from proxai_mitm.wire.streaming import StreamHandler

from ..helpers import ANTH, CHAT, make_flow, respond, stream_exchange


def test_capped_buffer_keeps_the_head_and_counts_the_rest():
    b = CappedBuffer(10)
    for i, piece in enumerate([b"abcd", b"efgh", b"ijkl", b"mnop"]):
        b.add(piece, at_ms=float(i))
    assert b.head() == b"abcdefghij" and (b.kept, b.total) == (10, 16) and b.truncated
    assert b.value() == b"abcdefghij" + truncation_note(10, 16)
    assert b"recording truncated after 10 bytes (16 total)" in b.value()
    assert b.times == [[0.0, 4], [1.0, 4], [2.0, 2]]  # timings only for held bytes
    small = CappedBuffer(100)
    small.extend([b"x", b"", b"y"])
    assert small.value() == b"xy" and not small.truncated


def _chat_events(n: int) -> list[bytes]:
    ev = [b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
          b'"delta":{"role":"assistant","content":""}}]}\n\n']
    ev += [('data: ' + json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"content": f"word{i} " * 10}}]}) + "\n\n").encode() for i in range(n)]
    ev.append(b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},'
              b'"finish_reason":"length"}]}\n\n')
    ev.append(b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],'
              b'"usage":{"prompt_tokens":7,"completion_tokens":4000,"total_tokens":4007}}\n\n')
    ev.append(b"data: [DONE]\n\n")
    return ev


@pytest.mark.parametrize("passthrough", [True, False])
def test_stream_handler_copies_are_capped_stop_and_usage_intact(passthrough, monkeypatch):
    # the handler reads the cap when it is built (a master left by another test may hold the option)
    monkeypatch.setattr(streaming, "record_limit", lambda: 4096)
    client = Protocol.CHAT if passthrough else Protocol.ANTHROPIC
    h = StreamHandler(stream_exchange(Protocol.CHAT, client), client, passthrough=passthrough)
    total = 0
    for ev in _chat_events(2000):
        total += len(ev)
        h(ev)
    h(b"")
    assert h.exchange.stop is not None and h.exchange.stop.reason == "max_output"
    assert h.exchange.usage.output == 4000
    if passthrough:  # identity pass-through: the upstream's bytes are the client's, kept once (out)
        assert len(h.chunks) == 0
    else:
        assert len(h.chunks) == 4096 and h.chunks.total == total
    assert len(h.out) == 4096 and h.out.total > 4096
    assert b"recording truncated after 4096 bytes" in h.upstream_bytes
    assert h.client_bytes.startswith(b"data: " if passthrough else b"event: message_start")
    parts = {p for p, _, _ in h.truncations}
    assert parts == ({"response"} if passthrough else {"upstream_response", "response"})
    assert len(h.chunk_times) < 100  # timings are bounded with the bytes


def test_record_limit_option():
    with taddons.context(RecordLimit()) as tctx:
        assert recordcap.record_limit() == recordcap.DEFAULT_RECORD_LIMIT
        tctx.options.update(proxai_record_limit=1234)
        assert recordcap.record_limit() == 1234
        with pytest.raises(exceptions.OptionsError, match="proxai_record_limit"):
            tctx.options.update(proxai_record_limit=-1)


def test_each_cut_copy_is_recorded_once_in_the_flow_record(addon, monkeypatch):
    """A translated stream longer than the recording cap: the record names each cut copy (the
    upstream's and the client's) exactly once."""
    monkeypatch.setattr(streaming, "record_limit", lambda: 4096)
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    for ev in _chat_events(2000):
        f.response.stream(ev)
    f.response.stream(b"")
    addon.response(f)
    rec = FlowRecord.of(f)
    assert rec is not None and rec.stop is not None and rec.stop.reason == "max_output"
    assert sorted(t.part for t in rec.truncated) == ["response", "upstream_response"]
