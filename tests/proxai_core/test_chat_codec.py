"""OpenAI Chat Completions codec: fixtures (real recordings), seed rules, edge cases.

Every body produced is validated with the official SDK types; every stream produced is
accumulated by the SDK's own ``ChatCompletionStreamState`` and compared semantically with the
source (text, refusal, tool calls with JSON-equal arguments, finish).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pydantic
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

from proxai_core import build_context
from proxai_core import reasoning as rz
from proxai_core.codecs import chat
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
    Message,
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
from proxai_core.protocol import Protocol
from proxai_core.sse import SSEReader, frame
from proxai_core.stop import GENERIC_CONTENT_FILTER_REFUSAL, StopInfo, StopReason, classify_stop
from tests.conftest import FIXTURES, fixture_dir

CHAT_DIR = fixture_dir(chat.CODEC.protocol)

_NONSTREAM = pydantic.TypeAdapter(CompletionCreateParamsNonStreaming)
_STREAM = pydantic.TypeAdapter(CompletionCreateParamsStreaming)


def _files(pattern: str) -> list[Path]:
    if not CHAT_DIR.is_dir():
        return []
    return sorted(CHAT_DIR.glob(pattern))


def _features() -> dict[str, set[str]]:
    idx = FIXTURES / "INDEX.tsv"
    if not idx.is_file():
        return {}
    out = {}
    with idx.open(newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["file"].startswith("chat/"):
                out[row["file"][5:]] = set(filter(None, row["features"].split(",")))
    return out


FEATURES = _features()
JSON_FILES = [p for p in _files("*.json") if not p.name.endswith(".request.json")]
SSE_FILES = _files("*.sse")
REQUEST_FILES = _files("*.request.json")

needs_fixtures = pytest.mark.skipif(not CHAT_DIR.is_dir(), reason="../shared/fixtures not present")


def _force(v: Any) -> Any:
    """Consume pydantic's lazy ValidatorIterators so TypedDict validation really runs."""
    if isinstance(v, dict):
        return {k: _force(x) for k, x in v.items()}
    if v is None or isinstance(v, (str, bytes, int, float, bool)):
        return v
    if isinstance(v, list) or hasattr(v, "__iter__"):
        return [_force(x) for x in v]
    return v


def _validate_request(body: dict[str, Any]) -> None:
    _force((_STREAM if body.get("stream") else _NONSTREAM).validate_python(body))


def _ctx(**kw: Any) -> ClientContext:
    return ClientContext(Protocol.CHAT, **kw)


def _json_eq(a: str, b: str) -> bool:
    try:
        return json.loads(a or "null") == json.loads(b or "null")
    except ValueError:
        return a == b


# ----------------------------------------------------------------------------- stream helpers
def _decode_stream(data: bytes, warnings: list[str] | None = None) -> list[Any]:
    w = warnings if warnings is not None else []
    reader = SSEReader()
    dec = chat.StreamDecoder(w)
    evs: list[Any] = []
    for sev in reader.feed(data) + reader.close():
        evs += dec.feed(sev[0], sev[1])
    if not dec.done:
        evs += dec.finish()
    return evs


def _encode_stream(evs: list[Any], ctx: ClientContext | None = None,
                   warnings: list[str] | None = None) -> bytes:
    enc = chat.StreamEncoder(ctx or _ctx(include_usage=True), warnings if warnings is not None else [])
    return b"".join(enc.encode(e) for e in evs)


def _frames(out: bytes) -> list[str]:
    assert b"event:" not in out, "Chat streams use bare data: lines"
    r = SSEReader()
    return [d for _, d in r.feed(out) + r.close()]


def _accumulate_ours(out: bytes) -> dict[str, Any]:
    """Our output through the SDK: every chunk validated, ChatCompletionStreamState accumulates."""
    frames = _frames(out)
    st = ChatCompletionStreamState()
    res: dict[str, Any] = {"done": False, "error": None, "snapshot": None, "usage": None, "ids": set()}
    for i, d in enumerate(frames):
        if d == "[DONE]":
            assert i == len(frames) - 1, "[DONE] must be last"
            res["done"] = True
            continue
        obj = orjson.loads(d)
        if "error" in obj:
            assert i == len(frames) - 1, "nothing may follow the error frame"
            assert set(obj["error"]) >= {"message", "type", "param", "code"}
            res["error"] = obj["error"]
            continue
        chunk = ChatCompletionChunk.model_validate(obj)
        res["ids"].add(chunk.id)
        assert chunk.id.startswith("chatcmpl-")
        if chunk.usage is not None:
            res["usage"] = chunk.usage
        st.handle_chunk(chunk)
    if frames and frames[0] != "[DONE]" and "error" not in orjson.loads(frames[0]):
        res["snapshot"] = st.current_completion_snapshot
    return res


def _snapshot_facts(res: dict[str, Any]) -> dict[str, Any]:
    snap = res["snapshot"]
    if snap is None or not snap.choices:
        return {"text": "", "refusal": "", "tools": [], "finish": None, "reasoning": ""}
    ch = snap.choices[0]
    m = ch.message
    extra = m.model_extra or {}
    return {
        "text": m.content or "",
        "refusal": m.refusal or "",
        "tools": [(t.id, t.function.name, t.function.arguments) for t in (m.tool_calls or [])],
        "finish": ch.finish_reason,
        "reasoning": extra.get("reasoning_content") or extra.get("reasoning") or "",
    }


def _accumulate_source(data: bytes) -> dict[str, Any]:
    """An independent, minimal accumulator of a Chat stream (first choice only)."""
    r = SSEReader()
    text, refusal, reasoning = [], [], []
    calls: list[dict[str, Any]] = []
    by_index: dict[Any, dict[str, Any]] = {}
    finish = None
    error = False
    usage = None
    for _, d in r.feed(data) + r.close():
        if d.strip() == "[DONE]":
            continue
        obj = json.loads(d)
        if obj.get("error") is not None:
            error = True
            continue
        if obj.get("usage"):
            usage = obj["usage"]
        for ch in obj.get("choices") or []:
            if ch.get("index", 0) != 0:
                continue
            delta = ch.get("delta") or {}
            if finish is None:
                text.append(delta.get("content") or "")
                refusal.append(delta.get("refusal") or "")
                rsn = delta.get("reasoning_content") or delta.get("reasoning")
                if not rsn and delta.get("reasoning_details"):
                    rsn = "".join(x.get("text") or "" for x in delta["reasoning_details"])
                reasoning.append(rsn or "")
                for tc in delta.get("tool_calls") or []:
                    cur = by_index.get(tc.get("index"))
                    if cur is None or (tc.get("id") and tc["id"] != cur["id"]):
                        cur = {"id": tc.get("id"), "name": "", "args": ""}
                        by_index[tc.get("index")] = cur
                        calls.append(cur)
                    fn = tc.get("function") or {}
                    if fn.get("name") and not cur["name"]:
                        cur["name"] = fn["name"]
                    cur["args"] += fn.get("arguments") or ""
            if ch.get("finish_reason") and finish is None:
                finish = ch["finish_reason"]
    return {"text": "".join(text), "refusal": "".join(refusal), "reasoning": "".join(reasoning),
            "tools": [(c["id"], c["name"], c["args"]) for c in calls], "finish": finish, "error": error,
            "usage": usage}


def _expected_reason(features: set[str], has_tools: bool) -> StopReason | None:
    if "refusal" in features:
        return StopReason.REFUSAL
    for f in features:
        if f.startswith("finish:"):
            return classify_stop(f[7:], has_tool_calls=has_tools).reason
    return None


# ============================================================================= fixtures: JSON
@needs_fixtures
@pytest.mark.parametrize("path", JSON_FILES, ids=lambda p: p.name[:90])
def test_fixture_json_response(path: Path) -> None:
    body = json.loads(path.read_bytes())
    if "choices" not in body:  # an HTTP error body
        err = parse_error(400, body)
        assert isinstance(err, Error) and err.message and err.kind
        return
    w: list[str] = []
    resp = chat.decode_response(body, w)
    src = body["choices"][0]
    msg = src["message"]
    tools = [t for t in (msg.get("tool_calls") or []) if (t.get("function") or {}).get("name")]
    feats = FEATURES.get(path.name, set())
    exp = _expected_reason(feats, bool(tools))
    assert resp.stop is not None
    if exp is not None:
        assert resp.stop.reason is exp
    elif not src.get("finish_reason"):
        assert resp.stop.raw is None
        assert resp.stop.reason is (StopReason.TOOL_USE if tools else StopReason.END_TURN)

    out = chat.encode_response(resp, _ctx(model="client-model"), w)
    ChatCompletion.model_validate(out)
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    assert out["model"] == "client-model"
    om = out["choices"][0]["message"]
    content = msg.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if p.get("type") == "text")
    assert (om["content"] or "") == (content or "")
    assert (om["refusal"] or "") == (msg.get("refusal") or "")
    got = [(t["id"], t["function"]["name"], t["function"]["arguments"]) for t in om.get("tool_calls") or []]
    assert [b for _, b, _ in got] == [t["function"]["name"] for t in tools]
    for (i, _, a), t in zip(got, tools, strict=True):
        assert i == t["id"] if t["id"] else i.startswith("call_")  # ids kept; minted only when missing
        assert _json_eq(a, t["function"]["arguments"])
    src_rsn = msg.get("reasoning_content") or msg.get("reasoning")
    if src_rsn:
        assert (om.get("reasoning_content") or om.get("reasoning")) == src_rsn
    if src.get("finish_reason") in ("stop", "length", "tool_calls", "content_filter"):
        assert out["choices"][0]["finish_reason"] == src["finish_reason"]
    u = body.get("usage")
    if u:
        assert out["usage"]["prompt_tokens"] == u["prompt_tokens"]
        rt = (u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
        xai = rt and u.get("total_tokens") == u["prompt_tokens"] + u["completion_tokens"] + rt
        assert out["usage"]["completion_tokens"] == u["completion_tokens"] + (rt if xai else 0)
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == cached


# ============================================================================= fixtures: SSE
@needs_fixtures
@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: p.name[:90])
def test_fixture_stream(path: Path) -> None:
    data = path.read_bytes()
    src = _accumulate_source(data)
    w: list[str] = []
    evs = _decode_stream(data, w)
    feats = FEATURES.get(path.name, set())
    kinds = [type(e).__name__ for e in evs]
    assert kinds[0] == "Start"
    col = collect(evs)
    if "error-midstream" in feats:
        assert isinstance(evs[-1], ErrorEvent)
        assert not any(isinstance(e, Stop) for e in evs)
    else:
        assert kinds[-2:] == ["Stop", "End"]
        exp = _expected_reason(feats, bool(src["tools"]))
        stop = evs[-2].stop
        assert stop.reason is (exp or (StopReason.TOOL_USE if src["tools"] else StopReason.END_TURN))
        assert stop.raw == src["finish"]
    # every delta inside an open block; blocks closed before Stop
    open_: set[int] = set()
    for e in evs:
        if isinstance(e, BlockStart):
            assert e.index not in open_
            open_.add(e.index)
        elif isinstance(e, Delta):
            assert e.index in open_
        elif isinstance(e, BlockEnd):
            open_.remove(e.index)
        elif isinstance(e, Stop):
            assert not open_

    out = _encode_stream(evs, _ctx(model="client-model", include_usage=True), w)
    res = _accumulate_ours(out)
    facts = _snapshot_facts(res)
    assert facts["text"] == src["text"]
    assert facts["refusal"] == src["refusal"]
    assert facts["reasoning"] == src["reasoning"]
    assert [(a, b) for a, b, _ in facts["tools"]] == [(a, b) for a, b, _ in src["tools"]]
    for (_, _, a), (_, _, b) in zip(facts["tools"], src["tools"], strict=True):
        assert _json_eq(a, b)
    assert len(res["ids"]) <= 1
    if res["snapshot"] is not None:
        assert res["snapshot"].model == "client-model"
    if "error-midstream" in feats:
        assert res["error"] is not None and not res["done"]
    else:
        assert res["done"] and res["error"] is None
        assert facts["finish"] == (src["finish"] or ("tool_calls" if src["tools"] else "stop"))
        if src["usage"]:
            assert res["usage"] is not None
            assert res["usage"].prompt_tokens == src["usage"]["prompt_tokens"]
    # the collected stream also makes a valid complete response
    resp = col.response
    if col.error is None:
        body = chat.encode_response(resp, _ctx(), [])
        ChatCompletion.model_validate(body)
        assert (body["choices"][0]["message"]["content"] or "") == src["text"]


# ============================================================================= fixtures: requests
def _msg_text(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if p.get("type") == "text")
    return c or ""


@needs_fixtures
@pytest.mark.parametrize("path", REQUEST_FILES, ids=lambda p: p.name[:90])
def test_fixture_request_roundtrip(path: Path) -> None:
    body = json.loads(path.read_bytes())
    w: list[str] = []
    parts = [p for m in body["messages"] if isinstance(m.get("content"), list) for p in m["content"]]
    req = chat.decode_request(body, w)
    for p in parts:  # vendor parts (OpenRouter video_url) are Opaque: kept toward Chat, dropped elsewhere
        if p.get("type") == "video_url":
            assert any(isinstance(x, Opaque) and x.raw == p for m in req.messages for x in m.parts)
    if req.extra.get("server_tools"):
        # gateway server tools (openrouter:web_search) stay toward a Chat upstream
        out = chat.encode_request(req, w)
        assert [t for t in out["tools"] if ":" in str(t.get("type"))] == req.extra["server_tools"]
        return
    out = chat.encode_request(req, w)
    try:
        _validate_request(body)
    except pydantic.ValidationError:  # vendor shapes (Mistral thinking parts) are kept as they came
        pass
    else:  # a request the SDK accepts stays one it accepts
        _validate_request(out)
    assert out["model"] == body["model"]
    assert bool(out.get("stream")) == bool(body.get("stream"))
    if body.get("stream"):
        assert out["stream_options"] == {"include_usage": True}
    # roles and text survive (leading system/developer messages of one role are merged)
    def norm(msgs: list[dict[str, Any]]) -> list[tuple[str, str]]:
        res: list[tuple[str, str]] = []
        for m in msgs:
            t = _msg_text(m)
            if res and m["role"] in ("system", "developer") and res[-1][0] == m["role"] and \
                    all(r[0] == m["role"] for r in res):
                res[-1] = (m["role"], res[-1][1] + "\n\n" + t)
            else:
                res.append((m["role"], t))
        return res
    assert norm(out["messages"]) == norm(body["messages"])
    assert [p for m in out["messages"] if isinstance(m.get("content"), list) for p in m["content"]
            if p.get("type") == "video_url"] == [p for p in parts if p.get("type") == "video_url"]
    src_calls = [(t["id"], t["function"]["name"], t["function"]["arguments"])
                 for m in body["messages"] if m["role"] == "assistant" for t in m.get("tool_calls") or []]
    got_calls = [(t["id"], t["function"]["name"], t["function"]["arguments"])
                 for m in out["messages"] if m["role"] == "assistant" for t in m.get("tool_calls") or []]
    assert [c[:2] for c in got_calls] == [c[:2] for c in src_calls]
    for a, b in zip(got_calls, src_calls, strict=True):
        assert _json_eq(a[2], b[2])
    src_results = [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    got_results = [(m["tool_call_id"], m["content"]) for m in out["messages"] if m["role"] == "tool"]
    assert got_results == src_results
    if body.get("tools"):
        assert [t["function"]["name"] for t in out["tools"]] == [t["function"]["name"] for t in body["tools"]]
        assert [t["function"].get("parameters") for t in out["tools"]] == \
            [t["function"].get("parameters") for t in body["tools"]]
    for k in ("temperature", "top_p", "seed", "parallel_tool_calls", "reasoning_effort"):
        if k in body:
            assert out[k] == body[k]
    mt = body.get("max_completion_tokens", body.get("max_tokens"))
    if mt is not None:
        assert out["max_completion_tokens"] == mt


# ============================================================================= seed 000: refusals
def _anthropic_refusal(text: str | None) -> Response:
    parts = [Text(text)] if text else []
    return Response(id="msg_01ABC", model="claude-x", parts=parts,
                    stop=classify_stop("refusal", category="cyber",
                                       message="The request asks for unsafe instructions.",
                                       detail={"type": "refusal", "category": "cyber"}),
                    usage=Usage(input=10, output=5))


def test_seed000_anthropic_refusal_with_visible_text_nonstreaming() -> None:
    w: list[str] = []
    out = chat.encode_response(_anthropic_refusal("I can't provide instructions for that request."),
                               _ctx(model="gpt-client"), w)
    ChatCompletion.model_validate(out)
    ch = out["choices"][0]
    assert ch["message"]["refusal"] == "I can't provide instructions for that request."
    assert ch["message"]["content"] is None
    assert ch["finish_reason"] == "stop"
    assert out["id"] == "chatcmpl-01ABC"
    assert "cyber" not in orjson.dumps(out).decode()  # category not mapped


def test_seed000_anthropic_refusal_without_text_uses_explanation() -> None:
    out = chat.encode_response(_anthropic_refusal(None), _ctx(), [])
    ChatCompletion.model_validate(out)
    m = out["choices"][0]["message"]
    assert m["refusal"] == "The request asks for unsafe instructions."
    assert m["content"] is None
    assert out["choices"][0]["finish_reason"] == "stop"


def test_seed000_refusal_part_is_never_duplicated_in_content() -> None:
    resp = Response(parts=[Text("I can help with safe alternatives."),
                           Refusal("I can't provide instructions for that request.")],
                    stop=StopInfo(StopReason.REFUSAL, raw="completed", category="output-refusal",
                                  message="I can't provide instructions for that request."))
    out = chat.encode_response(resp, _ctx(), [])
    ChatCompletion.model_validate(out)
    m = out["choices"][0]["message"]
    assert m["content"] == "I can help with safe alternatives."
    assert m["refusal"] == "I can't provide instructions for that request."
    assert out["choices"][0]["finish_reason"] == "stop"
    only = chat.encode_response(Response(parts=[Refusal("No.")], stop=StopInfo(StopReason.REFUSAL,
                                                                               message="No.")), _ctx(), [])
    assert only["choices"][0]["message"] == {"role": "assistant", "content": None, "refusal": "No."}


def _refusal_stream(with_text: bool) -> list[Any]:
    evs: list[Any] = [Start("msg_01", "claude-x", None, 123)]
    if with_text:
        evs += [BlockStart(0, Text("")), Delta(0, "text", "I can't help"), Delta(0, "text", " with that."),
                BlockEnd(0)]
    evs += [UsageEvent(Usage(input=3, output=4)),
            Stop(classify_stop("refusal", category="cyber", message="Unsafe request.")), End()]
    return evs


def test_seed000_streaming_refusal_without_prior_content_sends_explanation() -> None:
    out = _encode_stream(_refusal_stream(False), _ctx(model="m"))
    frames = _frames(out)
    refusal_chunks = [f for f in frames if '"refusal"' in f]
    assert len(refusal_chunks) == 1
    facts = _snapshot_facts(_accumulate_ours(out))
    assert facts["refusal"] == "Unsafe request."
    assert facts["text"] == ""
    assert facts["finish"] == "stop"


def test_seed000_streaming_refusal_after_content_sends_no_duplicate() -> None:
    out = _encode_stream(_refusal_stream(True), _ctx(model="m"))
    assert b'"refusal"' not in out
    facts = _snapshot_facts(_accumulate_ours(out))
    assert facts["text"] == "I can't help with that."
    assert facts["refusal"] == ""
    assert facts["finish"] == "stop"


def test_seed000_streaming_refusal_deltas_not_repeated_at_stop() -> None:
    evs = [Start("x", "m"), BlockStart(0, Refusal("")), Delta(0, "refusal", "No way."), BlockEnd(0, Refusal("No way.")),
           Stop(StopInfo(StopReason.REFUSAL, raw="stop", category="output-refusal", message="No way.")), End()]
    out = _encode_stream(evs)
    facts = _snapshot_facts(_accumulate_ours(out))
    assert facts["refusal"] == "No way."
    assert facts["finish"] == "stop"


def test_streaming_and_nonstreaming_agree_on_refusal() -> None:
    resp = _anthropic_refusal(None)
    body = chat.encode_response(resp, _ctx(), [])
    facts = _snapshot_facts(_accumulate_ours(_encode_stream(response_to_events(resp))))
    assert facts["refusal"] == body["choices"][0]["message"]["refusal"]
    assert facts["finish"] == body["choices"][0]["finish_reason"]


# ============================================================================= seed 002: content_filter
def test_seed002_content_filter_with_nothing_is_generic_refusal() -> None:
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "content_filter",
                         "message": {"role": "assistant", "content": None, "refusal": None}}]}
    resp = chat.decode_response(body, [])
    assert resp.stop.reason is StopReason.REFUSAL
    assert resp.stop.raw == "content_filter"
    assert resp.stop.message == GENERIC_CONTENT_FILTER_REFUSAL
    assert resp.stop.category == "output-refusal"
    out = chat.encode_response(resp, _ctx(), [])
    ChatCompletion.model_validate(out)
    assert out["choices"][0]["finish_reason"] == "content_filter"
    assert out["choices"][0]["message"]["refusal"] == GENERIC_CONTENT_FILTER_REFUSAL


def test_seed002_content_filter_with_partial_text_keeps_text() -> None:
    body = {"choices": [{"index": 0, "finish_reason": "content_filter",
                         "message": {"role": "assistant", "content": "Partial"}}]}
    resp = chat.decode_response(body, [])
    assert resp.stop.reason is StopReason.REFUSAL and resp.stop.message is None
    out = chat.encode_response(resp, _ctx(), [])
    assert out["choices"][0]["message"]["content"] == "Partial"
    assert out["choices"][0]["message"]["refusal"] is None
    assert out["choices"][0]["finish_reason"] == "content_filter"


def _sse(*objs: Any, done: bool = True) -> bytes:
    out = b"".join(b"data: " + (o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n\n" for o in objs)
    return out + (b"data: [DONE]\n\n" if done else b"")


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 5, "model": "gpt-x",
                         "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    d.update(extra)
    return d


def test_seed002_streaming_content_filter_generic_refusal() -> None:
    evs = _decode_stream(_sse(_chunk({"role": "assistant", "content": ""}), _chunk({}, "content_filter")))
    stop = next(e for e in evs if isinstance(e, Stop)).stop
    assert stop.reason is StopReason.REFUSAL
    assert stop.message == GENERIC_CONTENT_FILTER_REFUSAL
    facts = _snapshot_facts(_accumulate_ours(_encode_stream(evs)))
    assert facts["refusal"] == GENERIC_CONTENT_FILTER_REFUSAL
    assert facts["finish"] == "content_filter"


def test_stream_refusal_deltas_give_refusal_stop_with_text() -> None:
    evs = _decode_stream(_sse(_chunk({"role": "assistant", "content": None, "refusal": ""}),
                              _chunk({"refusal": "I'm sorry"}), _chunk({"refusal": ", no."}), _chunk({}, "stop")))
    stop = next(e for e in evs if isinstance(e, Stop)).stop
    assert stop.reason is StopReason.REFUSAL
    assert stop.raw == "stop" and stop.message == "I'm sorry, no."
    resp = collect(evs).response
    assert [p.type for p in resp.parts] == ["refusal"]


# ============================================================================= seed 003: finish map
FINISH_TABLE = [
    (classify_stop("end_turn"), False, "stop"),
    (classify_stop("stop_sequence"), False, "stop"),
    (classify_stop("tool_use"), True, "tool_calls"),
    (classify_stop("max_tokens"), False, "length"),
    (classify_stop("model_context_window_exceeded"), False, "length"),
    (classify_stop("refusal", message="x"), False, "stop"),
    (classify_stop("content_filter"), False, "content_filter"),
    (classify_stop("pause_turn"), False, "stop"),
    (classify_stop("completed"), False, "stop"),
    (classify_stop("max_output_tokens"), False, "length"),
    (classify_stop("cancelled"), False, "stop"),
    (classify_stop("weird_new_value"), False, "stop"),
]


@pytest.mark.parametrize(("stop", "tools", "finish"), FINISH_TABLE, ids=lambda v: getattr(v, "raw", str(v)))
def test_seed003_finish_mapping_both_modes(stop: StopInfo, tools: bool, finish: str) -> None:
    parts: list[Any] = [Text("hi")]
    if tools:
        parts.append(ToolCall("toolu_1", "get", '{"a":1}'))
    resp = Response(id="msg_1", model="m", parts=parts, stop=stop, usage=Usage(input=1, output=1))
    w: list[str] = []
    body = chat.encode_response(resp, _ctx(), w)
    ChatCompletion.model_validate(body)
    assert body["choices"][0]["finish_reason"] == finish
    ws: list[str] = []
    facts = _snapshot_facts(_accumulate_ours(_encode_stream(response_to_events(resp), warnings=ws)))
    assert facts["finish"] == finish
    lossy = stop.reason in (StopReason.PAUSED, StopReason.OTHER, StopReason.INTERRUPTED)
    assert bool(w) == lossy and bool(ws) == lossy
    if stop.reason is StopReason.CONTEXT_FULL:
        assert stop.reason is StopReason.CONTEXT_FULL  # StopInfo keeps context_full; the wire says length


def test_tool_use_without_tool_calls_downgrades_to_stop() -> None:
    w: list[str] = []
    body = chat.encode_response(Response(parts=[Text("x")], stop=classify_stop("tool_use")), _ctx(), w)
    assert body["choices"][0]["finish_reason"] == "stop" and w


# ============================================================================= stream decode edge cases
def test_finish_merged_into_last_content_chunk_and_done_without_usage() -> None:
    evs = _decode_stream(_sse(_chunk({"role": "assistant", "content": "Hel"}), _chunk({"content": "lo"}, "stop")))
    assert [type(e).__name__ for e in evs] == ["Start", "BlockStart", "Delta", "Delta", "BlockEnd", "Stop", "End"]
    assert evs[-2].stop.reason is StopReason.END_TURN


def test_done_without_finish_is_a_legal_end() -> None:
    evs = _decode_stream(_sse(_chunk({"content": "x"}), _chunk(tool_calls=None)))
    assert isinstance(evs[-1], End) and evs[-2].stop.reason is StopReason.END_TURN
    evs = _decode_stream(_sse(_chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                      "function": {"name": "f", "arguments": "{}"}}]})))
    assert evs[-2].stop.reason is StopReason.TOOL_USE and evs[-2].stop.raw is None


def test_eof_after_finish_is_complete_and_eof_before_is_interrupted() -> None:
    evs = _decode_stream(_sse(_chunk({"content": "x"}), _chunk({}, "length"), done=False))
    assert isinstance(evs[-1], End) and evs[-2].stop.reason is StopReason.MAX_OUTPUT
    evs = _decode_stream(_sse(_chunk({"content": "x"}), done=False))
    assert isinstance(evs[-1], ErrorEvent) and evs[-1].error.kind == "interrupted"
    out = _encode_stream(evs)
    res = _accumulate_ours(out)
    assert res["error"] is not None and not res["done"]


def test_cut_last_frame_after_finish_is_still_complete() -> None:
    data = _sse(_chunk({"content": "x"}), _chunk({}, "stop"), done=False) + b'data: {"id":"chatcmpl-s","choi'
    w: list[str] = []
    evs = _decode_stream(data, w)
    assert isinstance(evs[-1], End)
    assert any("invalid JSON" in x for x in w)


def test_usage_only_final_chunk_and_usage_inside_choice_chunk() -> None:
    u = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
         "prompt_tokens_details": {"cached_tokens": 60}, "completion_tokens_details": {"reasoning_tokens": 5}}
    evs = _decode_stream(_sse(_chunk({"content": "x"}), _chunk({}, "stop"),
                              {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 5,
                               "model": "gpt-x", "choices": [], "usage": u}))
    usage = next(e for e in evs if isinstance(e, UsageEvent)).usage
    assert (usage.input, usage.cache_read, usage.output, usage.reasoning) == (40, 60, 20, 5)
    assert [type(e).__name__ for e in evs][-2:] == ["Stop", "End"]
    evs2 = _decode_stream(_sse(_chunk({"content": "x"}, "stop", usage=u)))
    assert any(isinstance(e, UsageEvent) for e in evs2)
    out = _encode_stream(evs, _ctx(include_usage=True))
    usage_out = _accumulate_ours(out)["usage"]
    assert usage_out.prompt_tokens == 100 and usage_out.prompt_tokens_details.cached_tokens == 60
    assert usage_out.completion_tokens_details.reasoning_tokens == 5
    assert b'"usage"' not in _encode_stream(evs, _ctx(include_usage=False))


def test_input_output_token_naming_is_accepted() -> None:
    resp = chat.decode_response({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
                                 "usage": {"input_tokens": 12, "output_tokens": 3,
                                           "input_tokens_details": {"cached_tokens": 2}}}, [])
    assert (resp.usage.input, resp.usage.cache_read, resp.usage.output) == (10, 2, 3)


def test_finish_sent_twice_keeps_first_and_warns() -> None:
    w: list[str] = []
    evs = _decode_stream(_sse(_chunk({"content": "x"}, "stop"), _chunk({}, "length")), w)
    assert evs[-2].stop.reason is StopReason.END_TURN
    assert any("twice" in x for x in w)


def test_parallel_calls_reusing_index_are_separate_calls() -> None:
    def tc(i: int, cid: str | None, name: str | None, args: str) -> dict[str, Any]:
        d: dict[str, Any] = {"index": i, "function": {"arguments": args}}
        if cid:
            d["id"], d["type"] = cid, "function"
        if name:
            d["function"]["name"] = name
        return d
    data = _sse(_chunk({"role": "assistant", "content": "Let me check."}),
                _chunk({"tool_calls": [tc(0, "call_a", "get", "")]}),
                _chunk({"tool_calls": [tc(0, None, None, '{"x":')]}),
                _chunk({"tool_calls": [tc(0, None, None, "1}")]}),
                _chunk({"tool_calls": [tc(0, "call_b", "put", '{"y":2}')]}),
                _chunk({}, "tool_calls"))
    evs = _decode_stream(data)
    starts = [e for e in evs if isinstance(e, BlockStart)]
    assert [type(s.part).__name__ for s in starts] == ["Text", "ToolCall", "ToolCall"]
    # the text block is closed when the first tool call starts
    assert [type(e).__name__ for e in evs].index("BlockEnd") < evs.index(starts[1])
    resp = collect(evs).response
    assert [(p.id, p.name, p.arguments) for p in resp.parts if isinstance(p, ToolCall)] == \
        [("call_a", "get", '{"x":1}'), ("call_b", "put", '{"y":2}')]
    facts = _snapshot_facts(_accumulate_ours(_encode_stream(evs)))
    assert facts["tools"] == [("call_a", "get", '{"x":1}'), ("call_b", "put", '{"y":2}')]
    assert facts["text"] == "Let me check." and facts["finish"] == "tool_calls"


def test_tool_call_without_id_gets_a_minted_one() -> None:
    evs = _decode_stream(_sse(_chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}),
                              _chunk({}, "tool_calls")))
    call = next(e.part for e in evs if isinstance(e, BlockStart))
    assert call.id.startswith("call_") and call.name == "f"


def test_in_band_error_chunks_are_error_events() -> None:
    # OpenRouter: error object plus a choice with finish_reason "error"
    err = {"id": "gen-1", "object": "chat.completion.chunk", "created": 1, "model": "x",
           "error": {"code": 502, "message": "Provider disconnected"},
           "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}
    evs = _decode_stream(_sse(_chunk({"content": "partial"}), err))
    assert isinstance(evs[-1], ErrorEvent) and evs[-1].error.message == "Provider disconnected"
    assert evs[-1].error.status == 502
    assert not any(isinstance(e, Stop) for e in evs)
    out = _encode_stream(evs)
    res = _accumulate_ours(out)
    assert res["error"]["message"] == "Provider disconnected" and not res["done"]
    assert _snapshot_facts(res)["text"] == "partial"
    # Groq: `event: error` with a bare error body, no choices
    dec = chat.StreamDecoder([])
    evs = dec.feed("error", orjson.dumps({"error": {"message": "bad", "type": "invalid_request_error"}}).decode())
    assert isinstance(evs[-1], ErrorEvent) and evs[-1].error.kind == "invalid_request" and dec.done
    assert dec.feed(None, "[DONE]") == [] and dec.finish() == []


def test_finish_reason_error_without_error_object_is_interrupted() -> None:
    evs = _decode_stream(_sse(_chunk({"content": "x"}), _chunk({}, "error")))
    assert evs[-2].stop.reason is StopReason.INTERRUPTED


def test_unknown_finish_is_other_with_raw_and_native_reason_kept() -> None:
    evs = _decode_stream(_sse(_chunk({"content": "x"}),
                              {**_chunk({}, "weird"), "choices": [{"index": 0, "delta": {}, "finish_reason": "weird",
                                                                   "native_finish_reason": "WEIRD_NATIVE"}]}))
    stop = evs[-2].stop
    assert stop.reason is StopReason.OTHER and stop.raw == "weird"
    assert stop.detail["native_finish_reason"] == "WEIRD_NATIVE"


def test_invalid_json_and_non_object_events_are_warnings() -> None:
    w: list[str] = []
    dec = chat.StreamDecoder(w)
    assert dec.feed(None, "{nope") == []
    assert dec.feed(None, "[1,2]") == []
    assert len(w) == 2 and not dec.done


def test_reasoning_stream_deepseek_and_openrouter_details() -> None:
    evs = _decode_stream(_sse(_chunk({"role": "assistant", "content": None, "reasoning_content": "Think"}),
                              _chunk({"reasoning_content": "ing."}), _chunk({"content": "Answer"}),
                              _chunk({}, "stop")))
    resp = collect(evs).response
    assert isinstance(resp.parts[0], Reasoning) and resp.parts[0].text == "Thinking."
    assert resp.parts[0].opaque == {"protocol": "openai_chat_completions", "field": "reasoning_content"}
    evs = _decode_stream(_sse(
        _chunk({"reasoning": "a", "reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0,
                                                         "format": "anthropic-claude-v1"}]}),
        _chunk({"reasoning": "b", "reasoning_details": [{"type": "reasoning.text", "text": "b", "index": 0}]}),
        _chunk({"reasoning_details": [{"type": "reasoning.text", "signature": "sig", "index": 0}]}),
        _chunk({"content": "x"}, "stop")))
    r = collect(evs).response.parts[0]
    assert r.text == "ab" and r.opaque["field"] == "reasoning"
    assert r.opaque["details"] == [{"type": "reasoning.text", "text": "ab", "index": 0,
                                    "format": "anthropic-claude-v1", "signature": "sig"}]
    # same-protocol re-encode keeps the details for the client
    res = _accumulate_ours(_encode_stream(evs))
    extra = res["snapshot"].choices[0].message.model_extra
    assert extra["reasoning"] == "ab" and extra["reasoning_details"][0]["signature"] == "sig"


# ============================================================================= reasoning continuity
_ANTHROPIC_OPAQUE = {"protocol": "anthropic_messages", "signature": "EqQBCkYIBxgCKkBsig=="}


def test_foreign_reasoning_is_enveloped_and_unpacked_on_the_next_request() -> None:
    resp = Response(id="msg_9", model="claude", parts=[
        Reasoning("Let me think.", opaque=dict(_ANTHROPIC_OPAQUE)),
        Reasoning("", opaque={"protocol": "anthropic_messages", "data": "REDACTED"}, redacted=True),
        Text("Hi"), ToolCall("toolu_1", "get", '{"a":1}')], stop=classify_stop("tool_use"))
    out = chat.encode_response(resp, _ctx(), [])
    ChatCompletion.model_validate(out)
    m = out["choices"][0]["message"]
    assert m["reasoning_content"].startswith("Let me think.<proxai-reasoning v1>")
    assert rz.strip_chat_envelopes(m["reasoning_content"]) == "Let me think."
    # the client echoes the message back: the issuer's payload comes back exactly
    req = chat.decode_request({"model": "x", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": m["content"], "reasoning_content": m["reasoning_content"],
         "tool_calls": m["tool_calls"]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "42"}]}, [])
    rs = [p for p in req.messages[1].parts if isinstance(p, Reasoning)]
    assert rs[0].text == "Let me think." and rs[0].opaque == _ANTHROPIC_OPAQUE and not rs[0].redacted
    assert rs[1].redacted and rs[1].opaque == {"protocol": "anthropic_messages", "data": "REDACTED"}
    # toward a Chat upstream, reasoning issued by Anthropic is dropped with a warning
    w: list[str] = []
    body = chat.encode_request(req, w)
    assert "reasoning_content" not in body["messages"][1]
    assert any("anthropic_messages" in x for x in w)


def test_foreign_reasoning_streaming_envelope_at_block_end_roundtrips() -> None:
    evs = [Start("msg_1", "claude"), BlockStart(0, Reasoning()), Delta(0, "reasoning", "Hmm"),
           Delta(0, "reasoning", "..."), BlockEnd(0, Reasoning("Hmm...", opaque=dict(_ANTHROPIC_OPAQUE))),
           BlockStart(1, Text("")), Delta(1, "text", "Done"), BlockEnd(1), Stop(classify_stop("end_turn")), End()]
    out = _encode_stream(evs)
    facts = _snapshot_facts(_accumulate_ours(out))
    assert rz.strip_chat_envelopes(facts["reasoning"]) == "Hmm..."
    assert "<proxai-reasoning v1>" in facts["reasoning"]
    # our own decoder (a chained proxy) unpacks it at the block end
    back = collect(_decode_stream(out)).response
    assert back.parts[0].text == "Hmm..." and back.parts[0].opaque == _ANTHROPIC_OPAQUE


def test_chat_reasoning_is_native_toward_chat() -> None:
    req = chat.decode_request({"model": "deepseek-reasoner", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "because"}]}, [])
    body = chat.encode_request(req, [])
    assert body["messages"][1] == {"role": "assistant", "content": "a", "reasoning_content": "because"}


# ============================================================================= request decode
def _req(messages: Any, **kw: Any) -> dict[str, Any]:
    return {"model": "gpt-x", "messages": messages, **kw}


@pytest.mark.parametrize(("body", "field"), [
    ({"model": "x", "messages": "hi"}, "messages"),
    (_req([{"content": "hi"}]), r"messages\[0\]\.role"),
    (_req([{"role": "user", "content": 5}]), r"messages\[0\]\.content"),
    (_req([{"role": "user", "content": [{"type": "text", "text": 1}]}]), r"messages\[0\]\.content\[0\]\.text"),
    (_req([{"role": "user", "content": [{"type": "hologram"}]}]), r"messages\[0\]\.content\[0\]\.type"),
    (_req([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]}]),
     r"messages\[0\]\.content\[0\]"),
    (_req([{"role": "function", "name": "f", "content": "x"}]), r"messages\[0\]\.role"),
    (_req([{"role": "user", "content": "x"}], n=2), "^n: only one choice can be translated"),
    (_req([{"role": "user", "content": "x"}], temperature="hot"), "temperature"),
    (_req([{"role": "tool", "content": "x"}]), r"messages\[0\]\.tool_call_id"),
    (_req([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}]),
     r"messages\[0\]\.tool_calls\[0\]\.function"),
    (_req([{"role": "user", "content": "x"}], tools=[{"type": "function", "function": {"name": 3}}]),
     r"tools\[0\]\.function\.name"),
    (_req([{"role": "user", "content": "x"}], tool_choice="sometimes"), "tool_choice"),
    (_req([{"role": "user", "content": "x"}], stop=[1]), r"stop\[0\]"),
    (_req([{"role": "user", "content": "x"}], response_format={"type": "yaml"}), "response_format"),
    (_req([{"role": "user", "content": "x"}], modalities=["text", "audio"]), "modalities"),
])
def test_malformed_requests_raise_translation_error_naming_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(TranslationError, match=field):
        chat.decode_request(body, [])


def test_request_decode_full() -> None:
    body = _req([
        {"role": "developer", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Really."}]},
        {"role": "user", "content": [
            {"type": "text", "text": "Look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"}},
            {"type": "file", "file": {"file_id": "file-1"}}]},
        {"role": "assistant", "content": None, "refusal": "no", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
            {"id": "c2", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "r2"}]},
        {"role": "system", "content": "late system"},
    ], tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}},
              {"type": "custom", "custom": {"name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                                            "definition": "start: x"}}}],
        tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
            {"type": "function", "function": {"name": "f"}}]}},
        parallel_tool_calls=False, max_tokens=100, temperature=0.5, top_p=0.9, stop="END", seed=7,
        reasoning_effort="low", response_format={"type": "json_schema", "json_schema": {
            "name": "r", "schema": {"type": "object"}, "strict": True}},
        stream=True, stream_options={"include_usage": True}, safety_identifier="u1", metadata={"k": "v"},
        service_tier="flex", prompt_cache_key="pk", store=False)
    req = chat.decode_request(body, [])
    assert req.system_role == "developer" and [t.text for t in req.system] == ["Be brief.", "Really."]
    u = req.messages[0].parts
    assert isinstance(u[1], Image) and (u[1].source, u[1].media_type, u[1].data, u[1].detail) == \
        ("base64", "image/png", "iVBOR", "high")
    assert isinstance(u[2], Image) and u[2].source == "url"
    assert isinstance(u[3], Document) and (u[3].source, u[3].media_type, u[3].filename) == \
        ("base64", "application/pdf", "a.pdf")
    assert isinstance(u[4], Document) and u[4].source == "file" and u[4].file_id == "file-1"
    a = req.messages[1].parts
    assert isinstance(a[0], Refusal) and a[1].kind == "function" and a[2].kind == "custom"
    tr = req.messages[2].parts
    assert [(t.call_id, t.kind, t.content[0].text) for t in tr] == [("c1", "function", "r1"), ("c2", "custom", "r2")]
    assert req.messages[3].role == "system"
    assert req.tools[1].kind == "custom" and req.tools[1].format["syntax"] == "lark"
    assert req.tool_choice == ToolChoice("allowed", allowed=["f"], allowed_required=True)
    assert (req.max_output_tokens, req.stop, req.seed, req.reasoning.effort) == (100, ["END"], 7, "low")
    assert req.output_format == OutputFormat("json_schema", {"type": "object"}, "r", True)
    assert req.stream and req.include_usage and req.user == "u1"
    assert req.extra == {"service_tier": "flex", "prompt_cache_key": "pk", "store": False, "safety_identifier": "u1"}
    assert req.parallel_tool_calls is False and req.metadata == {"k": "v"}


def test_request_tool_result_kind_follows_the_latest_call_of_its_id() -> None:
    """A result's kind is that of the last call with its id before it (a custom call's id reused by a
    function call, or the reverse, gives the later kind); an unknown id is a function's."""
    def call(kind: str) -> dict[str, Any]:
        if kind == "custom":
            return {"id": "a", "type": "custom", "custom": {"name": "c", "input": "x"}}
        return {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}

    for kinds, want in ((["function"], "function"), (["custom"], "custom"), (["custom", "function"], "function"),
                        (["function", "custom"], "custom")):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call(k)]} for k in kinds]
        msgs += [{"role": "tool", "tool_call_id": "a", "content": "r"},
                 {"role": "tool", "tool_call_id": "unknown", "content": "r"}]
        req = chat.decode_request({"model": "m", "messages": msgs}, [])
        assert [p.kind for p in req.messages[-1].parts] == [want, "function"], kinds


@pytest.mark.parametrize(("bad", "message"), [
    (3, "messages[1].tool_calls[1]: expected an object, got integer"),
    ({"type": "function", "function": {"name": "f"}}, "messages[1].tool_calls[1].id: expected a string, got null"),
    ({"id": "b", "function": {"name": 1}}, "messages[1].tool_calls[1].function.name: expected a string, got integer"),
    ({"id": "b", "function": {"name": "f", "arguments": 2}},
     "messages[1].tool_calls[1].function.arguments: expected a string, got integer"),
    ({"id": "b", "type": "function"}, "messages[1].tool_calls[1].function: expected an object, got null"),
    ({"id": "b", "type": "custom"}, "messages[1].tool_calls[1].custom: expected an object, got null"),
    ({"id": "b", "type": "x"}, "messages[1].tool_calls[1].type: unknown tool call type 'x'"),
])
def test_request_bad_tool_call_is_named_by_its_index(bad: Any, message: str) -> None:
    good = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {"model": "m", "messages": [{"role": "user", "content": "q"},
                                       {"role": "assistant", "content": None, "tool_calls": [good, bad]}]}
    with pytest.raises(TranslationError) as e:
        chat.decode_request(body, [])
    assert str(e.value) == message and e.value.field == message.split(":")[0]


def test_request_garbage_only_raises_translation_error() -> None:
    rnd = random.Random(1234)
    atoms: list[Any] = [None, 1, -1.5, True, "", "x", [], {}, "user", "assistant", "tool", "system", "text",
                        "image_url", "function", "custom", "data:image/png;base64,xx"]
    keys = ["role", "content", "type", "text", "tool_calls", "id", "function", "name", "arguments",
            "tool_call_id", "image_url", "url", "file", "refusal", "reasoning_content", "custom", "input"]

    def gen(depth: int) -> Any:
        r = rnd.random()
        if depth > 3 or r < 0.4:
            return rnd.choice(atoms)
        if r < 0.7:
            return {rnd.choice(keys): gen(depth + 1) for _ in range(rnd.randint(0, 4))}
        return [gen(depth + 1) for _ in range(rnd.randint(0, 3))]

    top = ["messages", "tools", "tool_choice", "stop", "response_format", "n", "max_tokens", "stream_options",
           "reasoning", "temperature", "metadata", "functions", "function_call"]
    for _ in range(800):
        body = {k: gen(0) for k in rnd.sample(top, rnd.randint(1, 5))}
        if rnd.random() < 0.7:
            body["messages"] = [gen(1) for _ in range(rnd.randint(0, 4))]
        try:
            req = chat.decode_request(body, [])
        except TranslationError:
            continue
        try:
            chat.encode_request(req, [])
        except TranslationError:
            pass


# ============================================================================= request encode
def test_request_encode_from_neutral() -> None:
    req = Request(
        model="gpt-x", system=[Text("sys")], system_role="developer",
        messages=[
            Message("user", [Text("Look"), Image("base64", media_type="image/jpeg", data="AAA", detail="low"),
                             Image("url", url="https://i/x.png"),
                             Document("base64", media_type="application/pdf", data="JVB", filename="f.pdf"),
                             Document("text", data="plain doc", title="T"),
                             Opaque("anthropic_messages", {"type": "container_upload"}, "container_upload")]),
            Message("assistant", [Reasoning("t", opaque=dict(_ANTHROPIC_OPAQUE)), Text("Calling"),
                                  ToolCall("toolu_1", "get", '{"q":1}'),
                                  ToolCall("call_2", "apply_patch", "*** Begin Patch", kind="custom")]),
            Message("user", [ToolResult("toolu_1", [Text("ok"), Image("base64", media_type="image/png", data="P")],
                                        is_error=True),
                             ToolResult("call_2", [Text("done")], kind="custom"), Text("next?")]),
        ],
        tools=[Tool("get", "Get it", {"type": "object", "properties": {"q": {"type": "integer"}}}, strict=True),
               Tool("apply_patch", "Patch files", kind="custom",
                    format={"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}),
               Tool("x" * 80, None, {"type": "object"})],
        tool_choice=ToolChoice("tool", name="apply_patch", kind="custom"), parallel_tool_calls=True,
        max_output_tokens=500, temperature=1.0, top_p=0.5, top_k=40, stop=["\n\n"], seed=3,
        reasoning=ReasoningConfig(budget_tokens=10000), output_format=OutputFormat("json_object"),
        stream=True, user="u", metadata={"a": "b"}, extra={"service_tier": "auto", "store": True})
    w: list[str] = []
    body = chat.encode_request(req, w)
    _validate_request(body)
    msgs = body["messages"]
    assert msgs[0] == {"role": "developer", "content": "sys"}
    parts = msgs[1]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAA", "detail": "low"}}
    assert parts[2] == {"type": "image_url", "image_url": {"url": "https://i/x.png"}}
    assert parts[3] == {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVB", "filename": "f.pdf"}}
    assert parts[4] == {"type": "text", "text": "T\n\nplain doc"}
    assert len(parts) == 5  # the Opaque part was dropped...
    assert any("container_upload" in x for x in w)  # ...with a warning
    a = msgs[2]
    assert a["content"] == "Calling" and "reasoning_content" not in a
    assert a["tool_calls"][1] == {"id": "call_2", "type": "function", "function": {
        "name": "apply_patch", "arguments": '{"input":"*** Begin Patch"}'}}
    assert msgs[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "ok"}
    assert msgs[4] == {"role": "tool", "tool_call_id": "call_2", "content": "done"}
    assert msgs[5]["role"] == "user"
    assert msgs[5]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,P"}}
    assert msgs[5]["content"][-1] == {"type": "text", "text": "next?"}
    assert any("moved to a following user message" in x for x in w)
    assert any("is_error" in x for x in w)
    tools = body["tools"]
    assert tools[0]["function"] == {"name": "get", "description": "Get it", "strict": True,
                                    "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}
    assert tools[1]["function"]["parameters"]["required"] == ["input"]
    assert "start: /.+/" in tools[1]["function"]["parameters"]["properties"]["input"]["description"]
    assert len(tools[2]["function"]["name"]) <= 64
    assert body["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    assert body["max_completion_tokens"] == 500 and "max_tokens" not in body
    assert "top_k" not in body and any("top_k" in x for x in w)
    assert body["reasoning_effort"] == "medium"
    assert body["response_format"] == {"type": "json_object"}
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["user"] == "u" and body["metadata"] == {"a": "b"} and body["service_tier"] == "auto"
    # without store: true OpenAI rejects metadata; tool_choice/parallel_tool_calls need tools
    w2: list[str] = []
    bare = chat.encode_request(Request(model="m", messages=[Message("user", [Text("x")])], metadata={"a": "b"},
                                       tool_choice=ToolChoice("auto"), parallel_tool_calls=False), w2)
    assert "metadata" not in bare and "tool_choice" not in bare and "parallel_tool_calls" not in bare
    assert any("metadata" in x for x in w2)


@pytest.mark.parametrize(("rc", "effort"), [
    (ReasoningConfig(budget_tokens=500), "minimal"), (ReasoningConfig(budget_tokens=1024), "minimal"),
    (ReasoningConfig(budget_tokens=2048), "low"), (ReasoningConfig(budget_tokens=8191), "low"),
    (ReasoningConfig(budget_tokens=8192), "medium"), (ReasoningConfig(budget_tokens=16384), "high"),
    (ReasoningConfig(budget_tokens=64000), "xhigh"), (ReasoningConfig(effort="high", budget_tokens=1), "high"),
    (ReasoningConfig(effort="none", disabled=True), "none"), (ReasoningConfig(disabled=True), None),
    (ReasoningConfig(adaptive=True), None), (ReasoningConfig(effort="max"), "xhigh"),
])
def test_reasoning_budget_to_effort_table(rc: ReasoningConfig, effort: str | None) -> None:
    body = chat.encode_request(Request(model="m", messages=[Message("user", [Text("x")])], reasoning=rc), [])
    assert body.get("reasoning_effort") == effort


def test_tool_choice_all_forms_roundtrip() -> None:
    for tc in ["auto", "none", "required", {"type": "function", "function": {"name": "f"}},
               {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
                   {"type": "function", "function": {"name": "f"}}]}}]:
        body = _req([{"role": "user", "content": "x"}], tools=[{"type": "function", "function": {"name": "f"}}],
                    tool_choice=tc)
        out = chat.encode_request(chat.decode_request(body, []), [])
        assert out["tool_choice"] == tc
        _validate_request(out)


def test_unsupported_documents_and_server_tools_raise() -> None:
    with pytest.raises(TranslationError, match=r"messages\[0\]\.parts\[0\]"):
        chat.encode_request(Request(model="m", messages=[Message("user", [Document("url", url="https://d")])]), [])
    # another provider's server tool cannot run on a Chat upstream: dropped, and said so
    w: list[str] = []
    out = chat.encode_request(Request(model="m", messages=[Message("user", [Text("x")])],
                                      extra={"server_tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                              w)
    assert "tools" not in out and any("web_search_20250305" in x for x in w)


# ============================================================================= response decode/encode
def test_response_decode_refusal_outranks_finish_and_annotations() -> None:
    body = {"id": "chatcmpl-9", "object": "chat.completion", "created": 9, "model": "gpt-x", "choices": [{
        "index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "See [x].", "refusal": None,
            "annotations": [{"type": "url_citation", "url_citation": {"url": "https://x", "title": "X",
                                                                     "start_index": 4, "end_index": 7}}]}}]}
    resp = chat.decode_response(body, [])
    assert resp.parts[0].citations[0]["url"] == "https://x" and resp.parts[0].citations[0]["start"] == 4
    out = chat.encode_response(resp, _ctx(), [])
    ChatCompletion.model_validate(out)
    assert out["choices"][0]["message"]["annotations"] == body["choices"][0]["message"]["annotations"]
    assert out["id"] == "chatcmpl-9" and out["created"] == 9
    body["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "I can't."}
    resp = chat.decode_response(body, [])
    assert resp.stop.reason is StopReason.REFUSAL and resp.stop.raw == "stop"
    assert resp.stop.message == "I can't." and resp.stop.category == "output-refusal"


def test_response_error_in_200_and_choices_edge_cases() -> None:
    resp = chat.decode_response({"error": {"message": "overloaded", "code": 503}}, [])
    assert isinstance(resp.extra["error"], Error) and resp.extra["error"].kind == "overloaded"
    assert resp.stop.reason is StopReason.INTERRUPTED
    w: list[str] = []
    resp = chat.decode_response({"choices": []}, w)
    assert resp.stop.reason is StopReason.OTHER and w
    w = []
    resp = chat.decode_response({"choices": [{"message": {"content": "a"}, "finish_reason": "stop"},
                                             {"message": {"content": "b"}, "finish_reason": "stop"}]}, w)
    assert resp.parts[0].text == "a" and any("2 choices" in x for x in w)


def test_response_encode_custom_tool_call_and_usage() -> None:
    resp = Response(id="resp_abc", model="gpt-5", created=77, parts=[
        ToolCall("call_1", "apply_patch", "*** Begin Patch", kind="custom")], stop=classify_stop("completed",
                                                                                                has_tool_calls=True),
        usage=Usage(input=10, cache_read=90, cache_write=5, output=20, reasoning=8))
    out = chat.encode_response(resp, _ctx(), [])
    cc = ChatCompletion.model_validate(out)
    assert out["id"] == "chatcmpl-abc" and out["created"] == 77
    assert cc.choices[0].message.tool_calls[0].custom.input == "*** Begin Patch"
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"] == {"prompt_tokens": 105, "completion_tokens": 20, "total_tokens": 125,
                            "prompt_tokens_details": {"cached_tokens": 90, "cache_write_tokens": 5},
                            "completion_tokens_details": {"reasoning_tokens": 8}}
    back = chat.decode_response(out, [])
    assert (back.usage.input, back.usage.cache_read, back.usage.cache_write) == (10, 90, 5)


def test_response_encode_drops_opaque_with_warning() -> None:
    w: list[str] = []
    out = chat.encode_response(Response(parts=[Opaque("anthropic_messages", {"type": "server_tool_use"},
                                                      "server_tool_use"), Text("x")]), _ctx(), w)
    assert out["choices"][0]["message"]["content"] == "x" and any("server_tool_use" in x for x in w)


# ============================================================================= stream encoder
def test_stream_encoder_lifecycle_and_late_arguments() -> None:
    evs = [Start("msg_abc", "claude", None, 42), BlockStart(0, Text("")), Delta(0, "text", "a"),
           BlockStart(1, ToolCall("toolu_1", "f", "")), BlockStart(2, ToolCall("toolu_2", "g", "")),
           Delta(2, "arguments", '{"b":'), Delta(1, "arguments", '{"a":1}'), Delta(2, "arguments", "2}"),
           BlockEnd(1, ToolCall("toolu_1", "f", '{"a":1}')), BlockEnd(2), BlockEnd(0),
           BlockStart(3, ToolCall("toolu_3", "h", "")), BlockEnd(3, ToolCall("toolu_3", "h", '{"c":3}')),
           BlockStart(4, ToolCall("toolu_4", "noargs", "")), BlockEnd(4),
           BlockStart(5, Opaque("anthropic_messages", {"type": "server_tool_use"}, "server_tool_use")),
           BlockEnd(5), UsageEvent(Usage(input=1, output=2)), Stop(classify_stop("tool_use")), End()]
    w: list[str] = []
    out = _encode_stream(evs, _ctx(model="client", include_usage=True), w)
    frames = _frames(out)
    first = orjson.loads(frames[0])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["id"] == "chatcmpl-abc" and first["created"] == 42 and first["model"] == "client"
    res = _accumulate_ours(out)
    facts = _snapshot_facts(res)
    assert facts["text"] == "a"
    assert facts["tools"] == [("toolu_1", "f", '{"a":1}'), ("toolu_2", "g", '{"b":2}'), ("toolu_3", "h", '{"c":3}'),
                              ("toolu_4", "noargs", "{}")]
    assert facts["finish"] == "tool_calls" and res["done"] and res["usage"].total_tokens == 3
    assert any("server_tool_use" in x for x in w)
    assert frames[-1] == "[DONE]" and orjson.loads(frames[-2])["choices"] == []


def test_stream_encoder_custom_tool_call_chunks() -> None:
    evs = [Start("x", "m"), BlockStart(0, ToolCall("call_1", "apply_patch", "", kind="custom")),
           Delta(0, "arguments", "*** Begin"), Delta(0, "arguments", " Patch"), BlockEnd(0),
           Stop(classify_stop("completed", has_tool_calls=True)), End()]
    frames = [orjson.loads(f) for f in _frames(_encode_stream(evs)) if f != "[DONE]"]
    tcs = [f["choices"][0]["delta"]["tool_calls"][0] for f in frames if f["choices"] and
           "tool_calls" in f["choices"][0]["delta"]]
    assert tcs[0] == {"index": 0, "id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": ""}}
    assert "".join(t["custom"]["input"] for t in tcs) == "*** Begin Patch"
    st = ChatCompletionStreamState()  # the SDK helper accumulates it (lenient construction)
    for f in frames:
        st.handle_chunk(ChatCompletionChunk.construct(**f))
    assert frames[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_stream_encoder_error_event_frame_and_error_frame() -> None:
    err = Error(kind="overloaded", message="Overloaded", status=529)
    out = _encode_stream([Start("a", "m"), BlockStart(0, Text("")), Delta(0, "text", "x"), ErrorEvent(err),
                          Stop(classify_stop("end_turn")), End()])
    frames = _frames(out)
    assert orjson.loads(frames[-1]) == {"error": {"message": "Overloaded", "type": "server_error", "param": None,
                                                  "code": "overloaded"}}
    assert "[DONE]" not in frames
    assert chat.error_frame(err) == b'data: {"error":{"message":"Overloaded","type":"server_error","param":null,' \
                                    b'"code":"overloaded"}}\n\n'
    only = _frames(_encode_stream([ErrorEvent(err)]))
    assert len(only) == 1 and "error" in orjson.loads(only[0])


def test_stream_encoder_without_start_and_end_without_stop() -> None:
    out = _encode_stream([BlockStart(0, Text("")), Delta(0, "text", "hey"), BlockEnd(0), End()],
                         _ctx(model="m"))
    facts = _snapshot_facts(_accumulate_ours(out))
    assert facts["text"] == "hey" and facts["finish"] == "stop"


def test_stream_to_response_and_response_to_stream_agree() -> None:
    data = _sse(_chunk({"role": "assistant", "content": "Hi "}), _chunk({"content": "there"}),
                _chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                        "function": {"name": "f", "arguments": '{"z":'}}]}),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "0}"}}]}), _chunk({}, "tool_calls"),
                {**_chunk(), "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}})
    evs = _decode_stream(data)
    resp = collect(evs).response
    body = chat.encode_response(resp, _ctx(), [])
    ChatCompletion.model_validate(body)
    facts = _snapshot_facts(_accumulate_ours(_encode_stream(response_to_events(resp))))
    m = body["choices"][0]["message"]
    assert facts["text"] == m["content"] == "Hi there"
    assert facts["tools"] == [(t["id"], t["function"]["name"], t["function"]["arguments"]) for t in m["tool_calls"]]
    assert facts["finish"] == body["choices"][0]["finish_reason"] == "tool_calls"


def test_build_context_include_usage_drives_usage_chunk() -> None:
    ctx = build_context({"model": "gpt-client", "stream": True, "stream_options": {"include_usage": True},
                         "messages": []}, Protocol.CHAT)
    out = _encode_stream([Start("a", "up"), UsageEvent(Usage(input=1, output=1)), Stop(classify_stop("end_turn")),
                          End()], ctx)
    res = _accumulate_ours(out)
    assert res["usage"] is not None and res["snapshot"].model == "gpt-client"


def test_stream_decoder_survives_garbage_chunks() -> None:
    rnd = random.Random(99)
    atoms: list[Any] = [None, 0, 1, -2, 1.5, True, "", "x", "stop", "content_filter", [], {}, "[DONE]"]
    keys = ["choices", "delta", "index", "content", "refusal", "reasoning", "reasoning_content",
            "reasoning_details", "tool_calls", "id", "function", "name", "arguments", "finish_reason", "usage",
            "prompt_tokens", "completion_tokens", "error", "annotations", "type", "custom", "input", "function_call",
            "text", "model", "created", "url_citation", "native_finish_reason", "message"]

    def gen(depth: int) -> Any:
        r = rnd.random()
        if depth > 4 or r < 0.35:
            return rnd.choice(atoms)
        if r < 0.75:
            return {rnd.choice(keys): gen(depth + 1) for _ in range(rnd.randint(0, 5))}
        return [gen(depth + 1) for _ in range(rnd.randint(0, 3))]

    for _ in range(250):
        w: list[str] = []
        dec = chat.StreamDecoder(w)
        enc = chat.StreamEncoder(_ctx(include_usage=True), w)
        evs: list[Any] = []
        for _ in range(rnd.randint(1, 8)):
            obj = gen(0)
            if rnd.random() < 0.5:
                obj = {"choices": [{"index": 0, "delta": gen(1), "finish_reason": rnd.choice(atoms)}]}
            evs += dec.feed(rnd.choice([None, None, "error"]), orjson.dumps(obj).decode())
        evs += dec.finish()
        assert isinstance(evs[-1], (End, ErrorEvent))
        for e in evs:
            enc.encode(e)


def test_response_decoder_survives_garbage_bodies() -> None:
    rnd = random.Random(7)
    atoms: list[Any] = [None, 0, 3, True, "", "x", "stop", "content_filter", [], {}]
    keys = ["choices", "message", "content", "refusal", "reasoning", "reasoning_content", "reasoning_details",
            "tool_calls", "id", "function", "name", "arguments", "finish_reason", "usage", "prompt_tokens",
            "completion_tokens", "prompt_tokens_details", "cached_tokens", "annotations", "type", "custom",
            "input", "function_call", "text", "thinking", "url_citation", "audio", "data", "error"]

    def gen(depth: int) -> Any:
        r = rnd.random()
        if depth > 4 or r < 0.35:
            return rnd.choice(atoms)
        if r < 0.75:
            return {rnd.choice(keys): gen(depth + 1) for _ in range(rnd.randint(0, 5))}
        return [gen(depth + 1) for _ in range(rnd.randint(0, 3))]

    for _ in range(400):
        body = gen(0)
        if rnd.random() < 0.6:
            body = {"choices": [{"message": gen(1), "finish_reason": rnd.choice(atoms)}], "usage": gen(1)}
        resp = chat.decode_response(body, [])
        assert resp.stop is not None
        if "error" not in resp.extra:
            ChatCompletion.model_validate(chat.encode_response(resp, _ctx(), []))


# ----------------------------------------------------------------------------- delta templates
_TEMPLATE_VALUES = ["plain", 'quote " and \\ backslash', "ctrl \x00\x1f\n\t", "émoji 😀 \u2028", "\x00slot\x00"]


@pytest.mark.parametrize("model", ["gpt-4o", 'm "é" \x00slot\x00'])
def test_stream_delta_chunks_are_exactly_frame_of_their_chunk(model: str) -> None:
    """Each delta is its block's template around the dumped value: byte-equal to frame() of the chunk,
    for every block shape (two-digit tool indexes included), whatever the value or model."""
    enc = chat.StreamEncoder(ClientContext(Protocol.CHAT, model=model), [])
    enc.encode(Start("chatcmpl-t", None, None, 1700000000))

    def chunk(delta: dict[str, Any]) -> bytes:
        return frame(None, {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1700000000,
                            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})

    blocks: list[tuple[Any, str, Any]] = [
        (Text(""), "text", lambda v: {"content": v}),
        (Refusal(""), "refusal", lambda v: {"refusal": v}),
        (Reasoning(), "reasoning", lambda v: {"reasoning_content": v}),
        (Reasoning(opaque={"protocol": chat.PROTOCOL, "field": "reasoning"}), "summary", lambda v: {"reasoning": v}),
    ]
    for i in range(34):
        kind = "custom" if i % 2 else "function"
        inner = {"input": None} if kind == "custom" else {"arguments": None}
        blocks.append((ToolCall(f"call_{i}", "f", "", kind), "arguments",
                       lambda v, i=i, kind=kind, inner=inner: {"tool_calls": [
                           {"index": i, kind: {k: v for k in inner}}]}))
    for idx, (part, dkind, shape) in enumerate(blocks):
        enc.encode(BlockStart(idx, part))
        for v in _TEMPLATE_VALUES:
            assert enc.encode(Delta(idx, dkind, v)) == chunk(shape(v))
        enc.encode(BlockEnd(idx))
