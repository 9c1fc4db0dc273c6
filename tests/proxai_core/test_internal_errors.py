"""Defect 6: our own bugs are never blamed on the upstream.

A genuinely malformed upstream event (bad JSON, a shape its protocol does not allow) is skipped with
a warning naming the upstream. An exception of ours raises in strict mode (the test suite runs in
it, see tests/conftest.py); in production it is named as ProxAI's internal error in the warnings
and logged once. Stream (StreamTranslator) and complete (response_from_stream,
stream_from_response) forms."""

from __future__ import annotations

import logging

import orjson
import pytest

from proxai_core import (
    Protocol,
    StreamTranslator,
    response_from_stream,
    stream_from_response,
    strict,
    translate_response_result,
)
from proxai_core.codecs import chat

C, R, A = Protocol.CHAT, Protocol.RESPONSES, Protocol.ANTHROPIC

CHUNK = b'data: {"id":"chatcmpl-1","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
STREAM = (CHUNK + b'data: {"id":"chatcmpl-1","model":"m","choices":[{"index":0,"delta":{},'
          b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
BAD_ITEM = (b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
            b'"output_index":0,"item":{"type":{},"id":"x"}}\n\n')


class Bug(Exception):
    """Stands for a mistake in our own code."""


def _boom(self, event, data):
    raise Bug("our mistake")


@pytest.fixture
def production():
    """Strict mode off for one test (the suite runs strict); the log-once memory starts empty."""
    assert strict.is_strict(), "the test suite runs the core in strict mode (tests/conftest.py)"
    strict._logged.clear()
    strict.set_strict(False)
    yield
    strict.set_strict(True)
    strict._logged.clear()


def _internal(warnings: list[str]) -> list[str]:
    return [w for w in warnings if w.startswith("ProxAI internal error")]


# ----------------------------------------------------------------------------- stream form
def test_strict_mode_raises_an_internal_error_in_a_stream(monkeypatch):
    monkeypatch.setattr(chat.StreamDecoder, "feed", _boom)
    t = StreamTranslator(C, A)
    with pytest.raises(Bug):
        t.feed(CHUNK)


def test_production_names_an_internal_stream_error_as_ours_and_logs_it_once(monkeypatch, production, caplog):
    monkeypatch.setattr(chat.StreamDecoder, "feed", _boom)
    t = StreamTranslator(C, A)
    with caplog.at_level(logging.ERROR, logger="proxai"):
        t.feed(CHUNK)
        t.feed(CHUNK)
        t.close()
    ours = _internal(t.warnings)
    assert len(ours) == 2 and "Bug: our mistake" in ours[0] and "not an upstream fault" in ours[0]
    assert not [w for w in t.warnings if "malformed upstream" in w]
    records = [r for r in caplog.records if r.name == "proxai"]
    assert len(records) == 1 and records[0].exc_info is not None  # once, with its traceback


@pytest.mark.parametrize("mode", ["strict", "production"])
def test_malformed_upstream_stream_event_names_the_upstream(mode, request):
    if mode == "production":
        request.getfixturevalue("production")
    t = StreamTranslator(R, C)
    t.feed(BAD_ITEM)
    t.feed(b"data: {not json\n\n")
    t.close()
    assert any(w.startswith("malformed upstream openai_responses event ignored") and "string type" in w
               for w in t.warnings), t.warnings
    assert any("invalid JSON in a Responses SSE event" in w for w in t.warnings), t.warnings
    assert not _internal(t.warnings)


def test_malformed_upstream_events_in_a_pass_through_are_observed_as_nothing():
    t = StreamTranslator(R, R)
    out = t.feed(BAD_ITEM) + t.close()
    assert out.startswith(BAD_ITEM)  # forwarded unchanged; the client judges its own protocol
    assert any(w.startswith("malformed upstream openai_responses event") for w in t.warnings)


# ----------------------------------------------------------------------------- complete forms
def test_strict_mode_raises_an_internal_error_when_collecting_a_stream(monkeypatch):
    monkeypatch.setattr(chat.StreamDecoder, "feed", _boom)
    with pytest.raises(Bug):
        response_from_stream(STREAM, C, A)


def test_production_names_an_internal_error_collecting_a_stream_as_ours(monkeypatch, production, caplog):
    monkeypatch.setattr(chat.StreamDecoder, "feed", _boom)
    with caplog.at_level(logging.ERROR, logger="proxai"):
        res = response_from_stream(STREAM, C, A)
    assert res.status == 502  # every event skipped: the stream never finished
    ours = _internal(res.warnings)
    assert len(ours) == 3 and all("Bug: our mistake" in w for w in ours)
    assert len([r for r in caplog.records if r.name == "proxai"]) == 1


def test_production_internal_error_outside_the_decoder_is_a_native_500_named_as_ours(monkeypatch, production):
    from proxai_core.codecs import anthropic

    def broken(resp, ctx, warnings):
        raise Bug("encoder mistake")

    monkeypatch.setattr(anthropic.CODEC, "encode_response", broken)
    res = response_from_stream(STREAM, C, A)
    assert res.status == 500
    assert res.body["type"] == "error" and res.body["error"]["type"] == "api_error"
    assert "ProxAI internal error" in res.body["error"]["message"]
    assert "Bug: encoder mistake" in res.body["error"]["message"]


def test_malformed_upstream_event_when_collecting_names_the_upstream():
    res = response_from_stream(BAD_ITEM, R, C)
    assert res.status == 502 and res.stop.reason.value == "interrupted"
    assert any(w.startswith("malformed upstream openai_responses event ignored") for w in res.warnings)
    assert not _internal(res.warnings)


def test_strict_mode_raises_an_internal_error_streaming_a_complete_response(monkeypatch):
    from proxai_core.codecs import anthropic

    def broken(self, ev):
        raise Bug("encoder mistake")

    monkeypatch.setattr(anthropic.StreamEncoder, "encode", broken)
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    with pytest.raises(Bug):
        stream_from_response(body, C, A)
    strict.set_strict(False)
    try:
        sse, stop, warnings = stream_from_response(body, C, A)
    finally:
        strict.set_strict(True)
    assert sse.startswith(b"event: error\n")
    err = orjson.loads(sse.split(b"data: ", 1)[1])
    assert err["error"]["type"] == "api_error" and "ProxAI internal error" in err["error"]["message"]
    assert _internal(warnings) and stop.reason.value == "interrupted"


# ----------------------------------------------------------------------------- complete responses
BODY = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def _broken_encoder(monkeypatch):
    from proxai_core.codecs import anthropic

    def broken(resp, ctx, warnings):
        raise Bug("encoder mistake")

    monkeypatch.setattr(anthropic.CODEC, "encode_response", broken)


def test_strict_mode_raises_an_internal_error_translating_a_complete_response(monkeypatch):
    _broken_encoder(monkeypatch)
    with pytest.raises(Bug):
        translate_response_result(BODY, C, A)


def test_production_names_an_internal_error_translating_a_complete_response_as_ours(monkeypatch, production,
                                                                                   caplog):
    _broken_encoder(monkeypatch)
    with caplog.at_level(logging.ERROR, logger="proxai"):
        res = translate_response_result(BODY, C, A)
        translate_response_result(BODY, C, A)
    assert res.status == 500
    assert res.body["type"] == "error" and res.body["error"]["type"] == "api_error"
    assert "ProxAI internal error" in res.body["error"]["message"] and "Bug: encoder mistake" in res.body["error"]["message"]
    assert _internal(res.warnings) and not [w for w in res.warnings if "could not be read" in w]
    assert res.stop.reason.value == "interrupted"  # (as in the stream forms)
    assert len([r for r in caplog.records if r.name == "proxai"]) == 1  # logged once


@pytest.mark.parametrize("mode", ["strict", "production"])
@pytest.mark.parametrize("exc", [strict.MalformedEvent("choices: expected a list"),
                                 TypeError("'int' object is not subscriptable")], ids=["judged", "unforeseen-shape"])
def test_malformed_upstream_complete_response_names_the_upstream(mode, exc, monkeypatch, request):
    """Reading the upstream body failed (the decoder judged it malformed, or met a shape it did not
    foresee): the upstream's fault, the client's native 502, strict mode or not."""
    if mode == "production":
        request.getfixturevalue("production")

    def unreadable(body, warnings):
        raise exc

    monkeypatch.setattr(chat.CODEC, "decode_response", unreadable)
    res = translate_response_result(BODY, C, A)
    assert res.status == 502 and res.body["error"]["type"] == "api_error"
    assert res.warnings[0].startswith("the upstream openai_chat_completions response could not be read")
    assert str(exc) in res.warnings[0] and not _internal(res.warnings)
