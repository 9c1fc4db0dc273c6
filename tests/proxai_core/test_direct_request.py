"""The direct Anthropic <-> Chat request translation (codecs/_direct_request.py) gives exactly what
the neutral path gives (body bytes and warnings), and hands every other shape to the neutral path."""

from __future__ import annotations

import copy
import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai_core import Protocol, translate_request
from proxai_core.codecs import codec
from proxai_core.codecs._direct_request import DIRECT

from ..sdk import FIXTURES, fixture_files

A, C = Protocol.ANTHROPIC, Protocol.CHAT

TOOLS_A = [{"name": "get_weather", "description": "Weather of a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
           {"name": "get_time", "input_schema": {"properties": {}}, "cache_control": {"type": "ephemeral"}}]
A_BODY = {
    "model": "claude-sonnet-4-5", "max_tokens": 1024, "temperature": 0.7, "stream": True,
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}],
    "metadata": {"user_id": "u-1"}, "tools": TOOLS_A, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "stop_sequences": ["END"],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": None}]},
        {"role": "user", "content": [{"type": "text", "text": "before"},
                                     {"type": "tool_result", "tool_use_id": "toolu_1", "content": "15 C"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": False,
                                      "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                     {"type": "tool_result", "tool_use_id": "toolu_3", "content": ""},
                                     {"type": "text", "text": "after", "cache_control": {"type": "ephemeral"}},
                                     {"type": "text", "text": "and more"}]},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ],
}
C_BODY = {
    "model": "gpt-4o", "max_completion_tokens": 512, "top_p": 0.9, "stream": True,
    "stream_options": {"include_usage": True}, "user": "u-1", "stop": "END", "parallel_tool_calls": False,
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                "parameters": {"properties": {"city": {"type": "string"}}},
                                                "strict": True}},
              {"function": {"name": "get time!", "parameters": {}}, "cache_control": {"type": "ephemeral"}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "refusal": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_2", "function": {"name": "get time!", "arguments": " "}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "15 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}, {"type": "text", "text": ""}]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": ""},
    ],
}


def _neutral(body: dict, src: Protocol, tgt: Protocol):
    w: list[str] = []
    try:
        out = codec(tgt).encode_request(codec(src).decode_request(copy.deepcopy(body), w), w)
    except Exception as exc:  # noqa: BLE001 - compared, not hidden
        return ("error", type(exc).__name__, str(exc)), w
    return orjson.dumps(out), w


def _direct(body: dict, src: Protocol, tgt: Protocol):
    w: list[str] = []
    b = copy.deepcopy(body)
    out = DIRECT[src, tgt](b, w)
    assert b == body, "the direct translation changed its input"
    return (None if out is None else orjson.dumps(out)), w


def _check(body: dict, src: Protocol, tgt: Protocol) -> bool:
    """Direct == neutral when the direct translation takes the body; True if it did."""
    try:
        out, w = _direct(body, src, tgt)
    except Exception:  # noqa: BLE001 - translate_request falls back to the neutral path then
        return False
    if out is None:
        return False
    assert (out, w) == _neutral(body, src, tgt)
    return True


@pytest.mark.parametrize(("body", "src", "tgt"), [(A_BODY, A, C), (C_BODY, C, A)], ids=["M->C", "C->M"])
def test_usual_shapes_go_direct_with_the_neutral_result(body, src, tgt):
    assert _check(body, src, tgt)
    w: list[str] = []
    assert orjson.dumps(translate_request(copy.deepcopy(body), src, tgt, warnings=w)) == _neutral(body, src, tgt)[0]
    assert w == _neutral(body, src, tgt)[1]


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/fixtures absent")
@pytest.mark.parametrize(("src", "tgt"), [(A, C), (C, A)], ids=["M->C", "C->M"])
def test_recorded_requests(src, tgt):
    files = fixture_files(src, ".request.json")
    direct = sum(_check(json.loads(f.read_text()), src, tgt) for f in files)
    assert direct >= len(files) // 4, f"only {direct} of {len(files)} recorded requests went direct"


# the neutral path warns, rewrites, rejects or keeps more for these: the direct translation must not take them
FALLBACK_A = {
    "thinking block": {"messages": [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "x"}]}]},
    "tool result error flag": {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": True}]}]},
    "image": {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]},
    "citations": {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "citations": []}]}]},
    "empty content list": {"messages": [{"role": "user", "content": []}]},
    "server tool": {"messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    "thinking config": {"messages": [], "thinking": {"type": "enabled", "budget_tokens": 2048}},
    "top_k": {"messages": [], "top_k": 5},
    "unknown field": {"messages": [], "foo": 1},
    "bool max_tokens": {"messages": [], "max_tokens": True},
    "bad tool choice": {"messages": [], "tool_choice": {"type": "sometimes"}},
    "non-string user id": {"messages": [], "metadata": {"user_id": 5}},
}
FALLBACK_C = {
    "no model": {"messages": [{"role": "user", "content": "x"}]},
    "late system message": {"model": "m", "messages": [{"role": "user", "content": "x"},
                                                       {"role": "system", "content": "y"}]},
    "mixed system roles": {"model": "m", "messages": [{"role": "system", "content": "x"},
                                                      {"role": "developer", "content": "y"}]},
    "image part": {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]},
    "text part cache_control": {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]},
    "tool result after text": {"model": "m", "messages": [{"role": "user", "content": "x"},
                                                          {"role": "tool", "tool_call_id": "c", "content": "y"}]},
    "id Anthropic rejects": {"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "call.1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]},
    "arguments not an object": {"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]},
    "reasoning content": {"model": "m", "messages": [{"role": "assistant", "content": "x",
                                                      "reasoning_content": "hm"}]},
    "custom tool": {"model": "m", "messages": [], "tools": [{"type": "custom", "custom": {"name": "f"}}]},
    "forced choice without tools": {"model": "m", "messages": [], "tool_choice": "required"},
    "temperature above 1": {"model": "m", "messages": [], "temperature": 1.5},
    "temperature and top_p": {"model": "m", "messages": [], "temperature": 0.5, "top_p": 0.9},
    "reasoning effort": {"model": "m", "messages": [], "reasoning_effort": "low"},
    "string stream": {"model": "m", "messages": [], "stream": "yes"},
}


@pytest.mark.parametrize(("body", "src", "tgt"),
                         [(b, A, C) for b in FALLBACK_A.values()] + [(b, C, A) for b in FALLBACK_C.values()],
                         ids=[f"M->C {k}" for k in FALLBACK_A] + [f"C->M {k}" for k in FALLBACK_C])
def test_other_shapes_are_left_to_the_neutral_path(body, src, tgt):
    assert _direct(body, src, tgt)[0] is None
    # and translate_request still answers as the neutral path does (a body, or its error)
    w: list[str] = []
    try:
        out: object = orjson.dumps(translate_request(copy.deepcopy(body), src, tgt, warnings=w))
    except Exception as exc:  # noqa: BLE001
        out = ("error", type(exc).__name__, str(exc))
    assert (out, w) == _neutral(body, src, tgt)


_POOL = [None, True, False, 0, 1, 2.5, "", "x", "auto", "any", "none", "required", "tool", "text", "tool_use",
         "tool_result", "user", "assistant", "system", "developer", "function", "{}", "[1]", " ", "call.1",
         [], {}, ["a"], {"type": "ephemeral"}, {"type": "text", "text": "t"}, {"user_id": "u"}]
_KEYS = ["type", "text", "role", "content", "name", "id", "input", "arguments", "cache_control", "citations",
         "is_error", "tool_use_id", "tool_call_id", "function", "parameters", "input_schema", "strict",
         "description", "tool_calls", "refusal", "max_tokens", "temperature", "top_p", "stop", "user", "stream",
         "metadata", "disable_parallel_tool_use"]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_requests(data):
    src, tgt, base = data.draw(st.sampled_from([(A, C, A_BODY), (C, A, C_BODY)]))
    body = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in _paths(body) if p]))
        parent = body
        for k in path[:-1]:
            parent = parent[k]
        op = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if op == "replace":
            parent[path[-1]] = copy.deepcopy(data.draw(st.sampled_from(_POOL)))
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][data.draw(st.sampled_from(_KEYS))] = copy.deepcopy(data.draw(st.sampled_from(_POOL)))
        elif isinstance(parent[path[-1]], list) and parent[path[-1]]:
            parent[path[-1]].append(copy.deepcopy(data.draw(st.sampled_from(parent[path[-1]]))))
    _check(body, src, tgt)
