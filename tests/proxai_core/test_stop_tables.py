"""Every stop reaches every client protocol as a valid value of its own, from its codec's table.

Every StopReason (the refusal both stated and filtered) x every target, complete and streamed: the
client's value is the table's, is in the codec's own vocabulary, and is never missing. Defect 3:
an unknown finish reason ("eos") gives a finished message with the closest valid value and a
warning naming the raw value, while StopInfo keeps ``other`` and the raw value.
"""

from __future__ import annotations

import json

import pytest

from proxai_core import StreamTranslator, translate_response_result
from proxai_core.codecs import Codec, all_codecs, get
from proxai_core.collect import Collector
from proxai_core.context import ClientContext
from proxai_core.neutral import (
    BlockEnd,
    BlockStart,
    Delta,
    End,
    ErrorEvent,
    Response,
    Start,
    Stop,
    Text,
    ToolCall,
)
from proxai_core.stop import StopInfo, StopKey, StopReason, is_filter_refusal, stop_key
from tests.conftest import PROTOCOLS, sse, sse_events

# one StopInfo per decision: every reason, and the refusal as a model's and as a filter's
CASES: list[tuple[str, StopInfo]] = [
    ("end_turn", StopInfo(StopReason.END_TURN, raw="end_turn")),
    ("tool_use", StopInfo(StopReason.TOOL_USE, raw="tool_use")),
    ("max_output", StopInfo(StopReason.MAX_OUTPUT, raw="max_tokens")),
    ("context_full", StopInfo(StopReason.CONTEXT_FULL, raw="model_context_window_exceeded")),
    ("refusal_stated", StopInfo(StopReason.REFUSAL, raw="refusal", message="I won't.")),
    ("refusal_filtered", StopInfo(StopReason.REFUSAL, raw="content_filter", category="content_filter")),
    ("paused", StopInfo(StopReason.PAUSED, raw="pause_turn")),
    ("interrupted", StopInfo(StopReason.INTERRUPTED, raw="network_error", category="network_error")),
    ("rejected", StopInfo(StopReason.REJECTED, raw="error", category="authentication")),
    ("other", StopInfo(StopReason.OTHER, raw="eos")),
]


def test_the_cases_cover_every_reason_and_every_key():
    assert {s.reason for _, s in CASES} == set(StopReason)
    assert {stop_key(s, has_tool_calls=False) for _, s in CASES} == set(StopKey)


@pytest.mark.parametrize("codec", all_codecs(), ids=lambda c: c.name)
def test_every_codec_table_maps_every_key_to_its_own_vocabulary(codec: Codec):
    assert set(codec.stop_table) == set(StopKey), f"{codec.name}: unmapped stop keys"
    for key, wire in codec.stop_table.items():
        assert wire.value, (codec.name, key)
        value = wire.detail or wire.value
        assert value in codec.stop_values, f"{codec.name}: {key} -> {value!r} is not a value it writes"


@pytest.mark.parametrize("codec", all_codecs(), ids=lambda c: c.name)
def test_the_vocabulary_reads_back_through_the_neutral_classification(codec: Codec):
    from proxai_core.stop import classify_stop

    for value, reason in codec.stop_values.items():
        assert classify_stop(value).reason is reason, (codec.name, value)


def _tool_use(case: str) -> bool:
    return case == "tool_use"


def _parts(case: str) -> list:
    if _tool_use(case):
        return [ToolCall(id="call_1", name="f", arguments="{}")]
    return [Text("partial")]


def _events(case: str, stop: StopInfo) -> list:
    if _tool_use(case):
        body = [BlockStart(0, ToolCall(id="call_1", name="f", arguments="")), Delta(0, "arguments", "{}"),
                BlockEnd(0, ToolCall(id="call_1", name="f", arguments="{}"))]
    else:
        body = [BlockStart(0, Text("")), Delta(0, "text", "partial"), BlockEnd(0, Text("partial"))]
    return [Start("x1", "m"), *body, Stop(stop), End()]


def _expected(codec: Codec, case: str, stop: StopInfo) -> set[str]:
    wire = codec.stop_table[stop_key(stop, _tool_use(case))]
    return {wire.detail or wire.value, wire.value}


def _read_back(codec: Codec, resp: Response) -> str | None:
    if resp.stop is not None:
        return resp.stop.raw
    err = resp.extra.get("error")
    return "failed" if err is not None else None


@pytest.mark.parametrize("case,stop", CASES, ids=[c for c, _ in CASES])
@pytest.mark.parametrize("target", PROTOCOLS, ids=lambda p: get(p).name)
def test_every_reason_to_every_target_complete(target, case, stop):
    codec = get(target)
    w: list[str] = []
    body = codec.encode_response(Response(id="x1", model="m", parts=_parts(case), stop=stop),
                                 ClientContext(target), w)
    back = codec.decode_response(body, [])
    raw = _read_back(codec, back)
    assert raw is not None, f"{codec.name}: no stop value for {case}"
    assert raw in _expected(codec, case, stop), (codec.name, case, raw)
    if not codec.stop_table[stop_key(stop, _tool_use(case))].exact:
        assert any(repr(stop.raw) in x for x in w), f"no warning names the raw value: {w}"


def _stream_stop(codec: Codec, raw: bytes) -> str | None:
    w: list[str] = []
    dec = codec.StreamDecoder(w)
    col = Collector()
    error = None
    reader = codec.stream_reader()  # (SSE, or the protocol's own framing)
    for name, data in reader.feed(raw) + reader.close():
        for ev in dec.feed(name, data):
            if isinstance(ev, ErrorEvent):
                error = ev.error
            col.add(ev)
    if not dec.done:
        for ev in dec.finish():
            col.add(ev)
    resp = col.finish()
    if error is not None:
        return "failed"
    return resp.stop.raw if resp.stop is not None else None


@pytest.mark.parametrize("case,stop", CASES, ids=[c for c, _ in CASES])
@pytest.mark.parametrize("target", PROTOCOLS, ids=lambda p: get(p).name)
def test_every_reason_to_every_target_streamed(target, case, stop):
    codec = get(target)
    w: list[str] = []
    enc = codec.StreamEncoder(ClientContext(target), w)
    out = b"".join(enc.encode(ev) for ev in _events(case, stop))
    raw = _stream_stop(codec, out)
    assert raw is not None, f"{codec.name}: stream without a stop value for {case}"
    assert raw in _expected(codec, case, stop), (codec.name, case, raw)
    if not codec.stop_table[stop_key(stop, _tool_use(case))].exact:
        assert any(repr(stop.raw) in x for x in w), f"no warning names the raw value: {w}"


# ----------------------------------------------------------------------------- one refusal decision
@pytest.mark.parametrize("raw,filtered", [
    ("refusal", False), ("content_filter", True), ("sensitive", True), ("guardrail_intervened", True),
    ("safety", True), ("model_armor", True), ("stop", False), ("completed", False), ("end_turn", False),
])
def test_refusal_or_filter_is_one_neutral_decision(raw, filtered):
    assert is_filter_refusal(StopInfo(StopReason.REFUSAL, raw=raw)) is filtered


@pytest.mark.parametrize("raw", ["content_filtered", "spii", "image_safety", "jailbreak"])
def test_every_filter_value_reaches_chat_and_responses_clients_the_same_way(raw):
    stop = StopInfo(StopReason.REFUSAL, raw=raw)
    chat = get("chat").encode_response(Response(id="x", parts=[], stop=stop), ClientContext(get("chat").protocol), [])
    resp = get("responses").encode_response(Response(id="x", parts=[], stop=stop),
                                            ClientContext(get("responses").protocol), [])
    assert chat["choices"][0]["finish_reason"] == "content_filter"
    assert resp["status"] == "incomplete" and resp["incomplete_details"] == {"reason": "content_filter"}


# ----------------------------------------------------------------------------- defect 3
def _chat_body(finish: str, tool: bool = False) -> dict:
    msg: dict = {"role": "assistant", "content": None if tool else "hi"}
    if tool:
        msg["tool_calls"] = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}


def _chat_stream(finish: str) -> bytes:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return sse([
        (None, dict(head, choices=[{"index": 0, "delta": {"role": "assistant", "content": "hi"},
                                     "finish_reason": None}])),
        (None, dict(head, choices=[{"index": 0, "delta": {}, "finish_reason": finish}])),
        (None, "[DONE]"),
    ])


def test_defect3_unknown_finish_reason_complete_reaches_anthropic_as_end_turn():
    chat, anthropic = get("chat").protocol, get("anthropic").protocol
    res = translate_response_result(_chat_body("eos"), chat, anthropic)
    assert res.body["stop_reason"] == "end_turn"
    assert any("'eos'" in w for w in res.warnings), res.warnings
    assert res.stop.reason is StopReason.OTHER and res.stop.raw == "eos"


def test_defect3_unknown_finish_reason_with_tool_calls_complete_is_tool_use():
    chat, anthropic = get("chat").protocol, get("anthropic").protocol
    res = translate_response_result(_chat_body("eos", tool=True), chat, anthropic)
    assert res.body["stop_reason"] == "tool_use"
    assert any("'eos'" in w for w in res.warnings)


def test_defect3_unknown_finish_reason_stream_reaches_anthropic_as_end_turn():
    chat, anthropic = get("chat").protocol, get("anthropic").protocol
    tr = StreamTranslator(chat, anthropic)
    out = tr.feed(_chat_stream("eos")) + tr.close()
    deltas = [json.loads(d) for n, d in sse_events(out) if n == "message_delta"]
    assert [d["delta"]["stop_reason"] for d in deltas] == ["end_turn"]
    assert any("'eos'" in w for w in tr.warnings), tr.warnings
    assert tr.stop is not None and tr.stop.reason is StopReason.OTHER and tr.stop.raw == "eos"


@pytest.mark.parametrize("target", [p for p in PROTOCOLS if get(p).name != "chat"], ids=lambda p: get(p).name)
def test_defect3_unknown_finish_reason_is_valid_for_every_other_client(target):
    chat = get("chat").protocol  # (a Chat client gets the upstream's bytes unchanged)
    codec = get(target)
    res = translate_response_result(_chat_body("eos"), chat, target)
    assert codec.decode_response(res.body, []).stop.raw in codec.stop_values
    tr = StreamTranslator(chat, target)
    out = tr.feed(_chat_stream("eos")) + tr.close()
    assert _stream_stop(codec, out) in codec.stop_values
