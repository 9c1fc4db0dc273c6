"""The OpenAI Responses codec: fixtures (json / request / sse) and the seed 000 rules it owns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai.types.responses as orr
import orjson
import pydantic
import pytest
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import response_create_params as rcp

from proxai_core import build_context
from proxai_core import reasoning as rz
from proxai_core.codecs import responses as R
from proxai_core.collect import Collector, response_to_events
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
    Message,
    Opaque,
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
    WebSearchCall,
    WebSearchResults,
)
from proxai_core.protocol import Protocol
from proxai_core.stop import GENERIC_CONTENT_FILTER_REFUSAL, StopInfo, StopReason, classify_stop
from tests.conftest import fixture_dir, sse_events

FIX = fixture_dir(R.CODEC.protocol)
HAVE_FIX = FIX.is_dir()
needs_fix = pytest.mark.skipif(not HAVE_FIX, reason="../shared/fixtures absent")

_EVENT = pydantic.TypeAdapter(orr.ResponseStreamEvent)
_CREATE = pydantic.TypeAdapter(rcp.ResponseCreateParamsNonStreaming)
_OWN_INPUT_TYPES = {"message", "function_call", "custom_tool_call", "function_call_output",
                    "custom_tool_call_output", "reasoning"}


def validate_request(body: dict) -> None:
    """Validate a request body with the SDK's params type. Two known gaps between the SDK types and the
    API: an assistant ``message`` with ``output_text`` parts needs no ``id``/``status`` on the wire (Codex
    omits them: ids of unstored items are meaningless with store=false), and hosted items we pass through
    unchanged are whatever the client sent (real recordings carry shapes newer than the SDK)."""
    b = dict(body)
    b.pop("stream", None)
    items = []
    for it in b.get("input") or []:
        t = it.get("type", "message")
        if t not in _OWN_INPUT_TYPES:
            continue
        if t == "message" and it.get("role") == "assistant" and isinstance(it.get("content"), list):
            it = {"id": "msg_x", "status": "completed", **it}
        items.append(it)
    b["input"] = items
    b["tools"] = [t for t in b.get("tools") or [] if t.get("type") in ("function", "custom")]
    _CREATE.validate_python(b)
CTX = ClientContext(protocol=Protocol.RESPONSES)
_OWN_ITEM_TYPES = {"message", "function_call", "custom_tool_call", "reasoning"}


def _files(suffix: str) -> list[Path]:
    if not HAVE_FIX:
        return []
    fs = sorted(FIX.glob(f"*{suffix}"))
    if suffix == ".json":
        fs = [f for f in fs if not f.name.endswith(".request.json")]
    return fs


def _ids(fs: list[Path]) -> list[str]:
    return [f.name[:100] for f in fs]


def _args(s: Any) -> Any:
    if not isinstance(s, str) or not s:
        return {} if not s else s
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return s


# ----------------------------------------------------------------------------- summaries
def summary(body: dict) -> dict[str, Any]:
    """What a Responses user cares about in a response object."""
    text, refusal, calls, reasoning = "", "", [], []
    for item in body.get("output") or []:
        t = item.get("type")
        if t == "message":
            for c in item.get("content") or []:
                if c.get("type") == "output_text":
                    text += c.get("text") or ""
                elif c.get("type") == "refusal":
                    refusal += c.get("refusal") or ""
        elif t == "function_call":
            calls.append((item["call_id"], item["name"], _args(item.get("arguments"))))
        elif t == "custom_tool_call":
            calls.append((item["call_id"], item["name"], item.get("input")))
        elif t == "reasoning":
            reasoning.append(" ".join(s.get("text", "") for s in item.get("summary") or []))
    inc = body.get("incomplete_details") or {}
    return {"text": text, "refusal": refusal, "calls": calls, "status": body.get("status"),
            "incomplete": inc.get("reason"), "reasoning": len(reasoning)}


def validate(body: dict, source: dict | None = None) -> None:
    """Validate with the SDK. Hosted items we pass through unchanged are validated only if the source's
    own item validates (real servers send shapes the SDK rejects, e.g. web_search sources type 'api')."""
    try:
        orr.Response.model_validate(body)
    except pydantic.ValidationError:
        own = dict(body, output=[i for i in body["output"] if i.get("type") in _OWN_ITEM_TYPES])
        orr.Response.model_validate(own)
        assert source is not None, "our own body does not validate"
        for item in body["output"]:
            if item.get("type") not in _OWN_ITEM_TYPES:
                assert item in source.get("output", []), "a hosted item changed on the way"


def decode_stream(data: bytes, w: list[str] | None = None) -> list[Any]:
    w = [] if w is None else w
    dec = R.StreamDecoder(w)
    out: list[Any] = []
    for name, d in sse_events(data):
        if dec.done:
            break
        out.extend(dec.feed(name, d))
    if not dec.done:
        out.extend(dec.finish())
    return out


def encode_stream(events: list[Any], ctx: ClientContext = CTX, w: list[str] | None = None) -> bytes:
    enc = R.StreamEncoder(ctx, [] if w is None else w)
    return b"".join(enc.encode(e) for e in events)


class ClientStream:
    """Our client stream consumed by the SDK's ResponseStreamState, plus the invariants the SDK does
    not check (sequence numbers, event: lines, output_index uniqueness, ids equal the snapshot's)."""

    def __init__(self, data: bytes, source: dict | None = None):
        self.state = ResponseStreamState(input_tools=[], text_format=omit)
        self.events = [json.loads(d) for _, d in sse_events(data)]
        names = [n for n, _ in sse_events(data)]
        self.final: dict | None = None
        self.sdk_final = None
        self.error: dict | None = None
        self.terminals = 0
        seq = -1
        added: dict[int, str] = {}
        done_ids: dict[int, str] = {}
        for name, obj in zip(names, self.events, strict=True):
            assert name == obj["type"], (name, obj["type"])
            assert obj["sequence_number"] == seq + 1, "sequence_number must increase by one from 0"
            seq = obj["sequence_number"]
            t = obj["type"]
            if t == "response.output_item.added":
                oi = obj["output_index"]
                assert oi not in added, f"output_index {oi} reused"
                assert oi == len(added), "output_index values are allocated in order"
                added[oi] = obj["item"]["id"]
            elif t == "response.output_item.done":
                done_ids[obj["output_index"]] = obj["item"]["id"]
                assert added[obj["output_index"]] == obj["item"]["id"]
            elif "item_id" in obj:
                assert added[obj["output_index"]] == obj["item_id"], "item_id differs from its item"
            if t == "error":
                self.error = obj
            assert self.terminals == 0, "nothing may follow the terminal event"
            try:
                ev = _EVENT.validate_python(obj)
            except pydantic.ValidationError:
                # only a hosted item passed through unchanged may be outside the SDK's types
                item = obj.get("item") or {}
                assert source is not None and item.get("type") not in _OWN_ITEM_TYPES, obj
                ev = construct_type(type_=orr.ResponseStreamEvent, value=obj)
            self.state.handle_event(ev)
            if t in ("response.completed", "response.incomplete", "response.failed"):
                self.terminals += 1
                self.final = obj["response"]
        assert self.terminals == 1, "exactly one terminal event"
        assert self.final is not None
        validate(self.final, source)
        for i, item in enumerate(self.final["output"]):
            assert added.get(i) == item["id"], "snapshot ids equal the event ids"
            if self.final["status"] != "failed":
                assert done_ids.get(i) == item["id"], "every item was closed"
        self.sdk_final = self.state._completed_response


# ============================================================================= fixtures: json
JSON_FILES = _files(".json")


def _expected_reason(body: dict) -> StopReason:
    status = body.get("status")
    out = body.get("output") or []
    refusal = any(c.get("type") == "refusal" and c.get("refusal") for i in out if i.get("type") == "message"
                  for c in i.get("content") or [])
    if status == "incomplete":
        reason = (body.get("incomplete_details") or {}).get("reason")
        if reason == "content_filter" or refusal:
            return StopReason.REFUSAL
        return StopReason.MAX_OUTPUT if reason in (None, "max_output_tokens") else StopReason.OTHER
    if status == "failed" or status == "cancelled":
        return StopReason.INTERRUPTED
    if status in ("queued", "in_progress"):
        return StopReason.OTHER
    if refusal:
        return StopReason.REFUSAL
    if any(i.get("type") in ("function_call", "custom_tool_call") for i in out):
        return StopReason.TOOL_USE
    return StopReason.END_TURN


@needs_fix
@pytest.mark.parametrize("path", JSON_FILES, ids=_ids(JSON_FILES))
def test_json_fixture(path: Path):
    body = json.loads(path.read_text())
    w: list[str] = []
    if "output" not in body:
        # an HTTP error body: parse_error understands it; decode_response reports it as an error
        err = parse_error(400, body)
        assert err.message and err.message == body["error"]["message"]
        assert err.kind in ("invalid_request", "authentication")
        resp = R.decode_response(body, w)
        assert isinstance(resp.extra.get("error"), Error)
        return
    resp = R.decode_response(body, w)
    assert resp.stop is not None
    assert resp.stop.reason is _expected_reason(body), resp.stop
    assert resp.stop.raw in (body.get("status"), (body.get("incomplete_details") or {}).get("reason"))
    if body.get("usage"):
        u = body["usage"]
        assert resp.usage.input_total == u["input_tokens"]
        assert resp.usage.cache_read == u["input_tokens_details"]["cached_tokens"]
        det = u["input_tokens_details"]
        assert resp.usage.input == u["input_tokens"] - det["cached_tokens"] - det.get("cache_write_tokens", 0)
        assert resp.usage.output == u["output_tokens"]
    out = R.encode_response(resp, CTX, w)
    validate(out, body)
    src, dst = summary(body), summary(out)
    if resp.stop.reason is StopReason.OTHER:  # queued: not a terminal, sent as completed with a warning
        assert dst["status"] == "completed" and any("queued" in x for x in w)
        src["status"] = dst["status"]
    assert dst == src
    again = R.decode_response(out, [])
    assert again.stop.reason is (resp.stop.reason if resp.stop.reason is not StopReason.OTHER
                                 else StopReason.END_TURN)


# ============================================================================= fixtures: requests
REQ_FILES = _files(".request.json")


def _canon_part(p: dict) -> tuple:
    t = p.get("type")
    if t in ("input_text", "output_text"):
        return ("text", p["text"], tuple(json.dumps(a, sort_keys=True) for a in p.get("annotations") or []))
    if t == "refusal":
        return ("refusal", p["refusal"])
    if t == "input_image":
        return ("image", p.get("image_url"), p.get("file_id"), p.get("detail") or "auto")
    if t == "input_file":
        return ("file", p.get("file_data"), p.get("file_url"), p.get("file_id"), p.get("filename"))
    raise AssertionError(f"unexpected part {t}")


def canon_input(inp: Any) -> list[tuple]:
    """Input items as a flat, comparable list (message boundaries of one role do not matter)."""
    if isinstance(inp, str):
        return [("user", ("text", inp, ()))]
    out: list[tuple] = []
    for item in inp or []:
        t = item.get("type", "message")
        if t == "message":
            c = item["content"]
            parts = [("text", c, ())] if isinstance(c, str) else [_canon_part(p) for p in c]
            out.extend((item["role"], p) for p in parts)
        elif t == "function_call":
            out.append(("call", item["call_id"], item["name"], _args(item["arguments"] or "{}")))
        elif t == "custom_tool_call":
            out.append(("custom", item["call_id"], item["name"], item["input"]))
        elif t in ("function_call_output", "custom_tool_call_output"):
            o = item["output"]
            o = o if isinstance(o, str) else tuple(_canon_part(p) for p in o)
            if isinstance(o, tuple) and all(p[0] == "text" for p in o):
                o = "".join(p[1] for p in o)
            out.append((t, item["call_id"], o))
        elif t == "reasoning":
            out.append(("reasoning", item["id"], tuple(s["text"] for s in item.get("summary") or []),
                        tuple(s["text"] for s in item.get("content") or []), item.get("encrypted_content")))
        else:
            out.append(("raw", json.dumps(item, sort_keys=True)))
    return out


@needs_fix
@pytest.mark.parametrize("path", REQ_FILES, ids=_ids(REQ_FILES))
def test_request_fixture_round_trip(path: Path):
    body = json.loads(path.read_text())
    w: list[str] = []
    req = R.decode_request(body, w)
    out = R.encode_request(req, w)
    assert json.loads(json.dumps(out)) == out
    validate_request(out)
    # same-protocol round trip keeps the items (message boundaries of one role may merge)
    assert canon_input(out["input"]) == canon_input(body.get("input"))
    assert out.get("instructions") == (body.get("instructions") or None)
    for k in ("model", "max_output_tokens", "temperature", "top_p", "parallel_tool_calls", "previous_response_id",
              "include", "store", "prompt_cache_key", "service_tier", "background", "metadata"):
        if body.get(k) is not None and not (k == "include" and out.get("include") != body[k]):
            assert out.get(k) == body[k], k
    if body.get("include"):
        assert set(body["include"]) <= set(out["include"])
    # function/custom tools keep their order; hosted tools (kept apart in extra) follow them
    def _order(tools: list) -> list:
        return sorted(tools, key=lambda t: t.get("type") not in ("function", "custom"))

    assert [t.get("name") for t in out.get("tools", [])] == [t.get("name") for t in _order(body.get("tools") or [])]
    for a, b in zip(out.get("tools", []), _order(body.get("tools") or []), strict=True):
        if b["type"] == "function":
            assert a["parameters"] == (b.get("parameters") or {"type": "object", "properties": {}})
            assert a["strict"] is bool(b.get("strict"))
        else:
            assert a == b
    tc = body.get("tool_choice")
    if tc is not None:
        assert out["tool_choice"] == tc
    if body.get("reasoning"):
        for k in ("effort", "summary"):
            if body["reasoning"].get(k) is not None:
                assert out["reasoning"][k] == body["reasoning"][k]
    if (body.get("text") or {}).get("format"):
        assert out["text"]["format"] == body["text"]["format"]


# ============================================================================= fixtures: streams
SSE_FILES = _files(".sse")


def _source_stream(data: bytes) -> tuple[dict | None, dict | None, dict | None]:
    """(terminal response snapshot, the output items from output_item.done, error payload)."""
    final = err = None
    items: dict[int, dict] = {}
    for _, d in sse_events(data):
        try:
            obj = json.loads(d)
        except json.JSONDecodeError:
            continue
        t = obj.get("type")
        if t == "error" and err is None and final is None:
            err = obj
            break
        if t == "response.output_item.done":
            items.setdefault(obj["output_index"], obj["item"])
        if t in ("response.completed", "response.incomplete", "response.failed"):
            final = obj["response"]
            break
    out = dict(final or {}, output=[items[k] for k in sorted(items)])
    return final, out, err


@needs_fix
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # SDK internals on passed-through hosted items
@pytest.mark.parametrize("path", SSE_FILES, ids=_ids(SSE_FILES))
def test_sse_fixture(path: Path):
    data = path.read_bytes()
    w: list[str] = []
    events = decode_stream(data, w)
    assert isinstance(events[0], Start)
    terminal = events[-1]
    final, src_items, err = _source_stream(data)
    # block pairing: every BlockStart has one BlockEnd, deltas only to open blocks
    open_: set[int] = set()
    for ev in events:
        if isinstance(ev, BlockStart):
            assert ev.index not in open_
            open_.add(ev.index)
        elif isinstance(ev, Delta):
            assert ev.index in open_
        elif isinstance(ev, BlockEnd):
            open_.remove(ev.index)
    col = Collector()
    for ev in events:
        col.add(ev)
    neutral = col.finish()
    if err is not None or (final or {}).get("status") == "failed":
        assert isinstance(terminal, ErrorEvent)
        assert terminal.error.message
        cs = ClientStream(encode_stream(events))
        assert cs.error is not None and cs.error["message"] == terminal.error.message
        assert cs.error["error"]["message"] == terminal.error.message  # nested and flat
        assert cs.final["status"] == "failed" and cs.final["error"]["message"] == terminal.error.message
        return
    assert isinstance(terminal, End) and not open_
    # the neutral result agrees with the upstream's own snapshot
    ref = R.decode_response(final, [])
    assert neutral.stop.reason is ref.stop.reason
    assert neutral.stop.raw == ref.stop.raw
    src = summary(src_items)
    ref_body = R.encode_response(neutral, CTX, [])
    got = summary(ref_body)
    assert (got["text"], got["refusal"], got["calls"]) == (src["text"], src["refusal"], src["calls"])
    # ... and through our encoder into the SDK's accumulator
    cs = ClientStream(encode_stream(events), src_items)
    mine = summary(cs.final)
    assert (mine["text"], mine["refusal"], mine["calls"]) == (src["text"], src["refusal"], src["calls"])
    assert mine["status"] == final["status"]
    assert mine["incomplete"] == (final.get("incomplete_details") or {}).get("reason")
    if mine["status"] == "completed":
        assert cs.sdk_final is not None
        assert summary(cs.sdk_final.model_dump(mode="json", warnings=False)) == mine
    assert mine["reasoning"] == src["reasoning"]
    if final.get("usage"):
        assert cs.final["usage"]["input_tokens"] == final["usage"]["input_tokens"]
        assert cs.final["usage"]["output_tokens"] == final["usage"]["output_tokens"]
    # our stream decodes back to the same stop
    back = decode_stream(encode_stream(events))
    assert next(e for e in back if isinstance(e, Stop)).stop.reason is neutral.stop.reason


# ============================================================================= seed 000: Responses -> stop
def _body(output: list[dict], status: str | None = "completed", **kw: Any) -> dict:
    b = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-x", "output": output,
         "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    if status is not None:
        b["status"] = status
    b.update(kw)
    return b


def _msg(*content: dict) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": list(content)}


def _ot(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": []}


def _ref(text: str) -> dict:
    return {"type": "refusal", "refusal": text}


def _fc(name: str = "get", args: str = '{"a":1}', call_id: str = "call_1") -> dict:
    return {"id": "fc_1", "type": "function_call", "call_id": call_id, "name": name, "arguments": args,
            "status": "completed"}


def test_seed_completed_infers_end_turn():
    s = R.decode_response(_body([_msg(_ot("hi"))]), []).stop
    assert s.reason is StopReason.END_TURN and s.raw == "completed"


def test_seed_completed_with_function_call_is_tool_use():
    s = R.decode_response(_body([_msg(_ot("let me")), _fc()]), []).stop
    assert s.reason is StopReason.TOOL_USE and s.raw == "completed"
    custom = {"id": "ctc_1", "type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "x"}
    assert R.decode_response(_body([custom]), []).stop.reason is StopReason.TOOL_USE


def test_seed_completed_with_refusal_part_is_refusal():
    s = R.decode_response(_body([_msg(_ref("I can't help with that."))]), []).stop
    assert s.reason is StopReason.REFUSAL
    assert s.raw == "completed" and s.category == "output-refusal" and s.message == "I can't help with that."


def test_seed_incomplete_max_output_tokens():
    s = R.decode_response(_body([_msg(_ot("cut"))], "incomplete",
                                incomplete_details={"reason": "max_output_tokens"}), []).stop
    assert s.reason is StopReason.MAX_OUTPUT and s.raw == "max_output_tokens"


def test_seed_incomplete_content_filter_is_refusal():
    s = R.decode_response(_body([], "incomplete", incomplete_details={"reason": "content_filter"}), []).stop
    assert s.reason is StopReason.REFUSAL and s.raw == "content_filter"
    assert s.message == GENERIC_CONTENT_FILTER_REFUSAL  # nothing produced (seed 002)


def test_seed_incomplete_without_details_is_max_output_with_warning():
    w: list[str] = []
    s = R.decode_response(_body([_msg(_ot("x"))], "incomplete", incomplete_details=None), w).stop
    assert s.reason is StopReason.MAX_OUTPUT and s.raw == "incomplete"
    assert "incomplete without details read as max_output_tokens" in w


def test_seed_incomplete_unknown_reason_is_other():
    w: list[str] = []
    s = R.decode_response(_body([], "incomplete", incomplete_details={"reason": "steered"}), w).stop
    assert s.reason is StopReason.OTHER and s.raw == "steered"
    assert w


def test_seed_failed_is_an_error_not_a_refusal():
    body = _body([], "failed", error={"code": "bio_policy", "message": "blocked by policy"})
    resp = R.decode_response(body, [])
    assert resp.stop.reason is StopReason.INTERRUPTED
    assert resp.stop.category == "bio_policy" and resp.stop.message == "blocked by policy"
    err = resp.extra["error"]
    assert isinstance(err, Error) and err.message == "blocked by policy" and err.code == "bio_policy"
    for code, kind in (("server_error", "api_error"), ("rate_limit_exceeded", "rate_limit"),
                       ("invalid_prompt", "invalid_request"), ("insufficient_quota", "billing")):
        e = R.decode_response(_body([], "failed", error={"code": code, "message": "m"}), []).extra["error"]
        assert e.kind == kind, code


def test_seed_cancelled_is_interrupted():
    s = R.decode_response(_body([_msg(_ot("part"))], "cancelled"), []).stop
    assert s.reason is StopReason.INTERRUPTED and s.raw == "cancelled"


# ============================================================================= seed 000: stop -> Responses
def _resp(parts: list, stop: StopInfo, usage: Usage | None = None) -> Response:
    return Response(id="msg_01abc", model="claude-x", parts=parts, stop=stop, usage=usage, created=5)


def _enc(resp: Response, w: list[str] | None = None) -> dict:
    out = R.encode_response(resp, CTX, [] if w is None else w)
    orr.Response.model_validate(out)
    return out


def test_seed_end_turn_and_tool_use_are_completed():
    out = _enc(_resp([Text("hi")], classify_stop("end_turn")))
    assert out["status"] == "completed" and out["incomplete_details"] is None
    out = _enc(_resp([Text("x"), ToolCall("toolu_9", "get", '{"a": 1}')], classify_stop("tool_use")))
    assert out["status"] == "completed"
    fc = out["output"][1]
    assert fc == {"id": "fc_9", "type": "function_call", "call_id": "toolu_9", "name": "get",
                  "arguments": '{"a": 1}', "status": "completed"}
    assert out["id"] == "resp_01abc" and out["output"][0]["id"].startswith("msg_01abc")


def test_seed_max_tokens_is_incomplete():
    out = _enc(_resp([Text("cut")], classify_stop("max_tokens")))
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["output"][0]["status"] == "incomplete"
    out = _enc(_resp([Text("cut")], classify_stop("model_context_window_exceeded")))
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}


def test_seed_pause_turn_and_stop_sequence_are_completed():
    for raw in ("pause_turn", "stop_sequence"):
        assert _enc(_resp([Text("x")], classify_stop(raw)))["status"] == "completed"


def test_seed_anthropic_refusal_with_text_becomes_refusal_part_completed():
    stop = classify_stop("refusal", category="cyber", message="unsafe request")
    out = _enc(_resp([Text("I can't help with that.")], stop))
    assert out["status"] == "completed" and out["error"] is None  # never failed
    assert out["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't help with that."}]
    assert R.decode_response(out, []).stop.reason is StopReason.REFUSAL


def test_seed_anthropic_refusal_without_text_uses_explanation():
    out = _enc(_resp([], classify_stop("refusal", message="The request asks for unsafe instructions.")))
    assert out["status"] == "completed"
    assert out["output"][0]["content"] == [{"type": "refusal",
                                            "refusal": "The request asks for unsafe instructions."}]


def test_seed_refusal_part_kept_with_text():
    parts = [Text("I can help with safe alternatives."), Refusal("I can't provide that.")]
    out = _enc(_resp(parts, StopInfo(StopReason.REFUSAL, raw="completed", message="I can't provide that.")))
    assert out["status"] == "completed"
    assert [c["type"] for c in out["output"][0]["content"]] == ["output_text", "refusal"]


def test_seed_chat_content_filter_is_incomplete_with_generic_refusal():
    stop = classify_stop("content_filter", message=GENERIC_CONTENT_FILTER_REFUSAL)
    out = _enc(_resp([], stop))
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "content_filter"}
    assert out["output"][0]["content"] == [{"type": "refusal", "refusal": GENERIC_CONTENT_FILTER_REFUSAL}]
    back = R.decode_response(out, [])
    assert back.stop.reason is StopReason.REFUSAL and back.stop.raw == "content_filter"
    # partial text stays text; the refusal part is added after it
    out = _enc(_resp([Text("partial")], classify_stop("content_filter")))
    assert [c["type"] for c in out["output"][0]["content"]] == ["output_text", "refusal"]


def test_seed_interrupted_and_other():
    out = _enc(_resp([Text("x")], classify_stop("cancelled")))
    assert out["status"] == "cancelled"
    out = _enc(_resp([Text("x")], classify_stop("insufficient_system_resource", message="no capacity")))
    assert out["status"] == "failed" and out["error"] == {"code": "server_error", "message": "no capacity"}
    w: list[str] = []
    out = _enc(_resp([Text("x")], classify_stop("weird_reason")), w)
    assert out["status"] == "completed" and w


def test_usage_encode_and_decode():
    out = _enc(_resp([Text("x")], classify_stop("end_turn"),
                     Usage(input=10, cache_read=100, cache_write=5, output=20, reasoning=7)))
    assert out["usage"] == {"input_tokens": 115,
                            "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 5},
                            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 7},
                            "total_tokens": 135}
    u = R.decode_response(out, []).usage
    assert (u.input, u.cache_read, u.cache_write, u.output, u.reasoning) == (10, 100, 5, 20, 7)


def test_model_echo_and_consecutive_text_merge():
    ctx = ClientContext(protocol=Protocol.RESPONSES, model="client-model")
    r = _resp([Text("a"), Text("b", citations=[{"type": "url", "url": "https://x.test", "title": "X"}]),
               ToolCall("call_1", "f", "{}"), Text("c")], classify_stop("tool_use"))
    out = R.encode_response(r, ctx, [])
    orr.Response.model_validate(out)
    assert out["model"] == "client-model"
    assert [i["type"] for i in out["output"]] == ["message", "function_call", "message"]
    assert len(out["output"][0]["content"]) == 2
    ann = out["output"][0]["content"][1]["annotations"][0]
    assert ann == {"type": "url_citation", "url": "https://x.test", "title": "X", "start_index": 0, "end_index": 1}


# ============================================================================= reasoning continuity
def test_foreign_reasoning_is_packed_and_unpacked():
    op = {"protocol": "anthropic_messages", "signature": "sig=="}
    r = _resp([Reasoning("thinking hard", opaque=op), Text("answer")], classify_stop("end_turn"))
    out = _enc(r)
    item = out["output"][0]
    assert item["type"] == "reasoning" and item["id"].startswith("rs_")
    assert item["summary"] == [{"type": "summary_text", "text": "thinking hard"}]
    assert rz.is_packed(item["encrypted_content"])
    # the client echoes the item back
    req = R.decode_request({"model": "m", "input": [item, {"type": "message", "role": "assistant",
                                                           "content": [_ot("answer")]}]}, [])
    rp = req.messages[0].parts[0]
    assert isinstance(rp, Reasoning)
    assert rp.text == "thinking hard" and rp.opaque == op and rp.redacted is False
    # ... and a Responses upstream never gets it
    w: list[str] = []
    body = R.encode_request(req, w)
    assert [i["type"] for i in body["input"]] == ["message"]
    assert any("reasoning" in x for x in w)


def test_own_reasoning_round_trips_natively():
    item = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "a"},
                                                          {"type": "summary_text", "text": "b"}],
            "encrypted_content": "gAAAA"}
    resp = R.decode_response(_body([item, _fc()]), [])
    rp = resp.parts[0]
    assert rp.text == "a\n\nb" and rp.summary == ["a", "b"]
    assert rp.opaque == {"protocol": "openai_responses", "id": "rs_1", "encrypted_content": "gAAAA"}
    out = _enc(resp)
    assert out["output"][0] == item
    req = Request(model="m", messages=[Message("user", [Text("q")]),
                                       Message("assistant", [rp, resp.parts[1]])],
                  reasoning=ReasoningConfig(effort="high"))
    body = R.encode_request(req, [])
    assert body["input"][1] == item  # reasoning first, followed by the call it produced (lesson #32)
    assert body["input"][2]["type"] == "function_call"
    assert body["store"] is False and "reasoning.encrypted_content" in body["include"]


def test_trailing_reasoning_without_its_item_is_dropped():
    rp = Reasoning("x", opaque={"protocol": "openai_responses", "id": "rs_1", "encrypted_content": "e"})
    w: list[str] = []
    body = R.encode_request(Request(messages=[Message("user", [Text("q")]), Message("assistant", [rp])]), w)
    assert [i["type"] for i in body["input"]] == ["message"]
    assert any("reasoning item without a following output item" in x for x in w)


# ============================================================================= request decode
CODEX = {
    "model": "gpt-5-codex",
    "instructions": "You are Codex.",
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "env"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "fix it"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "high"},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"},
            {"type": "input_file", "file_url": "https://x.test/a.pdf"},
            {"type": "input_file", "file_id": "file-1"},
            {"type": "input_image", "image_url": "https://x.test/i.png"},
        ]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "message", "role": "assistant", "content": [_ot("looking")]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": '{"cmd":"ls"}'},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
        {"type": "item_reference", "id": "msg_9"},
        {"role": "user", "content": "next"},
    ],
    "tools": [
        {"type": "function", "name": "shell", "description": "run", "parameters": {"type": "object"}, "strict": False},
        {"type": "custom", "name": "apply_patch", "description": "patch",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
        {"type": "web_search"},
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "high", "summary": "auto"},
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "k",
    "text": {"verbosity": "low", "format": {"type": "json_schema", "name": "o", "schema": {"type": "object"},
                                            "strict": True}},
    "stream": True,
    "safety_identifier": "u1",
    "metadata": {"a": "b"},
    "max_output_tokens": 1000,
    "temperature": 0.5,
    "top_p": 0.9,
    "previous_response_id": "resp_prev",
    "service_tier": "priority",
    "truncation": "auto",
}


def test_codex_request_decode():
    w: list[str] = []
    req = R.decode_request(CODEX, w)
    assert not w
    assert [t.text for t in req.system] == ["You are Codex."]
    roles = [m.role for m in req.messages]
    assert roles == ["developer", "user", "assistant", "user", "assistant", "user", "user"]
    user = req.messages[1].parts
    assert isinstance(user[1], Image) and user[1].source == "base64" and user[1].media_type == "image/png"
    assert user[2].source == "base64" and user[2].media_type == "application/pdf" and user[2].filename == "a.pdf"
    assert user[3].source == "url" and user[4].source == "file" and user[5].source == "url"
    asst = req.messages[2].parts
    assert [type(p).__name__ for p in asst] == ["Reasoning", "Text", "ToolCall", "ToolCall"]
    assert asst[2].item_id == "fc_1" and asst[3].kind == "custom" and asst[3].arguments == "*** Begin Patch"
    tools = req.messages[3].parts
    assert [type(p).__name__ for p in tools] == ["ToolResult", "ToolResult"]
    assert tools[1].kind == "custom" and tools[0].content[0].text == "a.txt"
    # hosted items stay in order, on the side that produced them
    assert req.messages[4].parts[0].label == "web_search_call"
    assert req.messages[5].parts[0].label == "item_reference"
    assert [t.name for t in req.tools] == ["shell", "apply_patch"]
    assert req.tools[1].kind == "custom" and req.tools[1].format["syntax"] == "lark"
    assert req.extra["server_tools"] == [{"type": "web_search"}]
    assert req.reasoning.effort == "high" and req.reasoning.summary == "auto"
    assert req.output_format.type == "json_schema" and req.output_format.strict is True
    assert req.extra["verbosity"] == "low" and req.extra["previous_response_id"] == "resp_prev"
    assert req.user == "u1" and req.metadata == {"a": "b"} and req.stream is True
    assert req.parallel_tool_calls is False and req.max_output_tokens == 1000
    assert req.extra["store"] is False and req.extra["service_tier"] == "priority"
    body = R.encode_request(req, w)
    validate_request(body)
    assert canon_input(body["input"]) == canon_input(CODEX["input"])
    for k in ("instructions", "tool_choice", "parallel_tool_calls", "store", "include", "prompt_cache_key",
              "text", "safety_identifier", "metadata", "max_output_tokens", "previous_response_id",
              "service_tier", "truncation", "reasoning", "temperature", "top_p"):
        assert body[k] == CODEX[k], k
    assert body["tools"] == CODEX["tools"]


@pytest.mark.parametrize("tc,expect", [
    ("none", ToolChoice(mode="none")),
    ("required", ToolChoice(mode="required")),
    ({"type": "function", "name": "f"}, ToolChoice(mode="tool", name="f")),
    ({"type": "custom", "name": "apply_patch"}, ToolChoice(mode="tool", name="apply_patch", kind="custom")),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]},
     ToolChoice(mode="allowed", allowed=["f"], allowed_required=True)),
])
def test_tool_choice_forms(tc, expect):
    body = {"model": "m", "input": "x", "tool_choice": tc,
            "tools": [{"type": "function", "name": "f", "parameters": {}},
                      {"type": "custom", "name": "apply_patch"}]}
    req = R.decode_request(body, [])
    assert req.tool_choice == expect
    assert R.encode_request(req, [])["tool_choice"] == tc


def test_hosted_tool_choice_is_kept_in_extra():
    req = R.decode_request({"model": "m", "input": "x", "tool_choice": {"type": "web_search_preview"},
                            "tools": [{"type": "web_search_preview"}]}, [])
    assert req.tool_choice is None and req.extra["server_tool_choice"] == {"type": "web_search_preview"}
    assert R.encode_request(req, [])["tool_choice"] == {"type": "web_search_preview"}


@pytest.mark.parametrize("body,path", [
    ({"input": [{"type": "foo"}]}, "input[0].type: unknown item type 'foo'"),
    ({"input": [{"role": "user", "content": "a"}, {"role": "robot", "content": "a"}]}, "input[1].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text"),
    ({"input": [{"role": "user", "content": [{"type": "wat", "text": "x"}]}]}, "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]}, "input[0].output"),
    ({"input": [{"type": "reasoning", "id": "r", "summary": "x"}]}, "input[0].summary"),
    ({"input": 5}, "input"),
    ({"input": ["x"]}, "input[0]"),
    ({"tools": [{"type": "function"}]}, "tools[0].name"),
    ({"tools": "x"}, "tools"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "x", "tools": []}}, "tool_choice.mode"),
    ({"temperature": "hot"}, "temperature"),
    ({"max_output_tokens": 1.5}, "max_output_tokens"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
    ({"reasoning": "high"}, "reasoning"),
    ({"metadata": []}, "metadata"),
    ({"instructions": 3}, "instructions"),
    ({"stream": "yes"}, "stream"),
])
def test_malformed_requests_name_the_path(body, path):
    with pytest.raises(TranslationError) as e:
        R.decode_request({"model": "m", **body}, [])
    assert str(e.value).startswith(path), str(e.value)


def test_garbage_never_crashes():
    import random

    rnd = random.Random(7)
    atoms: list[Any] = [None, 1, 1.5, "s", True, [], {}, [1], {"type": "message"}, {"role": "user"},
                        {"type": "function_call"}, {"type": "reasoning", "summary": [{}]}]
    keys = ["input", "tools", "tool_choice", "text", "reasoning", "instructions", "metadata", "temperature"]
    for _ in range(400):
        body = {k: rnd.choice(atoms) for k in rnd.sample(keys, 3)}
        if rnd.random() < 0.5:
            body["input"] = [rnd.choice(atoms) for _ in range(3)]
        try:
            R.encode_request(R.decode_request(body, []), [])
        except TranslationError:
            pass


# ============================================================================= request encode (foreign)
def test_encode_foreign_request():
    long = "mcp__server__" + "x" * 80
    req = Request(
        model="gpt-5",
        system=[Text("sys a"), Text("sys b")],
        messages=[
            Message("user", [Text("hello"), Image(source="base64", media_type="image/jpeg", data="AAA"),
                             Document(source="base64", media_type="application/pdf", data="JVB"),
                             Document(source="text", data="plain doc")]),
            Message("assistant", [Reasoning("think", opaque={"protocol": "anthropic_messages", "signature": "s"}),
                                  Text("calling"), ToolCall("toolu_1", long, '{"q": 1}'),
                                  ToolCall("toolu_2", "apply_patch", "*** patch", kind="custom")]),
            Message("user", [ToolResult("toolu_1", [Text("result")], is_error=True),
                             ToolResult("toolu_2", [Text("ok")], kind="custom"),
                             ToolResult("toolu_3", [Text("see"), Image(source="url", url="https://x.test/a.png")]),
                             Text("thanks")]),
            Message("developer", [Text("be brief")]),
        ],
        tools=[Tool(long, "d", {"type": "object", "properties": {}}), Tool("apply_patch", kind="custom")],
        tool_choice=ToolChoice(mode="tool", name=long),
        max_output_tokens=8,
        stop=["END"],
        top_k=5,
        seed=1,
        reasoning=ReasoningConfig(budget_tokens=10000),
        user="user-1",
        metadata={"user_id": "u", "n": 3},
        stream=True,
    )
    w: list[str] = []
    body = R.encode_request(req, w)
    validate_request(body)
    assert body["instructions"] == "sys a\n\nsys b"
    short = body["tools"][0]["name"]
    assert len(short) <= 64 and short != long
    assert body["tool_choice"] == {"type": "function", "name": short}
    assert body["tools"][0]["strict"] is False
    assert body["tools"][1] == {"type": "custom", "name": "apply_patch"}
    types = [(i["type"], i.get("role")) for i in body["input"]]
    assert types == [("message", "user"), ("message", "assistant"), ("function_call", None),
                     ("custom_tool_call", None), ("function_call_output", None),
                     ("custom_tool_call_output", None), ("function_call_output", None),
                     ("message", "user"), ("message", "developer")]
    user = body["input"][0]["content"]
    assert user[1] == {"type": "input_image", "detail": "auto", "image_url": "data:image/jpeg;base64,AAA"}
    assert user[2] == {"type": "input_file", "file_data": "data:application/pdf;base64,JVB",
                       "filename": "document.pdf"}
    # a plain-text document stays a file: a text/plain input_file (issue 18)
    assert user[3] == {"type": "input_file", "file_data": "data:text/plain;base64,cGxhaW4gZG9j",
                       "filename": "document.txt"}
    fc = body["input"][2]
    assert fc == {"type": "function_call", "call_id": "toolu_1", "name": short, "arguments": '{"q": 1}'}
    assert body["input"][3] == {"type": "custom_tool_call", "call_id": "toolu_2", "name": "apply_patch",
                                "input": "*** patch"}
    assert body["input"][4]["output"] == "result"
    assert body["input"][6]["output"] == [{"type": "input_text", "text": "see"},
                                          {"type": "input_image", "detail": "auto",
                                           "image_url": "https://x.test/a.png"}]
    assert body["max_output_tokens"] == 16
    assert body["reasoning"] == {"effort": "medium"}
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["safety_identifier"] == "user-1" and body["metadata"] == {"user_id": "u", "n": "3"}
    assert "stop" not in body and "top_k" not in body and "seed" not in body
    joined = " | ".join(w)
    for needle in ("stop sequences", "top_k", "seed", "max_output_tokens", "thinking budget", "is_error",
                   "reasoning part"):
        assert needle in joined, needle


@pytest.mark.parametrize("budget,effort", [(1024, "minimal"), (2048, "low"), (4000, "low"), (8192, "medium"),
                                           (16384, "high"), (31999, "high"), (32768, "xhigh"), (500, "minimal")])
def test_budget_to_effort_table(budget, effort):
    body = R.encode_request(Request(model="m", reasoning=ReasoningConfig(budget_tokens=budget)), [])
    assert body["reasoning"]["effort"] == effort


def test_reasoning_disabled():
    w: list[str] = []
    body = R.encode_request(Request(model="m", reasoning=ReasoningConfig(disabled=True)), w)
    assert "reasoning" not in body and "include" not in body and w
    body = R.encode_request(Request(model="m", reasoning=ReasoningConfig(effort="none", disabled=True)), [])
    assert body["reasoning"] == {"effort": "none"} and "include" not in body


def test_previous_response_id_kept_for_responses_upstream():
    req = R.decode_request({"model": "m", "input": "x", "previous_response_id": "resp_1",
                            "conversation": "conv_1"}, [])
    assert req.extra["previous_response_id"] == "resp_1" and req.extra["conversation"] == "conv_1"
    body = R.encode_request(req, [])
    assert body["previous_response_id"] == "resp_1" and body["conversation"] == "conv_1"


# ============================================================================= stream decode (hand-written)
def _sse(*objs: dict, named: bool = True) -> bytes:
    out = b""
    for o in objs:
        if named:
            out += b"event: " + o["type"].encode() + b"\n"
        out += b"data: " + orjson.dumps(o) + b"\n\n"
    return out


def _snap(status: str = "in_progress", output: list | None = None, **kw: Any) -> dict:
    return _body(output or [], status, **kw)


def test_stream_arguments_only_in_done_events():
    """lesson #19: arguments that arrive only in .done / output_item.done."""
    item = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "",
            "status": "in_progress"}
    data = _sse(
        {"type": "response.created", "response": _snap()},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.function_call_arguments.done", "output_index": 0, "item_id": "fc_1",
         "arguments": '{"x": 2}'},
        {"type": "response.output_item.done", "output_index": 0, "item": dict(item, arguments='{"x": 2}')},
        {"type": "response.completed", "response": _snap("completed")},
        named=False,
    )
    events = decode_stream(data)
    ends = [e for e in events if isinstance(e, BlockEnd)]
    assert ends[0].part.arguments == '{"x": 2}' and ends[0].part.id == "call_1"
    assert next(e for e in events if isinstance(e, Stop)).stop.reason is StopReason.TOOL_USE
    cs = ClientStream(encode_stream(events))
    assert summary(cs.final)["calls"] == [("call_1", "f", {"x": 2})]


def test_stream_reasoning_summary_parts_joined():
    rid = "rs_1"
    data = _sse(
        {"type": "response.created", "response": _snap()},
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": rid, "type": "reasoning",
                                                                           "summary": []}},
        {"type": "response.reasoning_summary_part.added", "output_index": 0, "item_id": rid, "summary_index": 0,
         "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": rid, "summary_index": 0,
         "delta": "one"},
        {"type": "response.reasoning_summary_part.added", "output_index": 0, "item_id": rid, "summary_index": 1,
         "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": rid, "summary_index": 1,
         "delta": "two"},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": rid, "type": "reasoning", "encrypted_content": "ENC",
                  "summary": [{"type": "summary_text", "text": "one"}, {"type": "summary_text", "text": "two"}]}},
        {"type": "response.completed", "response": _snap("completed")},
    )
    col = Collector()
    for e in decode_stream(data):
        col.add(e)
    r = col.finish().parts[0]
    assert r.text == "one\n\ntwo" and r.summary == ["one", "two"]
    assert r.opaque == {"protocol": "openai_responses", "id": rid, "encrypted_content": "ENC"}


def test_stream_error_event_flat_and_nested():
    for err in ({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None},
                {"type": "error", "error": {"type": "rate_limit_error", "code": "rate_limit_exceeded",
                                            "message": "slow down", "param": None}}):
        events = decode_stream(_sse({"type": "response.created", "response": _snap()}, err))
        assert isinstance(events[-1], ErrorEvent)
        assert events[-1].error.kind == "rate_limit" and events[-1].error.message == "slow down"


def test_stream_failed_event():
    events = decode_stream(_sse({"type": "response.created", "response": _snap()},
                                {"type": "response.failed", "response": _snap(
                                    "failed", error={"code": "server_error", "message": "boom"})}))
    assert isinstance(events[-1], ErrorEvent) and events[-1].error.message == "boom"
    assert events[-1].error.kind == "api_error"


def test_stream_eof_before_terminal_and_done_marker():
    w: list[str] = []
    events = decode_stream(_sse({"type": "response.created", "response": _snap()}) + b"data: [DONE]\n\n", w)
    assert isinstance(events[-1], ErrorEvent) and events[-1].error.kind == "interrupted"
    assert not w  # [DONE] is not a problem
    # a cut final frame after the terminal is still complete
    dec = R.StreamDecoder([])
    dec.feed(None, orjson.dumps({"type": "response.created", "response": _snap()}).decode())
    out = dec.feed(None, orjson.dumps({"type": "response.completed", "response": _snap("completed")}).decode())
    assert isinstance(out[-1], End) and dec.done and dec.finish() == []


def test_stream_unknown_events_and_bad_json_warn_once():
    w: list[str] = []
    dec = R.StreamDecoder(w)
    dec.feed(None, orjson.dumps({"type": "response.created", "response": _snap()}).decode())
    for _ in range(3):
        assert dec.feed(None, '{"type":"response.brand_new","x":1}') == []
    assert dec.feed("response.web_search_call.searching",
                    '{"type":"response.web_search_call.searching","output_index":0}') == []
    assert dec.feed(None, '{"type": "response.output_te') == []
    assert len([x for x in w if "response.brand_new" in x]) == 1
    assert len(w) == 2


def test_stream_type_in_json_is_authoritative():
    d = orjson.dumps({"type": "response.created", "response": _snap()}).decode()
    assert isinstance(R.StreamDecoder([]).feed("response.completed", d)[0], Start)
    # no type in the JSON: the event: line decides
    assert isinstance(R.StreamDecoder([]).feed("response.created", orjson.dumps({"response": _snap()}).decode())[0],
                      Start)
    # ... for the deltas too (read before the other events)
    dec = R.StreamDecoder([])
    dec.feed(None, orjson.dumps({"type": "response.output_item.added", "output_index": 0, "item": {
        "type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": ""}}).decode())
    dec.feed(None, orjson.dumps({"type": "response.output_item.added", "output_index": 1, "item": {
        "type": "message", "id": "msg_1", "content": []}}).decode())
    for name, payload, kind in (("response.function_call_arguments.delta", {"output_index": 0, "delta": "{}"},
                                 "arguments"),
                                ("response.output_text.delta", {"output_index": 1, "content_index": 0, "delta": "hi"},
                                 "text")):
        evs = dec.feed(name, orjson.dumps(payload).decode())
        assert [type(e) for e in evs][-1] is Delta and evs[-1].kind == kind


def test_stream_refusal_and_content_filter():
    mid = "msg_1"
    data = _sse(
        {"type": "response.created", "response": _snap()},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": mid, "type": "message", "role": "assistant", "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "output_index": 0, "item_id": mid, "content_index": 0,
         "part": {"type": "refusal", "refusal": ""}},
        {"type": "response.refusal.delta", "output_index": 0, "item_id": mid, "content_index": 0, "delta": "No."},
        {"type": "response.refusal.done", "output_index": 0, "item_id": mid, "content_index": 0, "refusal": "No."},
        {"type": "response.content_part.done", "output_index": 0, "item_id": mid, "content_index": 0,
         "part": {"type": "refusal", "refusal": "No."}},
        {"type": "response.output_item.done", "output_index": 0,
         "item": _msg(_ref("No."))},
        {"type": "response.incomplete", "response": _snap("incomplete", [_msg(_ref("No."))],
                                                          incomplete_details={"reason": "content_filter"})},
    )
    stop = next(e for e in decode_stream(data) if isinstance(e, Stop)).stop
    assert stop.reason is StopReason.REFUSAL and stop.raw == "content_filter" and stop.message == "No."


# ============================================================================= stream encode (neutral -> client)
def _anthropic_like(parts_events: list, stop: StopInfo, usage: Usage | None = None) -> list:
    evs: list = [Start("msg_01X", "claude-x", Usage(input=5), 7)]
    evs.extend(parts_events)
    if usage:
        evs.append(UsageEvent(usage))
    evs.append(Stop(stop))
    evs.append(End())
    return evs


def test_stream_encode_text_tool_reasoning():
    op = {"protocol": "anthropic_messages", "signature": "sig"}
    evs = _anthropic_like([
        BlockStart(0, Reasoning()), Delta(0, "reasoning", "hmm"), Delta(0, "signature", "sig"),
        BlockEnd(0, Reasoning("hmm", opaque=op)),
        BlockStart(1, Text("")), Delta(1, "text", "Hello "), Delta(1, "text", "world"), BlockEnd(1),
        BlockStart(2, Text("")), Delta(2, "text", "!"), BlockEnd(2),
        BlockStart(3, ToolCall("toolu_5", "get", "")), Delta(3, "arguments", '{"a":'), Delta(3, "arguments", "1}"),
        BlockEnd(3),
        BlockStart(4, ToolCall("toolu_6", "apply_patch", "", kind="custom")), Delta(4, "arguments", "*** x"),
        BlockEnd(4),
    ], classify_stop("tool_use"), Usage(input=5, cache_read=10, output=30, reasoning=3))
    cs = ClientStream(encode_stream(evs))
    f = cs.final
    assert f["status"] == "completed" and f["id"] == "resp_01X"
    assert [i["type"] for i in f["output"]] == ["reasoning", "message", "function_call", "custom_tool_call"]
    assert [c["text"] for c in f["output"][1]["content"]] == ["Hello world", "!"]  # one message, two parts
    assert f["output"][2]["id"] == "fc_5" and f["output"][2]["arguments"] == '{"a":1}'
    assert f["output"][3]["input"] == "*** x"
    r = f["output"][0]
    assert r["summary"] == [{"type": "summary_text", "text": "hmm"}]
    payload = rz.unpack(r["encrypted_content"])
    assert payload["signature"] == "sig" and payload["text"] == "hmm"
    assert f["usage"]["input_tokens"] == 15 and f["usage"]["input_tokens_details"]["cached_tokens"] == 10
    sdk = cs.sdk_final
    assert sdk.output_text == "Hello world!"
    assert [o.type for o in sdk.output] == ["reasoning", "message", "function_call", "custom_tool_call"]
    # the non-streaming encoding of the same response has the same ids
    col = Collector()
    for e in evs:
        col.add(e)
    body = R.encode_response(col.finish(), CTX, [])
    assert [i["id"] for i in body["output"]] == [i["id"] for i in f["output"]]


def test_stream_encode_interleaved_blocks():
    evs = _anthropic_like([
        BlockStart(0, Text("")), Delta(0, "text", "a"),
        BlockStart(1, ToolCall("call_1", "f", "")), Delta(1, "arguments", "{}"),
        Delta(0, "text", "b"),
        BlockStart(2, ToolCall("call_2", "g", "")), Delta(2, "arguments", '{"z":1}'),
        BlockEnd(1), BlockEnd(0), BlockEnd(2),
    ], classify_stop("tool_calls"))
    cs = ClientStream(encode_stream(evs))
    assert summary(cs.final)["text"] == "ab"
    assert [c[1] for c in summary(cs.final)["calls"]] == ["f", "g"]


def test_stream_encode_late_arguments_and_text():
    evs = _anthropic_like([
        BlockStart(0, ToolCall("call_1", "f", "")), BlockEnd(0, ToolCall("call_1", "f", '{"late": true}')),
        BlockStart(1, Text("")), BlockEnd(1, Text("only at end")),
    ], classify_stop("tool_use"))
    s = summary(ClientStream(encode_stream(evs)).final)
    assert s["calls"] == [("call_1", "f", {"late": True})] and s["text"] == "only at end"


def test_stream_encode_max_tokens_is_incomplete():
    cs = ClientStream(encode_stream(_anthropic_like([BlockStart(0, Text("")), Delta(0, "text", "cut"),
                                                     BlockEnd(0)], classify_stop("max_tokens"))))
    assert cs.final["status"] == "incomplete" and cs.final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cs.events[-1]["type"] == "response.incomplete"
    assert cs.final["output"][0]["status"] == "incomplete"


def test_stream_encode_anthropic_refusal_adds_refusal_part():
    stop = classify_stop("refusal", message="The request asks for unsafe instructions.")
    cs = ClientStream(encode_stream(_anthropic_like([BlockStart(0, Text("")), Delta(0, "text", "I can't."),
                                                     BlockEnd(0)], stop)))
    f = cs.final
    assert f["status"] == "completed"
    assert f["output"][0]["content"] == [
        {"type": "output_text", "text": "I can't.", "annotations": [], "logprobs": []},
        {"type": "refusal", "refusal": "The request asks for unsafe instructions."}]
    assert any(e["type"] == "response.refusal.delta" for e in cs.events)
    back = next(e for e in decode_stream(encode_stream(_anthropic_like([], stop))) if isinstance(e, Stop))
    assert back.stop.reason is StopReason.REFUSAL


def test_stream_encode_content_filter_empty():
    stop = classify_stop("content_filter", message=GENERIC_CONTENT_FILTER_REFUSAL)
    cs = ClientStream(encode_stream(_anthropic_like([], stop)))
    assert cs.final["status"] == "incomplete" and cs.final["incomplete_details"] == {"reason": "content_filter"}
    assert summary(cs.final)["refusal"] == GENERIC_CONTENT_FILTER_REFUSAL


def test_stream_encode_refusal_block_is_not_duplicated():
    stop = StopInfo(StopReason.REFUSAL, raw="stop", category="output-refusal", message="no")
    cs = ClientStream(encode_stream(_anthropic_like([BlockStart(0, Refusal("")), Delta(0, "refusal", "no"),
                                                     BlockEnd(0)], stop)))
    assert summary(cs.final)["refusal"] == "no"


def test_stream_encode_error_event():
    evs = [Start("chatcmpl-1", "m"), BlockStart(0, Text("")), Delta(0, "text", "part"),
           ErrorEvent(Error(kind="overloaded", message="busy", status=529))]
    enc = R.StreamEncoder(CTX, [])
    data = b"".join(enc.encode(e) for e in evs)
    assert enc.encode(End()) == b""  # nothing after the terminal
    cs = ClientStream(data)
    err = cs.error
    assert err["message"] == "busy" and err["code"] == "overloaded"
    assert err["error"] == {"type": "server_error", "code": "overloaded", "message": "busy", "param": None}
    assert cs.final["status"] == "failed" and cs.final["error"] == {"code": "server_error", "message": "busy"}
    assert cs.events[-1]["type"] == "response.failed"
    assert summary(cs.final)["text"] == "part"


def test_stream_encode_without_start_and_model_echo():
    ctx = ClientContext(protocol=Protocol.RESPONSES, model="client-model")
    cs = ClientStream(encode_stream([BlockStart(0, Text("")), Delta(0, "text", "x"), BlockEnd(0),
                                     Stop(classify_stop("stop")), End()], ctx))
    assert cs.final["model"] == "client-model" and cs.events[0]["response"]["model"] == "client-model"


def test_error_frame_has_both_shapes():
    data = R.error_frame(Error(kind="rate_limit", message="slow", status=429), sequence_number=4)
    evs = sse_events(data)
    assert [n for n, _ in evs] == ["error", "response.failed"]
    e = json.loads(evs[0][1])
    assert e["message"] == "slow" and e["code"] == "rate_limit_exceeded" and e["error"]["message"] == "slow"
    assert e["sequence_number"] == 4
    f = json.loads(evs[1][1])
    assert f["sequence_number"] == 5 and f["response"]["error"]["code"] == "rate_limit_exceeded"
    orr.Response.model_validate(f["response"])


def test_response_to_events_round_trip_same_ids():
    """stream_from_response-like path: a complete response re-encoded as a stream keeps the items."""
    body = _body([{"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}],
                   "encrypted_content": "E"}, _msg(_ot("hello")), _fc()])
    resp = R.decode_response(body, [])
    cs = ClientStream(encode_stream(response_to_events(resp), build_context({"model": "m"}, "openai_responses")))
    assert summary(cs.final) == dict(summary(body), reasoning=1)
    # our own reasoning goes out natively (its id is minted: BlockStart does not carry the opaque)
    r = cs.final["output"][0]
    assert r["id"].startswith("rs_") and r["encrypted_content"] == "E"
    assert cs.final["output"][2]["id"] == "fc_1"


def test_decode_response_keeps_citations_and_hosted_items():
    ann = {"type": "url_citation", "url": "https://a.test", "title": "A", "start_index": 0, "end_index": 3}
    ws = {"id": "ws_1", "type": "web_search_call", "status": "completed",
          "action": {"type": "search", "query": "q"}}
    body = _body([ws, _msg({"type": "output_text", "text": "abc", "annotations": [ann]})])
    resp = R.decode_response(body, [])
    # the search is a neutral web search call keeping its item; its pages are the ones the text cites
    assert isinstance(resp.parts[0], WebSearchCall) and resp.parts[0].query == "q"
    assert isinstance(resp.parts[1], WebSearchResults) and resp.parts[1].results[0].url == "https://a.test"
    assert resp.parts[2].citations[0]["url"] == "https://a.test"
    out = _enc(resp)
    assert out["output"][0] == ws and out["output"][1]["content"][0]["annotations"] == [ann]


@pytest.mark.parametrize("model", ["m", 'quote " é 😀', None])
def test_stream_opening_frames_equal_frame(model):
    """response.created + response.in_progress are one template around one written snapshot: the bytes
    frame() gives for each event's dict."""
    from proxai_core.sse import frame

    enc = R.StreamEncoder(ClientContext(protocol=Protocol.RESPONSES, model=model), [])
    got = enc.encode(Start("msg_01\"x", "upstream", Usage(input=3, output=1), 1700000000))
    snap = R._response_shell("resp_01\"x", model or "upstream", 1700000000, "in_progress", [], None, None, None)
    assert got == (frame("response.created", {"type": "response.created", "sequence_number": 0, "response": snap})
                   + frame("response.in_progress", {"type": "response.in_progress", "sequence_number": 1,
                                                     "response": snap}))
    assert enc._seq == 2


@pytest.mark.parametrize("iid", ["msg_1_0", 'fc_%d "100%" \\ é'])
def test_stream_delta_frames_equal_frame(iid):
    """The delta frames are one template per item (sequence number and value left): the bytes frame()
    gives for each event's dict, whatever the item id holds."""
    from proxai_core.sse import frame

    enc = R.StreamEncoder(CTX, [])
    enc._seq = 41
    out: list[bytes] = []
    text = R._Blk("text", 16, iid)
    text.content_index = 3
    tool = R._Blk("tool", 2, iid)
    custom = R._Blk("custom", 250, iid)
    for v in ("", "%s %d %b", 'a"\\\n\x00😀'):
        seq = enc._seq
        enc._text_delta(text, v, out)
        enc._args_delta(tool, v, out)
        enc._args_delta(custom, v, out)
        assert out[-3:] == [
            frame("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": seq,
                                                 "item_id": iid, "output_index": 16, "content_index": 3,
                                                 "delta": v, "logprobs": []}),
            frame("response.function_call_arguments.delta", {
                "type": "response.function_call_arguments.delta", "sequence_number": seq + 1, "item_id": iid,
                "output_index": 2, "delta": v}),
            frame("response.custom_tool_call_input.delta", {
                "type": "response.custom_tool_call_input.delta", "sequence_number": seq + 2, "item_id": iid,
                "output_index": 250, "delta": v})]


@pytest.mark.parametrize("src_id", ["msg_01", 'chatcmpl-%d "q" \\ é 😀'])
def test_stream_frames_are_frame_of_their_payload(src_id):
    """Every frame the encoder writes, templates included (message added, text part added, text done,
    deltas, the opening), is exactly frame() of its own payload: one writer per shape, no drift."""
    from proxai_core.sse import frame

    stop = StopInfo(StopReason.END_TURN, raw="stop")
    evs = [Start(src_id, "m", Usage(input=2, output=1), 5), BlockStart(0, Text("")),
           Delta(0, "text", 'a "%s" \\ \n 😀'), Delta(0, "text", "%b"), BlockEnd(0, Text("x")),
           BlockStart(1, Text("")), BlockEnd(1, Text("only in the end %d")),
           BlockStart(2, ToolCall("call_%1", 'f"%', "", "function")), Delta(2, "arguments", '{"a": "%d"}'),
           BlockEnd(2), BlockStart(3, Text("")), Delta(3, "text", "cited"),
           BlockEnd(3, Text("cited", citations=[{"type": "url", "url": "https://a.test/%d", "title": 't "%b"',
                                                  "start": 0, "end": 5}])), Stop(stop), End()]
    enc = R.StreamEncoder(CTX, [])
    data = b"".join(enc.encode(e) for e in evs)
    names = [n for n, _ in sse_events(data)]
    assert {"response.output_item.added", "response.content_part.added", "response.output_text.done",
            "response.output_text.delta", "response.function_call_arguments.delta", "response.content_part.done",
            "response.output_text.annotation.added"} <= set(names)
    for name, payload in sse_events(data):
        assert frame(name, orjson.loads(payload)) == f"event: {name}\ndata: {payload}\n\n".encode()
    assert [orjson.loads(p)["sequence_number"] for _, p in sse_events(data)] == list(range(len(names)))
    cs = ClientStream(data)
    assert summary(cs.final)["text"] == 'a "%s" \\ \n 😀%bonly in the end %dcited'
    done = [orjson.loads(p) for n, p in sse_events(data) if n == "response.content_part.done"]
    assert done[-1]["part"]["annotations"][0]["url"] == "https://a.test/%d"


def test_stream_item_nested_deeper_than_orjson_writes():
    """A hosted item of the upstream nested past orjson's depth limit still goes out, in its added, done
    and terminal frames (the writer of each falls back to frame())."""
    deep: dict[str, Any] = {"type": "mcp_call", "id": "mcp_1"}
    cur = deep
    for _ in range(300):
        cur["x"] = {}
        cur = cur["x"]
    evs = [Start("resp_1", "m"), BlockStart(0, Opaque(R.PROTOCOL, deep, "mcp_call")), BlockEnd(0),
           Stop(StopInfo(StopReason.END_TURN, raw="completed")), End()]
    enc = R.StreamEncoder(CTX, [])
    data = b"".join(enc.encode(e) for e in evs)
    events = list(sse_events(data))
    assert [n for n, _ in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                      "response.output_item.done", "response.completed"]
    final = orjson.loads(events[-1][1])
    assert final["sequence_number"] == 4 and final["response"]["output"] == [deep]
    assert orjson.loads(events[2][1])["item"] == deep
