"""Anthropic Messages requests: client body -> neutral, neutral -> upstream body."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

import orjson

from .. import reasoning as rz
from ..context import short_tool_name
from ..jsonutil import dumps
from ..neutral import (
    Document,
    Image,
    Message,
    Opaque,
    OutputFormat,
    Reasoning,
    ReasoningConfig,
    Refusal,
    Request,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
)
from ._anthropic_common import PROTOCOL, citation_from_neutral, citation_to_neutral, warn_once
from ._request_common import (
    expected,
    fail,
    invalid,
    is_json_int,
    opt_bool,
    opt_int,
    opt_num,
    opt_obj,
    opt_str,
    req_list,
    req_obj,
    req_str,
    where,
)

#: max_tokens sent when the neutral request has no output limit (Anthropic requires one).
DEFAULT_MAX_TOKENS = 8192

#: Reasoning effort -> extended thinking budget_tokens (Anthropic minimum is 1024).
EFFORT_BUDGET = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 32768,
}
MIN_BUDGET = 1024

#: output_config.effort values Anthropic accepts.
ANTHROPIC_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})

#: Request.extra keys this encoder forwards unchanged (Anthropic-only request fields).
PASSTHROUGH_EXTRA = (
    "container",
    "inference_geo",
    "speed",
    "cache_control",
    "context_management",
    "mcp_servers",
    "diagnostics",
    "user_profile_id",
    "workspace_id",
)
#: Request.extra keys of this codec's own (never warned about).
OWN_EXTRA = frozenset(
    {
        "server_tools",
        "service_tier",
        "anthropic_effort",
        "anthropic_thinking_display",
        "anthropic_thinking_between_tools",
    }
)
_ANTHROPIC_SERVICE_TIERS = frozenset({"auto", "standard_only"})
#: Anthropic server/Anthropic-defined tool types are versioned with an 8-digit date suffix.
_ANTHROPIC_TOOL_TYPE = re.compile(r"^[a-z][a-z0-9_]*_\d{8}$")
_BLOCK_TYPE = re.compile(r"^[a-z][a-z0-9_]*$")
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

CUSTOM_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The raw input text for this tool."}},
    "required": ["input"],
    "additionalProperties": False,
}
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
JSON_OBJECT_INSTRUCTION = "Respond with a single valid JSON object and nothing else."

_KNOWN_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "output_format",
        "metadata",
        "service_tier",
        *PASSTHROUGH_EXTRA,
    }
)

#: Fields handled above the extras; a body with only these skips the extras and unknown-field scans.
_CORE_FIELDS = _KNOWN_FIELDS - {"service_tier", *PASSTHROUGH_EXTRA}
#: The fields of a usual request; a body of only these skips the checks of the others.
_USUAL_FIELDS = frozenset({"model", "messages", "system", "max_tokens", "temperature", "stream", "tools",
                           "tool_choice", "thinking", "metadata"})


# ============================================================================= decode
def _text(b: dict[str, Any], *path: str | int) -> Text:
    text = b.get("text")
    if not isinstance(text, str):
        raise expected("a string", text, *path, "text")
    cc = b.get("cache_control")
    if cc is not None and not isinstance(cc, dict):
        raise expected("an object", cc, *path, "cache_control")
    cits = b.get("citations")
    if cits is None:
        return Text(text, None, cc)
    citations = [citation_to_neutral(c) for c in req_list(cits, *path, "citations") if isinstance(c, dict)]
    return Text(text, citations or None, cc)


def _image(b: dict[str, Any], *path: str | int) -> Image:
    src = req_obj(b.get("source"), *path, "source")
    st = src.get("type")
    cc = opt_obj(b.get("cache_control"), *path, "cache_control")
    if st == "base64":
        return Image("base64", media_type=req_str(src.get("media_type"), *path, "source", "media_type"),
                     data=req_str(src.get("data"), *path, "source", "data"), cache_control=cc)
    if st == "url":
        return Image("url", url=req_str(src.get("url"), *path, "source", "url"), cache_control=cc)
    if st == "file":
        return Image("file", file_id=req_str(src.get("file_id"), *path, "source", "file_id"), cache_control=cc)
    fail(f"unknown image source type {st!r}", *path, "source", "type")


def _document(b: dict[str, Any], warnings: list[str], *path: str | int) -> Document | Opaque:
    src = req_obj(b.get("source"), *path, "source")
    st = src.get("type")
    title = opt_str(b.get("title"), *path, "title")
    cc = opt_obj(b.get("cache_control"), *path, "cache_control")
    if b.get("context") is not None or b.get("citations") is not None:
        warn_once(warnings, "document context/citations settings are kept only toward Anthropic upstreams")
    if st == "base64":
        return Document("base64", media_type=req_str(src.get("media_type"), *path, "source", "media_type"),
                        data=req_str(src.get("data"), *path, "source", "data"), title=title, cache_control=cc)
    if st == "text":
        return Document("text", media_type=opt_str(src.get("media_type"), *path, "source", "media_type")
                        or "text/plain", data=req_str(src.get("data"), *path, "source", "data"), title=title,
                        cache_control=cc)
    if st == "url":
        return Document("url", url=req_str(src.get("url"), *path, "source", "url"), title=title, cache_control=cc)
    if st == "file":
        return Document("file", file_id=req_str(src.get("file_id"), *path, "source", "file_id"), title=title,
                        cache_control=cc)
    if st == "content":
        content = src.get("content")
        if isinstance(content, str):
            return Document("text", media_type="text/plain", data=content, title=title, cache_control=cc)
        if isinstance(content, list) and all(isinstance(c, dict) and c.get("type") == "text"
                                             and isinstance(c.get("text"), str) for c in content):
            return Document("text", media_type="text/plain", data="\n\n".join(c["text"] for c in content),
                            title=title, cache_control=cc)
        if isinstance(content, list):
            return Opaque(PROTOCOL, b, "document")
        raise expected("a string or an array of content blocks", content, *path, "source", "content")
    fail(f"unknown document source type {st!r}", *path, "source", "type")


def _search_result_text(b: dict[str, Any], warnings: list[str], *path: str | int) -> Text:
    content = req_list(b.get("content"), *path, "content")
    texts = [c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)]
    head = " ".join(x for x in (b.get("title"), b.get("source")) if isinstance(x, str))
    warn_once(warnings, "search_result blocks are carried as plain text")
    return Text((head + "\n" if head else "") + "\n".join(texts))


def _tool_result_content(v: Any, warnings: list[str], *path: str | int) -> list[Text | Image | Document]:
    if v is None:
        return []
    if isinstance(v, str):
        return [Text(v)] if v else []
    if not isinstance(v, list):
        raise expected("a string or an array of content blocks", v, *path)
    out: list[Text | Image | Document] = []
    for k, c in enumerate(v):
        ct = req_obj(c, *path, k).get("type")
        if ct == "text":
            out.append(_text(c, *path, k))
        elif ct == "image":
            out.append(_image(c, *path, k))
        elif ct == "document":
            d = _document(c, warnings, *path, k)
            if isinstance(d, Opaque):
                fail("document with non-text content blocks is not supported in a tool result", *path, k)
            out.append(d)
        elif ct == "search_result":
            out.append(_search_result_text(c, warnings, *path, k))
        elif ct == "tool_reference":
            warn_once(warnings, "tool_reference blocks are carried as plain text")
            out.append(Text(f"[tool reference: {c.get('tool_name')}]"))
        else:
            fail(f"unknown tool result content type {ct!r}", *path, k, "type")
    return out


def _unpacked(value: str, fallback_text: str, warnings: list[str], *path: str | int) -> Reasoning:
    payload = rz.unpack(value)
    if payload is None:
        warnings.append(f"{where(*path)}: damaged proxai reasoning envelope; its continuity payload was dropped")
        return Reasoning(text=fallback_text, opaque=None)
    text = payload.get("text")
    summary = payload.get("summary")
    return Reasoning(
        text=text if isinstance(text, str) else fallback_text,
        summary=summary if isinstance(summary, list) else None,
        redacted=bool(payload.get("redacted", False)),
        opaque={k: v for k, v in payload.items() if k not in ("text", "summary", "redacted")},
    )


def _block(b: Any, warnings: list[str], i: int, j: int) -> Any:
    """One content block of ``messages[i].content[j]``."""
    if not isinstance(b, dict):
        raise expected("an object", b, "messages", i, "content", j)
    t = b.get("type")
    if t == "text":
        text = b.get("text")
        if isinstance(text, str) and len(b) == 2:  # only type and text: nothing more to read
            return Text(text)
        return _text(b, "messages", i, "content", j)
    if t == "tool_use":
        tid = b.get("id")
        name = b.get("name")
        if not isinstance(tid, str):
            raise expected("a string", tid, "messages", i, "content", j, "id")
        if not isinstance(name, str):
            raise expected("a string", name, "messages", i, "content", j, "name")
        inp = b.get("input")
        return ToolCall(tid, name, "{}" if inp is None else dumps(inp).decode())
    if t == "tool_result":
        cid = b.get("tool_use_id")
        if not isinstance(cid, str):
            raise expected("a string", cid, "messages", i, "content", j, "tool_use_id")
        err = b.get("is_error")
        if err is not None and not isinstance(err, bool):
            raise expected("a boolean", err, "messages", i, "content", j, "is_error")
        cc = b.get("cache_control")
        if cc is not None and not isinstance(cc, dict):
            raise expected("an object", cc, "messages", i, "content", j, "cache_control")
        content = b.get("content")
        if isinstance(content, str):  # a text (the usual result)
            return ToolResult(cid, [Text(content)] if content else [], err, "function", cc)
        return ToolResult(cid, _tool_result_content(content, warnings, "messages", i, "content", j, "content"),
                          err, "function", cc)
    if t == "thinking":
        text = b.get("thinking")
        if not isinstance(text, str):
            raise expected("a string", text, "messages", i, "content", j, "thinking")
        sig = b.get("signature")
        if sig is None:
            return Reasoning(text, None, {"protocol": PROTOCOL})
        if not isinstance(sig, str):
            raise expected("a string", sig, "messages", i, "content", j, "signature")
        if rz.is_packed(sig):
            return _unpacked(sig, text, warnings, "messages", i, "content", j)
        return Reasoning(text, None, {"protocol": PROTOCOL, "signature": sig})
    if t == "image":
        return _image(b, "messages", i, "content", j)
    if t == "document":
        return _document(b, warnings, "messages", i, "content", j)
    if t == "redacted_thinking":
        data = req_str(b.get("data"), "messages", i, "content", j, "data")
        if rz.is_packed(data):
            return _unpacked(data, "", warnings, "messages", i, "content", j)
        return Reasoning(text="", redacted=True, opaque={"protocol": PROTOCOL, "data": data})
    if t == "search_result":
        return _search_result_text(b, warnings, "messages", i, "content", j)
    if isinstance(t, str) and _BLOCK_TYPE.match(t):
        # server tool blocks, MCP blocks, container uploads, compaction, future block types
        return Opaque(PROTOCOL, b, t)
    fail(f"unknown content block type {t!r}", "messages", i, "content", j, "type")


def _system(v: Any) -> list[Text]:
    if isinstance(v, str):
        return [Text(v)] if v else []
    out = []
    for k, b in enumerate(req_list(v, "system")):
        if not isinstance(b, dict) or b.get("type") != "text":
            fail("expected a text block", "system", k)
        text = b.get("text")
        # only type and text: nothing more to read
        out.append(Text(text) if isinstance(text, str) and len(b) == 2 else _text(b, "system", k))
    return out


def _tools(v: Any, req: Request) -> None:
    server: list[dict[str, Any]] = []
    if not isinstance(v, list):
        raise expected("an array", v, "tools")
    for k, t in enumerate(v):
        if not isinstance(t, dict):
            raise expected("an object", t, "tools", k)
        tt = t.get("type")
        if tt is None or tt == "custom":
            name = t.get("name")
            desc = t.get("description")
            schema = t.get("input_schema")
            strict = t.get("strict")
            cc = t.get("cache_control")
            if not isinstance(name, str):
                raise expected("a string", name, "tools", k, "name")
            if desc is not None and not isinstance(desc, str):
                raise expected("a string", desc, "tools", k, "description")
            if schema is not None and not isinstance(schema, dict):
                raise expected("an object", schema, "tools", k, "input_schema")
            if strict is not None and not isinstance(strict, bool):
                raise expected("a boolean", strict, "tools", k, "strict")
            if cc is not None and not isinstance(cc, dict):
                raise expected("an object", cc, "tools", k, "cache_control")
            req.tools.append(Tool(name, desc, schema, "function", strict, None, cc))
        elif isinstance(tt, str):
            opt_str(t.get("name"), "tools", k, "name")
            server.append(t)
        else:
            raise expected("a string", tt, "tools", k, "type")
    if server:
        req.extra["server_tools"] = server


def _tool_choice(v: Any, req: Request) -> None:
    if not isinstance(v, dict):
        raise expected("an object", v, "tool_choice")
    t = v.get("type")
    if t == "auto":
        req.tool_choice = ToolChoice("auto")
    elif t == "any":
        req.tool_choice = ToolChoice("required")
    elif t == "tool":
        req.tool_choice = ToolChoice("tool", name=req_str(v.get("name"), "tool_choice", "name"))
    elif t == "none":
        req.tool_choice = ToolChoice("none")
    else:
        fail(f"unknown tool_choice type {t!r}", "tool_choice", "type")
    dpt = v.get("disable_parallel_tool_use")
    if dpt is not None and opt_bool(dpt, "tool_choice", "disable_parallel_tool_use"):
        req.parallel_tool_calls = False


def _thinking(v: Any, req: Request) -> None:
    t = req_obj(v, "thinking").get("type")
    rc = req.reasoning or ReasoningConfig()
    if t == "enabled":
        budget = v.get("budget_tokens")
        if not is_json_int(budget):
            raise expected("an integer", budget, "thinking", "budget_tokens")
        rc.budget_tokens = budget
    elif t == "adaptive":
        rc.adaptive = True
    elif t == "disabled":
        rc.disabled = True
    elif t == "between_tools":
        rc.disabled = True
        req.extra["anthropic_thinking_between_tools"] = True
    else:
        fail(f"unknown thinking type {t!r}", "thinking", "type")
    display = opt_str(v.get("display"), "thinking", "display")
    if display is not None:
        req.extra["anthropic_thinking_display"] = display
    req.reasoning = rc


def _format(v: Any, *path: str) -> OutputFormat | None:
    if v is None:
        return None
    if req_obj(v, *path).get("type") != "json_schema":
        fail(f"unknown output format type {v.get('type')!r}", *path, "type")
    return OutputFormat("json_schema", schema=req_obj(v.get("schema"), *path, "schema"))


def _decode_rare(body: dict[str, Any], req: Request, warnings: list[str]) -> None:
    """The fields a usual request does not have."""
    req.top_p = opt_num(body.get("top_p"), "top_p")
    req.top_k = opt_int(body.get("top_k"), "top_k")
    stops = body.get("stop_sequences")
    if stops is not None:
        req.stop = [req_str(s, "stop_sequences", k) for k, s in enumerate(req_list(stops, "stop_sequences"))]
    oc = opt_obj(body.get("output_config"), "output_config")
    if oc is not None:
        effort = opt_str(oc.get("effort"), "output_config", "effort")
        if effort is not None:
            req.reasoning = req.reasoning or ReasoningConfig()
            req.reasoning.effort = effort
            req.extra["anthropic_effort"] = effort
        req.output_format = _format(oc.get("format"), "output_config", "format")
        rest = sorted(k for k in oc if k not in ("effort", "format"))
        if rest:
            warnings.append(f"output_config fields ignored: {', '.join(rest)}")
    if req.output_format is None:
        req.output_format = _format(body.get("output_format"), "output_format")
    if not body.keys() <= _CORE_FIELDS:
        st = opt_str(body.get("service_tier"), "service_tier")
        if st is not None:
            req.extra["service_tier"] = st
        for k in PASSTHROUGH_EXTRA:
            if body.get(k) is not None:
                req.extra[k] = body[k]
        unknown = sorted(k for k in body if k not in _KNOWN_FIELDS)
        if unknown:
            warnings.append(f"unknown request fields ignored: {', '.join(unknown)}")


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    if not isinstance(body, dict):
        raise expected("an object", body, "body")
    req = Request()
    v = body.get("model")
    if v is not None:
        req.model = opt_str(v, "model")
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise expected("an array", msgs, "messages")
    system = body.get("system")
    if system is not None:
        req.system = _system(system)
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise expected("an object", m, "messages", i)
        role = m.get("role")
        if role != "user" and role != "assistant" and role != "system":
            fail(f"expected 'user', 'assistant' or 'system', got {role!r}", "messages", i, "role")
        content = m.get("content")
        if isinstance(content, str):
            req.messages.append(Message(role, [Text(content)]))
        elif isinstance(content, list):
            parts = [_block(b, warnings, i, j) for j, b in enumerate(content)]
            if role == "system" and not all(isinstance(p, Text) for p in parts):
                # instructions inside the conversation (Claude Code's per-turn system messages) are text
                fail("a system message carries text blocks only", "messages", i, "content")
            req.messages.append(Message(role, parts))
        else:
            raise expected("a string or an array of content blocks", content, "messages", i, "content")
    v = body.get("max_tokens")
    if v is not None:
        req.max_output_tokens = opt_int(v, "max_tokens")
    v = body.get("temperature")
    if v is not None:
        req.temperature = opt_num(v, "temperature")
    v = body.get("stream")
    if v is not None:
        # Anthropic streams always carry usage
        req.stream = req.include_usage = v if isinstance(v, bool) else bool(opt_bool(v, "stream"))
    v = body.get("tools")
    if v is not None:
        _tools(v, req)
    v = body.get("tool_choice")
    if v is not None:
        _tool_choice(v, req)
    v = body.get("thinking")
    if v is not None:
        _thinking(v, req)
    md = body.get("metadata")
    if md is not None:
        if not isinstance(md, dict):
            raise expected("an object", md, "metadata")
        v = md.get("user_id")
        req.user = opt_str(v, "metadata", "user_id")
        req.metadata = dict(md)
    if not body.keys() <= _USUAL_FIELDS:
        _decode_rare(body, req, warnings)
    return req


# ============================================================================= encode
def _tool_id(tid: str, warnings: list[str]) -> str:
    """The id sent for ``tid``: unchanged when Anthropic accepts it, else a clean one (the same for
    the same id)."""
    # (the usual id, an ASCII identifier, is known valid without the pattern)
    if tid.isascii() and tid.isidentifier() or _TOOL_ID.match(tid):
        return tid
    clean = re.sub(r"[^a-zA-Z0-9_-]", "_", tid) or "toolu"
    warn_once(warnings, "tool call ids with characters Anthropic rejects were rewritten")
    return f"{clean}_{hashlib.sha1(tid.encode()).hexdigest()[:8]}"


def _data_url(url: str) -> tuple[str, str] | None:
    """(media_type, base64 data) of a base64 data: URL, else None."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[: -len(";base64")] or "application/octet-stream", data


def _enc_image(p: Image, path: str) -> dict[str, Any]:
    if p.source == "base64":
        src = {"type": "base64", "media_type": p.media_type or "image/png", "data": p.data or ""}
    elif p.source == "url":
        url = p.url or ""
        du = _data_url(url)
        if du is not None:
            src = {"type": "base64", "media_type": du[0], "data": du[1]}
        elif url.startswith("data:"):
            raise invalid("image data: URL must be base64-encoded", path)
        else:
            src = {"type": "url", "url": url}
    else:
        src = {"type": "file", "file_id": p.file_id or ""}
    out: dict[str, Any] = {"type": "image", "source": src}
    if p.cache_control:
        out["cache_control"] = p.cache_control
    return out


def _enc_document(p: Document, path: str) -> dict[str, Any]:
    src: dict[str, Any]
    if p.source in ("base64", "url") and (p.source == "base64" or (p.url or "").startswith("data:")):
        if p.source == "base64":
            media, data = p.media_type or "application/pdf", p.data or ""
        else:
            du = _data_url(p.url or "")
            if du is None:
                raise invalid("document data: URL must be base64-encoded", path)
            media, data = du
        if media == "application/pdf":
            src = {"type": "base64", "media_type": "application/pdf", "data": data}
        elif media.startswith("text/"):
            try:
                text = base64.b64decode(data, validate=False).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                raise invalid(f"document of type {media} is not valid base64 UTF-8 text", path) from None
            src = {"type": "text", "media_type": "text/plain", "data": text}
        else:
            raise invalid(f"Anthropic accepts PDF or plain-text documents, not {media}", path)
    elif p.source == "url":
        src = {"type": "url", "url": p.url or ""}
    elif p.source == "text":
        src = {"type": "text", "media_type": "text/plain", "data": p.data or ""}
    else:
        src = {"type": "file", "file_id": p.file_id or ""}
    out: dict[str, Any] = {"type": "document", "source": src}
    title = p.title or p.filename
    if title:
        out["title"] = title
    if p.cache_control:
        out["cache_control"] = p.cache_control
    return out


def _enc_text(p: Text, warnings: list[str]) -> dict[str, Any] | None:
    if not p.text:
        return None  # Anthropic rejects empty text blocks
    out: dict[str, Any] = {"type": "text", "text": p.text}
    if p.citations:
        cits = [c for c in (citation_from_neutral(n, allow_synthetic=False) for n in p.citations) if c]
        if len(cits) < len(p.citations):
            warn_once(warnings, "citations from another protocol were dropped from the conversation history")
        if cits:
            out["citations"] = cits
    if p.cache_control:
        out["cache_control"] = p.cache_control
    return out


def _index(items: list[Any], item: Any) -> int:
    """Where ``item`` (this very object) is in ``items``: for the path of an error."""
    return next(k for k, x in enumerate(items) if x is item)


def _enc_result_content(p: ToolResult, out: dict[str, Any], i: int, parts: list[Any], warnings: list[str]) -> None:
    """The content of a tool result, into ``out``."""
    content = p.content
    if len(content) == 1 and isinstance(content[0], Text) and not content[0].citations \
            and not content[0].cache_control:  # the usual one plain text
        if content[0].text:
            out["content"] = content[0].text
        return
    blocks: list[dict[str, Any]] = []
    j = _index(parts, p)
    for k, c in enumerate(content):
        if isinstance(c, Text):
            b = _enc_text(c, warnings)
            if b is not None:
                blocks.append(b)
        elif isinstance(c, Image):
            blocks.append(_enc_image(c, f"messages[{i}].content[{j}].content[{k}]"))
        elif isinstance(c, Document):
            blocks.append(_enc_document(c, f"messages[{i}].content[{j}].content[{k}]"))
    if len(blocks) == 1 and blocks[0]["type"] == "text" and len(blocks[0]) == 2:
        out["content"] = blocks[0]["text"]
    elif blocks:
        out["content"] = blocks


def _enc_reasoning(p: Reasoning, warnings: list[str]) -> dict[str, Any] | None:
    op = p.opaque
    if not op or op.get("protocol") != PROTOCOL:
        issuer = (op or {}).get("protocol") or "no provider"
        warn_once(warnings, f"reasoning issued by {issuer} was not forwarded to the Anthropic upstream")
        return None
    if p.redacted:
        data = op.get("data")
        if isinstance(data, str):
            return {"type": "redacted_thinking", "data": data}
    else:
        sig = op.get("signature")
        if isinstance(sig, str) and sig:
            return {"type": "thinking", "thinking": p.text, "signature": sig}
    warn_once(warnings, "Anthropic reasoning without its signature/data was not forwarded")
    return None


def _part_block(p: Any, role: str, i: int, parts: list[Any], warnings: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(role, block) of a part other than the plain text / tool call / tool result ``_messages``
    handles itself; None when it is dropped."""
    b: dict[str, Any] | None
    if isinstance(p, Text):
        b = _enc_text(p, warnings)
    elif isinstance(p, Reasoning):
        b = _enc_reasoning(p, warnings) if role == "assistant" else None
        if b is None and role != "assistant":
            warn_once(warnings, "reasoning in a non-assistant message was dropped")
    elif isinstance(p, Refusal):
        warn_once(warnings, "refusals in the conversation history were sent as text")
        b = {"type": "text", "text": p.text} if p.text else None
    elif isinstance(p, Image):
        if role == "assistant":
            warn_once(warnings, "images in assistant messages were dropped (Anthropic has no slot for them)")
            b = None
        else:
            b = _enc_image(p, f"messages[{i}].content[{_index(parts, p)}]")
    elif isinstance(p, Document):
        if role == "assistant":
            warn_once(warnings, "documents in assistant messages were dropped")
            b = None
        else:
            b = _enc_document(p, f"messages[{i}].content[{_index(parts, p)}]")
    elif isinstance(p, Opaque):
        if p.protocol == PROTOCOL:
            b = p.raw
        else:
            warn_once(warnings, f"{p.protocol} item {p.label or 'opaque'!r} was dropped: "
                      "Anthropic cannot represent it")
            b = None
    else:
        raise invalid(f"unsupported part {type(p).__name__}", f"messages[{i}].content[{_index(parts, p)}]")
    return None if b is None else (role, b)


def _system_texts(parts: list[Any], warnings: list[str]) -> list[Text]:
    out = []
    for p in parts:
        if isinstance(p, Text):
            if p.text:
                out.append(p)
        else:
            warn_once(warnings, "non-text parts of system/developer messages were dropped")
    return out


def _system_out(texts: list[Text], warnings: list[str]) -> str | list[dict[str, Any]] | None:
    if not texts:
        return None
    if len(texts) == 1 and not texts[0].cache_control and not texts[0].citations:
        return texts[0].text
    out = []
    for t in texts:
        b: dict[str, Any] = {"type": "text", "text": t.text}
        if t.cache_control:
            b["cache_control"] = t.cache_control
        out.append(b)
    return out


def _messages(req: Request, system: list[Text], warnings: list[str]) -> list[dict[str, Any]]:
    # blocks go to turns of alternating roles: tool calls always belong to the assistant, tool
    # results to the user, other parts to their message's role. A plain text is carried as a str
    # (a turn of one plain text has string content; a second block makes it a block list), so no
    # turn ever ends as a list of one plain text block.
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    cur_role: str | None = None
    mixed: list[dict[str, Any]] = []  # user turns where a tool result follows other content
    names: dict[str, str] = {}  # tool name -> the name sent, worked out once per request
    for i, m in enumerate(req.messages):
        mrole = m.role
        if mrole != "user" and mrole != "assistant":
            if mrole in ("system", "developer"):
                warn_once(warnings, "system/developer messages inside the conversation were merged into the "
                          "Anthropic system prompt")
                system.extend(_system_texts(m.parts, warnings))
                continue
            raise invalid(f"unsupported role {m.role!r}", f"messages[{i}].role")
        parts = m.parts
        role: str
        b: Any
        for p in parts:  # (a part's index is looked up only for an error path)
            if isinstance(p, Text):
                if not p.text:
                    continue  # Anthropic rejects empty text blocks
                role = mrole
                if not p.citations and not p.cache_control:
                    b = p.text
                else:
                    b = _enc_text(p, warnings)
                    if len(b) == 2:  # its citations were all dropped: a plain text
                        b = b["text"]
            elif isinstance(p, ToolCall):  # (read here: one on every turn of an agent loop)
                role = "assistant"
                args = p.arguments
                if p.kind == "custom":
                    inp: Any = {"input": args}
                elif not args or args.isspace():  # (strip() would copy the arguments)
                    inp = {}
                else:
                    try:
                        inp = orjson.loads(args)
                    except orjson.JSONDecodeError:
                        raise invalid("tool call arguments are not valid JSON",
                                      f"messages[{i}].content[{_index(parts, p)}].arguments") from None
                    if not isinstance(inp, dict):
                        raise invalid("tool call arguments must be a JSON object",
                                      f"messages[{i}].content[{_index(parts, p)}].arguments")
                name = names.get(p.name)
                if name is None:
                    name = names[p.name] = short_tool_name(p.name)
                b = {"type": "tool_use", "id": _tool_id(p.id, warnings), "name": name, "input": inp}
            elif isinstance(p, ToolResult):
                role = "user"
                b = {"type": "tool_result", "tool_use_id": _tool_id(p.call_id, warnings)}
                _enc_result_content(p, b, i, parts, warnings)
                if p.is_error:
                    b["is_error"] = True
                if p.cache_control:
                    b["cache_control"] = p.cache_control
            else:
                rb = _part_block(p, mrole, i, parts, warnings)
                if rb is None:
                    continue
                role, b = rb
                if b.get("type") == "text" and len(b) == 2 and isinstance(b["text"], str):
                    b = b["text"]  # a plain text (a refusal's, or an own text block carried opaque)
            if role != cur_role:
                cur_role = role
                cur = {"role": role, "content": b if isinstance(b, str) else [b]}
                out.append(cur)
                continue
            blocks = cur["content"]
            if isinstance(blocks, str):
                cur["content"] = blocks = [{"type": "text", "text": blocks}]
            if isinstance(b, str):
                b = {"type": "text", "text": b}
            elif role == "user" and b.get("type") == "tool_result" and (not mixed or mixed[-1] is not cur):
                mixed.append(cur)
            blocks.append(b)
    for turn in mixed:
        blocks = turn["content"]
        n_results = sum(1 for b in blocks if b.get("type") == "tool_result")
        if any(b.get("type") != "tool_result" for b in blocks[:n_results]):
            warn_once(warnings, "tool results were moved ahead of other user content in their turn "
                      "(Anthropic requires them first)")
            turn["content"] = [b for b in blocks if b.get("type") == "tool_result"] + [
                b for b in blocks if b.get("type") != "tool_result"
            ]
    return out


def _custom_description(t: Tool) -> str:
    head = t.description or ""
    fmt = t.format or {}
    if fmt.get("type") == "grammar":
        syntax = fmt.get("syntax") or "grammar"
        tail = (f"Pass the tool's raw input text in `input`; it must match this {syntax} grammar:\n"
                f"{fmt.get('definition', '')}")
    else:
        tail = "Pass the tool's raw free-form input text in `input`."
    return f"{head}\n\n{tail}" if head else tail


def _enc_tools(req: Request, warnings: list[str]) -> list[dict[str, Any]]:
    out = []
    for t in req.tools:
        name = short_tool_name(t.name)
        if t.kind == "custom":
            d: dict[str, Any] = {"name": name, "description": _custom_description(t),
                                 "input_schema": CUSTOM_TOOL_SCHEMA}
        else:
            schema = t.parameters if isinstance(t.parameters, dict) and t.parameters else EMPTY_SCHEMA
            if "type" not in schema:
                schema = {"type": "object", **schema}
            d = {"name": name}
            if t.description:
                d["description"] = t.description
            d["input_schema"] = schema
            if t.strict:
                d["strict"] = True
        if t.cache_control:
            d["cache_control"] = t.cache_control
        out.append(d)
    return out


def _enc_server_tools(req: Request, warnings: list[str]) -> list[dict[str, Any]]:
    out = []
    for t in req.extra.get("server_tools") or ():
        tt = t.get("type") if isinstance(t, dict) else None
        if isinstance(tt, str) and (_ANTHROPIC_TOOL_TYPE.match(tt) or tt == "mcp_toolset"):
            out.append(t)
        else:
            warn_once(warnings, f"server tool {tt!r} from another protocol was ignored (Anthropic has no such tool)")
    return out


def _enc_tool_choice(req: Request, tools: list[dict[str, Any]], warnings: list[str]) -> dict[str, Any] | None:
    tc = req.tool_choice
    out: dict[str, Any] | None
    if tc is None or tc.mode == "auto":
        out = {"type": "auto"} if tc is not None else None
    elif tc.mode == "none":
        out = {"type": "none"}
    elif tc.mode == "required":
        out = {"type": "any"}
    elif tc.mode == "tool":
        if not tc.name:
            raise invalid("a named tool choice needs a tool name", "tool_choice.name")
        out = {"type": "tool", "name": short_tool_name(tc.name)}
    else:  # allowed subset
        allowed = {short_tool_name(n) for n in (tc.allowed or ())}
        kept = [t for t in tools if "input_schema" not in t or t.get("name") in allowed]
        tools[:] = kept
        warnings.append("allowed_tools: the tool list was reduced to the allowed tools "
                        "(Anthropic has no allowed-subset tool choice)")
        out = {"type": "any" if tc.allowed_required else "auto"}
    if req.parallel_tool_calls is False:
        if out is None:
            out = {"type": "auto"}
        if out["type"] != "none":
            out["disable_parallel_tool_use"] = True
    return out


def _extras(req: Request, out: dict[str, Any], warnings: list[str]) -> None:
    ex = req.extra
    if not ex:
        return
    n = ex.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        raise invalid("Anthropic returns one completion per request; n > 1 cannot be translated", "n")
    if ex.get("previous_response_id"):
        raise invalid("Anthropic keeps no server-side conversation; send the full input", "previous_response_id")
    if ex.get("conversation"):
        raise invalid("Anthropic keeps no server-side conversation; send the full input", "conversation")
    mods = ex.get("modalities")
    if ex.get("audio") or (isinstance(mods, list) and "audio" in mods):
        raise invalid("Anthropic cannot produce audio output", "audio")
    for k in PASSTHROUGH_EXTRA:
        if ex.get(k) is not None:
            out[k] = ex[k]
    st = ex.get("service_tier")
    if st is not None:
        if st in _ANTHROPIC_SERVICE_TIERS:
            out["service_tier"] = st
        else:
            warnings.append(f"service_tier {st!r} has no Anthropic equivalent and was not sent")
    ignored = sorted(k for k in ex if k not in OWN_EXTRA and k not in PASSTHROUGH_EXTRA
                     and k not in ("n", "modalities") and ex[k] is not None)
    if ignored:
        warnings.append(f"request fields without an Anthropic equivalent were not sent: {', '.join(ignored)}")


def _thinking_config(req: Request, warnings: list[str]) -> tuple[dict[str, Any] | None, int | None, Any]:
    """(thinking, budget_tokens, output_config.effort) for the neutral reasoning config."""
    rc = req.reasoning
    ex = req.extra
    effort_out = ex.get("anthropic_effort")
    thinking: dict[str, Any] | None = None
    budget: int | None = None
    if rc is not None:
        if rc.disabled or rc.effort == "none":
            thinking = {"type": "between_tools" if ex.get("anthropic_thinking_between_tools") else "disabled"}
        elif rc.adaptive:
            thinking = {"type": "adaptive"}
            if effort_out is None and rc.effort in ANTHROPIC_EFFORTS:
                effort_out = rc.effort
        elif rc.budget_tokens is not None:
            budget = rc.budget_tokens
        elif rc.effort is not None and effort_out is None:
            budget = EFFORT_BUDGET.get(rc.effort)
            if budget is None:
                warnings.append(f"unknown reasoning effort {rc.effort!r} read as medium")
                budget = EFFORT_BUDGET["medium"]
    if budget is not None:
        if budget < MIN_BUDGET:
            warnings.append(f"thinking budget {budget} raised to Anthropic's minimum {MIN_BUDGET}")
            budget = MIN_BUDGET
        thinking = {"type": "enabled", "budget_tokens": budget}
    if thinking is not None and thinking["type"] in ("enabled", "adaptive"):
        display = ex.get("anthropic_thinking_display")
        if display is None and rc is not None and rc.summary in ("auto", "concise", "detailed"):
            display = "summarized"
        if display is not None:
            thinking["display"] = display
    return thinking, budget, effort_out


def _tool_loop_without_thinking(messages: list[dict[str, Any]]) -> bool:
    """The last assistant turn called tools and does not start with a thinking block: Anthropic
    rejects thinking for such a request (its reasoning came from elsewhere and was dropped)."""
    for m in reversed(messages):
        if m["role"] != "assistant":
            continue
        c = m["content"]
        if not isinstance(c, list) or not any(b.get("type") == "tool_use" for b in c):
            return False
        return c[0].get("type") not in ("thinking", "redacted_thinking")
    return False


def encode_request(req: Request, warnings: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if req.model is not None:
        out["model"] = req.model
    else:
        warnings.append("request has no model; the Anthropic upstream requires one")
    system = req.system
    # one plain text (the usual system prompt) needs no filtering
    if len(system) != 1 or not isinstance(system[0], Text) or not system[0].text:
        system = _system_texts(system, warnings)
    else:
        system = [system[0]]
    messages = _messages(req, system, warnings)

    # ---- tools (helpers only for what is there)
    tools = _enc_tools(req, warnings) if req.tools else []
    server = _enc_server_tools(req, warnings) if req.extra else []
    tc = _enc_tool_choice(req, tools, warnings) \
        if req.tool_choice is not None or req.parallel_tool_calls is False else None
    all_tools = tools + server if server else tools
    if not all_tools and tc is not None:
        if tc["type"] in ("any", "tool"):
            warnings.append("tool_choice dropped: the request has no tools")
        tc = None

    # ---- reasoning / thinking
    if req.reasoning is None and not req.extra:
        thinking, budget, effort_out = None, None, None
    else:
        thinking, budget, effort_out = _thinking_config(req, warnings)
    if thinking is not None and thinking["type"] in ("enabled", "adaptive"):
        if tc is not None and tc["type"] in ("any", "tool"):
            warnings.append("thinking disabled: Anthropic does not allow thinking with a forced tool choice")
            thinking, budget = None, None
        elif _tool_loop_without_thinking(messages):
            warnings.append("thinking disabled: the last assistant tool call has no Anthropic thinking block "
                            "to continue from")
            thinking, budget = None, None

    max_tokens = req.max_output_tokens
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
        warnings.append(f"max_tokens is required by Anthropic; sent the default {DEFAULT_MAX_TOKENS}")
    if budget is not None and max_tokens <= budget:
        warnings.append(f"max_tokens raised from {max_tokens} to {budget + max_tokens} to exceed the "
                        f"thinking budget ({budget})")
        max_tokens = budget + max_tokens
    out["max_tokens"] = max_tokens
    out["messages"] = messages

    # ---- output format (may add a system instruction)
    of = req.output_format
    output_config: dict[str, Any] = {}
    if of is not None and of.type == "json_schema":
        if not isinstance(of.schema, dict):
            raise invalid("a json_schema output format needs a schema object", "output_format.schema")
        output_config["format"] = {"type": "json_schema", "schema": of.schema}
    elif of is not None and of.type == "json_object":
        warnings.append("json_object output format sent as a system instruction (Anthropic structured "
                        "outputs need a closed schema)")
        system.append(Text(JSON_OBJECT_INSTRUCTION))
    if effort_out is not None:
        output_config["effort"] = effort_out
    sys_out = _system_out(system, warnings)
    if sys_out is not None:
        out["system"] = sys_out

    # ---- sampling
    thinking_on = thinking is not None and thinking["type"] in ("enabled", "adaptive")
    temperature, top_p, top_k = req.temperature, req.top_p, req.top_k
    if temperature is not None and temperature > 1:
        warnings.append(f"temperature {temperature} clamped to Anthropic's maximum 1.0")
        temperature = 1.0
    if thinking_on:
        if temperature is not None and temperature != 1:
            warnings.append("temperature dropped: Anthropic accepts only temperature 1 with thinking")
            temperature = None
        if top_k is not None:
            warnings.append("top_k dropped: Anthropic rejects top_k with thinking")
            top_k = None
        if top_p is not None and top_p < 0.95:
            warnings.append("top_p dropped: Anthropic requires top_p >= 0.95 with thinking")
            top_p = None
    if temperature is not None and top_p is not None:
        warnings.append("top_p dropped: current Anthropic models reject temperature and top_p together")
        top_p = None
    if temperature is not None:
        out["temperature"] = temperature
    if top_p is not None:
        out["top_p"] = top_p
    if top_k is not None:
        out["top_k"] = top_k
    if req.stop:
        out["stop_sequences"] = list(req.stop)
    if req.seed is not None:
        warnings.append("seed has no Anthropic equivalent and was not sent")
    if thinking is not None:
        out["thinking"] = thinking
    if output_config:
        out["output_config"] = output_config
    if all_tools:
        out["tools"] = all_tools
        if tc is not None:
            out["tool_choice"] = tc

    # ---- user / metadata / stream / extras
    md = req.metadata
    user = req.user if req.user is not None or not md else md.get("user_id")
    if isinstance(user, str) and user:
        out["metadata"] = {"user_id": user}
    if md:
        other_md = sorted(k for k in md if k != "user_id")
        if other_md:
            warnings.append(f"metadata keys without an Anthropic equivalent were not sent: {', '.join(other_md)}")
    if req.stream:
        out["stream"] = True
    if req.extra:
        _extras(req, out, warnings)
    return out
