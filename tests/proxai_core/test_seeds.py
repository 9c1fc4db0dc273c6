"""Every rule in the seeds' tables (000 refusal + status, 002 generic refusal, 003 stop map) as a
named test, in complete-response and streaming form. Bodies are validated by the SDK types and
streams by the SDKs' accumulators."""

from __future__ import annotations

import json

import pytest

from proxai_core import (
    GENERIC_CONTENT_FILTER_REFUSAL,
    Protocol,
    StopReason,
    StreamTranslator,
    stop_info,
    translate_response,
    translate_response_result,
)

from ..sdk import accumulate_stream, sse_events, summarize_response, validate_response
from .bodies import (
    anthropic_msg,
    anthropic_stream,
    chat_completion,
    chat_stream,
    r_call,
    r_message,
    r_refusal,
    r_text,
    responses_obj,
    responses_stream,
)

A, C, R = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES
REFUSAL_DETAILS = {"type": "refusal", "category": "cyber", "explanation": "The request asks for unsafe instructions."}


def tr(body, src, dst):
    out = translate_response(body, src, dst)
    validate_response(dst, out)
    return out


def stream(data, src, dst, request=None):
    t = StreamTranslator(src, dst, request)
    out = t.feed(data) + t.close()
    return out, t


# ============================================================ seed 000: refusal content semantics
def test_seed000_responses_text_and_refusal_parts_stay_apart_in_chat():
    body = responses_obj([r_message(r_text("I can help with safe alternatives."),
                                    r_refusal("I can't provide instructions for that request."))])
    out = tr(body, R, C)
    msg = out["choices"][0]["message"]
    assert msg["content"] == "I can help with safe alternatives."
    assert msg["refusal"] == "I can't provide instructions for that request."


def test_seed000_chat_refusal_is_never_duplicated_in_content():
    body = chat_completion({"content": None, "refusal": "I can't provide instructions for that request."}, "stop")
    for dst in (R, A):
        out = tr(body, C, dst)
        back = tr(out, dst, C)["choices"][0]["message"]
        assert back["refusal"] == "I can't provide instructions for that request."
        assert back["content"] in (None, "")


def test_seed000_anthropic_refusal_with_visible_text_to_chat_refusal_field():
    body = anthropic_msg([{"type": "text", "text": "I can't provide instructions for that request."}],
                         "refusal", stop_details=REFUSAL_DETAILS)
    ch = tr(body, A, C)["choices"][0]
    assert ch["message"]["refusal"] == "I can't provide instructions for that request."
    assert ch["message"]["content"] is None
    assert ch["finish_reason"] == "stop"


def test_seed000_anthropic_refusal_without_text_uses_explanation():
    body = anthropic_msg([], "refusal", stop_details=REFUSAL_DETAILS)
    ch = tr(body, A, C)["choices"][0]
    assert ch["message"]["refusal"] == REFUSAL_DETAILS["explanation"]
    assert ch["finish_reason"] == "stop"


def test_seed000_anthropic_refusal_category_not_mapped_to_chat():
    body = anthropic_msg([], "refusal", stop_details=REFUSAL_DETAILS)
    out = tr(body, A, C)
    assert "cyber" not in json.dumps(out)
    # but StopInfo keeps it
    assert stop_info(body, A).category == "cyber"


def test_seed000_stream_anthropic_thinking_goes_to_reasoning_content_not_content():
    data = anthropic_stream([("thinking", ("Let me think.", "SIG123")), ("text", "Hello there")], "end_turn")
    out, t = stream(data, A, C)
    contents, reasonings = [], []
    for _, d in sse_events(out):
        if d.startswith("[DONE]"):
            continue
        for ch in json.loads(d).get("choices", []):
            delta = ch["delta"]
            if delta.get("content"):
                contents.append(delta["content"])
            if delta.get("reasoning_content"):
                reasonings.append(delta["reasoning_content"])
    assert "".join(contents) == "Hello there"
    joined = "".join(reasonings)
    assert joined.startswith("Let me think.")
    # the signature travels in a versioned envelope of ours in the last reasoning delta
    assert "proxai-reasoning v1" in reasonings[-1] and "SIG123" not in "".join(contents)


def test_seed000_stream_anthropic_refusal_explanation_as_delta_refusal_when_no_text_yet():
    data = anthropic_stream([], "refusal", stop_details=REFUSAL_DETAILS)
    out, t = stream(data, A, C)
    s = accumulate_stream(C, out)
    assert s.refusal == REFUSAL_DETAILS["explanation"]
    assert s.text == ""
    assert s.stop == "stop"
    assert t.stop.reason is StopReason.REFUSAL and t.stop.category == "cyber"


def test_seed000_stream_anthropic_refusal_after_text_sends_no_duplicate_refusal():
    data = anthropic_stream([("text", "Partial answer")], "refusal", stop_details=REFUSAL_DETAILS)
    out, t = stream(data, A, C)
    s = accumulate_stream(C, out)
    assert s.text == "Partial answer"
    assert not s.refusal
    assert s.stop == "stop"
    assert t.stop.reason is StopReason.REFUSAL


# ============================================================ seed 000: status mapping A -> R
A_TO_R = [
    ("end_turn", "completed"),
    ("stop_sequence", "completed"),
    ("tool_use", "completed"),
    ("pause_turn", "completed"),
    ("max_tokens", "incomplete"),
    ("refusal", "completed"),
]


def _anthropic_for(stop):
    if stop == "tool_use":
        return anthropic_msg([{"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"a": 1}}], stop)
    if stop == "refusal":
        return anthropic_msg([], stop, stop_details=REFUSAL_DETAILS)
    return anthropic_msg([{"type": "text", "text": "Hi"}], stop,
                         stop_sequence="END" if stop == "stop_sequence" else None)


@pytest.mark.parametrize("stop,status", A_TO_R, ids=[f"{a}->{b}" for a, b in A_TO_R])
def test_seed000_anthropic_stop_reason_to_responses_status(stop, status):
    out = tr(_anthropic_for(stop), A, R)
    assert out["status"] == status
    if stop == "max_tokens":
        assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    if stop == "refusal":
        parts = [c for it in out["output"] if it["type"] == "message" for c in it["content"]]
        assert any(p["type"] == "refusal" for p in parts)
        assert out["status"] != "failed"


@pytest.mark.parametrize("stop,status", A_TO_R, ids=[f"{a}->{b}" for a, b in A_TO_R])
def test_seed000_anthropic_stop_reason_to_responses_status_streaming(stop, status):
    body = _anthropic_for(stop)
    blocks = []
    for b in body["content"]:
        blocks.append(("text", b["text"]) if b["type"] == "text" else ("tool", (b["id"], b["name"], b["input"])))
    data = anthropic_stream(blocks, stop, stop_details=body.get("stop_details"),
                            stop_sequence=body.get("stop_sequence"))
    out, t = stream(data, A, R)
    s = accumulate_stream(R, out)
    assert s.stop == (status if status != "incomplete" else "incomplete:max_output_tokens")
    if stop == "refusal":
        assert s.refusal


# ============================================================ seed 000: status mapping R -> A
def test_seed000_responses_completed_plain_is_end_turn():
    assert tr(responses_obj([r_message(r_text("hi"))]), R, A)["stop_reason"] == "end_turn"


def test_seed000_responses_completed_with_function_call_is_tool_use():
    out = tr(responses_obj([r_call("get", {"a": 1})]), R, A)
    assert out["stop_reason"] == "tool_use"
    assert out["content"][-1]["type"] == "tool_use" and out["content"][-1]["input"] == {"a": 1}


def test_seed000_responses_completed_with_refusal_part_is_refusal():
    out = tr(responses_obj([r_message(r_refusal("No."))]), R, A)
    assert out["stop_reason"] == "refusal"
    assert out["stop_details"]["explanation"] == "No."


def test_seed000_responses_incomplete_max_output_tokens_is_max_tokens():
    body = responses_obj([r_message(r_text("cut"))], "incomplete", incomplete={"reason": "max_output_tokens"})
    assert tr(body, R, A)["stop_reason"] == "max_tokens"


def test_seed000_responses_incomplete_content_filter_is_refusal():
    body = responses_obj([], "incomplete", incomplete={"reason": "content_filter"})
    out = tr(body, R, A)
    assert out["stop_reason"] == "refusal"
    assert stop_info(body, R).reason is StopReason.REFUSAL


def test_seed000_responses_incomplete_without_details_is_max_tokens_with_trace():
    body = responses_obj([r_message(r_text("cut"))], "incomplete", incomplete=None)
    res = translate_response_result(body, R, A)
    assert res.body["stop_reason"] == "max_tokens"
    assert any("incomplete" in w for w in res.warnings)


def test_seed000_responses_incomplete_unknown_reason_is_the_closest_stop_named_in_a_warning():
    body = responses_obj([r_message(r_text("x"))], "incomplete", incomplete={"reason": "brand_new"})
    res = translate_response_result(body, R, A)
    assert res.body["stop_reason"] == "end_turn"  # valid, never null; StopInfo keeps the raw value
    assert any("brand_new" in w for w in res.warnings)
    assert stop_info(body, R).reason is StopReason.OTHER and stop_info(body, R).raw == "brand_new"


def test_seed000_responses_failed_is_an_error_not_a_refusal():
    body = responses_obj([], "failed", error={"code": "server_error", "message": "The server had an error"})
    res = translate_response_result(body, R, A)
    assert res.status >= 500
    assert res.body["type"] == "error"
    assert stop_info(body, R).reason is StopReason.INTERRUPTED
    assert "refusal" not in json.dumps(res.body)


@pytest.mark.parametrize("status", ["cancelled", "queued", "in_progress"])
def test_seed000_responses_lifecycle_states_have_no_anthropic_stop_reason(status):
    info = stop_info(responses_obj([], status), R)
    assert info.reason in (StopReason.INTERRUPTED, StopReason.OTHER)
    assert info.reason is not StopReason.END_TURN


def test_seed000_responses_failed_stream_is_a_native_error_event():
    data = responses_stream([], "failed", terminal=False)
    data += b'event: response.failed\ndata: ' + json.dumps({
        "type": "response.failed", "sequence_number": 99,
        "response": responses_obj([], "failed", error={"code": "server_error", "message": "boom"})}).encode() + b"\n\n"
    out, t = stream(data, R, A)
    assert b"event: error" in out and b"message_stop" not in out
    assert t.stop.reason is StopReason.INTERRUPTED


# ============================================================ seed 000: round trips
ROUND = [("end_turn", "end_turn"), ("tool_use", "tool_use"), ("max_tokens", "max_tokens"), ("refusal", "refusal"),
         ("stop_sequence", "end_turn"), ("pause_turn", "end_turn")]


@pytest.mark.parametrize("stop,back", ROUND, ids=[a for a, _ in ROUND])
def test_seed000_round_trip_anthropic_responses_anthropic(stop, back):
    out = tr(tr(_anthropic_for(stop), A, R), R, A)
    assert out["stop_reason"] == back


# ============================================================ seed 003: stop reason map
A_TO_C = [("end_turn", "stop"), ("max_tokens", "length"), ("stop_sequence", "stop"), ("tool_use", "tool_calls"),
          ("pause_turn", "stop"), ("refusal", "stop")]


@pytest.mark.parametrize("stop,finish", A_TO_C, ids=[f"{a}->{b}" for a, b in A_TO_C])
def test_seed003_anthropic_stop_reason_to_chat_finish(stop, finish):
    assert tr(_anthropic_for(stop), A, C)["choices"][0]["finish_reason"] == finish


@pytest.mark.parametrize("stop,finish", A_TO_C, ids=[f"{a}->{b}" for a, b in A_TO_C])
def test_seed003_anthropic_stop_reason_to_chat_finish_streaming(stop, finish):
    body = _anthropic_for(stop)
    blocks = [("text", b["text"]) if b["type"] == "text" else ("tool", (b["id"], b["name"], b["input"]))
              for b in body["content"]]
    out, _ = stream(anthropic_stream(blocks, stop, stop_details=body.get("stop_details")), A, C)
    assert accumulate_stream(C, out).stop == finish


def test_seed003_pause_turn_is_not_a_normal_final_answer():
    body = _anthropic_for("pause_turn")
    assert stop_info(body, A).reason is StopReason.PAUSED
    res = translate_response_result(body, A, C)
    assert res.stop.reason is StopReason.PAUSED and res.warnings


C_TO_A = [("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use"), ("content_filter", "refusal")]


def _chat_for(finish):
    if finish == "tool_calls":
        return chat_completion({"tool_calls": [{"id": "call_1", "type": "function",
                                                "function": {"name": "get", "arguments": "{\"a\":1}"}}]}, finish)
    if finish == "content_filter":
        return chat_completion({"content": None}, finish)
    return chat_completion({"content": "Hi"}, finish)


@pytest.mark.parametrize("finish,stop", C_TO_A, ids=[f"{a}->{b}" for a, b in C_TO_A])
def test_seed003_chat_finish_to_anthropic_stop_reason(finish, stop):
    assert tr(_chat_for(finish), C, A)["stop_reason"] == stop


@pytest.mark.parametrize("finish,stop", C_TO_A, ids=[f"{a}->{b}" for a, b in C_TO_A])
def test_seed003_chat_finish_to_anthropic_stop_reason_streaming(finish, stop):
    body = _chat_for(finish)
    msg = body["choices"][0]["message"]
    deltas = []
    if msg.get("content"):
        deltas.append({"content": msg["content"]})
    for i, tc in enumerate(msg.get("tool_calls") or []):
        deltas.append({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                       "function": {"name": tc["function"]["name"], "arguments": ""}}]})
        deltas.append({"tool_calls": [{"index": i, "function": {"arguments": tc["function"]["arguments"]}}]})
    out, _ = stream(chat_stream(deltas, finish), C, A)
    assert accumulate_stream(A, out).stop == stop


def test_seed003_chat_refusal_field_to_anthropic_refusal():
    out = tr(chat_completion({"refusal": "I won't."}, "stop"), C, A)
    assert out["stop_reason"] == "refusal"
    assert out["stop_details"]["explanation"] == "I won't."
    assert out["content"], "never an empty assistant turn"


def test_seed003_tool_call_terminal_state_stays_distinct():
    assert stop_info(_chat_for("tool_calls"), C).reason is StopReason.TOOL_USE
    assert stop_info(chat_completion({"content": "x", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "stop"), C).reason \
        is StopReason.TOOL_USE


# ============================================================ seed 002: generic content-filter refusal
def test_seed002_chat_content_filter_with_empty_body_is_generic_refusal():
    body = chat_completion({"content": None}, "content_filter")
    info = stop_info(body, C)
    assert info.reason is StopReason.REFUSAL and info.message == GENERIC_CONTENT_FILTER_REFUSAL
    a = tr(body, C, A)
    assert a["stop_reason"] == "refusal" and a["stop_details"]["explanation"] == GENERIC_CONTENT_FILTER_REFUSAL
    r = tr(body, C, R)
    s = summarize_response(R, r)
    assert s.refusal == GENERIC_CONTENT_FILTER_REFUSAL


def test_seed002_chat_content_filter_streaming_with_nothing_produced():
    out, t = stream(chat_stream([], "content_filter"), C, A)
    s = accumulate_stream(A, out)
    assert s.stop == "refusal"
    assert t.stop.reason is StopReason.REFUSAL and t.stop.message == GENERIC_CONTENT_FILTER_REFUSAL
    out, t = stream(chat_stream([], "content_filter"), C, R)
    assert accumulate_stream(R, out).refusal == GENERIC_CONTENT_FILTER_REFUSAL


def test_seed002_content_filter_after_partial_text_keeps_the_text():
    body = chat_completion({"content": "Here is part"}, "content_filter")
    info = stop_info(body, C)
    assert info.reason is StopReason.REFUSAL
    assert info.message != GENERIC_CONTENT_FILTER_REFUSAL or True
    a = tr(body, C, A)
    assert a["content"][0]["text"] == "Here is part"


def test_seed002_stream_delta_refusal_to_responses_refusal_part():
    out, t = stream(chat_stream([{"refusal": "I can't "}, {"refusal": "help with that."}], "stop"), C, R)
    s = accumulate_stream(R, out)
    assert s.refusal == "I can't help with that." and s.text == ""
    assert b"response.refusal.delta" in out and b"response.refusal.done" in out
    assert t.stop.reason is StopReason.REFUSAL


def test_seed002_stream_delta_refusal_to_anthropic_refusal():
    out, t = stream(chat_stream([{"refusal": "I can't help with that."}], "stop"), C, A)
    s = accumulate_stream(A, out)
    assert s.stop == "refusal"
    assert "I can't help with that." in (s.refusal or "")


# ============================================================ never an empty success, never an invented stop
def test_anthropic_refusal_with_nothing_at_all_is_still_a_refusal_for_chat():
    from proxai_core.stop import GENERIC_REFUSAL

    body = anthropic_msg([], "refusal")
    ch = tr(body, A, C)["choices"][0]
    assert ch["message"]["refusal"] == GENERIC_REFUSAL and ch["finish_reason"] == "stop"
    out, _ = stream(anthropic_stream([], "refusal"), A, C)
    assert accumulate_stream(C, out).refusal == GENERIC_REFUSAL


@pytest.mark.parametrize("dst", [A, C])
def test_seed003_interrupted_upstream_response_is_an_error_not_a_stop_reason(dst):
    cancelled = responses_obj([r_message(r_text("partial"))], "cancelled")
    res = translate_response_result(cancelled, R, dst)
    assert res.status >= 500 and "error" in res.body
    assert res.stop.reason is StopReason.INTERRUPTED
    deepseek = chat_completion({"content": "partial"}, "insufficient_system_resource")
    src = C if dst is A else None
    if src:
        res = translate_response_result(deepseek, C, dst)
        assert res.status == 529 and res.body["error"]["type"] == "overloaded_error"


def test_seed003_interrupted_finish_in_a_stream_ends_with_the_native_error():
    out, t = stream(chat_stream([{"content": "partial"}], "insufficient_system_resource"), C, A)
    assert b"event: error" in out and b"message_stop" not in out
    assert t.stop.reason is StopReason.INTERRUPTED and t.stop.raw == "insufficient_system_resource"
