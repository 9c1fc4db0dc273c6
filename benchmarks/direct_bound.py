"""How close to the orjson floor can a translator get at all? Hand-written direct translators as a bound.

    uv run python benchmarks/direct_bound.py [--reps 21] [--write]

For the benchmark rows furthest from their targets, a translator written by hand for exactly that
direction and exactly that input: no neutral model, no codec registry, no validation of the client's
body, no StopInfo, no warnings, no error paths, an SSE reader that knows only "event:"/"data:" lines
ended by a blank line. Each produces the same output as ProxAI on its input (streams: the same bytes;
requests: an equal JSON body) — checked before timing, so the bound costs exactly the work of producing
that output. Timed like benchmarks/stream.py and benchmarks/request_translation.py (CPU time, cases
interleaved, × = median of the per-round ratios to bare orjson decode + encode + framing).

What it shows: the floor of a stream row counts only the source's events, but the client's protocol
decides how many frames, and how large, must be written. Where the direct translator is itself above a
target, no implementation of the product (which must also validate, observe StopInfo and read any SSE
framing) can meet that target on that row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from benchmarks._common import machine, write_section  # noqa: E402
from benchmarks.request_translation import BODIES, G_PATH, history  # noqa: E402
from benchmarks.request_translation import case_bare as req_bare  # noqa: E402
from benchmarks.request_translation import case_ours as req_ours  # noqa: E402
from benchmarks.stream import (  # noqa: E402
    FIX,
    STREAMS,
    bench,
    case_bare_orjson,
    case_ours,
    ratio,
    split_events,
    stream_path,
)
from orjson import dumps, loads  # noqa: E402

from proxai_core import Protocol, translate_request  # noqa: E402

C, R, A, G = Protocol.CHAT, Protocol.RESPONSES, Protocol.ANTHROPIC, Protocol.GEMINI


def _events(buf: bytes):
    """(name, payload bytes) of each whole event at the head of ``buf``, and the rest."""
    out = []
    while (j := buf.find(b"\n\n")) >= 0:
        ev, buf = buf[:j], buf[j + 2:]
        i = ev.find(b"data: ")
        if i >= 0:
            out.append((ev[7:i - 1] if ev.startswith(b"event: ") else None, ev[i + 6:]))
    return out, buf


# ----------------------------------------------------------------------------- streams
_FINISH = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls", "stop_sequence": "stop"}
_TAIL = b',"finish_reason":null}]}\n\n'


class DirectAnthropicToChat:
    """Anthropic Messages SSE -> Chat Completions SSE (text and tool_use blocks)."""

    def __init__(self) -> None:
        self.buf = b""
        self.head = b""
        self.tools: dict[int, int] = {}
        self.finish = "stop"

    def feed(self, chunk: bytes) -> bytes:
        evs, self.buf = _events(self.buf + chunk)
        out = []
        for _name, data in evs:
            obj = loads(data)
            t = obj["type"]
            if t == "content_block_delta":
                d = obj["delta"]
                if d["type"] == "text_delta":
                    out.append(self.head + dumps({"content": d["text"]}) + _TAIL)
                elif d["type"] == "input_json_delta" and d["partial_json"]:
                    out.append(self.head + dumps({"tool_calls": [{"index": self.tools[obj["index"]], "function": {
                        "arguments": d["partial_json"]}}]}) + _TAIL)
            elif t == "message_start":
                m = obj["message"]
                self.head = (b'data: {"id":' + dumps("chatcmpl-" + m["id"].removeprefix("msg_"))
                             + b',"object":"chat.completion.chunk","created":0,"model":' + dumps(m["model"])
                             + b',"choices":[{"index":0,"delta":')
                out.append(self.head + b'{"role":"assistant","content":""}' + _TAIL)
            elif t == "content_block_start":
                cb = obj["content_block"]
                if cb["type"] == "tool_use":
                    k = self.tools[obj["index"]] = len(self.tools)
                    out.append(self.head + dumps({"tool_calls": [{"index": k, "id": cb["id"], "type": "function",
                                                                  "function": {"name": cb["name"], "arguments": ""}}]})
                               + _TAIL)
            elif t == "message_delta":
                self.finish = _FINISH[obj["delta"]["stop_reason"]]
            elif t == "message_stop":
                out.append(self.head + b'{},"finish_reason":' + dumps(self.finish) + b"}]}\n\ndata: [DONE]\n\n")
        return b"".join(out)

    def close(self) -> bytes:
        return b""


def _shell(rid, model, status, output, usage, incomplete=None):
    return {"id": rid, "object": "response", "created_at": 0, "status": status, "background": False, "error": None,
            "incomplete_details": incomplete, "instructions": None, "max_output_tokens": None, "model": model,
            "output": output, "parallel_tool_calls": True, "previous_response_id": None, "temperature": None,
            "tool_choice": "auto", "tools": [], "top_p": None, "metadata": {}, "usage": usage}


def _frame(name: bytes, obj: dict) -> bytes:
    return b"event: " + name + b"\ndata: " + dumps(obj) + b"\n\n"


class _ResponsesOut:
    """The Responses frames of one text message: begin, deltas, the done frames and the terminal."""

    def __init__(self) -> None:
        self.buf = b""
        self.rid = ""
        self.seq = 4
        self.text: list[str] = []

    def begin(self, rid: str, model: str, out: list[bytes]) -> None:
        self.rid, self.model, self.iid = "resp_" + rid, model, "msg_" + rid + "_0"
        s = _shell(self.rid, model, "in_progress", [], None)
        out += [_frame(b"response.created", {"type": "response.created", "sequence_number": 0, "response": s}),
                _frame(b"response.in_progress", {"type": "response.in_progress", "sequence_number": 1,
                                                 "response": s}),
                _frame(b"response.output_item.added", {
                    "type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
                    "item": {"id": self.iid, "type": "message", "status": "in_progress", "role": "assistant",
                             "content": []}}),
                _frame(b"response.content_part.added", {
                    "type": "response.content_part.added", "sequence_number": 3, "item_id": self.iid,
                    "output_index": 0, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})]

    def delta(self, t: str, out: list[bytes]) -> None:
        self.text.append(t)
        out.append(_frame(b"response.output_text.delta", {
            "type": "response.output_text.delta", "sequence_number": self.seq, "item_id": self.iid,
            "output_index": 0, "content_index": 0, "delta": t, "logprobs": []}))
        self.seq += 1

    def end(self, incomplete: bool, i: int, o: int) -> bytes:
        text, s, iid = "".join(self.text), self.seq, self.iid
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        status = "incomplete" if incomplete else "completed"
        item = {"id": iid, "type": "message", "status": status, "role": "assistant", "content": [part]}
        usage = {"input_tokens": i, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                 "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": i + o}
        name = "response.incomplete" if incomplete else "response.completed"
        why = {"reason": "max_output_tokens"} if incomplete else None
        return b"".join([
            _frame(b"response.output_text.done", {"type": "response.output_text.done", "sequence_number": s,
                                                  "item_id": iid, "output_index": 0, "content_index": 0, "text": text,
                                                  "logprobs": []}),
            _frame(b"response.content_part.done", {"type": "response.content_part.done", "sequence_number": s + 1,
                                                   "item_id": iid, "output_index": 0, "content_index": 0,
                                                   "part": part}),
            _frame(b"response.output_item.done", {"type": "response.output_item.done", "sequence_number": s + 2,
                                                  "output_index": 0, "item": item}),
            _frame(name.encode(), {"type": name, "sequence_number": s + 3,
                                   "response": _shell(self.rid, self.model, status, [item], usage, why)})])


class DirectGeminiToResponses(_ResponsesOut):
    """Gemini SSE (text parts) -> Responses SSE."""

    def __init__(self) -> None:
        super().__init__()
        self.finish = None
        self.usage: dict = {}

    def feed(self, chunk: bytes) -> bytes:
        evs, self.buf = _events(self.buf + chunk)
        out: list[bytes] = []
        for _name, data in evs:
            obj = loads(data)
            if not self.rid:
                self.begin(obj["responseId"], obj["modelVersion"], out)
            cand = obj["candidates"][0]
            for p in cand["content"]["parts"]:
                if t := p.get("text"):
                    self.delta(t, out)
            self.finish = cand.get("finishReason") or self.finish
            self.usage = obj.get("usageMetadata") or self.usage
        return b"".join(out)

    def close(self) -> bytes:
        u = self.usage
        return self.end(self.finish == "MAX_TOKENS", u.get("promptTokenCount", 0), u.get("candidatesTokenCount", 0))


class DirectAnthropicToResponses(_ResponsesOut):
    """Anthropic Messages SSE (one text block) -> Responses SSE."""

    def feed(self, chunk: bytes) -> bytes:
        evs, self.buf = _events(self.buf + chunk)
        out: list[bytes] = []
        for _name, data in evs:
            obj = loads(data)
            t = obj["type"]
            if t == "content_block_delta":
                self.delta(obj["delta"]["text"], out)
            elif t == "message_start":
                m = obj["message"]
                self.begin(m["id"].removeprefix("msg_"), m["model"], out)
                self.input = m["usage"]["input_tokens"]
            elif t == "message_delta":
                self.stop, self.output = obj["delta"]["stop_reason"], obj["usage"]["output_tokens"]
            elif t == "message_stop":
                out.append(self.end(self.stop == "max_tokens", self.input, self.output))
        return b"".join(out)

    def close(self) -> bytes:
        return b""


def case_direct_stream(cls, events):
    def run():
        t = cls()
        out = [t.feed(e) for e in events]
        out.append(t.close())
        return out
    return run


# ----------------------------------------------------------------------------- requests
def direct_gemini_to_chat(raw: bytes) -> bytes:
    """A Gemini generateContent body (model from the URL) -> a Chat Completions body."""
    b = loads(raw)
    msgs: list[dict] = []
    if si := b.get("systemInstruction"):
        msgs.append({"role": "system", "content": "".join(p["text"] for p in si["parts"])})
    for c in b["contents"]:
        if c.get("role") == "model":
            text, calls = [], []
            for p in c["parts"]:
                if "text" in p:
                    text.append(p["text"])
                elif fc := p.get("functionCall"):
                    calls.append({"id": fc["id"], "type": "function", "function": {
                        "name": fc["name"], "arguments": dumps(fc.get("args") or {}).decode()}})
            m = {"role": "assistant", "content": "".join(text) or None}
            if calls:
                m["tool_calls"] = calls
            msgs.append(m)
            continue
        for p in c["parts"]:
            if "text" in p:
                msgs.append({"role": "user", "content": p["text"]})
            elif fr := p.get("functionResponse"):
                msgs.append({"role": "tool", "tool_call_id": fr["id"], "content": fr["response"]["output"]})
    out: dict = {"model": G_PATH.split("/models/")[1].split(":")[0], "messages": msgs}
    out["tools"] = [{"type": "function", "function": {"name": f["name"], "description": f["description"],
                                                      "parameters": f["parametersJsonSchema"]}}
                    for t in b.get("tools", []) for f in t["functionDeclarations"]]
    out["tool_choice"] = {"AUTO": "auto", "ANY": "required", "NONE": "none"}[
        b["toolConfig"]["functionCallingConfig"]["mode"]]
    gc = b.get("generationConfig", {})
    out["max_completion_tokens"] = gc["maxOutputTokens"]
    out["temperature"] = gc["temperature"]
    out["stream"] = True
    out["stream_options"] = {"include_usage": True}
    return dumps(out)


def direct_chat_to_anthropic(raw: bytes) -> bytes:
    """A Chat Completions body -> an Anthropic Messages body."""
    b = loads(raw)
    msgs: list[dict] = []
    system = []
    for m in b["messages"]:
        role = m["role"]
        if role == "system":
            system.append(m["content"])
        elif role == "tool":
            blk = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if msgs and msgs[-1]["role"] == "user" and type(msgs[-1]["content"]) is list:
                msgs[-1]["content"].append(blk)
            else:
                msgs.append({"role": "user", "content": [blk]})
        elif role == "assistant" and m.get("tool_calls"):
            content = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            content += [{"type": "tool_use", "id": tc["id"], "name": tc["function"]["name"],
                         "input": loads(tc["function"]["arguments"])} for tc in m["tool_calls"]]
            msgs.append({"role": "assistant", "content": content})
        elif role == "user" and msgs and msgs[-1]["role"] == "user" and type(msgs[-1]["content"]) is list:
            msgs[-1]["content"].append({"type": "text", "text": m["content"]})  # turns alternate
        else:
            msgs.append({"role": role, "content": m["content"]})
    out = {"model": b["model"], "max_tokens": b["max_tokens"], "messages": msgs, "system": "\n\n".join(system),
           "temperature": b["temperature"],
           "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                      "input_schema": t["function"]["parameters"]} for t in b["tools"]],
           "tool_choice": {"type": "auto"}, "metadata": {"user_id": b["user"]}, "stream": True}
    return dumps(out)


# ----------------------------------------------------------------------------- run
def checked_rows() -> list[tuple[str, str, int, dict]]:
    """(label, target, units, cases) of each row, once each direct translator is checked to produce
    ProxAI's output on its input (SystemExit naming the row otherwise)."""
    rows = []
    for src, dst, kind, cls in ((A, C, "text", DirectAnthropicToChat), (A, C, "tools", DirectAnthropicToChat),
                                (A, R, "text", DirectAnthropicToResponses), (G, R, "text", DirectGeminiToResponses)):
        rel = STREAMS[src][kind]
        events = split_events((FIX / rel).read_bytes())
        ours, direct = case_ours(src, dst, events, stream_path(src, rel)), case_direct_stream(cls, events)
        if b"".join(ours()) != b"".join(direct()):
            sys.exit(f"{src.value} → {dst.value} {kind}: the direct translator's bytes differ from ProxAI's")
        units = sum(1 for e in events if b"data:" in e and b"[DONE]" not in e)
        rows.append((f"stream {src.value} → {dst.value}, {kind} ({units} events)", "≤ 3", units,
                     {"bare": case_bare_orjson(events), "direct": direct, "ProxAI": ours}))
    for src, dst, fn, label in ((G, C, direct_gemini_to_chat, "G→C"), (C, A, direct_chat_to_anthropic, "C→M")):
        for size, body in (("built-in", BODIES[src]), ("1,000 messages", history(src, 1000))):
            raw = dumps(body)
            path = G_PATH if src is G else None
            if loads(fn(raw)) != translate_request(loads(raw), src, dst, path=path):
                sys.exit(f"{label} {size}: the direct translator's body differs from ProxAI's")
            rows.append((f"request {label}, {size} ({len(raw):,} B)", "≤ 4", 1,
                         {"bare": req_bare(raw), "direct": lambda raw=raw, fn=fn: fn(raw),
                          "ProxAI": req_ours(raw, src, dst, path)}))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--rep-ms", type=float, default=40)
    ap.add_argument("--write", action="store_true", help="update docs/performance.md")
    args = ap.parse_args()
    if not FIX.is_dir():
        sys.exit("../shared/fixtures is required")
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `benchmarks/direct_bound.py --reps "
             f"{args.reps}` on {machine()}. µs (CPU) per upstream event (streams) or per request; × = median of the "
             "per-round ratios to bare orjson. \"Direct\" = a translator hand-written for this one direction and "
             "input (no neutral model, no validation, no StopInfo), checked to produce the same output as ProxAI.",
             "", "| row | target | bare orjson | direct (bound) | ProxAI | ProxAI ÷ direct |", "|---|---|---|---|---|---|"]
    rows = checked_rows()
    for label, target, units, cases in rows:
        res = bench(cases, units, args.reps, args.rep_ms)
        base = res["bare"]

        def cell(k: str, res=res, base=base) -> str:
            v = res[k]
            return f"**{statistics.median(v):.1f}** ×{ratio(v, base):.2f}"

        lines.append(f"| {label} | {target} | **{statistics.median(base):.1f}** | {cell('direct')} | {cell('ProxAI')} | "
                     f"{ratio(res['ProxAI'], res['direct']):.2f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "performance.md", "direct-bound",
                      "### The bound: hand-written direct translators\n\n" + text, "Performance")


if __name__ == "__main__":
    main()
