"""The same input gives the same bytes, whenever it is translated: no wall-clock timestamps (a source
without one gets a fixed ``created`` / ``created_at``, docs/mapping.md) and no random ids, in every
direction, stream and complete, errors included."""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable

import orjson
import pytest

from proxai_core import (
    Protocol,
    StreamTranslator,
    response_from_stream,
    stream_from_response,
    translate_request,
    translate_response,
)
from proxai_core.api import translate_error
from proxai_core.codecs import get
from proxai_core.neutral import Error
from tests.fake_upstream import RECORDED, _enc_event

A, C, R = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES
DIRECTIONS = [(s, t) for s, t in itertools.permutations((C, R, A), 2)]
CASES = ["text", "tool", "refusal"]


_TOOL = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
REQUESTS = {
    C: {"model": "gpt-4o", "stream": True, "tools": [{"type": "function", "function": _TOOL}], "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]},
    R: {"model": "gpt-5", "instructions": "Be brief.", "tools": [dict(_TOOL, type="function")], "input": [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]},
    A: {"model": "claude-sonnet-4-5", "max_tokens": 512, "system": "Be brief.", "tools": [
        {"name": "get_weather", "description": "Weather", "input_schema": _TOOL["parameters"]}], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]},
}


def _sse(source: Protocol, case: str) -> bytes:
    return b"".join(_enc_event(e) for e in RECORDED[source.value][case]["sse"])


def _twice(fn: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    """fn run at two clock readings 3,601 s apart; its result as bytes."""
    outs = []
    for t in (1_764_700_000.25, 1_764_703_601.75):
        monkeypatch.setattr(time, "time", lambda t=t: t)
        monkeypatch.setattr(time, "time_ns", lambda t=t: int(t * 1e9))
        r = fn()
        outs.append(r if isinstance(r, bytes) else orjson.dumps(r, option=orjson.OPT_SORT_KEYS))
    return outs[0], outs[1]


@pytest.mark.parametrize(("source", "target"), DIRECTIONS, ids=lambda p: p.value)
@pytest.mark.parametrize("case", CASES)
def test_complete_response_same_bytes(source, target, case, monkeypatch):
    body = RECORDED[source.value][case]["json"]
    a, b = _twice(lambda: translate_response(copy.deepcopy(body), source, target), monkeypatch)
    assert a == b


@pytest.mark.parametrize(("source", "target"), DIRECTIONS, ids=lambda p: p.value)
@pytest.mark.parametrize("case", CASES)
def test_stream_same_bytes(source, target, case, monkeypatch):
    raw = _sse(source, case)

    def run() -> bytes:
        t = StreamTranslator(source, target)
        return b"".join(t.feed(raw[i:i + 100]) for i in range(0, len(raw), 100)) + t.close()

    a, b = _twice(run, monkeypatch)
    assert a == b


@pytest.mark.parametrize(("source", "target"), DIRECTIONS, ids=lambda p: p.value)
def test_complete_to_stream_and_stream_to_complete_same_bytes(source, target, monkeypatch):
    body = RECORDED[source.value]["text"]["json"]
    a, b = _twice(lambda: stream_from_response(copy.deepcopy(body), source, target)[0], monkeypatch)
    assert a == b
    raw = _sse(source, "text")
    a, b = _twice(lambda: response_from_stream(raw, source, target).body, monkeypatch)
    assert a == b


@pytest.mark.parametrize(("source", "target"), DIRECTIONS, ids=lambda p: p.value)
def test_interrupted_stream_and_errors_same_bytes(source, target, monkeypatch):
    raw = _sse(source, "text")
    cut = raw[: len(raw) // 2]

    def run() -> bytes:
        t = StreamTranslator(source, target)
        return t.feed(cut) + t.close()

    a, b = _twice(run, monkeypatch)
    assert a == b
    a, b = _twice(lambda: translate_error(503, b'{"error": {"message": "busy"}}', source, target), monkeypatch)
    assert a == b
    err = Error(kind="overloaded", message="busy", status=529)
    a, b = _twice(lambda: get(target).error_frame(err), monkeypatch)
    assert a == b


@pytest.mark.parametrize(("source", "target"), DIRECTIONS, ids=lambda p: p.value)
def test_request_same_bytes(source, target, monkeypatch):
    body = REQUESTS[source]
    a, b = _twice(lambda: translate_request(copy.deepcopy(body), source, target), monkeypatch)
    assert a == b


@pytest.mark.parametrize("target", [C, R])
def test_a_source_without_timestamp_gets_the_fixed_one(target):
    """An Anthropic upstream has no timestamp: the OpenAI client gets 0, stream and complete."""
    field = "created" if target is C else "created_at"
    body = translate_response(copy.deepcopy(RECORDED[A.value]["text"]["json"]), A, target)
    assert body[field] == 0
    t = StreamTranslator(A, target)
    out = t.feed(_sse(A, "text")) + t.close()
    first = orjson.loads(out.split(b"data: ", 1)[1].split(b"\n", 1)[0])
    assert (first if target is C else first["response"])[field] == 0


@pytest.mark.parametrize(("source", "target"), [(C, R), (R, C)], ids=lambda p: p.value)
def test_a_source_timestamp_is_carried(source, target):
    src_field, field = ("created", "created_at") if source is C else ("created_at", "created")
    body = copy.deepcopy(RECORDED[source.value]["text"]["json"])
    body[src_field] = 1_700_000_123
    assert translate_response(body, source, target)[field] == 1_700_000_123
