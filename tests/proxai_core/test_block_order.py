"""One block on the wire at a time: Anthropic never opens a content block before it closed the
previous one, and Responses never adds an output item before the previous one is done. Neutral
blocks may overlap (a Chat upstream's parallel tool calls stay open until its finish, and an upstream
may interleave their fragments), so the encoders hold what cannot be sent yet; nothing is lost.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxai_core import (
    Protocol,
    StreamTranslator,
    response_from_stream,
    stream_from_response,
    translate_response,
)
from tests.fake_upstream import _enc_event
from tests.proxai_core.test_tool_args_stream import _chunk, _tc, chat_stream
from tests.sdk import FIXTURES, accumulate_stream, sse_events, summarize_response, validate_response

A, C, R = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES
TARGETS = [A, R]


def _translate(raw: bytes, target: Protocol, chunk: int = 0) -> tuple[bytes, StreamTranslator]:
    t = StreamTranslator(C, target)
    if chunk:
        out = b"".join(t.feed(raw[i:i + chunk]) for i in range(0, len(raw), chunk))
    else:
        out = t.feed(raw)
    return out + t.close(), t


def _opens_and_closes(target: Protocol, out: bytes) -> list[tuple[str, int]]:
    """('open'|'close', index) in wire order: content blocks (Anthropic) or output items (Responses)."""
    seq = []
    for name, data in sse_events(out):
        d = json.loads(data)
        t = name or d.get("type")
        if target is A and t in ("content_block_start", "content_block_stop"):
            seq.append(("open" if t.endswith("start") else "close", d["index"]))
        elif target is R and t in ("response.output_item.added", "response.output_item.done"):
            seq.append(("open" if t.endswith("added") else "close", d["output_index"]))
    return seq


def _assert_serial(seq: list[tuple[str, int]]) -> None:
    open_: int | None = None
    for what, i in seq:
        if what == "open":
            assert open_ is None, f"{i} opened while {open_} is open: {seq}"
            open_ = i
        else:
            assert open_ == i, seq
            open_ = None


CALLS = [("get_weather", ['{"city"', ': "Paris"', "}"]),
         ("get_time", ['{"tz": ', '"Europe/Paris"}']),
         ("get_news", ["{", '"topic": "rain", "n": ', "3}"])]
EXPECTED = [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"}),
            ("get_news", {"topic": "rain", "n": 3})]


# ----------------------------------------------------------------------------- streams
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("chunk", [0, 7])
def test_parallel_tool_calls_stream_one_block_at_a_time(target, interleave, chunk):
    out, t = _translate(chat_stream(CALLS, interleave=interleave), target, chunk)
    seq = _opens_and_closes(target, out)
    _assert_serial(seq)
    assert [w for w, _ in seq] == ["open", "close"] * 3
    s = accumulate_stream(target, out)  # strict: the SDK's accumulator and the lifecycle checks
    assert s.tool_calls == EXPECTED
    assert s.stop == ("tool_use" if target is A else "completed")
    assert not [w for w in t.warnings if "dropped" in w]


@pytest.mark.parametrize("target", TARGETS)
def test_a_complete_call_ends_when_the_next_starts(target):
    """Not held until the finish: the first call's block closes as soon as the second one starts."""
    raw = chat_stream(CALLS[:2])
    events = [e for e in raw.split(b"\n\n") if e]
    t = StreamTranslator(C, target)
    sent = b""
    second_start = next(i for i, e in enumerate(events) if b'"id":"call_1"' in e)
    for e in events[:second_start + 1]:
        sent += t.feed(e + b"\n\n")
    seq = _opens_and_closes(target, sent)
    assert seq == [("open", 0), ("close", 0), ("open", 1)]


@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_fragments_of_unfinished_calls_are_held_not_lost(target):
    # index 0, 1, 0, 1 ...: the second call waits until the first one's JSON is whole
    raw = b"".join(_enc_event(e) for e in [
        _chunk({"role": "assistant", "content": None}),
        _tc(0, "", "call_a", "first"), _tc(1, "", "call_b", "second"),
        _tc(0, '{"x": '), _tc(1, '{"y": '), _tc(1, '[1, 2'), _tc(0, '"a"'), _tc(1, ', 3]'), _tc(1, "}"),
        _tc(0, "}"), _chunk({}, "tool_calls"), "[DONE]"])
    out, t = _translate(raw, target)
    _assert_serial(_opens_and_closes(target, out))
    s = accumulate_stream(target, out)
    assert s.tool_calls == [("first", {"x": "a"}), ("second", {"y": [1, 2, 3]})]
    assert not t.warnings


@pytest.mark.parametrize("target", TARGETS)
def test_text_while_a_call_is_unfinished_waits_for_it(target):
    raw = b"".join(_enc_event(e) for e in [
        _chunk({"role": "assistant", "content": None}),
        _tc(0, '{"x": ', "call_a", "first"),
        _chunk({"content": "Looking"}), _tc(0, "1"), _chunk({"content": " it up."}), _tc(0, "}"),
        _chunk({}, "tool_calls"), "[DONE]"])
    out, _t = _translate(raw, target)
    _assert_serial(_opens_and_closes(target, out))
    s = accumulate_stream(target, out)
    assert s.tool_calls == [("first", {"x": 1})]
    assert s.text == "Looking it up."


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_tool_calls_stream_to_complete_body(target):
    res = response_from_stream(chat_stream(CALLS, interleave=True), C, target)
    assert res.status == 200
    validate_response(target, res.body)
    assert summarize_response(target, res.body).tool_calls == EXPECTED


# ----------------------------------------------------------------------------- complete bodies
def _chat_body() -> dict[str, Any]:
    return {"id": "chatcmpl-p", "object": "chat.completion", "created": 1764700000, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": {
                "role": "assistant", "content": None, "refusal": None, "tool_calls": [
                    {"id": f"call_{i}", "type": "function",
                     "function": {"name": name, "arguments": "".join(frags)}}
                    for i, (name, frags) in enumerate(CALLS)]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}}


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_tool_calls_complete_body(target):
    body = translate_response(_chat_body(), C, target)
    validate_response(target, body)
    assert summarize_response(target, body).tool_calls == EXPECTED


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_tool_calls_complete_body_streamed(target):
    out, _stop, _w = stream_from_response(_chat_body(), C, target)
    _assert_serial(_opens_and_closes(target, out))
    assert accumulate_stream(target, out).tool_calls == EXPECTED


# ----------------------------------------------------------------------------- recordings
def _parallel_fixtures() -> list[Any]:
    d = FIXTURES / "chat"
    if not d.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/fixtures absent"))]
    found = []
    for f in sorted(d.glob("*.sse")):
        for _name, data in sse_events(f.read_bytes()):
            if '"tool_calls"' in data and '"index":1' in data.replace(" ", ""):
                found.append(pytest.param(f, id=f.name[:70]))
                break
    assert found, "the chat fixtures hold streams with parallel tool calls"
    return found


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("path", _parallel_fixtures())
def test_recorded_parallel_tool_call_streams(path, target):
    raw = path.read_bytes()
    src = accumulate_stream(C, raw, strict=False)
    assert len(src.tool_calls) >= 2
    for chunk in (0, 61):
        out, _t = _translate(raw, target, chunk)
        _assert_serial(_opens_and_closes(target, out))
        assert accumulate_stream(target, out).tool_calls == src.tool_calls


def test_parallel_calls_cut_by_max_tokens_anthropic():
    """The first call is whole, the second cut: block 0 closes, block 1 stays open (as Anthropic does)."""
    out, t = _translate(chat_stream([("first", ['{"a": 1}']), ("second", ['{"b": [1, '])], finish="length"), A)
    assert _opens_and_closes(A, out) == [("open", 0), ("close", 0), ("open", 1)]
    s = accumulate_stream(A, out)
    assert s.stop == "max_tokens"
    assert s.tool_calls[0] == ("first", {"a": 1})


@pytest.mark.parametrize("target", TARGETS)
def test_custom_tool_call_in_parallel_is_held_not_lost(target):
    """A custom call's input is free text (it never 'ends early'): a call after it waits for its end."""
    raw = b"".join(_enc_event(e) for e in [
        _chunk({"role": "assistant", "content": None}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_p", "type": "custom",
                                "custom": {"name": "apply_patch", "input": "*** Begin"}}]}),
        _tc(1, '{"x": 1}', "call_f", "fn"),
        _chunk({"tool_calls": [{"index": 0, "custom": {"input": " Patch"}}]}),
        _chunk({}, "tool_calls"), "[DONE]"])
    out, _t = _translate(raw, target)
    _assert_serial(_opens_and_closes(target, out))
    s = accumulate_stream(target, out)
    first = ("apply_patch", {"input": "*** Begin Patch"}) if target is A else ("apply_patch", "*** Begin Patch")
    assert s.tool_calls == [first, ("fn", {"x": 1})]
