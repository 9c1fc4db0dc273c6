"""Text renderings of LLM requests and responses, the way a person reads a conversation.

Used by the "LLM" contentview (contentview.py).
"""

from __future__ import annotations

import json
from typing import Any

from proxai_core import Exchange, Protocol, StopInfo
from proxai_core import neutral as n
from proxai_core.codecs import get

from ..flow.analysis import BodyInfo
from ..wire.protocols import TITLES as _TITLES

__all__ = ["render_part", "render_request", "render_request_lenient", "render_response"]

IND = "  "
ARG_IND = "      "


# ----------------------------------------------------------------------------- small helpers
def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else prefix.rstrip() for line in text.split("\n"))


def _kb(chars: int, b64: bool = True) -> str:
    size = chars * 3 // 4 if b64 else chars
    if size >= 1024 * 1024:
        return f"{size / 1024 / 1024:.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.1f} kB"
    return f"{size} B"


def _short(s: str | None, limit: int = 100) -> str:
    if not s:
        return ""
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _pretty_args(arguments: str) -> str:
    if not arguments:
        return "{}"
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def _compact_json(v: Any, limit: int = 160) -> str:
    try:
        s = json.dumps(v, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        s = str(v)
    return _short(s, limit)


def _elide(key: str, value: Any) -> str:
    if isinstance(value, str):
        return f"[{key} {len(value)} chars elided]"
    return f"[{key} elided]"


# ----------------------------------------------------------------------------- parts
def _image(p: n.Image) -> str:
    if p.source == "base64":
        return f"[image: base64 {p.media_type or '?'}, {_kb(len(p.data or ''))}]"
    if p.source == "url":
        url = p.url or ""
        if url.startswith("data:"):
            mt = url[5:].split(";", 1)[0] or "?"
            return f"[image: data URL {mt}, {_kb(len(url))}]"
        return f"[image: {_short(url, 100)}]" + (f" detail={p.detail}" if p.detail else "")
    return f"[image: file {p.file_id}]"


def _document(p: n.Document) -> str:
    name = p.title or p.filename
    label = f" '{_short(name, 60)}'" if name else ""
    if p.source == "base64":
        return f"[document{label}: base64 {p.media_type or '?'}, {_kb(len(p.data or ''))}]"
    if p.source == "text":
        return f"[document{label}: text, {len(p.data or '')} chars]"
    if p.source == "url":
        url = p.url or ""
        if url.startswith("data:"):
            return f"[document{label}: data URL, {_kb(len(url))}]"
        return f"[document{label}: {_short(url, 100)}]"
    return f"[document{label}: file {p.file_id}]"


def _opaque(p: n.Opaque) -> str:
    raw = p.raw if isinstance(p.raw, dict) else {}
    kind = raw.get("type") or p.label or "item"
    bits: list[str] = []
    if raw.get("name"):
        bits.append(str(raw["name"]))
    for k in ("input", "arguments", "action", "query", "queries", "code", "command"):
        if raw.get(k) not in (None, "", {}, []):
            bits.append(_compact_json(raw[k], 160))
            break
    if raw.get("status"):
        bits.append(f"status={raw['status']}")
    for k in ("content", "results", "output", "tools"):
        v = raw.get(k)
        if isinstance(v, list):
            bits.append(f"{len(v)} item{'s' if len(v) != 1 else ''}")
            break
        if isinstance(v, dict) and v.get("type"):
            inner = v.get("content")
            bits.append(f"{v['type']}" + (f" ({len(inner)} items)" if isinstance(inner, list) else ""))
            break
    if p.label and p.label != kind:
        bits.append(f"({p.label})")
    return f"◆ {kind}" + (": " + " ".join(bits) if bits else "")


def _citations(cits: list[dict[str, Any]]) -> list[str]:
    out = [f"[{len(cits)} citation{'s' if len(cits) != 1 else ''}]"]
    for i, c in enumerate(cits[:5], 1):
        what = c.get("title") or c.get("url") or c.get("filename") or c.get("file_id") or c.get("type")
        where = c.get("url") if c.get("title") and c.get("url") else ""
        quote = f' "{_short(c.get("cited_text"), 80)}"' if c.get("cited_text") else ""
        out.append(f"  {i}. {_short(str(what), 80)}" + (f" — {_short(where, 80)}" if where else "") + quote)
    if len(cits) > 5:
        out.append(f"  … {len(cits) - 5} more")
    return out


def _reasoning(p: n.Reasoning) -> list[str]:
    out: list[str] = []
    head = "💭 reasoning (redacted)" if p.redacted else "💭 reasoning"
    if p.summary and len(p.summary) > 1:
        out.append(head + " summary:")
        for s in p.summary:
            first, *rest = s.split("\n")
            out.append("   • " + first)
            out.extend("     " + line for line in rest)
    elif p.text:
        lines = p.text.split("\n")
        out.append(f"{head}: {lines[0]}")
        out.extend(("   " + line).rstrip() for line in lines[1:])
    else:
        out.append(head)
    op = p.opaque or {}
    for k, v in op.items():
        if k == "protocol" or v in (None, ""):
            continue
        if k in ("signature", "encrypted_content", "data", "envelope"):
            label = "redacted thinking data" if k == "data" else k
            out.append("   " + _elide(label, v))
        elif k == "id":
            out.append(f"   id {v}")
        elif isinstance(v, str) and len(v) > 60:
            out.append("   " + _elide(k, v))
    return out


def render_part(p: Any) -> list[str]:
    """One neutral part as display lines (without the message indentation)."""
    if isinstance(p, n.Text):
        lines = p.text.split("\n") if p.text else ['""']
        if p.citations:
            lines += _citations(p.citations)
        return lines
    if isinstance(p, n.Refusal):
        return [f"⛔ REFUSAL: {p.text}"]
    if isinstance(p, n.ToolCall):
        kind = "custom tool call" if p.kind == "custom" else "tool call"
        body = p.arguments if p.kind == "custom" else _pretty_args(p.arguments)
        return [f"→ {kind} {p.name} ({p.id})", _indent(body, ARG_IND[len(IND):])]
    if isinstance(p, n.ToolResult):
        flag = " (error)" if p.is_error else ""
        lines = [f"← tool result {p.call_id}{flag}:"]
        if not p.content:
            lines.append("    (empty)")
        for c in p.content:
            for chunk in render_part(c):
                lines.extend(("    " + line).rstrip() for line in chunk.split("\n"))
        return lines
    if isinstance(p, n.Reasoning):
        return _reasoning(p)
    if isinstance(p, n.Image):
        return [_image(p)]
    if isinstance(p, n.Document):
        return [_document(p)]
    if isinstance(p, n.Opaque):
        return [_opaque(p)]
    return [f"[{type(p).__name__}]"]


def _block(role: str, parts: list[Any], name: str | None = None) -> list[str]:
    if parts and all(isinstance(p, n.ToolResult) for p in parts):
        name = f"{name}, tool results" if name else "tool results"
    head = f"── {role}" + (f" ({name})" if name else "") + " ──"
    out = [head]
    if not parts:
        out.append(IND + "(empty)")
    for p in parts:
        for chunk in render_part(p):
            for line in chunk.split("\n"):
                out.append((IND + line).rstrip() if line else "")
    out.append("")
    return out


def _usage_line(u: n.Usage | None) -> str | None:
    if u is None:
        return None
    bits = []
    if u.input_total is not None:
        extra = []
        if u.cache_read:
            extra.append(f"cache read {u.cache_read}")
        if u.cache_write:
            extra.append(f"cache write {u.cache_write}")
        bits.append(f"input {u.input_total}" + (f" ({', '.join(extra)})" if extra else ""))
    if u.output is not None:
        bits.append(f"output {u.output}" + (f" (reasoning {u.reasoning})" if u.reasoning else ""))
    return "usage: " + " · ".join(bits) if bits else None


def _stop_lines(stop: StopInfo | None, shown_refusal: bool) -> list[str]:
    if stop is None:
        return ["stop: (unknown — the body has no stop information)"]
    out = []
    if stop.refused and not shown_refusal:
        out.append(f"⛔ REFUSAL: {stop.message or 'the model declined (no text)'}")
    out.append(f"stop: {stop.describe()}")
    if stop.recommended_model:
        out.append(f"      recommended model: {stop.recommended_model}")
    return out


# ----------------------------------------------------------------------------- requests / responses
def render_request(obj: dict[str, Any], protocol: Protocol, note: str | None = None) -> str:
    warnings: list[str] = []
    req = Exchange(protocol, obj, warnings=warnings).request
    head = [f"{_TITLES[protocol]} request"]
    facts = []
    if req.model:
        facts.append(f"model {req.model}")
    facts.append("stream" if req.stream else "no stream")
    if req.max_output_tokens is not None:
        facts.append(f"max output {req.max_output_tokens}")
    if req.temperature is not None:
        facts.append(f"temperature {req.temperature}")
    if req.top_p is not None:
        facts.append(f"top_p {req.top_p}")
    if req.stop:
        facts.append(f"stop {req.stop!r}")
    lines = [head[0] + " — " + ", ".join(facts)]
    if note:
        lines.append(note)
    if req.tools:
        names = [t.name + (" [custom]" if t.kind == "custom" else "") for t in req.tools]
        lines.append(f"tools ({len(names)}): " + ", ".join(names))
    tc = req.tool_choice
    if tc is not None and tc.mode != "auto":
        lines.append("tool choice: " + (f"{tc.mode} {tc.name}" if tc.name else tc.mode)
                     + (f" of {', '.join(tc.allowed)}" if tc.allowed else ""))
    if req.parallel_tool_calls is False:
        lines.append("parallel tool calls: off")
    r = req.reasoning
    if r is not None:
        bits = []
        if r.disabled:
            bits.append("disabled")
        if r.adaptive:
            bits.append("adaptive")
        if r.effort:
            bits.append(f"effort {r.effort}")
        if r.budget_tokens:
            bits.append(f"budget {r.budget_tokens} tokens")
        if r.summary:
            bits.append(f"summary {r.summary}")
        if bits:
            lines.append("reasoning: " + ", ".join(bits))
    of = req.output_format
    if of is not None and of.type != "text":
        lines.append(f"output format: {of.type}" + (f" {of.name}" if of.name else ""))
    lines.append("")
    if req.system:
        lines += _block(req.system_role, list(req.system))
    for m in req.messages:
        lines += _block(m.role, m.parts, m.name)
    if not req.messages and not req.system:
        lines.append("(no messages)")
    if warnings:
        lines.append("notes: " + "; ".join(dict.fromkeys(warnings)))
    return "\n".join(lines).rstrip() + "\n"


#: the lenient view shows at most this much of the body
_LENIENT_CHARS = 64 * 1024


def render_request_lenient(obj: dict[str, Any], protocol: Protocol | None, error: Exception) -> str:
    """A best-effort rendering of a request the codec rejects (unknown part types, provider extras):
    the facts the registry says where to find, the reader's complaint, then the body as indented JSON."""
    title = _TITLES.get(protocol, "LLM") if protocol else "LLM"
    fields = get(protocol).wire.fields if protocol else None
    model = obj.get(fields.model) if fields else None
    facts = [f"model {model}"] if model else []
    if fields:
        facts.append("stream" if obj.get(fields.stream) else "no stream")
    lines = [f"{title} request — " + (", ".join(facts) or "unreadable"),
             f"(lenient view; the {protocol.value if protocol else 'LLM'} reader said: {error})", ""]
    text = json.dumps(obj, indent=2, ensure_ascii=False)
    if len(text) > _LENIENT_CHARS:
        text = text[:_LENIENT_CHARS] + f"\n… ({len(text) - _LENIENT_CHARS} more characters)"
    lines.append(text)
    return "\n".join(lines).rstrip() + "\n"


def render_response(info: BodyInfo, status: int | None = None) -> str:
    proto = info.protocol
    title = _TITLES.get(proto, "LLM") if proto else "LLM"
    facts = []
    resp = info.response
    model = info.model or (resp.model if resp else None)
    if model:
        facts.append(f"model {model}")
    if resp is not None and resp.id:
        facts.append(f"id {resp.id}")
    if info.kind == "sse":
        facts.append(f"stream, {info.events} events")
    if status is not None:
        facts.append(f"HTTP {status}")
    kind = "error" if info.kind == "error" else "response"
    lines = [f"{title} {kind}" + (" — " + ", ".join(facts) if facts else ""), ""]
    shown_refusal = False
    if resp is not None and (resp.parts or info.kind != "error"):
        lines += _block("assistant", resp.parts)
        shown_refusal = any(isinstance(p, n.Refusal) for p in resp.parts)
    if info.error is not None:
        e = info.error
        code = f" {e.code}" if e.code and e.code != e.kind else ""
        st = f" (HTTP {e.status})" if e.status else ""
        lines.append(f"error: {e.kind}{code}{st}: {e.message}")
    lines += _stop_lines(info.stop, shown_refusal)
    u = _usage_line(info.usage)
    if u:
        lines.append(u)
    if info.warnings:
        lines.append("notes: " + "; ".join(dict.fromkeys(info.warnings)))
    return "\n".join(lines).rstrip() + "\n"
