"""protocols.py: the mitm side's protocol knowledge (paths, clients, model lists, fallback frames)."""

from __future__ import annotations

import json

import pytest

from proxai_core import Protocol
from proxai_core.codecs import get
from proxai_mitm.wire.protocols import (
    SHORT,
    TITLES,
    convert_models,
    counts_tokens,
    fallback_error_frame,
    model_list_client,
    protocol_from_path,
    sniff_protocol,
)
from tests.conftest import sse_events


@pytest.mark.parametrize("path, proto", [
    ("/v1/chat/completions", Protocol.CHAT), ("/api/v1/chat/completions?x=1", Protocol.CHAT),
    ("/openai/deployments/d/chat/completions?api-version=1", Protocol.CHAT),
    ("/v1/responses", Protocol.RESPONSES), ("/v1/messages", Protocol.ANTHROPIC),
    ("/v1/messages/count_tokens", None), ("/v1/models", None), ("https://h/v1/messages", Protocol.ANTHROPIC),
])
def test_protocol_from_path(path, proto):
    assert protocol_from_path(path) is proto


def test_every_protocol_has_names():
    assert set(SHORT) == set(TITLES) == set(Protocol)


def test_model_list_client_and_token_counting():
    assert model_list_client({"anthropic-version": "2023-06-01"}) is Protocol.ANTHROPIC
    assert model_list_client({"authorization": "Bearer x"}) is None
    assert [p for p in Protocol if counts_tokens(p)] == [Protocol.RESPONSES, Protocol.ANTHROPIC, Protocol.GEMINI,
                                                         Protocol.BEDROCK_CONVERSE, Protocol.VERTEX_ANTHROPIC,
                                                         Protocol.BEDROCK_INVOKE]
    assert model_list_client({"x-goog-api-key": "k"}) is Protocol.GEMINI


@pytest.mark.parametrize("proto", list(Protocol))
def test_fallback_error_frame_is_one_sse_event_naming_the_message(proto):
    frame = fallback_error_frame(proto, "boom")
    if get(proto).wire.stream_type is not None:  # a protocol with its own stream framing: one frame of it
        reader = get(proto).stream_reader()
        events = reader.feed(frame) + reader.close()
        assert len(events) == 1 and "boom" in events[0][1]
        return
    events = sse_events(frame)
    assert events and frame.endswith((b"\n\n", b"\r\n\r\n"))  # complete events, the client's own frame
    assert "boom" in json.dumps(json.loads(events[0][1]))


def test_convert_models_in_the_clients_format():
    upstream = {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "created": 5, "owned_by": "o"}]}
    anth = convert_models(upstream, "models", Protocol.ANTHROPIC, ["claude-x"], None)
    assert [m["id"] for m in anth["data"]] == ["claude-x", "gpt-4o"] and anth["data"][0]["type"] == "model"
    assert anth["first_id"] == "claude-x" and anth["has_more"] is False
    oai = convert_models(upstream, "models", None, [], None)
    assert oai == {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "created": 5, "owned_by": "o"}]}
    one = convert_models({"id": "gpt-4o"}, "model", Protocol.ANTHROPIC, [], "claude-x")
    assert one["id"] == "claude-x" and one["type"] == "model"


def test_sniff_protocol_of_bodies():
    assert sniff_protocol({"model": "m", "input": "hi"}, request=True) is Protocol.RESPONSES
    assert sniff_protocol({"choices": []}, request=False) is Protocol.CHAT
    assert sniff_protocol(b"event: message_start\ndata: {}\n\n") is Protocol.ANTHROPIC
