"""Streamed tool-call arguments toward an Anthropic client: the anthropic SDK re-parses the buffer
at every input_json_delta (jiter partial mode), so only valid JSON-object prefixes are forwarded;
arguments that go invalid (or end incomplete, except when max_tokens cut them) end the turn with
the native error event. Chat / Responses clients take any argument string and are left alone."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest

from proxai_core import Protocol, StopReason, StreamTranslator, stream_from_response
from tests.fake_upstream import RECORDED, _enc_event
from tests.sdk import StreamError, accumulate_stream, sse_events

A, C, R = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES


# ----------------------------------------------------------------------------- helpers
def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1764700000, "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def _tc(index: int, args: str, tid: str | None = None, name: str | None = None) -> dict[str, Any]:
    tc: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if tid:
        tc["id"], tc["type"] = tid, "function"
        tc["function"]["name"] = name
    return _chunk({"tool_calls": [tc]})


def chat_stream(calls: list[tuple[str, list[str]]], finish: str = "tool_calls", *,
                interleave: bool = False) -> bytes:
    """A Chat upstream stream with one tool call per (name, argument fragments)."""
    evs: list[Any] = [_chunk({"role": "assistant", "content": None})]
    for i, (name, _frags) in enumerate(calls):
        if not interleave or i == 0:
            evs.append(_tc(i, "", f"call_{i}", name))
        if not interleave:
            evs += [_tc(i, f) for f in _frags]
    if interleave:
        for i, (name, _frags) in enumerate(calls[1:], 1):
            evs.append(_tc(i, "", f"call_{i}", name))
        for k in range(max(len(f) for _n, f in calls)):
            evs += [_tc(i, f[k]) for i, (_n, f) in enumerate(calls) if k < len(f)]
    evs.append(_chunk({}, finish))
    evs.append("[DONE]")
    return b"".join(_enc_event(e) for e in evs)


def translate(raw: bytes, source: Protocol = C, target: Protocol = A, *, chunk: int = 0) -> tuple[bytes, StreamTranslator]:
    t = StreamTranslator(source, target)
    if chunk:
        out = b"".join(t.feed(raw[i:i + chunk]) for i in range(0, len(raw), chunk))
    else:
        out = t.feed(raw)
    return out + t.close(), t


def frames(out: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    return [(name, json.loads(data)) for name, data in sse_events(out)]


def partial_jsons(out: bytes, index: int | None = None) -> list[str]:
    return [d["delta"]["partial_json"] for name, d in frames(out)
            if name == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
            and (index is None or d["index"] == index)]


def assert_ends_with_error(out: bytes, tool: str) -> dict[str, Any]:
    fs = frames(out)
    name, last = fs[-1]
    assert name == "error" and last["type"] == "error", fs[-3:]
    assert last["error"]["type"] == "api_error"
    assert f"tool-call arguments for tool {tool!r}" in last["error"]["message"]
    assert "the turn was ended" in last["error"]["message"]
    assert sum(1 for n, _ in fs if n == "error") == 1
    with pytest.raises(StreamError):  # the SDK's own accumulator reaches the error event intact
        accumulate_stream(A, out)
    return last


# ----------------------------------------------------------------------------- valid arguments
ARGS = '{"city": "Paris \\"15e\\" \\u00e9\\ud83d\\ude00", "days": [1, -2.5e+3, true, null], "opt": {}}'


def test_valid_arguments_in_one_char_fragments_pass_through_unchanged():
    frags = list(ARGS)
    out, t = translate(chat_stream([("get_weather", frags)]))
    assert partial_jsons(out) == frags  # forwarded one for one, unchanged
    s = accumulate_stream(A, out)
    assert s.tool_calls == [("get_weather", json.loads(ARGS))]
    assert s.stop == "tool_use"
    whole, _ = translate(chat_stream([("get_weather", [ARGS])]))
    assert accumulate_stream(A, whole) == s
    assert not [w for w in t.warnings if "tool call" in w]


def test_valid_arguments_any_chunking_of_the_upstream_bytes():
    frags = [ARGS[i:i + 3] for i in range(0, len(ARGS), 3)]
    raw = chat_stream([("get_weather", frags)])
    ref, _ = translate(raw)
    for chunk in (1, 7, 64):
        out, _t = translate(raw, chunk=chunk)
        assert out == ref


def test_leading_whitespace_waits_for_the_brace():
    # a buffer of only whitespace is not parseable by the SDK: it is held back and sent with the '{'
    out, _t = translate(chat_stream([("f", ["  ", "\n", '{"a"', ": 1}  "])]))
    assert partial_jsons(out) == ['  \n{"a"', ": 1}  "]
    assert accumulate_stream(A, out).tool_calls == [("f", {"a": 1})]


@pytest.mark.parametrize("frags", [[], ["   "]], ids=["no-fragments", "whitespace-only"])
def test_empty_arguments_are_an_empty_input(frags):
    out, t = translate(chat_stream([("f", frags)]))
    assert partial_jsons(out) == []
    assert accumulate_stream(A, out).tool_calls == [("f", {})]
    assert t.stop.reason is StopReason.TOOL_USE


# ----------------------------------------------------------------------------- invalid arguments
def test_invalid_midway_ends_the_turn_with_the_native_error():
    frags = ['{"city":', ' "Par', 'is" ', "x}", '"more"', "}"]
    raw = chat_stream([("get_weather", frags)])
    out, t = translate(raw)
    assert partial_jsons(out) == frags[:3]  # the bad fragment and everything after it are dropped
    assert_ends_with_error(out, "get_weather")
    assert not any(n == "content_block_stop" and d["index"] == 0 for n, d in frames(out))
    assert t.stop.reason is StopReason.TOOL_USE  # what the upstream said
    assert any("get_weather" in w and "'x}'" in w for w in t.warnings), t.warnings
    assert t.close() == b""


def test_invalid_midway_swallows_the_rest_of_the_upstream():
    raw = chat_stream([("f", ['{"a": tru', "e,,", ' "b": 2}'])])
    t = StreamTranslator(C, A)
    parts = [t.feed(raw[i:i + 5]) for i in range(0, len(raw), 5)]
    err_at = next(i for i, p in enumerate(parts) if b"event: error" in p)
    assert all(p == b"" for p in parts[err_at + 1:])
    assert t.close() == b""
    assert t.stop is not None and t.stop.reason is StopReason.TOOL_USE
    assert t.finished


def test_invalid_first_fragment_sends_nothing_of_it():
    out, t = translate(chat_stream([("f", ["[1, 2]"])]))  # JSON, but not an object
    assert partial_jsons(out) == []
    assert_ends_with_error(out, "f")
    assert len([w for w in t.warnings if "tool call" in w]) == 1


def test_incomplete_at_block_end_is_an_error_not_a_block_stop():
    out, t = translate(chat_stream([("get_weather", ['{"city": "Par', "is"])]))
    last = assert_ends_with_error(out, "get_weather")
    assert "not a complete JSON object" in last["error"]["message"]
    names = [n for n, _ in frames(out)]
    assert "content_block_stop" not in names and "message_stop" not in names
    assert partial_jsons(out) == ['{"city": "Par', "is"]
    assert t.stop.reason is StopReason.TOOL_USE
    assert any("ended before their JSON object was complete" in w for w in t.warnings)


def test_cut_by_max_tokens_leaves_the_block_open_like_anthropic():
    # Anthropic itself sends no content_block_stop for a tool_use cut by max_tokens
    out, t = translate(chat_stream([("get_weather", ['{"city": "Paris", "unit": "cel'])], finish="length"))
    fs = frames(out)
    assert "content_block_stop" not in [n for n, _ in fs]
    assert [n for n, _ in fs][-2:] == ["message_delta", "message_stop"]
    s = accumulate_stream(A, out)
    assert s.stop == "max_tokens"
    assert s.tool_calls == [("get_weather", {"city": "Paris"})]  # as the SDK parses the cut buffer
    assert t.stop.reason is StopReason.MAX_OUTPUT


def test_two_parallel_calls_only_the_second_invalid():
    good = ['{"city"', ': "Paris"}']
    bad = ['{"city"', ': Lyon}']
    for interleave in (False, True):
        out, t = translate(chat_stream([("first", good), ("second", bad)], interleave=interleave))
        assert partial_jsons(out, 0) == good  # the valid call went through whole
        assert partial_jsons(out, 1) == bad[:1]
        assert_ends_with_error(out, "second")
        assert [w for w in t.warnings if "tool call" in w][0].startswith("tool call call_1 (second)")


def test_two_parallel_calls_second_incomplete_at_the_end():
    out, _t = translate(chat_stream([("first", ['{"a": 1}']), ("second", ['{"b": [1, 2'])]))
    fs = frames(out)
    assert ("content_block_stop", {"type": "content_block_stop", "index": 0}) in fs
    assert not any(n == "content_block_stop" and d["index"] == 1 for n, d in fs)
    assert_ends_with_error(out, "second")


# ----------------------------------------------------------------------------- other sources / paths
def _responses_tool_stream(deltas: list[str], done_args: str | None) -> bytes:
    evs = copy.deepcopy(RECORDED["openai_responses"]["tool"]["sse"])
    head = [e for e in evs if e[0] not in ("response.function_call_arguments.delta",
                                           "response.function_call_arguments.done",
                                           "response.output_item.done", "response.completed")]
    tmpl = next(e for e in evs if e[0] == "response.function_call_arguments.delta")
    body = []
    for i, d in enumerate(deltas):
        e = copy.deepcopy(tmpl)
        e[1]["delta"] = d
        e[1]["sequence_number"] = 10 + i
        body.append(e)
    tail = [e for e in evs if e[0] in ("response.function_call_arguments.done", "response.output_item.done",
                                       "response.completed")]
    for e in tail:
        if e[0] == "response.function_call_arguments.done":
            e[1]["arguments"] = done_args if done_args is not None else "".join(deltas)
        elif e[0] == "response.output_item.done":
            e[1]["item"]["arguments"] = done_args if done_args is not None else "".join(deltas)
        e[1]["sequence_number"] = 100 + tail.index(e)
    return b"".join(_enc_event(e) for e in head + body + tail)


def test_responses_upstream_invalid_delta():
    out, t = translate(_responses_tool_stream(['{"city":"Par', 'is"}}'], None), R, A)
    assert partial_jsons(out) == ['{"city":"Par']
    assert_ends_with_error(out, "get_weather")
    assert t.stop.reason is StopReason.TOOL_USE


def test_responses_upstream_arguments_only_at_the_end():
    # no deltas: the whole arguments come with the item's end and are checked the same way
    out, _t = translate(_responses_tool_stream([], '{"city":"Paris"}'), R, A)
    assert partial_jsons(out) == ['{"city":"Paris"}']
    assert accumulate_stream(A, out).tool_calls == [("get_weather", {"city": "Paris"})]
    out, _t = translate(_responses_tool_stream([], "{'city': 'Paris'}"), R, A)
    assert partial_jsons(out) == []
    assert_ends_with_error(out, "get_weather")


def test_complete_upstream_body_streamed_to_the_client():
    body = copy.deepcopy(RECORDED["openai_chat_completions"]["tool"]["json"])
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": Paris}'
    out, stop, warnings = stream_from_response(body, C, A)
    assert_ends_with_error(out, "get_weather")
    assert stop.reason is StopReason.TOOL_USE
    assert any("tool call" in w for w in warnings)


@pytest.mark.parametrize("target", [C, R])
def test_openai_clients_get_any_argument_string(target):
    # Chat and Responses clients take arguments as an opaque string: nothing is checked or cut
    frags = ['{"city": ', "Paris}", " trailing"]
    out, t = translate(chat_stream([("get_weather", frags)]), C, target)
    s = accumulate_stream(target, out)
    assert s.tool_calls == [("get_weather", "".join(frags))]
    assert not [w for w in t.warnings if "tool call" in w]


def test_known_fixture_streams_unchanged():
    # the recorded tool streams translate exactly as before: every fragment forwarded
    evs = RECORDED["openai_chat_completions"]["tool"]["sse"]
    out, _t = translate(b"".join(_enc_event(e) for e in evs))
    frags = [tc["function"]["arguments"] for e in evs if isinstance(e, dict) and e.get("choices")
             for tc in e["choices"][0]["delta"].get("tool_calls") or [] if tc["function"].get("arguments")]
    assert partial_jsons(out) == frags
    assert orjson.loads("".join(frags)) == accumulate_stream(A, out).tool_calls[0][1]
