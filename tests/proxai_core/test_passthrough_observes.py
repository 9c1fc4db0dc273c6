"""Pass-through (same protocol): the bytes are forwarded as they came, and only the events the
source codec says carry something observed (``Codec.stream_observes``) are decoded."""

from __future__ import annotations

import pytest

from proxai_core import Protocol, StreamTranslator, api
from proxai_core.codecs import chat

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
    monkeypatch.setattr(api, "_STREAM_PAIRS", {})  # (pairs are looked up once per direction)
    monkeypatch.setattr(chat.CODEC, "stream_observes", lambda name, data: '"content":"Hi"' not in data)
    out, t = _run(reads)
    assert out == out0 == STREAM  # byte for byte
    assert len(decoded) == 4 and not any('"content":"Hi"' in d for d in decoded)
    assert t.stop == t0.stop and t.stop is not None and t.stop.raw == "length"
    assert t.usage == t0.usage and t.usage is not None
    assert t.model == t0.model == "m" and t.warnings == t0.warnings == []
    assert t.finished
