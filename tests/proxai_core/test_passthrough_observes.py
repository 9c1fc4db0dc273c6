"""Pass-through (same protocol): the bytes are forwarded as they came, and only the events the
source codec says carry something observed (``Codec.stream_observes``) are decoded."""

from __future__ import annotations

import pytest

from proxai_core import Protocol, StreamTranslator
from proxai_core.codecs import all_codecs, chat
from tests.conftest import FIXTURES, needs_fixtures
from tests.sdk import fixture_files

C = Protocol.CHAT

HEAD = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
STREAM = (HEAD + b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
          + (HEAD + b'"delta":{"content":"Hi"},"finish_reason":null}]}\n\n') * 5
          + HEAD + b'"delta":{},"finish_reason":"length"}]}\n\n'
          + b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
            b'"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}\n\n'
          + b"data: [DONE]\n\n")


def _run(reads: list[bytes]) -> tuple[bytes, StreamTranslator]:
    t = StreamTranslator(C, C)
    out = b"".join(t.feed(r) for r in reads) + t.close()
    return out, t


@pytest.mark.parametrize("split", [False, True], ids=["one-read", "event-per-read"])
def test_events_the_codec_does_not_observe_are_forwarded_undecoded(monkeypatch, split):
    reads = [p + b"\n\n" for p in STREAM.split(b"\n\n") if p] if split else [STREAM]
    out0, t0 = _run(reads)  # every event decoded (the default: stream_observes None)
    assert out0 == STREAM

    decoded: list[str] = []
    feed = chat.StreamDecoder.feed

    def counting(self, event, data):
        decoded.append(data)
        return feed(self, event, data)

    monkeypatch.setattr(chat.StreamDecoder, "feed", counting)
    monkeypatch.setattr(chat.CODEC, "stream_observes", lambda name, data: '"content":"Hi"' not in data)
    out, t = _run(reads)
    assert out == out0 == STREAM  # byte for byte
    # the first content event is decoded (it marks the time to first token), the later ones are not
    assert len(decoded) == 5 and sum('"content":"Hi"' in d for d in decoded) == 1
    assert t.first_content is not None
    assert t.stop == t0.stop and t.stop is not None and t.stop.raw == "length"
    assert t.usage == t0.usage and t.usage is not None
    assert t.model == t0.model == "m" and t.warnings == t0.warnings == []
    assert t.finished


#: codecs that skip some events in pass-through
SKIPPING = [c for c in all_codecs() if c.stream_observes is not None]


def _observed(t: StreamTranslator) -> tuple:
    return t.stop, t.usage, t.model, t.error, t.finished


@needs_fixtures
@pytest.mark.parametrize("codec", SKIPPING, ids=lambda c: c.name)
def test_skipping_changes_no_observed_fact_on_real_streams(monkeypatch, codec):
    """Every recorded stream of a codec that skips events: the same bytes, StopInfo, usage, model and
    error as when every event is decoded, in one read and in 61-byte reads."""
    files = fixture_files(codec.protocol, ".sse")
    assert files, FIXTURES
    skipped = 0
    for f in files:
        raw = f.read_bytes()
        for reads in ([raw], [raw[i:i + 61] for i in range(0, len(raw), 61)]):
            t = StreamTranslator(codec.protocol, codec.protocol)
            out = b"".join(t.feed(r) for r in reads) + t.close()
            with monkeypatch.context() as m:
                m.setattr(codec, "stream_observes", None)
                t0 = StreamTranslator(codec.protocol, codec.protocol)
                out0 = b"".join(t0.feed(r) for r in reads) + t0.close()
            assert out == out0, f.name
            assert _observed(t) == _observed(t0), f.name
            assert t.warnings == t0.warnings, f.name
        reader = codec.stream_reader()
        skipped += any(not codec.stream_observes(n, d) for n, d in reader.feed(raw) + reader.close())
    assert skipped, "no recording had an event the codec skips"

