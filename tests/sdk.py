"""The official SDKs as judges: body validation and stream accumulation, plus semantic summaries.

Every body we produce is validated by the SDK types; every stream is consumed by the SDKs' own
stream accumulators. Summaries reduce a result to what the user cares about (text, refusal, tool
calls with parsed arguments, reasoning present, stop) so directions can be compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic.types as at
import anthropic.types.beta as atb
import openai.types.chat as oc
import openai.types.responses as orr
import pydantic
from anthropic.lib.streaming._beta_messages import accumulate_event as beta_accumulate_event
from anthropic.lib.streaming._messages import accumulate_event
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses._responses import ResponseStreamState

from proxai_core import Protocol
from proxai_core.codecs import get
from tests.conftest import FIXTURES, PROTOCOLS, sse_events

from . import sdk_gemini

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
DIRS = {p: get(p).name for p in PROTOCOLS}

_anthropic_event = pydantic.TypeAdapter(at.RawMessageStreamEvent)
_anthropic_beta_event = pydantic.TypeAdapter(atb.BetaRawMessageStreamEvent)


def validate_anthropic_error(status: int, body: dict) -> None:
    """An Anthropic error body, judged by the SDK's ErrorResponse, except ``request_too_large``:
    the real API sends it with HTTP 413 (the SDK raises RequestTooLargeError by that status) though
    the SDK's type union lacks it, so it is accepted exactly with 413."""
    if body.get("type") == "error" and isinstance(body.get("error"), dict) \
            and body["error"].get("type") == "request_too_large":
        assert status == 413, (status, body)
        assert set(body["error"]) == {"type", "message"} and isinstance(body["error"]["message"], str)
        return
    at.ErrorResponse.model_validate(body)


def anthropic_message(body: dict):
    """GA Message type; beta-only blocks (mcp_tool_use, compaction, ...) validate as BetaMessage."""
    try:
        return at.Message.model_validate(body)
    except pydantic.ValidationError:
        return atb.BetaMessage.model_validate(body)
_responses_event = pydantic.TypeAdapter(orr.ResponseStreamEvent)


def fixture_files(protocol: Protocol, suffix: str) -> list[Path]:
    d = FIXTURES / DIRS[protocol]
    if not d.is_dir():
        return []
    files = sorted(d.glob(f"*{suffix}"))
    if suffix == ".json":
        files = [f for f in files if not f.name.endswith(".request.json")]
        if protocol is G:  # a streamed JSON array is a stream, not a complete body
            files = [f for f in files if f.read_bytes().lstrip()[:1] != b"["]
    return files


def gemini_array_files() -> list[Path]:
    """Gemini ``streamGenerateContent`` recordings without ``alt=sse``: one JSON array of chunks."""
    d = FIXTURES / DIRS[G]
    if not d.is_dir():
        return []
    return sorted(f for f in d.glob("*.json")
                  if not f.name.endswith(".request.json") and f.read_bytes().lstrip()[:1] == b"[")


@dataclass
class Summary:
    text: str = ""
    refusal: str | None = None
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    reasoning: bool = False
    stop: str | None = None  # the protocol's own stop value
    error: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    model: str | None = None


def _args(s: str | None) -> Any:
    if s is None or s == "":
        return {}
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return s


# ----------------------------------------------------------------------------- complete bodies
def validate_response(protocol: Protocol, body: dict) -> Any:
    if protocol is G:
        return sdk_gemini.validate_response(body)
    if protocol is C:
        return oc.ChatCompletion.model_validate(body)
    if protocol is R:
        return orr.Response.model_validate(body)
    return anthropic_message(body)


def summarize_response(protocol: Protocol, body: dict) -> Summary:
    s = Summary()
    if protocol is G:
        return sdk_gemini.summarize(body, s)
    if protocol is C:
        if "error" in body and not body.get("choices"):
            s.error = str(body["error"])
            return s
        m = oc.ChatCompletion.model_validate(body)
        s.model = m.model
        ch = m.choices[0]
        s.text = ch.message.content or ""
        s.refusal = ch.message.refusal
        for tc in ch.message.tool_calls or []:
            if tc.type == "function":
                s.tool_calls.append((tc.function.name, _args(tc.function.arguments)))
            else:
                s.tool_calls.append((tc.custom.name, tc.custom.input))
        extra = ch.message.model_extra or {}
        s.reasoning = bool(extra.get("reasoning_content") or extra.get("reasoning") or extra.get("reasoning_details"))
        s.stop = ch.finish_reason
        if m.usage:
            s.usage = {"input": m.usage.prompt_tokens, "output": m.usage.completion_tokens}
        return s
    if protocol is R:
        m = orr.Response.model_validate(body)
        s.model = m.model
        for item in m.output:
            if item.type == "message":
                for c in item.content:
                    if c.type == "output_text":
                        s.text += c.text
                    elif c.type == "refusal":
                        s.refusal = (s.refusal or "") + c.refusal
            elif item.type == "function_call":
                s.tool_calls.append((item.name, _args(item.arguments)))
            elif item.type == "custom_tool_call":
                s.tool_calls.append((item.name, item.input))
            elif item.type == "reasoning":
                s.reasoning = True
        s.stop = m.status
        if m.status == "incomplete" and m.incomplete_details:
            s.stop = f"incomplete:{m.incomplete_details.reason}"
        if m.error:
            s.error = m.error.message
        if m.usage:
            s.usage = {"input": m.usage.input_tokens, "output": m.usage.output_tokens}
        return s
    if body.get("type") == "error":
        s.error = body["error"]["message"]
        return s
    m = anthropic_message(body)
    s.model = m.model
    for b in m.content:
        if b.type == "text":
            s.text += b.text
        elif b.type == "tool_use":
            s.tool_calls.append((b.name, b.input))
        elif b.type in ("thinking", "redacted_thinking"):
            s.reasoning = True
    s.stop = m.stop_reason
    if m.stop_reason == "refusal":
        s.refusal = s.text or (m.stop_details.explanation if m.stop_details else None)
    s.usage = {"input": m.usage.input_tokens, "output": m.usage.output_tokens}
    return s


# ----------------------------------------------------------------------------- streams
class StreamError(Exception):
    pass


def accumulate_stream(protocol: Protocol, data: bytes, *, strict: bool = True) -> Summary:
    """Consume a client SSE body with the SDK's accumulator; raise StreamError on a native error
    event. ``strict`` also checks lifecycle invariants the SDKs are lenient about."""
    if protocol is G:
        try:
            body = sdk_gemini.accumulate(sdk_gemini.chunks_of_stream(data), strict=strict)
        except sdk_gemini.GeminiStreamError as e:
            raise StreamError(str(e)) from e
        return summarize_response(G, body)
    events = sse_events(data)
    if protocol is A:
        return _acc_anthropic(events, strict)
    if protocol is C:
        return _acc_chat(events, strict)
    return _acc_responses(events, strict)


def _acc_anthropic(events, strict) -> Summary:
    snap = None
    bufs: dict[int, bytes] = {}
    open_blocks: set[int] = set()
    seen_stop = False
    stop_reason = None
    beta = False  # beta-only blocks (mcp_tool_use, compaction, ...) need the beta types for the whole stream
    for name, data in events:
        if name not in (None, "ping", "error"):
            try:
                _anthropic_event.validate_python(json.loads(data))
            except (pydantic.ValidationError, ValueError):
                beta = True
                break
    for name, data in events:
        if name is None:
            if strict:
                raise AssertionError(f"Anthropic frame without event: line: {data[:80]}")
            continue
        if name == "ping":
            continue
        obj = json.loads(data)
        if name == "error":
            raise StreamError(obj["error"]["message"])
        assert obj["type"] == name, (name, obj.get("type"))
        ev = (_anthropic_beta_event if beta else _anthropic_event).validate_python(obj)
        if strict:
            if ev.type == "content_block_start":
                assert not open_blocks, f"block {ev.index} opened while {sorted(open_blocks)} open"
                open_blocks.add(ev.index)
            elif ev.type == "content_block_delta":
                assert ev.index in open_blocks, f"delta to block {ev.index} not open"
            elif ev.type == "content_block_stop":
                assert ev.index in open_blocks
                open_blocks.discard(ev.index)
            elif ev.type == "message_delta":
                stop_reason = ev.delta.stop_reason
            elif ev.type == "message_stop":
                # Anthropic leaves a tool_use block cut by max_tokens open (its JSON is incomplete)
                cut = stop_reason in ("max_tokens", "model_context_window_exceeded") and all(
                    snap.content[i].type == "tool_use" for i in open_blocks)
                assert not open_blocks or cut, "message_stop with open blocks"
                seen_stop = True
        if beta:
            import httpx2

            snap = beta_accumulate_event(event=ev, current_snapshot=snap, json_bufs=bufs,
                                         request_headers=httpx2.Headers())
        else:
            snap = accumulate_event(event=ev, current_snapshot=snap, json_bufs=bufs)
    if strict:
        assert seen_stop, "no message_stop"
    body = snap.model_dump(mode="json", exclude_none=False)
    return summarize_response(A, _clean_anthropic(body))


def _clean_anthropic(body: dict) -> dict:
    body = dict(body)
    body.pop("parsed_output", None)
    body["content"] = [{k: v for k, v in b.items() if k != "parsed_output"} for b in body["content"]]
    return body


def _acc_chat(events, strict) -> Summary:
    state = ChatCompletionStreamState()
    done = False
    n = 0
    for name, data in events:
        if strict:
            assert name is None, "Chat streams use bare data: lines"
        if data.startswith("[DONE]"):
            done = True
            break
        obj = json.loads(data)
        if "error" in obj and isinstance(obj["error"], dict):
            raise StreamError(obj["error"].get("message"))
        chunk = oc.ChatCompletionChunk.model_validate(obj)
        state.handle_chunk(chunk)
        n += 1
    if strict:
        assert done, "no [DONE]"
    snap = state.current_completion_snapshot
    body = snap.model_dump(mode="json")
    for ch in body["choices"]:
        ch["message"].pop("parsed", None)
        for tc in ch["message"].get("tool_calls") or []:
            tc["function"].pop("parsed_arguments", None)
    return summarize_response(C, body)


def _acc_responses(events, strict) -> Summary:
    state = ResponseStreamState(input_tools=[], text_format=_omit())
    seq = -1
    final = None
    terminals = 0
    item_ids: dict[int, str] = {}
    open_item: int | None = None
    for name, data in events:
        obj = json.loads(data)
        if obj.get("type") == "error":
            err = obj.get("error") if isinstance(obj.get("error"), dict) else obj
            raise StreamError(err.get("message"))
        if strict:
            assert name is None or name == obj["type"], (name, obj["type"])
            assert obj["sequence_number"] > seq, "sequence_number not increasing"
            seq = obj["sequence_number"]
            if obj["type"] == "response.output_item.added":
                oi = obj["output_index"]
                assert oi not in item_ids, f"output_index {oi} reused"
                assert open_item is None, f"item {oi} added while item {open_item} open"
                item_ids[oi] = obj["item"].get("id")
                open_item = oi
            elif obj["type"] == "response.output_item.done":
                assert obj["output_index"] == open_item, "output_item.done for an item that is not open"
                open_item = None
        ev = _responses_event.validate_python(obj)
        state.handle_event(ev)
        if ev.type in ("response.completed", "response.incomplete", "response.failed"):
            terminals += 1
            final = obj["response"]
    if strict:
        assert terminals == 1, f"{terminals} terminal events"
        for i, item in enumerate(final["output"]):
            if i in item_ids:
                assert item.get("id") == item_ids[i], "item id differs from the snapshot"
    if final is None:
        raise AssertionError("no terminal Responses event")
    if final.get("status") == "failed":
        raise StreamError((final.get("error") or {}).get("message"))
    return summarize_response(R, final)


def _omit():
    from openai._types import omit

    return omit


# ----------------------------------------------------------------------------- requests
def _force(v: Any) -> Any:
    """Consume pydantic's lazy ValidatorIterators so TypedDict validation really runs."""
    if isinstance(v, dict):
        return {k: _force(x) for k, x in v.items()}
    if v is None or isinstance(v, (str, bytes, int, float, bool)):
        return v
    if isinstance(v, list) or hasattr(v, "__iter__"):
        return [_force(x) for x in v]
    return v


_REQ_ADAPTERS: dict = {}


def validate_request(protocol: Protocol, body: dict) -> None:
    """Validate a request body with the SDK's own request param types (TypedDicts)."""
    import anthropic.types.message_create_params as _at
    import openai.types.chat.completion_create_params as _oc
    import openai.types.responses.response_create_params as _rcp

    if protocol is G:
        sdk_gemini.validate_request(body)
        return
    stream = bool(body.get("stream"))
    key = (protocol, stream)
    if key not in _REQ_ADAPTERS:
        if protocol is C:
            t = _oc.CompletionCreateParamsStreaming if stream else _oc.CompletionCreateParamsNonStreaming
        elif protocol is R:
            t = _rcp.ResponseCreateParamsStreaming if stream else _rcp.ResponseCreateParamsNonStreaming
        else:
            t = _at.MessageCreateParamsStreaming if stream else _at.MessageCreateParamsNonStreaming
        _REQ_ADAPTERS[key] = pydantic.TypeAdapter(t)
    if protocol is R:
        body = responses_input_placeholders(body)
    _force(_REQ_ADAPTERS[key].validate_python(body))


def responses_input_placeholders(body: dict) -> dict:
    """The SDK's request types require id/status on assistant output_text messages; the API and
    Codex send them without (an invented id would be rejected): placeholders filled to validate."""
    if not isinstance(body.get("input"), list):
        return body
    items = []
    for it in body["input"]:
        if isinstance(it, dict) and it.get("role") == "assistant" and isinstance(it.get("content"), list):
            it = dict(it, id=it.get("id") or "msg_placeholder", status=it.get("status") or "completed",
                      type="message")
        items.append(it)
    return dict(body, input=items)
