"""Bedrock Converse requests, both ways (the body of ``/model/{id}/converse`` and
``converse-stream``; a count-tokens body ``{"input": {"converse": {...}}}`` reads the same)."""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson

from .. import reasoning as rz
from ..errors import TranslationError
from ..jsonutil import dumps
from ..neutral import (
    Document,
    Image,
    Message,
    Opaque,
    OutputFormat,
    Part,
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
from ._converse_common import PROTOCOL, warn_once
from ._request_common import (
    expected,
    fail,
    opt_int,
    opt_list,
    opt_num,
    opt_obj,
    opt_str,
    req_list,
    req_obj,
    req_str,
    tool_input,
)

#: a cache hint as the neutral parts carry it (what Anthropic calls cache_control)
CACHE_HINT: dict[str, Any] = {"type": "ephemeral"}
CACHE_POINT: dict[str, Any] = {"cachePoint": {"type": "default"}}

_IMAGE_FORMATS = {"png", "jpeg", "gif", "webp"}
_DOC_TYPES = {
    "pdf": "application/pdf", "csv": "text/csv", "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html", "txt": "text/plain", "md": "text/markdown",
}
_DOC_FORMATS = {v: k for k, v in _DOC_TYPES.items()}
#: the fields this module reads; the others are kept for a Converse upstream or named as dropped
_KNOWN = frozenset({"modelId", "messages", "system", "inferenceConfig", "toolConfig",
                    "additionalModelRequestFields", "outputConfig"})
#: fields kept in ``Request.extra`` for a Converse upstream (other upstreams drop them, named)
EXTRA_KEYS = ("guardrailConfig", "performanceConfig", "serviceTier", "promptVariables",
              "requestMetadata", "additionalModelResponseFieldPaths", "projectIdentifier")
#: Anthropic ``thinking`` budget for an effort (its minimum is 1024)
_EFFORT_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768, "max": 32768}


# ============================================================================= decode
def _source_bytes(src: dict[str, Any], *path: str | int) -> str:
    data = src.get("bytes")
    if isinstance(data, str):
        return data
    if isinstance(data, (bytes, bytearray)):  # (a body built in Python, not read from JSON)
        return base64.b64encode(bytes(data)).decode()
    raise expected("a base64 string", data, *path, "bytes")


def _image(b: dict[str, Any], *path: str | int) -> Image:
    fmt = req_str(b.get("format"), *path, "format")
    src = req_obj(b.get("source"), *path, "source")
    if "bytes" in src:
        return Image("base64", media_type=f"image/{fmt}", data=_source_bytes(src, *path, "source"))
    s3 = opt_obj(src.get("s3Location"), *path, "source", "s3Location")
    if s3 is not None:
        return Image("url", media_type=f"image/{fmt}", url=req_str(s3.get("uri"), *path, "source", "s3Location", "uri"))
    fail("needs bytes or s3Location", *path, "source")


def _document(b: dict[str, Any], *path: str | int) -> Document:
    fmt = opt_str(b.get("format"), *path, "format") or "txt"
    name = opt_str(b.get("name"), *path, "name")
    src = req_obj(b.get("source"), *path, "source")
    media = _DOC_TYPES.get(fmt, f"application/{fmt}")
    if "bytes" in src:
        return Document("base64", media_type=media, data=_source_bytes(src, *path, "source"), filename=name)
    if "text" in src:
        return Document("text", media_type="text/plain", data=req_str(src.get("text"), *path, "source", "text"),
                        filename=name)
    s3 = opt_obj(src.get("s3Location"), *path, "source", "s3Location")
    if s3 is not None:
        return Document("url", media_type=media, url=req_str(s3.get("uri"), *path, "source", "s3Location", "uri"),
                        filename=name)
    content = opt_list(src.get("content"), *path, "source", "content")
    if content is not None:
        texts = [str(c["text"]) for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)]
        return Document("text", media_type="text/plain", data="".join(texts), filename=name)
    fail("needs bytes, text, content or s3Location", *path, "source")


def _reasoning(b: Any, warnings: list[str], *path: str | int) -> Reasoning:
    rc = req_obj(b, *path)
    rt = rc.get("reasoningText")
    if isinstance(rt, dict):
        text = opt_str(rt.get("text"), *path, "reasoningText", "text") or ""
        sig = opt_str(rt.get("signature"), *path, "reasoningText", "signature")
        if sig is not None and rz.is_packed(sig):  # another protocol's reasoning, carried by us
            payload = rz.unpack(sig)
            if payload is None:
                warnings.append(f"{'.'.join(map(str, path))}: damaged proxai reasoning envelope dropped")
                return Reasoning(text=text)
            t = payload.get("text")
            summary = payload.get("summary")
            return Reasoning(text=t if isinstance(t, str) else text,
                             summary=summary if isinstance(summary, list) else None,
                             redacted=bool(payload.get("redacted", False)),
                             opaque={k: v for k, v in payload.items() if k not in ("text", "summary", "redacted")})
        opaque: dict[str, Any] = {"protocol": PROTOCOL}
        if sig is not None:
            opaque["signature"] = sig
        return Reasoning(text=text, opaque=opaque)
    red = rc.get("redactedContent")
    if red is not None:
        data = red if isinstance(red, str) else base64.b64encode(bytes(red)).decode() \
            if isinstance(red, (bytes, bytearray)) else None
        if data is None:
            raise expected("a base64 string", red, *path, "redactedContent")
        return Reasoning(text="", redacted=True, opaque={"protocol": PROTOCOL, "data": data})
    fail("needs reasoningText or redactedContent", *path)


def _tool_result_content(items: list[Any], *path: str | int) -> list[Text | Image | Document]:
    out: list[Text | Image | Document] = []
    for k, c in enumerate(items):
        c = req_obj(c, *path, k)
        if "text" in c:
            out.append(Text(req_str(c.get("text"), *path, k, "text")))
        elif "json" in c:
            out.append(Text(dumps(c["json"]).decode()))
        elif "image" in c:
            out.append(_image(req_obj(c["image"], *path, k, "image"), *path, k, "image"))
        elif "document" in c:
            out.append(_document(req_obj(c["document"], *path, k, "document"), *path, k, "document"))
        else:
            fail(f"unsupported tool result content {sorted(c)!r}", *path, k)
    return out


def _block(b: Any, warnings: list[str], i: int, j: int) -> Part | None:
    """One content block -> a part (None: a cachePoint, which marks the part before it)."""
    path: tuple[str | int, ...] = ("messages", i, "content", j)
    b = req_obj(b, *path)
    if "text" in b:
        return Text(req_str(b["text"], *path, "text"))
    if "toolUse" in b or "toolResult" in b:
        inner = b.get("toolUse") or b.get("toolResult")
        if isinstance(inner, dict) and inner.get("type") not in (None, "tool_use", "tool_result"):
            return Opaque(PROTOCOL, b, str(inner["type"]))  # a server tool's call or result
    if "toolUse" in b:
        tu = req_obj(b["toolUse"], *path, "toolUse")
        inp = tu.get("input")
        return ToolCall(req_str(tu.get("toolUseId"), *path, "toolUse", "toolUseId"),
                        req_str(tu.get("name"), *path, "toolUse", "name"),
                        dumps(inp if inp is not None else {}).decode())
    if "toolResult" in b:
        tr = req_obj(b["toolResult"], *path, "toolResult")
        content = _tool_result_content(req_list(tr.get("content", []), *path, "toolResult", "content"),
                                       *path, "toolResult", "content")
        status = opt_str(tr.get("status"), *path, "toolResult", "status")
        return ToolResult(req_str(tr.get("toolUseId"), *path, "toolResult", "toolUseId"), content,
                          is_error=True if status == "error" else None)
    if "image" in b:
        return _image(req_obj(b["image"], *path, "image"), *path, "image")
    if "document" in b:
        return _document(req_obj(b["document"], *path, "document"), *path, "document")
    if "reasoningContent" in b:
        return _reasoning(b["reasoningContent"], warnings, *path, "reasoningContent")
    if "cachePoint" in b:
        return None
    key = next(iter(b), "")
    if key in ("video", "guardContent", "citationsContent", "searchResult"):
        return Opaque(PROTOCOL, b, key)
    fail(f"unknown content block {sorted(b)!r}", *path)


def _mark_cached(parts: list[Any]) -> None:
    if parts and hasattr(parts[-1], "cache_control"):
        parts[-1].cache_control = dict(CACHE_HINT)


def _thinking(fields: dict[str, Any], req: Request) -> dict[str, Any]:
    """Anthropic ``thinking`` (and other models' reasoning switches) -> neutral; the rest is returned."""
    rest = dict(fields)
    th = rest.pop("thinking", None)
    if isinstance(th, dict):
        t = th.get("type")
        if t == "enabled":
            req.reasoning = ReasoningConfig(budget_tokens=opt_int(th.get("budget_tokens"),
                                                                  "additionalModelRequestFields", "thinking",
                                                                  "budget_tokens"))
        elif t == "adaptive":
            req.reasoning = ReasoningConfig(adaptive=True)
        elif t == "disabled":
            req.reasoning = ReasoningConfig(disabled=True)
        else:
            rest["thinking"] = th
    effort = rest.get("reasoning_effort")
    if isinstance(effort, str) and req.reasoning is None:
        del rest["reasoning_effort"]
        req.reasoning = ReasoningConfig(effort=effort)
    tk = rest.get("top_k")
    if isinstance(tk, int) and not isinstance(tk, bool):
        del rest["top_k"]
        req.top_k = tk
    return rest


def _output_config(oc: dict[str, Any], req: Request) -> None:
    """``outputConfig.textFormat`` (a JSON schema, given as JSON text) -> the neutral output format."""
    tf = opt_obj(oc.get("textFormat"), "outputConfig", "textFormat")
    if tf is not None:
        t = req_str(tf.get("type"), "outputConfig", "textFormat", "type")
        js = (opt_obj(tf.get("structure"), "outputConfig", "textFormat", "structure") or {}).get("jsonSchema")
        if t == "json_schema" and isinstance(js, dict):
            text = req_str(js.get("schema"), "outputConfig", "textFormat", "structure", "jsonSchema", "schema")
            try:
                schema = orjson.loads(text)
            except orjson.JSONDecodeError:
                fail("is not JSON", "outputConfig", "textFormat", "structure", "jsonSchema", "schema")
            req.output_format = OutputFormat("json_schema", schema if isinstance(schema, dict) else None,
                                             opt_str(js.get("name"), "outputConfig", "textFormat", "structure",
                                                     "jsonSchema", "name"),
                                             description=opt_str(js.get("description"), "outputConfig", "textFormat",
                                                                 "structure", "jsonSchema", "description"))
        else:
            req.extra["outputConfig.textFormat"] = tf
    effort = oc.get("effort")
    if isinstance(effort, str):
        req.extra["outputConfig.effort"] = effort


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    inp = body.get("input")
    if "messages" not in body and isinstance(inp, dict) and isinstance(inp.get("converse"), dict):
        body = inp["converse"]  # a count-tokens body: the Converse request inside
    req = Request()
    mid = body.get("modelId")
    if isinstance(mid, str):
        req.model = mid
    system = opt_list(body.get("system"), "system") or []
    for k, s in enumerate(system):
        s = req_obj(s, "system", k)
        if "text" in s:
            req.system.append(Text(req_str(s["text"], "system", k, "text")))
        elif "cachePoint" in s:
            _mark_cached(req.system)
        else:
            warnings.append(f"system[{k}]: {sorted(s)!r} block dropped (only text is carried)")
    for i, m in enumerate(req_list(body.get("messages", []), "messages")):
        m = req_obj(m, "messages", i)
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise expected('"user" or "assistant"', role, "messages", i, "role")
        parts: list[Part] = []
        for j, b in enumerate(req_list(m.get("content", []), "messages", i, "content")):
            p = _block(b, warnings, i, j)
            if p is None:
                _mark_cached(parts)
            else:
                parts.append(p)
        req.messages.append(Message(role, parts))
    ic = opt_obj(body.get("inferenceConfig"), "inferenceConfig")
    if ic is not None:
        req.max_output_tokens = opt_int(ic.get("maxTokens"), "inferenceConfig", "maxTokens")
        req.temperature = opt_num(ic.get("temperature"), "inferenceConfig", "temperature")
        req.top_p = opt_num(ic.get("topP"), "inferenceConfig", "topP")
        stop = opt_list(ic.get("stopSequences"), "inferenceConfig", "stopSequences")
        if stop is not None:
            req.stop = [req_str(s, "inferenceConfig", "stopSequences", k) for k, s in enumerate(stop)]
    tc = opt_obj(body.get("toolConfig"), "toolConfig")
    if tc is not None:
        for k, t in enumerate(req_list(tc.get("tools", []), "toolConfig", "tools")):
            t = req_obj(t, "toolConfig", "tools", k)
            if "cachePoint" in t:
                if req.tools:
                    req.tools[-1].cache_control = dict(CACHE_HINT)
                continue
            if "toolSpec" not in t:  # a tool Bedrock runs itself (systemTool): only Converse has it
                req.extra.setdefault("converse_server_tools", []).append(t)
                continue
            spec = req_obj(t.get("toolSpec"), "toolConfig", "tools", k, "toolSpec")
            schema = opt_obj(spec.get("inputSchema"), "toolConfig", "tools", k, "toolSpec", "inputSchema") or {}
            params = schema.get("json")
            req.tools.append(Tool(req_str(spec.get("name"), "toolConfig", "tools", k, "toolSpec", "name"),
                                  opt_str(spec.get("description"), "toolConfig", "tools", k, "toolSpec", "description"),
                                  params if isinstance(params, dict) else None,
                                  strict=spec.get("strict") if isinstance(spec.get("strict"), bool) else None))
        choice = opt_obj(tc.get("toolChoice"), "toolConfig", "toolChoice")
        if choice is not None:
            if "auto" in choice:
                req.tool_choice = ToolChoice("auto")
            elif "any" in choice:
                req.tool_choice = ToolChoice("required")
            elif "tool" in choice:
                t = req_obj(choice["tool"], "toolConfig", "toolChoice", "tool")
                req.tool_choice = ToolChoice("tool", req_str(t.get("name"), "toolConfig", "toolChoice", "tool", "name"))
            else:
                fail("needs auto, any or tool", "toolConfig", "toolChoice")
    oc = opt_obj(body.get("outputConfig"), "outputConfig")
    if oc is not None:
        _output_config(oc, req)
    amrf = opt_obj(body.get("additionalModelRequestFields"), "additionalModelRequestFields")
    if amrf is not None:
        rest = _thinking(amrf, req)
        if rest:
            req.extra["additionalModelRequestFields"] = rest
    for key in EXTRA_KEYS:
        if body.get(key) is not None:
            req.extra[key] = body[key]
            # (a request is decoded only to be translated: no other protocol has these fields)
            warnings.append(f"{key} has no equivalent outside Bedrock Converse: dropped")
    for key in body:
        if key not in _KNOWN and key not in EXTRA_KEYS:
            warnings.append(f"unknown Converse request field {key!r} ignored")
    return req


# ============================================================================= encode
_NAME_CLEAN = re.compile(r"[^A-Za-z0-9\s\-()\[\]]")


def _doc_name(p: Document, n: int) -> str:
    """A document name Converse accepts (letters, digits, spaces, hyphens, parentheses, brackets)."""
    name = p.filename or p.title or f"document-{n}"
    name = name.rsplit(".", 1)[0] if "." in name else name
    name = re.sub(r"\s{2,}", " ", _NAME_CLEAN.sub("-", name)).strip() or f"document-{n}"
    return name[:200]


def _data_url(url: str) -> tuple[str, str] | None:
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[:-7], data


_NOT_STANDARD_B64 = re.compile(r"[-_\s]")


def _standard_b64(data: str) -> str:
    """Base64 as Converse reads it (standard alphabet, no line breaks): another provider may have
    sent the URL-safe alphabet or wrapped lines."""
    if _NOT_STANDARD_B64.search(data) is None:
        return data
    return "".join(data.split()).replace("-", "+").replace("_", "/")


def _bytes_source(p: Image | Document, where: str, takes: str) -> tuple[str | None, str | None, str | None]:
    """Where an image's or a document's bytes are: (media type, base64 data, None), or (media type,
    None, s3 URI) for an ``s3://`` location; a data URL is read as its bytes. Any other URL or a file id
    is refused (``takes`` names what Converse accepts)."""
    media, data = p.media_type, p.data
    if p.source == "url" and p.url:
        if p.url.startswith("s3://"):
            return media, None, p.url
        du = _data_url(p.url)
        if du is None:
            raise TranslationError(f"{where}: Bedrock Converse takes {takes}, not a URL", field=where)
        media, data = du
    elif p.source != "base64" or data is None:
        raise TranslationError(f"{where}: Bedrock Converse takes {takes}, not a file id", field=where)
    return media, data, None


def _enc_image(p: Image, where: str) -> dict[str, Any]:
    media, data, s3 = _bytes_source(p, where, "images as bytes or an s3:// location")
    if s3 is not None:
        fmt = (media or "image/png").split("/")[-1]
        return {"image": {"format": fmt, "source": {"s3Location": {"uri": s3}}}}
    fmt = (media or "image/png").split("/")[-1].lower()
    if fmt == "jpg":
        fmt = "jpeg"
    if fmt not in _IMAGE_FORMATS:
        raise TranslationError(f"{where}: image type {media!r} is not one Bedrock Converse takes", field=where)
    return {"image": {"format": fmt, "source": {"bytes": _standard_b64(data or "")}}}


def _enc_document(p: Document, n: int, where: str) -> dict[str, Any]:
    name = _doc_name(p, n)
    if p.source == "text":
        return {"document": {"format": "txt", "name": name, "source": {"text": p.data or ""}}}
    media, data, s3 = _bytes_source(p, where, "documents as bytes, text or an s3:// location")
    if s3 is not None:
        return {"document": {"format": _DOC_FORMATS.get(media or "", "pdf"), "name": name,
                             "source": {"s3Location": {"uri": s3}}}}
    fmt = _DOC_FORMATS.get((media or "application/pdf").split(";")[0].strip().lower())
    if fmt is None:
        raise TranslationError(f"{where}: document type {media!r} is not one Bedrock Converse takes", field=where)
    return {"document": {"format": fmt, "name": name, "source": {"bytes": _standard_b64(data or "")}}}


def reasoning_block(p: Reasoning, for_client: bool) -> dict[str, Any] | None:
    """A reasoning part as ``reasoningContent``. Our own keeps its signature / redacted data; for a
    client, another protocol's reasoning travels packed in the signature (it comes back to us);
    toward an upstream it cannot be verified there and is dropped (None)."""
    op = p.opaque
    if op and op.get("protocol") == PROTOCOL:
        if p.redacted and isinstance(op.get("data"), str):
            return {"reasoningContent": {"redactedContent": op["data"]}}
        rt: dict[str, Any] = {"text": p.text}
        if isinstance(op.get("signature"), str):
            rt["signature"] = op["signature"]
        return {"reasoningContent": {"reasoningText": rt}}
    if not for_client:
        return None
    payload = dict(op or {})
    payload.update(text=p.text, summary=p.summary, redacted=p.redacted)
    return {"reasoningContent": {"reasoningText": {"text": p.text, "signature": rz.pack(payload)}}}


def _enc_parts(parts: list[Part], role: str, i: int, warnings: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for j, p in enumerate(parts):
        where = f"messages[{i}].content[{j}]"
        cached = False
        if isinstance(p, Text):
            if p.text:
                out.append({"text": p.text})
            cached = bool(p.cache_control)
        elif isinstance(p, Refusal):
            if p.text:
                warn_once(warnings, "refusals in the conversation history were sent as text")
                out.append({"text": p.text})
        elif isinstance(p, Image):
            out.append(_enc_image(p, where))
            cached = bool(p.cache_control)
        elif isinstance(p, Document):
            out.append(_enc_document(p, j, where))
            cached = bool(p.cache_control)
        elif isinstance(p, ToolCall):
            out.append({"toolUse": {"toolUseId": p.id, "name": p.name, "input": tool_input(p, warnings)}})
        elif isinstance(p, ToolResult):
            content: list[dict[str, Any]] = []
            for k, c in enumerate(p.content):
                if isinstance(c, Text):
                    content.append({"text": c.text})
                elif isinstance(c, Image):
                    content.append(_enc_image(c, f"{where}.content[{k}]"))
                else:
                    content.append(_enc_document(c, k, f"{where}.content[{k}]"))
            tr: dict[str, Any] = {"toolUseId": p.call_id, "content": content or [{"text": ""}]}
            if p.is_error:
                tr["status"] = "error"
            out.append({"toolResult": tr})
            cached = bool(p.cache_control)
        elif isinstance(p, Reasoning):
            if role != "assistant":
                warn_once(warnings, "reasoning in a non-assistant message was dropped")
                continue
            b = reasoning_block(p, for_client=False)
            if b is None:
                issuer = (p.opaque or {}).get("protocol") or "no provider"
                warn_once(warnings, f"reasoning issued by {issuer} was not forwarded to the Bedrock Converse upstream")
                continue
            out.append(b)
        elif isinstance(p, Opaque):
            if p.protocol == PROTOCOL:
                out.append(p.raw)
            else:
                warn_once(warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Bedrock Converse "
                          "cannot represent it")
        if cached:
            out.append(dict(CACHE_POINT))
    return out


def _thinking_fields(req: Request, warnings: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rc = req.reasoning
    if rc is not None:
        if rc.disabled:
            out["thinking"] = {"type": "disabled"}
        elif rc.adaptive:
            out["thinking"] = {"type": "adaptive"}
        elif rc.budget_tokens is not None:
            out["thinking"] = {"type": "enabled", "budget_tokens": rc.budget_tokens}
        elif rc.effort is not None and rc.effort != "none":
            out["thinking"] = {"type": "enabled", "budget_tokens": _EFFORT_BUDGET.get(rc.effort, 8192)}
        elif rc.effort == "none":
            out["thinking"] = {"type": "disabled"}
    if req.top_k is not None:
        out["top_k"] = req.top_k
    more = req.extra.get("additionalModelRequestFields")
    if isinstance(more, dict):
        out.update(more)
    return out


def encode_request(req: Request, warnings: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if req.web_search is not None:
        warnings.append("web_search tool dropped: Bedrock Converse has no web search tool")
    system: list[dict[str, Any]] = []
    for st in req.system:
        if st.text:
            system.append({"text": st.text})
        if st.cache_control:
            system.append(dict(CACHE_POINT))
    messages: list[dict[str, Any]] = []
    for i, m in enumerate(req.messages):
        if m.role in ("system", "developer"):
            # Converse has only user and assistant turns: instructions join the system prompt
            warn_once(warnings, f"{m.role} messages inside the conversation were moved to the system prompt")
            system += [{"text": p.text} for p in m.parts if isinstance(p, Text) and p.text]
            continue
        content = _enc_parts(m.parts, m.role, i, warnings)
        if not content:
            continue
        if messages and messages[-1]["role"] == m.role:  # Converse turns alternate: one turn per role
            messages[-1]["content"] += content
        else:
            messages.append({"role": m.role, "content": content})
    body["messages"] = messages
    if system:
        body["system"] = system
    ic: dict[str, Any] = {}
    if req.max_output_tokens is not None:
        ic["maxTokens"] = req.max_output_tokens
    if req.temperature is not None:
        ic["temperature"] = req.temperature
    if req.top_p is not None:
        ic["topP"] = req.top_p
    if req.stop:
        ic["stopSequences"] = list(req.stop)
    if ic:
        body["inferenceConfig"] = ic
    choice = req.tool_choice
    server_tools = req.extra.get("converse_server_tools")
    if req.tools and not (choice is not None and choice.mode == "none"):
        tools: list[dict[str, Any]] = []
        for t in req.tools:
            spec: dict[str, Any] = {"name": t.name, "inputSchema": {"json": t.parameters or {"type": "object"}}}
            if t.description:
                spec["description"] = t.description
            if t.strict is not None:
                spec["strict"] = t.strict
            if t.kind == "custom":
                spec["inputSchema"] = {"json": {"type": "object", "properties": {"input": {"type": "string"}},
                                                "required": ["input"]}}
            tools.append({"toolSpec": spec})
            if t.cache_control:
                tools.append(dict(CACHE_POINT))
        if isinstance(server_tools, list):
            tools += server_tools
        tc: dict[str, Any] = {"tools": tools}
        if choice is not None:
            if choice.mode == "required" or (choice.mode == "allowed" and choice.allowed_required):
                tc["toolChoice"] = {"any": {}}
            elif choice.mode == "tool" and choice.name:
                tc["toolChoice"] = {"tool": {"name": choice.name}}
            elif choice.mode == "auto":
                tc["toolChoice"] = {"auto": {}}
            if choice.mode == "allowed":
                warn_once(warnings, "tool_choice allowed_tools has no Bedrock Converse equivalent: all tools sent")
        body["toolConfig"] = tc
    elif choice is not None and choice.mode == "none" and req.tools:
        warn_once(warnings, "tool_choice none: the tools were not sent (Bedrock Converse has no none choice)")
    fields = _thinking_fields(req, warnings)
    if fields:
        body["additionalModelRequestFields"] = fields
    oc: dict[str, Any] = {}
    of = req.output_format
    if of is not None and of.type == "json_schema" and of.schema is not None:
        js: dict[str, Any] = {"schema": dumps(of.schema).decode(), "name": of.name or "output"}
        if of.description:
            js["description"] = of.description
        oc["textFormat"] = {"type": "json_schema", "structure": {"jsonSchema": js}}
    elif of is not None and of.type == "json_object":
        warn_once(warnings, "a JSON object output format has no Bedrock Converse equivalent: sent without it")
    elif isinstance(req.extra.get("outputConfig.textFormat"), dict):
        oc["textFormat"] = req.extra["outputConfig.textFormat"]
    if isinstance(req.extra.get("outputConfig.effort"), str):
        oc["effort"] = req.extra["outputConfig.effort"]
    if oc:
        body["outputConfig"] = oc
    if req.user:
        warn_once(warnings, "the end-user id (user) has no Bedrock Converse field: dropped")
    if req.parallel_tool_calls is False:
        warn_once(warnings, "parallel_tool_calls=false has no Bedrock Converse equivalent: dropped")
    for k in EXTRA_KEYS:
        if k in req.extra:
            body[k] = req.extra[k]
    return body
