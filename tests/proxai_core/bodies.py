"""Small hand-written wire bodies for the cases real recordings lack (seed rules, refusals...)."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import sse  # noqa: F401  (the shared SSE builder, re-exported)


def anthropic_msg(content: list[dict], stop_reason: str | None, *, stop_details: dict | None = None,
                  stop_sequence: str | None = None, usage: dict | None = None) -> dict:
    return {
        "id": "msg_01TEST", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
        "stop_details": stop_details,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0,
                           "cache_creation_input_tokens": 0},
    }


def chat_completion(message: dict, finish: str | None, *, usage: dict | None = None) -> dict:
    msg = {"role": "assistant", "content": None, "refusal": None}
    msg.update(message)
    return {
        "id": "chatcmpl-TEST", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def responses_obj(output: list[dict], status: str = "completed", *, incomplete: dict | None = None,
                  error: dict | None = None) -> dict:
    return {
        "id": "resp_TEST", "object": "response", "created_at": 1700000000, "model": "gpt-5",
        "status": status, "output": output, "incomplete_details": incomplete, "error": error,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "instructions": None,
        "metadata": {}, "temperature": 1.0, "top_p": 1.0,
        "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15},
    }


def r_message(*content: dict) -> dict:
    return {"type": "message", "id": "msg_TEST", "role": "assistant", "status": "completed",
            "content": list(content)}


def r_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def r_refusal(text: str) -> dict:
    return {"type": "refusal", "refusal": text}


def r_call(name: str, args: dict, call_id: str = "call_1") -> dict:
    return {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name,
            "arguments": json.dumps(args), "status": "completed"}


# ----------------------------------------------------------------------------- SSE builders
def anthropic_stream(blocks: list[tuple[str, Any]], stop_reason: str | None, *,
                     stop_details: dict | None = None, stop_sequence: str | None = None,
                     end: bool = True) -> bytes:
    """blocks: ("text", "hello") | ("thinking", ("thought", "sig")) | ("tool", (id, name, args))."""
    ev: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_01S", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1}}})]
    for i, (kind, val) in enumerate(blocks):
        if kind == "text":
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "text", "text": ""}}))
            for piece in (val[: len(val) // 2], val[len(val) // 2:]):
                if piece:
                    ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                        "delta": {"type": "text_delta", "text": piece}}))
        elif kind == "thinking":
            text, sig = val
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "thinking", "thinking": "",
                                                                  "signature": ""}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": {"type": "thinking_delta", "thinking": text}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": {"type": "signature_delta", "signature": sig}}))
        elif kind == "tool":
            tid, name, args = val
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "tool_use", "id": tid, "name": name,
                                                                  "input": {}}}))
            s = json.dumps(args)
            for piece in (s[:3], s[3:]):
                ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    if stop_reason is not None:
        delta: dict[str, Any] = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        if stop_details is not None:
            delta["stop_details"] = stop_details
        ev.append(("message_delta", {"type": "message_delta", "delta": delta,
                                      "usage": {"output_tokens": 20}}))
        if end:
            ev.append(("message_stop", {"type": "message_stop"}))
    return sse(ev)


def chat_stream(deltas: list[dict], finish: str | None, *, usage: bool = True, done: bool = True) -> bytes:
    base = {"id": "chatcmpl-S", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o"}
    ev: list[tuple[None, Any]] = [(None, dict(base, choices=[{"index": 0, "delta": {"role": "assistant"},
                                                               "finish_reason": None}]))]
    for d in deltas:
        ev.append((None, dict(base, choices=[{"index": 0, "delta": d, "finish_reason": None}])))
    if finish is not None:
        ev.append((None, dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}])))
        if usage:
            ev.append((None, dict(base, choices=[], usage={"prompt_tokens": 9, "completion_tokens": 4,
                                                            "total_tokens": 13})))
        if done:
            ev.append((None, "[DONE]"))
    return sse(ev)


def responses_stream(output: list[dict], status: str = "completed", *, incomplete: dict | None = None,
                     terminal: bool = True) -> bytes:
    """Builds a realistic Responses stream for a list of final output items."""
    seq = 0
    ev: list[tuple[str, Any]] = []

    def add(obj):
        nonlocal seq
        obj["sequence_number"] = seq
        seq += 1
        ev.append((obj["type"], obj))

    snap = responses_obj([], "in_progress")
    snap["usage"] = None
    add({"type": "response.created", "response": snap})
    add({"type": "response.in_progress", "response": snap})
    for oi, item in enumerate(output):
        if item["type"] == "message":
            add({"type": "response.output_item.added", "output_index": oi,
                 "item": dict(item, content=[], status="in_progress")})
            for ci, part in enumerate(item["content"]):
                empty = dict(part, text="") if part["type"] == "output_text" else dict(part, refusal="")
                add({"type": "response.content_part.added", "item_id": item["id"], "output_index": oi,
                     "content_index": ci, "part": empty})
                if part["type"] == "output_text":
                    add({"type": "response.output_text.delta", "item_id": item["id"], "output_index": oi,
                         "content_index": ci, "delta": part["text"], "logprobs": []})
                    add({"type": "response.output_text.done", "item_id": item["id"], "output_index": oi,
                         "content_index": ci, "text": part["text"], "logprobs": []})
                else:
                    add({"type": "response.refusal.delta", "item_id": item["id"], "output_index": oi,
                         "content_index": ci, "delta": part["refusal"]})
                    add({"type": "response.refusal.done", "item_id": item["id"], "output_index": oi,
                         "content_index": ci, "refusal": part["refusal"]})
                add({"type": "response.content_part.done", "item_id": item["id"], "output_index": oi,
                     "content_index": ci, "part": part})
        elif item["type"] == "function_call":
            add({"type": "response.output_item.added", "output_index": oi,
                 "item": dict(item, arguments="", status="in_progress")})
            add({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": oi,
                 "delta": item["arguments"]})
            add({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": oi,
                 "arguments": item["arguments"], "name": item["name"]})
        add({"type": "response.output_item.done", "output_index": oi, "item": item})
    if terminal:
        final = responses_obj(output, status, incomplete=incomplete)
        kind = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed"}[status]
        add({"type": kind, "response": final})
    return sse(ev)
