"""Anthropic Messages codec: fixtures (real recordings), seed rules, requests, streams."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from anthropic._models import construct_type
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.beta import BetaMessage
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from pydantic import TypeAdapter, ValidationError

from proxai_core import reasoning as rz
from proxai_core.codecs import anthropic as A
from proxai_core.collect import collect, response_to_events
from proxai_core.context import ClientContext
from proxai_core.errors import TranslationError, parse_error
from proxai_core.neutral import (
    BlockEnd,
    BlockStart,
    Delta,
    Document,
    End,
    Error,
    ErrorEvent,
    Image,
    Opaque,
    OutputFormat,
    Reasoning,
    ReasoningConfig,
    Refusal,
    Request,
    Response,
    Start,
    Stop,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Usage,
    UsageEvent,
)
from proxai_core.neutral import (
    Message as NMessage,
)
from proxai_core.protocol import Protocol
from proxai_core.stop import GENERIC_CONTENT_FILTER_REFUSAL, StopInfo, StopReason, classify_stop
from tests.conftest import fixture_dir, sse_events

from ..sdk import validate_request

FIXTURES = fixture_dir(A.CODEC.protocol)
HAVE_FIXTURES = FIXTURES.is_dir()
needs_fixtures = pytest.mark.skipif(not HAVE_FIXTURES, reason="../shared/fixtures is absent")


def _files(pattern: str) -> list[Path]:
    if not HAVE_FIXTURES:
        return []
    return sorted(FIXTURES.glob(pattern))


RESPONSE_FILES = [p for p in _files("*.json") if not p.name.endswith(".request.json")]
REQUEST_FILES = _files("*.request.json")
SSE_FILES = _files("*.sse")

_PARAMS = TypeAdapter(MessageCreateParamsNonStreaming)
_WIRE_STOP = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_OUTPUT,
    "pause_turn": StopReason.PAUSED,
    "refusal": StopReason.REFUSAL,
    "model_context_window_exceeded": StopReason.CONTEXT_FULL,
}


def ctx(model: str | None = None) -> ClientContext:
    return ClientContext(Protocol.ANTHROPIC, model=model)


def validate_message(body: dict[str, Any]) -> Any:
    """The official SDK type (beta union for beta-only block types such as mcp_tool_use)."""
    try:
        return Message.model_validate(body)
    except ValidationError:
        return BetaMessage.model_validate(body)


def validate_params(body: dict[str, Any]) -> None:
    _PARAMS.validate_python({k: v for k, v in body.items() if k != "stream"})


def accumulate(raw: bytes, *, first_message_only: bool = True) -> Any:
    """Accumulate an Anthropic SSE body with the SDK's own accumulator; error frames are returned."""
    snap = None
    bufs: dict[int, bytes] = {}
    for _, data in sse_events(raw):
        obj = orjson.loads(data)
        if obj.get("type") == "error":
            return ("error", obj)
        ev = construct_type(type_=RawMessageStreamEvent, value=obj)
        snap = accumulate_event(event=ev, current_snapshot=snap, json_bufs=bufs)
        if first_message_only and obj.get("type") == "message_stop":
            break
    return snap


def decode_stream(raw: bytes, warnings: list[str] | None = None) -> list[Any]:
    w = warnings if warnings is not None else []
    dec = A.StreamDecoder(w)
    out: list[Any] = []
    for ev, data in sse_events(raw):
        out.extend(dec.feed(ev, data))
    out.extend(dec.finish())
    return out


def encode_events(events: list[Any], c: ClientContext | None = None, warnings: list[str] | None = None) -> bytes:
    enc = A.StreamEncoder(c or ctx(), warnings if warnings is not None else [])
    return b"".join(enc.encode(e) for e in events)


def frames(raw: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    return [(ev, orjson.loads(data)) for ev, data in sse_events(raw)]


def block_summary(content: list[Any]) -> list[tuple]:
    out = []
    for b in content:
        t = b.type
        if t == "text":
            out.append((t, b.text))
        elif t == "tool_use":
            out.append((t, b.id, b.name, b.input))
        elif t == "thinking":
            out.append((t, b.thinking, b.signature))
        elif t == "redacted_thinking":
            out.append((t, b.data))
        else:
            d = b.to_dict() if hasattr(b, "to_dict") else dict(b)
            out.append((t, d.get("id"), d.get("input"), d.get("tool_use_id")))
    return out


# ============================================================================= fixtures: responses
@needs_fixtures
@pytest.mark.parametrize("path", RESPONSE_FILES, ids=lambda p: p.name[-70:])
def test_fixture_response_decode_encode(path: Path) -> None:
    body = orjson.loads(path.read_bytes())
    w: list[str] = []
    resp = A.decode_response(body, w)
    if body.get("type") == "error":
        err = resp.extra["error"]
        assert isinstance(err, Error)
        assert err.kind == parse_error(None, body).kind
        assert err.message == body["error"]["message"]
        return
    wire = body["stop_reason"]
    has_tools = any(b.get("type") == "tool_use" for b in body["content"])
    assert resp.stop is not None and resp.stop.raw == wire
    # classify_stop rule: a normal finish that carries tool calls is tool_use (raw keeps end_turn)
    want = StopReason.TOOL_USE if has_tools and _WIRE_STOP[wire] is StopReason.END_TURN else _WIRE_STOP[wire]
    assert resp.stop.reason is want
    assert resp.stop_sequence == body.get("stop_sequence")
    assert resp.usage is not None and resp.usage.input == body["usage"]["input_tokens"]
    assert resp.usage.cache_read == body["usage"].get("cache_read_input_tokens")
    assert resp.usage.cache_write == body["usage"].get("cache_creation_input_tokens")
    tool_calls = [p for p in resp.parts if isinstance(p, ToolCall)]
    for tc in tool_calls:
        orjson.loads(tc.arguments)
    # same protocol round trip keeps text, tool calls, reasoning, stop, usage
    out = A.encode_response(resp, ctx(), w)
    msg = validate_message(out)
    # real bodies may fail the SDK's stricter-than-the-server types (wire-facts §7): build leniently
    src = construct_type(type_=BetaMessage, value=body)
    assert block_summary(msg.content) == block_summary(src.content)
    if want is StopReason.TOOL_USE and wire != "tool_use":
        assert msg.stop_reason == "tool_use"
    else:
        assert msg.stop_reason == src.stop_reason
        assert msg.stop_sequence == src.stop_sequence
    assert msg.usage.input_tokens == src.usage.input_tokens
    assert msg.usage.output_tokens == src.usage.output_tokens
    assert msg.usage.cache_read_input_tokens == src.usage.cache_read_input_tokens
    assert msg.model == body["model"]
    assert msg.id == body["id"]
    # citations survive (raw Anthropic objects)
    for a, b in zip(out["content"], body["content"], strict=True):
        if a["type"] == "text" and b.get("citations"):
            assert a["citations"] == b["citations"]


# ============================================================================= fixtures: requests
def _norm_block(b: dict[str, Any]) -> dict[str, Any] | None:
    """Semantic form: string shorthands expanded, null fields and tool_use ``caller`` (not carried
    by the neutral model) removed, empty text blocks (rejected by Anthropic, dropped by us) skipped."""
    b = {k: v for k, v in b.items() if v is not None and k != "caller"}
    if b.get("type") == "text" and not b.get("text"):
        return None
    if b.get("type") == "tool_result" and isinstance(b.get("content"), str):
        b["content"] = [{"type": "text", "text": b["content"]}]
    return b


def _norm_messages(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic semantics: consecutive same-role turns are one turn; tool results lead a user turn."""
    out: list[dict[str, Any]] = []
    for m in msgs:
        c = m["content"]
        blocks = [{"type": "text", "text": c}] if isinstance(c, str) else c
        norm = [x for x in (_norm_block(b) for b in blocks) if x is not None]
        if not norm:
            continue
        if out and out[-1]["role"] == m["role"]:
            out[-1]["content"].extend(norm)
        else:
            out.append({"role": m["role"], "content": norm})
    for m in out:
        if m["role"] == "user":
            m["content"].sort(key=lambda b: b.get("type") != "tool_result")
    return out


@needs_fixtures
@pytest.mark.parametrize("path", REQUEST_FILES, ids=lambda p: p.name[-70:])
def test_fixture_request_round_trip(path: Path) -> None:
    body = orjson.loads(path.read_bytes())
    w: list[str] = []
    req = A.decode_request(body, w)
    out = A.encode_request(req, w)
    validate_params(out)
    assert _norm_messages(out["messages"]) == _norm_messages(body["messages"])
    assert out["max_tokens"] == body["max_tokens"]
    assert out["model"] == body["model"]
    for k in ("thinking", "tool_choice", "stop_sequences", "temperature", "top_k", "output_config",
              "mcp_servers", "container", "context_management", "cache_control"):
        if k in body:
            assert out.get(k) == body[k], k
    if "system" in body:
        sys_in = body["system"]
        sys_out = out["system"]
        def texts(s: Any) -> list[str]:
            return [s] if isinstance(s, str) else [b["text"] for b in s]
        assert texts(sys_out) == texts(sys_in)
    if "tools" in body:
        assert [t.get("name") for t in out["tools"]] == [t.get("name") for t in body["tools"]]
        for a, b in zip(out["tools"], body["tools"], strict=True):
            if b.get("type") in (None, "custom"):
                assert a["input_schema"] == b["input_schema"]
            else:
                assert a == b
    assert bool(out.get("stream")) == bool(body.get("stream"))


# ============================================================================= fixtures: streams
def _first_stop_reason(raw: bytes) -> str | None:
    for _, data in sse_events(raw):
        obj = orjson.loads(data)
        if obj.get("type") == "message_delta":
            return obj["delta"].get("stop_reason")
    return None


@needs_fixtures
@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: p.name[-70:])
def test_fixture_stream_decode_encode(path: Path) -> None:
    raw = path.read_bytes()
    w: list[str] = []
    events = decode_stream(raw, w)
    assert isinstance(events[0], Start)
    assert isinstance(events[-1], End), events[-1]
    stops = [e for e in events if isinstance(e, Stop)]
    assert len(stops) == 1
    wire = _first_stop_reason(raw)
    assert stops[0].stop.raw == wire
    assert stops[0].stop.reason is _WIRE_STOP[wire]
    # block pairing: every delta has an open block, every start is closed
    open_: set[int] = set()
    for e in events:
        if isinstance(e, BlockStart):
            assert e.index not in open_
            open_.add(e.index)
        elif isinstance(e, Delta):
            assert e.index in open_
        elif isinstance(e, BlockEnd):
            open_.remove(e.index)
    assert not open_
    if wire != "max_tokens":  # a tool call cut by max_tokens has truncated JSON, as sent
        for e in events:
            if isinstance(e, BlockEnd) and isinstance(e.part, ToolCall):
                orjson.loads(e.part.arguments)

    out = encode_events(events, ctx(), w)
    src = accumulate(raw)
    dst = accumulate(out)
    validate_message(dst.to_dict(warnings=False))
    # the SDK accumulator ignores compaction_delta: check the compaction summary ourselves
    comp = [e.part.raw for e in events if isinstance(e, BlockEnd) and isinstance(e.part, Opaque)
            and e.part.raw.get("type") == "compaction"]
    if comp:
        sent = [d["delta"]["content"] for ev, d in frames(out)
                if ev == "content_block_delta" and d["delta"]["type"] == "compaction_delta"]
        src_sent = "".join(d["delta"]["content"] for ev, d in frames(raw)
                           if ev == "content_block_delta" and d["delta"]["type"] == "compaction_delta")
        assert sent == [c["content"] for c in comp] and "".join(sent) == src_sent
    if wire == "refusal" and not any(b.type == "text" for b in src.content):
        # seed 000 / lesson #2: a refusal with nothing visible gets a text block with the explanation
        assert dst.content[-1].type == "text"
        assert dst.content[-1].text == src.stop_details.explanation
        assert block_summary(dst.content[:-1]) == block_summary(src.content)
    else:
        assert block_summary(dst.content) == block_summary(src.content)
    assert dst.stop_reason == src.stop_reason
    assert dst.stop_sequence == src.stop_sequence
    assert dst.usage.output_tokens == src.usage.output_tokens
    assert dst.usage.input_tokens == src.usage.input_tokens
    if src.stop_details is not None:
        assert dst.stop_details.to_dict() == src.stop_details.to_dict()
    for a, b in zip(dst.content, src.content):
        if a.type == "text" and b.citations:
            assert [c.to_dict() for c in a.citations] == [c.to_dict() for c in b.citations]
    # the complete-response path agrees with the stream path
    col = collect(events)
    body = A.encode_response(col.response, ctx(), [])
    validate_message(body)
    assert body["stop_reason"] == dst.stop_reason


# ============================================================================= seed rules (encoder side)
def _refusal_stop(raw: str, text: str | None, category: str | None = None) -> StopInfo:
    return classify_stop(raw, category=category, message=text)


def test_seed000_chat_refusal_to_anthropic_stop_reason_refusal() -> None:
    text = "I can't provide instructions for that request."
    resp = Response(id="chatcmpl-abc", model="gpt-x", parts=[Refusal(text)],
                    stop=_refusal_stop("stop", text, "output-refusal"), usage=Usage(input=10, output=5))
    w: list[str] = []
    body = A.encode_response(resp, ctx("claude-client-model"), w)
    msg = Message.model_validate(body)
    assert msg.stop_reason == "refusal"
    assert [b.text for b in msg.content] == [text]
    assert msg.stop_details is not None
    assert msg.stop_details.type == "refusal"
    assert msg.stop_details.category is None  # "output-refusal" is not an Anthropic category
    assert msg.stop_details.explanation == text
    assert msg.model == "claude-client-model"
    assert msg.id == "msg_abc"


def test_seed002_chat_content_filter_empty_to_anthropic_refusal_with_text() -> None:
    resp = Response(id="chatcmpl-1", model="m", parts=[],
                    stop=classify_stop("content_filter", message=GENERIC_CONTENT_FILTER_REFUSAL))
    body = A.encode_response(resp, ctx(), [])
    msg = Message.model_validate(body)
    assert msg.stop_reason == "refusal"
    assert body["content"] == [{"type": "text", "text": GENERIC_CONTENT_FILTER_REFUSAL}]
    assert body["stop_details"] == {"type": "refusal", "category": None,
                                    "explanation": GENERIC_CONTENT_FILTER_REFUSAL}


def test_seed000_responses_text_and_refusal_parts_keep_order() -> None:
    parts = [Text("I can help with safe alternatives."), Refusal("I can't provide instructions for that request.")]
    resp = Response(id="resp_123", parts=parts,
                    stop=classify_stop("completed", category="output-refusal", message=parts[1].text))
    resp.stop = StopInfo(StopReason.REFUSAL, raw="completed", category="output-refusal", message=parts[1].text)
    body = A.encode_response(resp, ctx("c"), [])
    msg = Message.model_validate(body)
    assert [b.text for b in msg.content] == [p.text for p in parts]
    assert msg.stop_reason == "refusal"
    assert msg.stop_details.explanation == parts[1].text
    assert msg.id == "msg_123"


def test_seed000_responses_incomplete_content_filter_to_refusal() -> None:
    resp = Response(parts=[], stop=classify_stop("content_filter", message=GENERIC_CONTENT_FILTER_REFUSAL))
    body = A.encode_response(resp, ctx(), [])
    assert body["stop_reason"] == "refusal"
    assert body["stop_details"]["category"] is None
    assert body["content"][0]["text"] == GENERIC_CONTENT_FILTER_REFUSAL
    Message.model_validate(body)


def test_seed000_anthropic_refusal_category_kept_only_when_known() -> None:
    stop = A.decode_response({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": "refusal", "stop_sequence": None,
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": "Blocked."},
        "usage": {"input_tokens": 3, "output_tokens": 0},
    }, []).stop
    assert stop.reason is StopReason.REFUSAL and stop.category == "cyber" and stop.message == "Blocked."
    body = A.encode_response(Response(parts=[], stop=stop), ctx(), [])
    assert body["stop_details"] == {"type": "refusal", "category": "cyber", "explanation": "Blocked."}
    assert body["content"] == [{"type": "text", "text": "Blocked."}]
    odd = StopInfo(StopReason.REFUSAL, raw="safety", category="safety", message="no")
    assert A.encode_response(Response(parts=[], stop=odd), ctx(), [])["stop_details"]["category"] is None


@pytest.mark.parametrize(
    ("stop", "seq", "parts", "wire"),
    [
        (classify_stop("stop"), None, [Text("hi")], "end_turn"),
        (classify_stop("completed"), None, [Text("hi")], "end_turn"),
        (classify_stop("stop"), "END", [Text("hi")], "stop_sequence"),
        (classify_stop("length"), None, [Text("hi")], "max_tokens"),
        (classify_stop("max_output_tokens"), None, [Text("hi")], "max_tokens"),
        (StopInfo(StopReason.MAX_OUTPUT, raw="incomplete"), None, [Text("hi")], "max_tokens"),
        (classify_stop("tool_calls", has_tool_calls=True), None,
         [ToolCall("call_1", "f", '{"a":1}')], "tool_use"),
        (classify_stop("model_length"), None, [Text("hi")], "model_context_window_exceeded"),
        (classify_stop("context_length_exceeded"), None, [Text("hi")], "model_context_window_exceeded"),
        (classify_stop("pause_turn"), None, [Text("hi")], "pause_turn"),
        (classify_stop("compaction"), None, [Text("hi")], "pause_turn"),
    ],
)
def test_seed003_stop_reason_map(stop: StopInfo, seq: str | None, parts: list[Any], wire: str) -> None:
    w: list[str] = []
    body = A.encode_response(Response(parts=parts, stop=stop, stop_sequence=seq), ctx(), w)
    msg = Message.model_validate(body)
    assert msg.stop_reason == wire
    assert msg.stop_sequence == (seq if wire == "stop_sequence" else None)
    assert msg.stop_details is None
    assert not w


def test_seed000_responses_incomplete_unknown_reason_is_the_closest_with_warning() -> None:
    w: list[str] = []
    body = A.encode_response(Response(parts=[Text("x")], stop=classify_stop("weird_reason")), ctx(), w)
    assert body["stop_reason"] == "end_turn"  # a finished message always carries a valid value
    assert any("weird_reason" in x for x in w)
    Message.model_validate(body)


def test_seed000_responses_cancelled_to_end_turn_with_warning() -> None:
    w: list[str] = []
    body = A.encode_response(Response(parts=[Text("x")], stop=classify_stop("cancelled")), ctx(), w)
    assert body["stop_reason"] == "end_turn"
    assert any("interrupted" in x for x in w)


def test_response_usage_and_cache_fields() -> None:
    u = Usage(input=100, cache_read=900, cache_write=50, output=20, reasoning=7)
    body = A.encode_response(Response(parts=[Text("x")], usage=u), ctx(), [])
    msg = Message.model_validate(body)
    assert msg.usage.input_tokens == 100
    assert msg.usage.cache_read_input_tokens == 900
    assert msg.usage.cache_creation_input_tokens == 50
    assert msg.usage.output_tokens == 20
    assert msg.usage.output_tokens_details.thinking_tokens == 7
    back = A.decode_response(body, [])
    assert back.usage == u


def test_response_foreign_opaque_dropped_with_warning_and_own_kept() -> None:
    own = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    parts = [Opaque("openai_responses", {"type": "web_search_call"}, "web_search_call"),
             Opaque(A.PROTOCOL, own, "server_tool_use"), Text("done")]
    w: list[str] = []
    body = A.encode_response(Response(parts=parts, stop=classify_stop("stop")), ctx(), w)
    assert body["content"] == [own, {"type": "text", "text": "done"}]
    assert any("web_search_call" in x for x in w)
    Message.model_validate(body)


def test_response_foreign_citations_become_web_search_locations() -> None:
    cit = {"type": "url", "url": "https://e.com", "title": "E", "start": 0, "end": 3,
           "raw": {"type": "url_citation", "url": "https://e.com"}}
    body = A.encode_response(Response(parts=[Text("abc", [cit])]), ctx(), [])
    msg = Message.model_validate(body)
    c = msg.content[0].citations[0]
    assert c.type == "web_search_result_location" and c.url == "https://e.com" and c.title == "E"


def test_response_tool_call_ids_kept_and_arguments_object() -> None:
    parts = [ToolCall("call_abc", "get_weather", '{"city": "Paris"}')]
    body = A.encode_response(Response(parts=parts, stop=classify_stop("tool_calls", has_tool_calls=True)),
                             ctx(), [])
    assert body["content"] == [{"type": "tool_use", "id": "call_abc", "name": "get_weather",
                                "input": {"city": "Paris"}}]
    w: list[str] = []
    bad = A.encode_response(Response(parts=[ToolCall("c", "f", '{"a":')], stop=classify_stop("length")), ctx(), w)
    assert bad["content"][0]["input"] == {} and w


# ============================================================================= reasoning continuity
def _responses_reasoning() -> Reasoning:
    return Reasoning(text="Thinking about it.", summary=["Thinking about it."],
                     opaque={"protocol": "openai_responses", "id": "rs_1", "encrypted_content": "gAAAA"})


def test_foreign_reasoning_packed_into_signature_and_unpacked_on_next_request() -> None:
    body = A.encode_response(Response(parts=[_responses_reasoning(), Text("Answer")]), ctx(), [])
    msg = Message.model_validate(body)
    th = msg.content[0]
    assert th.type == "thinking" and th.thinking == "Thinking about it."
    assert rz.is_packed(th.signature)
    # the client echoes the assistant turn back
    req = A.decode_request({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": body["content"]},
        {"role": "user", "content": "next"}]}, [])
    r = req.messages[1].parts[0]
    assert isinstance(r, Reasoning)
    assert r.text == "Thinking about it." and r.summary == ["Thinking about it."] and not r.redacted
    assert r.opaque == {"protocol": "openai_responses", "id": "rs_1", "encrypted_content": "gAAAA"}
    # and toward an Anthropic upstream the foreign payload is never forwarded
    w: list[str] = []
    out = A.encode_request(req, w)
    assert out["messages"][1]["content"] == "Answer"
    assert any("openai_responses" in x for x in w)


def test_anthropic_reasoning_native_and_redacted() -> None:
    parts = [Reasoning("t", opaque={"protocol": A.PROTOCOL, "signature": "sig"}),
             Reasoning("", redacted=True, opaque={"protocol": A.PROTOCOL, "data": "DATA"}),
             ToolCall("toolu_1", "f", "{}")]
    body = A.encode_response(Response(parts=parts, stop=classify_stop("tool_use", has_tool_calls=True)), ctx(), [])
    assert body["content"][:2] == [{"type": "thinking", "thinking": "t", "signature": "sig"},
                                   {"type": "redacted_thinking", "data": "DATA"}]
    req = Request(model="m", max_output_tokens=100, messages=[
        NMessage("user", [Text("q")]), NMessage("assistant", parts),
        NMessage("user", [ToolResult("toolu_1", [Text("ok")])])])
    out = A.encode_request(req, [])
    validate_params(out)
    assert out["messages"][1]["content"][:2] == body["content"][:2]  # thinking blocks first, unchanged


def test_foreign_redacted_reasoning_packed() -> None:
    p = Reasoning("", redacted=True, opaque={"protocol": "openai_chat_completions", "field": "reasoning_content"})
    body = A.encode_response(Response(parts=[p, Text("x")]), ctx(), [])
    sig = body["content"][0]["signature"]
    assert body["content"][0]["type"] == "thinking"
    payload = rz.unpack(sig)
    assert payload["redacted"] is True and payload["protocol"] == "openai_chat_completions"
    back = A.decode_request({"model": "m", "max_tokens": 5, "messages": [
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": sig}]}]}, [])
    assert back.messages[0].parts[0].redacted is True


# ============================================================================= streams: encoder
def _stream(events: list[Any], c: ClientContext | None = None) -> tuple[Any, list[str], bytes]:
    w: list[str] = []
    raw = encode_events(events, c, w)
    snap = accumulate(raw)
    if not isinstance(snap, tuple):
        Message.model_validate(snap.to_dict(warnings=False))
    return snap, w, raw


def test_seed000_stream_chat_refusal_delta_to_anthropic_refusal() -> None:
    text = "I can't help with that."
    events = [Start("chatcmpl-9", "gpt"), BlockStart(0, Refusal("")), Delta(0, "refusal", "I can't "),
              Delta(0, "refusal", "help with that."), BlockEnd(0), Stop(_refusal_stop("stop", text, "output-refusal")),
              UsageEvent(Usage(input=12, cache_read=3, output=7)), End()]
    snap, _, raw = _stream(events, ctx("claude-x"))
    assert snap.id == "msg_9" and snap.model == "claude-x"
    assert [b.text for b in snap.content] == [text]
    assert snap.stop_reason == "refusal"
    assert snap.stop_details.explanation == text and snap.stop_details.category is None
    # usage that arrived after Stop (Chat usage chunk) is in the final message_delta
    assert snap.usage.input_tokens == 12 and snap.usage.cache_read_input_tokens == 3
    assert snap.usage.output_tokens == 7
    names = [ev for ev, _ in frames(raw)]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]


def test_seed002_stream_content_filter_without_output_gets_text_block() -> None:
    events = [Start("chatcmpl-1", "m"), Stop(classify_stop("content_filter", message=GENERIC_CONTENT_FILTER_REFUSAL)),
              End()]
    snap, _, _ = _stream(events)
    assert [b.text for b in snap.content] == [GENERIC_CONTENT_FILTER_REFUSAL]
    assert snap.stop_reason == "refusal"
    assert snap.stop_details.explanation == GENERIC_CONTENT_FILTER_REFUSAL


def test_seed000_stream_refusal_after_text_adds_no_duplicate() -> None:
    events = [Start("x", "m"), BlockStart(0, Text("")), Delta(0, "text", "Partial answer"), BlockEnd(0),
              Stop(classify_stop("content_filter")), End()]
    snap, _, _ = _stream(events)
    assert [b.text for b in snap.content] == ["Partial answer"]
    assert snap.stop_reason == "refusal"


@pytest.mark.parametrize(("stop", "wire", "warns"), [
    (classify_stop("length"), "max_tokens", False),
    (StopInfo(StopReason.MAX_OUTPUT, raw="incomplete"), "max_tokens", False),
    (classify_stop("weird"), "end_turn", True),
    (classify_stop("cancelled"), "end_turn", True),
    (classify_stop("model_context_window_exceeded"), "model_context_window_exceeded", False),
    (classify_stop("pause_turn"), "pause_turn", False),
])
def test_seed003_stream_stop_map(stop: StopInfo, wire: str | None, warns: bool) -> None:
    events = [Start("x", "m"), BlockStart(0, Text("")), Delta(0, "text", "a"), BlockEnd(0), Stop(stop), End()]
    snap, w, _ = _stream(events)
    assert snap.stop_reason == wire
    assert bool(w) is warns


def test_stream_stop_sequence() -> None:
    events = [Start("x", "m"), BlockStart(0, Text("")), Delta(0, "text", "a"), BlockEnd(0),
              Stop(classify_stop("stop_sequence"), "END"), End()]
    snap, _, _ = _stream(events)
    assert snap.stop_reason == "stop_sequence" and snap.stop_sequence == "END"


def test_stream_tool_arguments_only_in_block_end_sent_as_one_delta() -> None:
    events = [Start("x", "m"), BlockStart(0, ToolCall("call_1", "f", "")),
              BlockEnd(0, ToolCall("call_1", "f", '{"path": "a.txt"}')),
              Stop(classify_stop("tool_calls", has_tool_calls=True)), End()]
    snap, _, raw = _stream(events)
    assert snap.content[0].input == {"path": "a.txt"}
    assert snap.stop_reason == "tool_use"
    starts = [d for ev, d in frames(raw) if ev == "content_block_start"]
    assert starts[0]["content_block"]["input"] == {}
    deltas = [d for ev, d in frames(raw) if ev == "content_block_delta"]
    assert len(deltas) == 1 and deltas[0]["delta"]["type"] == "input_json_delta"


def test_stream_interleaved_tool_calls() -> None:
    long = orjson.dumps({"cmd": 'echo "x" && ' * 100 + "true"}).decode()
    events = [Start("x", "m"), BlockStart(0, ToolCall("call_a", "sh", "")), BlockStart(1, ToolCall("call_b", "sh", ""))]
    for i in range(0, len(long), 7):
        events.append(Delta(0, "arguments", long[i:i + 7]))
        events.append(Delta(1, "arguments", long[i:i + 7]))
    events += [BlockEnd(1), BlockEnd(0), Stop(classify_stop("tool_calls", has_tool_calls=True)), End()]
    snap, _, _ = _stream(events)
    assert [b.id for b in snap.content] == ["call_a", "call_b"]
    assert snap.content[0].input == orjson.loads(long) == snap.content[1].input


def test_stream_reasoning_foreign_signature_packed_at_block_end() -> None:
    r = _responses_reasoning()
    events = [Start("resp_1", "m"), BlockStart(0, Reasoning()), Delta(0, "summary", "Thinking "),
              Delta(0, "summary", "about it."), BlockEnd(0, r), BlockStart(1, Text("")), Delta(1, "text", "Hi"),
              BlockEnd(1), Stop(classify_stop("completed")), End()]
    snap, _, raw = _stream(events)
    th = snap.content[0]
    assert th.type == "thinking" and th.thinking == "Thinking about it."
    payload = rz.unpack(th.signature)
    assert payload["encrypted_content"] == "gAAAA" and payload["text"] == "Thinking about it."
    sig_frames = [d for ev, d in frames(raw) if ev == "content_block_delta" and d["delta"]["type"] == "signature_delta"]
    assert len(sig_frames) == 1


def test_stream_chat_reasoning_without_opaque_until_end() -> None:
    op = {"protocol": "openai_chat_completions", "field": "reasoning_content"}
    events = [Start("c", "m"), BlockStart(0, Reasoning()), Delta(0, "reasoning", "hmm"), BlockEnd(0),
              Stop(classify_stop("stop")), End()]
    snap, _, _ = _stream(events)
    assert snap.content[0].thinking == "hmm" and rz.unpack(snap.content[0].signature)["text"] == "hmm"
    events[1] = BlockStart(0, Reasoning(opaque=op))
    snap, _, _ = _stream(events)
    assert rz.unpack(snap.content[0].signature)["protocol"] == "openai_chat_completions"


def test_stream_anthropic_redacted_and_thinking_native() -> None:
    events = [Start("msg_1", "m"),
              BlockStart(0, Reasoning(redacted=True, opaque={"protocol": A.PROTOCOL, "data": "D"})),
              BlockEnd(0), BlockStart(1, Reasoning()), Delta(1, "reasoning", "abc"),
              BlockEnd(1, Reasoning("abc", opaque={"protocol": A.PROTOCOL, "signature": "S"})),
              Stop(classify_stop("end_turn")), End()]
    snap, _, _ = _stream(events)
    assert block_summary(snap.content) == [("redacted_thinking", "D"), ("thinking", "abc", "S")]


def test_stream_error_event_is_native_error_frame_and_nothing_after() -> None:
    enc = A.StreamEncoder(ctx(), [])
    out = enc.encode(Start("x", "m")) + enc.encode(BlockStart(0, Text(""))) + enc.encode(Delta(0, "text", "a"))
    err = Error(kind="overloaded", message="Overloaded", status=529)
    tail = enc.encode(ErrorEvent(err))
    assert tail == A.error_frame(err)
    assert frames(tail) == [("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                    "message": "Overloaded"}})]
    assert enc.encode(End()) == b"" and enc.encode(Delta(0, "text", "b")) == b""
    assert out.startswith(b"event: message_start\n")


def test_stream_foreign_opaque_dropped_and_own_kept() -> None:
    own = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    events = [Start("x", "m"), BlockStart(0, Opaque("openai_responses", {"type": "web_search_call"}, "wsc")),
              BlockEnd(0), BlockStart(1, Opaque(A.PROTOCOL, own, "server_tool_use")), BlockEnd(1),
              Stop(classify_stop("end_turn")), End()]
    snap, w, raw = _stream(events)
    assert len(snap.content) == 1 and snap.content[0].input == {"query": "q"}
    assert any("wsc" in x for x in w)
    start = next(d for ev, d in frames(raw) if ev == "content_block_start")
    assert start["content_block"]["input"] == {}


def test_stream_without_start_event_still_valid() -> None:
    snap, _, _ = _stream([BlockStart(0, Text("")), Delta(0, "text", "x"), BlockEnd(0),
                          Stop(classify_stop("stop")), End()])
    assert snap.content[0].text == "x" and snap.stop_reason == "end_turn"


def test_stream_from_complete_response_events_matches_encode_response() -> None:
    resp = Response(id="chatcmpl-z", model="m", parts=[Text("hello"), ToolCall("call_1", "f", '{"a": [1]}')],
                    stop=classify_stop("tool_calls", has_tool_calls=True), usage=Usage(input=3, output=4))
    snap, _, _ = _stream(response_to_events(resp))
    body = A.encode_response(resp, ctx(), [])
    assert snap.to_dict()["content"] == body["content"]
    assert snap.stop_reason == body["stop_reason"] and snap.id == body["id"]


# ============================================================================= streams: decoder
_TEXT_STREAM = [
    {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                          "content": [], "stop_reason": None, "stop_sequence": None,
                                          "usage": {"input_tokens": 5, "output_tokens": 1,
                                                    "cache_read_input_tokens": 2}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "think."}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]


def _sse(objs: list[dict[str, Any]], *, names: bool = True) -> bytes:
    out = b""
    for o in objs:
        if names:
            out += b"event: " + o["type"].encode() + b"\n"
        out += b"data: " + orjson.dumps(o) + b"\n\n"
    return out


@pytest.mark.parametrize("names", [True, False])
def test_decoder_events_with_or_without_event_lines(names: bool) -> None:
    w: list[str] = []
    events = decode_stream(_sse(_TEXT_STREAM, names=names), w)
    assert not w
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["Start", "BlockStart", "Delta", "Delta", "BlockEnd", "BlockStart", "Delta", "BlockEnd",
                     "UsageEvent", "Stop", "End"]
    assert events[0].usage == Usage(input=5, cache_read=2, output=1)
    end = events[4]
    assert isinstance(end.part, Reasoning) and end.part.text == "Let me think."
    assert end.part.opaque == {"protocol": A.PROTOCOL, "signature": "SIG"}
    assert not any(isinstance(e, Delta) and e.kind == "signature" for e in events)
    col = collect(events)
    assert col.response.parts[0].opaque["signature"] == "SIG"
    assert col.response.parts[1].text == "Hello"
    assert col.response.usage == Usage(input=5, cache_read=2, output=9)


def test_decoder_cut_before_message_delta_is_interrupted() -> None:
    raw = _sse(_TEXT_STREAM[:9])
    events = decode_stream(raw)
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].error.kind == "interrupted" and events[-1].error.status == 502
    assert not any(isinstance(e, (Stop, End)) for e in events)
    # and toward an Anthropic client this is the native error frame, no message_stop
    out = encode_events(events)
    assert frames(out)[-1][0] == "error" and b"message_stop" not in out


def test_decoder_cut_after_message_delta_is_complete() -> None:
    raw = _sse(_TEXT_STREAM[:-1]) + b"event: message_stop\ndata: {\"type\":\"mess"
    w: list[str] = []
    events = decode_stream(raw, w)
    assert isinstance(events[-1], End)
    assert any(isinstance(e, Stop) for e in events)
    assert any("invalid JSON" in x for x in w)


def test_decoder_error_event() -> None:
    raw = _sse(_TEXT_STREAM[:3]) + b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",' \
                                   b'"message":"Overloaded"}}\n\n'
    dec = A.StreamDecoder([])
    events = []
    for ev, data in sse_events(raw):
        events.extend(dec.feed(ev, data))
    assert isinstance(events[-1], ErrorEvent) and dec.done
    assert events[-1].error.kind == "overloaded" and events[-1].error.message == "Overloaded"
    assert dec.finish() == [] and dec.feed("message_stop", '{"type":"message_stop"}') == []


def test_decoder_each_event_type_decision() -> None:
    """A ping (either spelling) is nothing; a ping that is not valid JSON or names another type is
    judged like any event; a delta feeds a block only when the block streams that delta type."""
    w: list[str] = []
    dec = A.StreamDecoder(w)
    dec.feed("message_start", orjson.dumps(_TEXT_STREAM[0]).decode())
    for data in ('{"type": "ping"}', '{"type":"ping"}', ' { "type" : "ping" } '):
        assert dec.feed("ping", data) == []
    assert not w
    assert dec.feed("ping", '{"type": "ping"') == [] and "invalid JSON" in w[-1]
    assert dec.feed("ping", '{"type": "pong"}') == [] and "'pong'" in w[-1]
    dec.feed(None, '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}')
    n = len(w)
    for delta in ('{"type":"thinking_delta","thinking":"x"}', '{"type":"input_json_delta","partial_json":"{"}',
                  '{"type":"text_delta","text":""}', '{"type":"text_delta","text":5}'):
        assert dec.feed(None, '{"type":"content_block_delta","index":0,"delta":' + delta + "}") == []
    assert len(w) == n
    assert dec.feed(None, '{"type":"content_block_delta","index":0,"delta":{"text":"x"}}') == []
    assert "delta None" in w[-1]
    assert dec.feed(None, '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}') == [
        Delta(0, "text", "x")]
    # a server tool's input streams into its own block, read at the block's end
    dec.feed(None, '{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use",'
                   '"id":"srvtoolu_1","name":"web_search","input":{}}}')
    for frag in ('{"q": ', '"a"}'):
        delta = {"type": "input_json_delta", "partial_json": frag}
        assert dec.feed(None, orjson.dumps({"type": "content_block_delta", "index": 1, "delta": delta}).decode()) == []
    assert dec.feed(None, '{"type":"content_block_delta","index":true,"delta":{"type":"text_delta","text":"x"}}') == []
    assert "unknown block" in w[-1]
    [end] = dec.feed(None, '{"type":"content_block_stop","index":1}')
    assert isinstance(end, BlockEnd) and isinstance(end.part, Opaque) and end.part.raw["input"] == {"q": "a"}


def test_decoder_refusal_stop_details() -> None:
    objs = [_TEXT_STREAM[0],
            {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": None,
                                                "stop_details": {"type": "refusal", "category": "bio",
                                                                 "explanation": "No.",
                                                                 "recommended_model": "claude-x"}},
             "usage": {"output_tokens": 0}},
            {"type": "message_stop"}]
    stop = next(e for e in decode_stream(_sse(objs)) if isinstance(e, Stop)).stop
    assert stop.reason is StopReason.REFUSAL and stop.category == "bio" and stop.message == "No."
    assert stop.recommended_model == "claude-x" and stop.detail["category"] == "bio"


def test_decoder_unknown_events_and_deltas_warn_once() -> None:
    objs = list(_TEXT_STREAM)
    objs.insert(1, {"type": "future_event"})
    objs.insert(1, {"type": "future_event"})
    objs.insert(9, {"type": "content_block_delta", "index": 1, "delta": {"type": "future_delta", "x": 1}})
    objs.insert(9, {"type": "content_block_delta", "index": 1, "delta": {"type": "future_delta", "x": 1}})
    w: list[str] = []
    events = decode_stream(_sse(objs), w)
    assert isinstance(events[-1], End)
    assert len(w) == 2


def test_decoder_tool_use_and_server_tool_blocks() -> None:
    objs = [_TEXT_STREAM[0],
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"q"'}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ':"x"}'}},
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1,
             "content_block": {"type": "tool_use", "id": "toolu_1", "name": "noargs", "input": {}}},
            {"type": "content_block_stop", "index": 1},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
            {"type": "message_stop"}]
    events = decode_stream(_sse(objs))
    ends = [e for e in events if isinstance(e, BlockEnd)]
    assert isinstance(ends[0].part, Opaque) and ends[0].part.raw["input"] == {"q": "x"}
    assert ends[1].part.arguments == "{}"
    stop = next(e for e in events if isinstance(e, Stop)).stop
    assert stop.reason is StopReason.TOOL_USE


def test_error_frame() -> None:
    raw = A.error_frame(Error(kind="rate_limit", message="slow down", status=429))
    assert raw.startswith(b"event: error\ndata: ")
    assert frames(raw) == [("error", {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})]


# ============================================================================= requests: decode
@pytest.mark.parametrize("text_form", [
    lambda t: t,
    lambda t: [{"type": "text", "text": t}],
])
def test_decode_request_plain_text_forms_are_one_neutral_and_one_wire(text_form: Any) -> None:
    """String content and a list of one plain text block decode to text-only messages/results; the
    neutral request and every target's body are those of the explicit one-Text-part form."""
    from proxai_core.codecs import get

    def body(form: Any) -> dict[str, Any]:
        return {"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": form("hi")},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": form("ok")}]},
            {"role": "assistant", "content": form("done")},
        ]}

    req = A.decode_request(body(text_form), [])
    assert req.messages[0].parts == [Text("hi")] and req.messages[3].parts == [Text("done")]
    result = req.messages[2].parts[0]
    assert isinstance(result, ToolResult) and result.content == [Text("ok")]
    explicit = Request(model="m", max_output_tokens=10, messages=[
        NMessage("user", [Text("hi")]),
        NMessage("assistant", [ToolCall("toolu_1", "f", "{}")]),
        NMessage("user", [ToolResult("toolu_1", [Text("ok")])]),
        NMessage("assistant", [Text("done")]),
    ])
    for target in Protocol:
        c = get(target)
        got, want = (orjson.dumps(c.encode_request(r, [])) for r in (
            A.decode_request(body(text_form), []), explicit))
        assert got == want, target
    assert A.decode_request(body(text_form), []) == explicit


def test_decode_request_fields() -> None:
    body = {
        "model": "claude-x", "max_tokens": 1000,
        "system": [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVB"},
                 "title": "T"},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain"}},
                {"type": "document", "source": {"type": "url", "url": "https://x/d.pdf"}},
                {"type": "document", "source": {"type": "file", "file_id": "file_1"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": True},
                {"type": "tool_result", "tool_use_id": "toolu_2",
                 "content": [{"type": "text", "text": "a"},
                             {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                          "data": "B"}}]},
            ]},
        ],
        "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}},
                  {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}},
        "metadata": {"user_id": "u-1"},
        "temperature": 1, "top_k": 5, "top_p": 0.99, "stop_sequences": ["END"], "stream": True,
        "service_tier": "auto",
    }
    w: list[str] = []
    req = A.decode_request(body, w)
    assert not w
    assert req.system[0].text == "Be terse." and req.system[0].cache_control == {"type": "ephemeral"}
    p = req.messages[0].parts
    assert isinstance(p[1], Image) and p[1].source == "base64" and p[2].url == "https://x/y.png"
    assert isinstance(p[3], Document) and p[3].title == "T" and p[4].source == "text" and p[4].data == "plain"
    assert p[5].source == "url" and p[6].file_id == "file_1"
    tc = req.messages[1].parts[0]
    assert isinstance(tc, ToolCall) and orjson.loads(tc.arguments) == {"a": 1}
    assert isinstance(req.messages[1].parts[1], Opaque) and req.messages[1].parts[1].label == "server_tool_use"
    tr = req.messages[2].parts
    assert tr[0].is_error is True and tr[0].content[0].text == "ok"
    assert isinstance(tr[1].content[1], Image)
    assert [t.name for t in req.tools] == ["f"]
    assert req.extra["server_tools"] == [body["tools"][1]]
    assert req.tool_choice == ToolChoice("required") and req.parallel_tool_calls is False
    assert req.reasoning.budget_tokens == 2048 and req.reasoning.effort == "high"
    assert req.output_format.type == "json_schema" and req.output_format.schema == {"type": "object"}
    assert req.user == "u-1" and req.metadata == {"user_id": "u-1"}
    assert (req.temperature, req.top_k, req.top_p, req.stop, req.stream) == (1, 5, 0.99, ["END"], True)
    assert req.extra["service_tier"] == "auto"
    out = A.encode_request(req, w)
    validate_params(out)
    assert out["tools"][1] == body["tools"][1]
    assert out["output_config"] == body["output_config"]


@pytest.mark.parametrize(("thinking", "check"), [
    ({"type": "adaptive"}, lambda rc: rc.adaptive),
    ({"type": "disabled"}, lambda rc: rc.disabled),
    ({"type": "enabled", "budget_tokens": 1024}, lambda rc: rc.budget_tokens == 1024),
])
def test_decode_thinking_forms(thinking: dict[str, Any], check: Any) -> None:
    req = A.decode_request({"model": "m", "max_tokens": 2000, "messages": [], "thinking": thinking}, [])
    assert check(req.reasoning)
    assert A.encode_request(req, [])["thinking"] == thinking


@pytest.mark.parametrize(("body", "field"), [
    ({"messages": "x"}, "messages"),
    ({}, "messages"),
    ({"messages": [1]}, "messages[0]"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "bogus type"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]}]},
     "messages[0].content[0].source.type"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]},
     "messages[0].content[0].id"),
    ({"messages": [], "max_tokens": "9"}, "max_tokens"),
    ({"messages": [], "max_tokens": True}, "max_tokens"),
    ({"messages": [], "temperature": "hot"}, "temperature"),
    ({"messages": [], "tools": [{"input_schema": {}}]}, "tools[0].name"),
    ({"messages": [], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"messages": [], "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"messages": [], "stop_sequences": "END"}, "stop_sequences"),
    ({"messages": [], "system": 3}, "system"),
    ({"messages": [], "metadata": {"user_id": 3}}, "metadata.user_id"),
    ({"messages": [], "output_config": {"format": {"type": "yaml"}}}, "output_config.format.type"),
])
def test_decode_request_malformed_names_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(TranslationError) as ei:
        A.decode_request({"model": "m", **body}, [])
    assert str(ei.value).startswith(field + ":"), str(ei.value)


def test_decode_request_garbage_never_crashes_untyped() -> None:
    rnd = random.Random(7)
    atoms: list[Any] = [None, 1, -1, 1.5, True, "x", "", [], {}, [1], {"type": "text"}, {"type": 1}]

    def garbage(depth: int) -> Any:
        if depth > 3 or rnd.random() < 0.3:
            return rnd.choice(atoms)
        if rnd.random() < 0.5:
            return [garbage(depth + 1) for _ in range(rnd.randint(0, 3))]
        keys = ["type", "role", "content", "text", "source", "id", "name", "input", "tool_use_id", "thinking",
                "signature", "data", "media_type", "url", "messages", "system", "tools", "tool_choice"]
        return {rnd.choice(keys): garbage(depth + 1) for _ in range(rnd.randint(0, 4))}

    for _ in range(3000):
        body = {"model": "m", "messages": [{"role": rnd.choice(["user", "assistant", 3]),
                                            "content": garbage(0)} for _ in range(2)]}
        for k in ("system", "tools", "tool_choice", "thinking", "metadata", "output_config", "stop_sequences"):
            if rnd.random() < 0.2:
                body[k] = garbage(1)
        try:
            req = A.decode_request(body, [])
        except TranslationError:
            continue
        try:
            A.encode_request(req, [])
        except TranslationError:
            pass


# ============================================================================= requests: encode
def _req(*msgs: NMessage, **kw: Any) -> Request:
    return Request(model="claude-x", messages=list(msgs), **kw)


def test_encode_default_max_tokens_with_warning() -> None:
    w: list[str] = []
    out = A.encode_request(_req(NMessage("user", [Text("hi")])), w)
    assert out["max_tokens"] == 8192 and any("max_tokens" in x for x in w)
    validate_params(out)


def test_encode_system_and_developer_messages_merged_into_system() -> None:
    w: list[str] = []
    req = _req(NMessage("developer", [Text("Rule 1")]), NMessage("user", [Text("hi")]),
               NMessage("system", [Text("Rule 2")]), NMessage("user", [Text("more")]),
               system=[Text("Top")], max_output_tokens=100)
    out = A.encode_request(req, w)
    assert out["system"] == [{"type": "text", "text": "Top"}, {"type": "text", "text": "Rule 1"},
                             {"type": "text", "text": "Rule 2"}]
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                            {"type": "text", "text": "more"}]}]
    assert any("system prompt" in x for x in w)
    single = A.encode_request(_req(NMessage("user", [Text("hi")]), system=[Text("Top")], max_output_tokens=5), [])
    assert single["system"] == "Top"


def test_encode_tool_results_one_user_turn_in_order_then_text() -> None:
    req = _req(
        NMessage("user", [Text("weather?")]),
        NMessage("assistant", [Text("Checking."), ToolCall("call_1", "w", '{"c":"a"}'), ToolCall("call_2", "w", "")]),
        NMessage("user", [ToolResult("call_1", [Text("sunny")])]),
        NMessage("user", [ToolResult("call_2", [Text("rain")], is_error=True)]),
        NMessage("user", [Text("and tomorrow?")]),
        max_output_tokens=50,
    )
    out = A.encode_request(req, [])
    validate_params(out)
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][1]["content"][1:] == [
        {"type": "tool_use", "id": "call_1", "name": "w", "input": {"c": "a"}},
        {"type": "tool_use", "id": "call_2", "name": "w", "input": {}}]
    assert out["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "rain", "is_error": True},
        {"type": "text", "text": "and tomorrow?"}]


def test_encode_tool_results_moved_before_text_in_a_turn() -> None:
    w: list[str] = []
    req = _req(NMessage("assistant", [ToolCall("call_1", "f", "{}")]),
               NMessage("user", [Text("note"), ToolResult("call_1", [Text("r")])]), max_output_tokens=5)
    out = A.encode_request(req, w)
    assert [b["type"] for b in out["messages"][1]["content"]] == ["tool_result", "text"]
    assert w


def test_encode_invalid_tool_arguments_names_message_index() -> None:
    req = _req(NMessage("user", [Text("q")]), NMessage("assistant", [ToolCall("call_1", "f", '{"a": ')]),
               max_output_tokens=5)
    with pytest.raises(TranslationError) as ei:
        A.encode_request(req, [])
    assert "messages[1].content[0].arguments" in str(ei.value)


def test_encode_images_and_documents() -> None:
    req = _req(NMessage("user", [
        Image("url", url="data:image/jpeg;base64,/9j/AA=="), Image("url", url="https://e.com/a.png"),
        Image("file", file_id="file_9"), Document("url", url="data:application/pdf;base64,JVBE"),
        Document("base64", media_type="text/plain", data="aGVsbG8="), Document("text", data="x", filename="f.txt"),
        Text("describe")]), max_output_tokens=5)
    out = A.encode_request(req, [])
    validate_params(out)
    c = out["messages"][0]["content"]
    assert c[0]["source"] == {"type": "base64", "media_type": "image/jpeg", "data": "/9j/AA=="}
    assert c[1]["source"] == {"type": "url", "url": "https://e.com/a.png"}
    assert c[2]["source"] == {"type": "file", "file_id": "file_9"}
    assert c[3]["source"] == {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}
    assert c[4]["source"] == {"type": "text", "media_type": "text/plain", "data": "hello"}
    assert c[5]["title"] == "f.txt"
    with pytest.raises(TranslationError):
        A.encode_request(_req(NMessage("user", [Document("base64", media_type="application/zip", data="x")]),
                              max_output_tokens=5), [])


def test_encode_refusal_in_history_as_text_with_warning() -> None:
    w: list[str] = []
    out = A.encode_request(_req(NMessage("user", [Text("q")]), NMessage("assistant", [Refusal("No.")]),
                                NMessage("user", [Text("why")]), max_output_tokens=5), w)
    assert out["messages"][1] == {"role": "assistant", "content": "No."}
    assert any("refusal" in x for x in w)


def _tools() -> list[Tool]:
    return [Tool("a", "A", {"type": "object", "properties": {"x": {"type": "string"}}}),
            Tool("b", None, None), Tool("c" * 80, "long name", {"type": "object"})]


@pytest.mark.parametrize(("choice", "parallel", "expected", "names"), [
    (ToolChoice("auto"), None, {"type": "auto"}, ["a", "b", None]),
    (ToolChoice("none"), None, {"type": "none"}, ["a", "b", None]),
    (ToolChoice("required"), None, {"type": "any"}, ["a", "b", None]),
    (ToolChoice("tool", name="b"), None, {"type": "tool", "name": "b"}, ["a", "b", None]),
    (ToolChoice("tool", name="b", kind="custom"), None, {"type": "tool", "name": "b"}, ["a", "b", None]),
    (ToolChoice("allowed", allowed=["a"], allowed_required=True), None, {"type": "any"}, ["a"]),
    (ToolChoice("allowed", allowed=["b"]), False, {"type": "auto", "disable_parallel_tool_use": True}, ["b"]),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}, ["a", "b", None]),
    (ToolChoice("required"), False, {"type": "any", "disable_parallel_tool_use": True}, ["a", "b", None]),
])
def test_encode_tool_choice_forms(choice: ToolChoice | None, parallel: bool | None, expected: dict[str, Any],
                                  names: list[str | None]) -> None:
    w: list[str] = []
    out = A.encode_request(_req(NMessage("user", [Text("q")]), tools=_tools(), tool_choice=choice,
                                parallel_tool_calls=parallel, max_output_tokens=5), w)
    validate_params(out)
    assert out["tool_choice"] == expected
    got = [t["name"] for t in out["tools"]]
    assert [g if n is not None else None for n, g in zip(names, got, strict=True)] == names
    if len(got) == 3:
        assert out["tools"][1]["input_schema"] == {"type": "object", "properties": {}}
    if choice is not None and choice.mode == "allowed":
        assert w
    if len(got) == 3:
        assert len(got[2]) <= 64


def test_encode_custom_tools_as_functions() -> None:
    tool = Tool("apply_patch", "Apply a patch", kind="custom",
                format={"type": "grammar", "syntax": "lark", "definition": "start: /.+/"})
    req = _req(NMessage("user", [Text("q")]),
               NMessage("assistant", [ToolCall("call_1", "apply_patch", "*** Begin Patch", kind="custom")]),
               NMessage("user", [ToolResult("call_1", [Text("done")], kind="custom")]),
               tools=[tool], tool_choice=ToolChoice("tool", name="apply_patch", kind="custom"), max_output_tokens=5)
    out = A.encode_request(req, [])
    validate_params(out)
    t = out["tools"][0]
    assert t["input_schema"]["required"] == ["input"] and "lark" in t["description"]
    assert out["messages"][1]["content"][0]["input"] == {"input": "*** Begin Patch"}
    assert out["messages"][2]["content"][0]["tool_use_id"] == "call_1"


@pytest.mark.parametrize(("rc", "max_out", "thinking", "max_tokens", "effort"), [
    (ReasoningConfig(effort="minimal"), 20000, {"type": "enabled", "budget_tokens": 1024}, 20000, None),
    (ReasoningConfig(effort="low"), 20000, {"type": "enabled", "budget_tokens": 2048}, 20000, None),
    (ReasoningConfig(effort="medium"), 20000, {"type": "enabled", "budget_tokens": 8192}, 20000, None),
    (ReasoningConfig(effort="high"), 1000, {"type": "enabled", "budget_tokens": 16384}, 17384, None),
    (ReasoningConfig(effort="xhigh"), 40000, {"type": "enabled", "budget_tokens": 32768}, 40000, None),
    (ReasoningConfig(effort="none"), 100, {"type": "disabled"}, 100, None),
    (ReasoningConfig(disabled=True), 100, {"type": "disabled"}, 100, None),
    (ReasoningConfig(adaptive=True, effort="high"), 100, {"type": "adaptive"}, 100, "high"),
    (ReasoningConfig(budget_tokens=500), 5000, {"type": "enabled", "budget_tokens": 1024}, 5000, None),
])
def test_encode_reasoning_config(rc: ReasoningConfig, max_out: int, thinking: dict[str, Any], max_tokens: int,
                                 effort: str | None) -> None:
    w: list[str] = []
    out = A.encode_request(_req(NMessage("user", [Text("q")]), reasoning=rc, max_output_tokens=max_out,
                                temperature=0.2, top_k=3), w)
    validate_params(out)
    assert out["thinking"] == thinking
    assert out["max_tokens"] == max_tokens
    assert out.get("output_config", {}).get("effort") == effort
    if thinking["type"] in ("enabled", "adaptive"):
        assert "temperature" not in out and "top_k" not in out
        assert any("temperature" in x for x in w)
    else:
        assert out["temperature"] == 0.2 and out["top_k"] == 3


def test_encode_sampling_stop_user_stream() -> None:
    w: list[str] = []
    out = A.encode_request(_req(NMessage("user", [Text("q")]), temperature=1.5, top_p=0.5, stop=["\n\nEND"],
                                user="user-7", metadata={"user_id": "x", "team": "t"}, stream=True, seed=3,
                                max_output_tokens=5), w)
    assert out["temperature"] == 1.0 and "top_p" not in out
    assert out["stop_sequences"] == ["\n\nEND"]
    assert out["metadata"] == {"user_id": "user-7"}
    assert out["stream"] is True
    assert any("seed" in x for x in w) and any("team" in x for x in w) and any("clamped" in x for x in w)
    validate_params(out)


def test_encode_output_formats() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}
    out = A.encode_request(_req(NMessage("user", [Text("q")]), output_format=OutputFormat("json_schema", schema,
                                                                                          name="x", strict=True),
                                max_output_tokens=5), [])
    assert out["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    validate_params(out)
    w: list[str] = []
    out = A.encode_request(_req(NMessage("user", [Text("q")]), output_format=OutputFormat("json_object"),
                                max_output_tokens=5), w)
    assert "output_config" not in out and "JSON object" in out["system"] and w


def test_encode_server_tools_and_opaque_parts() -> None:
    own = {"type": "web_search_20250305", "name": "web_search"}
    foreign = {"type": "web_search_preview", "search_context_size": "low"}
    block = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}}
    w: list[str] = []
    req = _req(NMessage("user", [Text("q")]),
               NMessage("assistant", [Opaque(A.PROTOCOL, block, "server_tool_use"),
                                      Opaque("openai_responses", {"type": "reasoning"}, "web_search_call"),
                                      Text("found")]),
               max_output_tokens=5, extra={"server_tools": [own, foreign], "store": True})
    out = A.encode_request(req, w)
    assert out["tools"] == [own]
    assert out["messages"][1]["content"] == [block, {"type": "text", "text": "found"}]
    assert any("web_search_preview" in x for x in w) and any("web_search_call" in x for x in w)
    assert any("store" in x for x in w)


@pytest.mark.parametrize(("extra", "field"), [
    ({"n": 2}, "n"), ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"modalities": ["text", "audio"]}, "audio"),
])
def test_encode_unrepresentable_raises(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(TranslationError) as ei:
        A.encode_request(_req(NMessage("user", [Text("q")]), max_output_tokens=5, extra=extra), [])
    assert str(ei.value).startswith(field + ":")


def test_encode_empty_text_and_empty_messages_skipped() -> None:
    out = A.encode_request(_req(NMessage("user", [Text("q")]), NMessage("assistant", [Text("")]),
                                NMessage("user", [Text("again")]), max_output_tokens=5), [])
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "q"},
                                                            {"type": "text", "text": "again"}]}]


def test_encode_tool_ids_with_invalid_characters_rewritten_consistently() -> None:
    req = _req(NMessage("assistant", [ToolCall("functions.f:0", "f", "{}")]),
               NMessage("user", [ToolResult("functions.f:0", [Text("x")])]), max_output_tokens=5)
    w: list[str] = []
    out = A.encode_request(req, w)
    tid = out["messages"][0]["content"][0]["id"]
    assert tid == out["messages"][1]["content"][0]["tool_use_id"] and ":" not in tid and w


def test_empty_text_parts_never_become_empty_text_blocks() -> None:
    resp = Response(parts=[Text(""), ToolCall("call_1", "f", "{}")], stop=classify_stop("tool_calls",
                                                                                         has_tool_calls=True))
    body = A.encode_response(resp, ctx(), [])
    assert [b["type"] for b in body["content"]] == ["tool_use"]
    snap, _, raw = _stream(response_to_events(resp))
    assert [b.type for b in snap.content] == ["tool_use"]
    assert [d["index"] for ev, d in frames(raw) if ev == "content_block_start"] == [0]


def test_encode_thinking_dropped_with_forced_tool_choice() -> None:
    w: list[str] = []
    out = A.encode_request(_req(NMessage("user", [Text("q")]), tools=_tools()[:1], tool_choice=ToolChoice("required"),
                                reasoning=ReasoningConfig(effort="high"), temperature=0.3, max_output_tokens=100), w)
    assert "thinking" not in out and out["tool_choice"] == {"type": "any"}
    assert out["max_tokens"] == 100 and out["temperature"] == 0.3
    assert any("forced tool choice" in x for x in w)


def test_encode_thinking_dropped_in_tool_loop_without_anthropic_thinking() -> None:
    foreign = Reasoning("r", opaque={"protocol": "openai_chat_completions", "field": "reasoning_content"})
    msgs = [NMessage("user", [Text("q")]), NMessage("assistant", [foreign, ToolCall("call_1", "a", "{}")]),
            NMessage("user", [ToolResult("call_1", [Text("ok")])])]
    w: list[str] = []
    out = A.encode_request(_req(*msgs, tools=_tools()[:1], reasoning=ReasoningConfig(effort="low"),
                                max_output_tokens=100), w)
    assert "thinking" not in out and any("thinking disabled" in x for x in w)
    native = Reasoning("r", opaque={"protocol": A.PROTOCOL, "signature": "sig"})
    msgs[1] = NMessage("assistant", [native, ToolCall("call_1", "a", "{}")])
    out = A.encode_request(_req(*msgs, tools=_tools()[:1], reasoning=ReasoningConfig(effort="low"),
                                max_output_tokens=100), [])
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    validate_params(out)


def test_system_messages_inside_the_conversation_are_read() -> None:
    """Claude Code 2.1 sends instructions as ``role: "system"`` messages inside ``messages`` (its
    environment block, per-turn reminders): read as system messages of the conversation, translated
    where each target keeps them (Chat and Responses in place; Anthropic and Gemini in the system
    prompt), never refused."""
    from proxai_core import Exchange

    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "You are Claude Code.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                         {"role": "system", "content": [{"type": "text", "text": "# Environment\nlinux"}]},
                         {"role": "system", "content": "be brief"},
                         {"role": "user", "content": "go"}]}
    ex = Exchange(Protocol.ANTHROPIC, body, path="/v1/messages")
    assert [m.role for m in ex.request.messages] == ["user", "system", "system", "user"]
    chat = ex.request_for(Protocol.CHAT)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "system", "system", "user"]
    resp = ex.request_for(Protocol.RESPONSES)
    assert [i.get("role") for i in resp["input"]] == ["user", "system", "system", "user"]
    gem = ex.request_for(Protocol.GEMINI)
    assert "# Environment" in json.dumps(gem["systemInstruction"])
    for target in (Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI):
        validate_request(target, ex.request_for(target))
    bad = dict(body, messages=[{"role": "system", "content": [{"type": "image", "source": {
        "type": "url", "url": "https://example.com/a.png"}}]}])
    with pytest.raises(TranslationError, match="system message carries text blocks only"):
        Exchange(Protocol.ANTHROPIC, bad, path="/v1/messages").request  # noqa: B018
