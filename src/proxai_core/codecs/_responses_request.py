"""OpenAI Responses requests: client body -> neutral, neutral -> upstream body (private).

Decisions (encode, neutral -> a Responses upstream):

* ``stop`` sequences, ``top_k`` and ``seed`` have no Responses parameter: dropped with a warning.
  Stop sequences only change where an answer ends, so dropping them lets the answer run past them
  (the client may trim); refusing the whole request would be worse for agents that always send one.
* Assistant ``message`` items carry no ``id`` (we would have to invent one, and ids of unstored items
  mean nothing with ``store: false``; Codex omits them the same way); ``function_call`` items carry
  the upstream's ``fc_`` id only when it came from a Responses source.
* Function tools always carry ``strict`` (``false`` unless the source said true): Responses would
  otherwise apply its own default, which is not what a Chat/Anthropic client asked for.
* Thinking budgets map to an effort with the table minimal 1024, low 2048, medium 8192, high 16384,
  xhigh 32768 (the largest level whose budget is <= the given budget); disabled thinking omits the
  effort (``none`` is not valid for every model) unless ``none`` was asked for explicitly.
* When reasoning is on (or reasoning items are replayed), ``store: false`` and
  ``include: ["reasoning.encrypted_content"]`` are set so continuity works statelessly.
* Hosted tools stay in ``Request.extra["server_tools"]`` (and a hosted tool_choice in
  ``extra["server_tool_choice"]``); ``previous_response_id`` / ``conversation`` in ``extra`` under their
  own names. Encoders of other protocols must reject them.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from .. import reasoning as rz
from ..context import short_tool_name
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
    ToolChoiceMode,
    ToolKind,
    ToolResult,
    WebSearchCall,
    WebSearchResults,
)
from ._openai_common import EFFORTS, effort_for_budget
from ._request_common import (
    Tail,
    expected,
    fail,
    namespaced_tool_name,
    opt_bool,
    opt_int,
    opt_num,
    opt_obj,
    opt_str,
    read_tail,
    req_list,
    req_obj,
    req_str,
    web_search_as_opaque,
)
from ._responses_common import (
    PROTOCOL,
    annotations_to_citations,
    citations_to_annotations,
    data_url,
    default_filename,
    parse_data_url,
    web_search_tool,
    web_search_tool_wire,
)

# Input item types kept as Opaque parts (only a Responses upstream understands them).
# Assistant-side items (produced by the model) join the assistant turn; the others the user side.
_ASSISTANT_OPAQUE = frozenset({
    "file_search_call", "computer_call", "web_search_call", "tool_search_call", "image_generation_call",
    "code_interpreter_call", "local_shell_call", "shell_call", "apply_patch_call", "mcp_list_tools",
    "mcp_approval_request", "mcp_call", "compaction", "program",
})
_USER_OPAQUE = frozenset({
    "computer_call_output", "tool_search_output", "additional_tools", "local_shell_call_output",
    "shell_call_output", "apply_patch_call_output", "mcp_approval_response", "program_output",
    "item_reference", "compaction_trigger", "configuration_update",
})
_ROLES = frozenset({"user", "system", "developer", "assistant"})

# Top-level request fields kept in Request.extra (same names) and forwarded to a Responses upstream.
_EXTRA_PASS = (
    "store", "include", "prompt_cache_key", "service_tier", "truncation", "background", "max_tool_calls",
    "top_logprobs", "prompt_cache_retention", "prompt", "context_management", "prompt_cache_options",
    "stream_options", "moderation", "previous_response_id", "conversation", "background_options", "image",
    "access_programs",
)
_KNOWN = frozenset(_EXTRA_PASS) | {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
    "temperature", "top_p", "reasoning", "text", "stream", "user", "safety_identifier", "metadata",
}
_TAIL = Tail(_EXTRA_PASS, _KNOWN, "unknown request field {!r} ignored")
_SERVICE_TIERS = frozenset({"auto", "default", "flex", "scale", "priority", "fast"})



# ============================================================================= decode
def _image(p: dict[str, Any], *path: str | int) -> Image:
    detail = opt_str(p.get("detail"), *path, "detail")
    url = p.get("image_url")
    if isinstance(url, str):
        parsed = parse_data_url(url)
        if parsed is not None:
            return Image(source="base64", media_type=parsed[0], data=parsed[1], detail=detail)
        return Image(source="url", url=url, detail=detail)
    if url is not None:
        raise expected("a string", url, *path, "image_url")
    fid = p.get("file_id")
    if isinstance(fid, str):
        return Image(source="file", file_id=fid, detail=detail)
    fail("input_image needs image_url or file_id", *path)


def _file(p: dict[str, Any], *path: str | int) -> Document:
    filename = opt_str(p.get("filename"), *path, "filename")
    fdata = opt_str(p.get("file_data"), *path, "file_data")
    if fdata is not None:
        parsed = parse_data_url(fdata)
        if parsed is not None:
            return Document(source="base64", media_type=parsed[0], data=parsed[1], filename=filename)
        return Document(source="base64", media_type=None, data=fdata, filename=filename)
    furl = opt_str(p.get("file_url"), *path, "file_url")
    if furl is not None:
        return Document(source="url", url=furl, filename=filename)
    fid = p.get("file_id")
    if isinstance(fid, str):
        return Document(source="file", file_id=fid, filename=filename)
    fail("input_file needs file_data, file_url or file_id", *path)


def _content_part(p: Any, *path: str | int) -> Part:
    """A content part other than a plain text (those are read by ``_parts``)."""
    if not isinstance(p, dict):
        raise expected("an object", p, *path)
    t = p.get("type")
    if t == "input_text" or t == "output_text":
        text = req_str(p.get("text"), *path, "text")
        anns = p.get("annotations") if t == "output_text" else None
        return Text(text, annotations_to_citations(req_list(anns, *path, "annotations")) if anns else None)
    if t == "refusal":
        return Refusal(req_str(p.get("refusal"), *path, "refusal"))
    if t == "input_image":
        return _image(p, *path)
    if t == "input_file":
        return _file(p, *path)
    if t == "input_audio":
        fail("audio input cannot be translated", *path, "type")
    fail(f"unknown content part type {t!r}", *path, "type")


def _parts(c: list[Any], key: str, i: int, field: str) -> list[Part]:
    """``input[i].content`` / ``.output`` parts; a plain text (the usual part: input_text, or
    output_text without annotations) is read here."""
    out: list[Part] = []
    for j, p in enumerate(c):
        t = p.get("type") if isinstance(p, dict) else None
        text = p.get("text") if t == "input_text" or t == "output_text" and not p.get("annotations") else None
        out.append(Text(text) if isinstance(text, str) else _content_part(p, key, i, field, j))
    return out


def _tool_output(out: Any, key: str, i: int) -> list[Text | Image | Document]:
    """A tool output other than a string (read where the item is)."""
    if not isinstance(out, list):
        raise expected("a string or an array of content parts", out, key, i, "output")
    content: list[Text | Image | Document] = []
    for j, part in enumerate(_parts(out, key, i, "output")):
        if not isinstance(part, (Text, Image, Document)):
            fail("only input_text, input_image and input_file are allowed in a tool output",
                 key, i, "output", j, "type")
        content.append(part)
    return content


def _texts(v: Any, *path: str | int) -> list[str]:
    """The ``text`` of each object of a list (reasoning summary / content)."""
    out: list[str] = []
    for j, s in enumerate(req_list(v, *path)):
        out.append(req_str(req_obj(s, *path, j).get("text"), *path, j, "text"))
    return out


def _reasoning(item: dict[str, Any], key: str, i: int, w: list[str]) -> Reasoning:
    enc = opt_str(item.get("encrypted_content"), key, i, "encrypted_content")
    if enc is not None and rz.is_packed(enc):
        payload = rz.unpack(enc)
        if payload is None:
            w.append(f"{key}[{i}].encrypted_content: damaged proxai envelope, reasoning kept without continuity")
            return Reasoning(text="", opaque=None)
        text = payload.get("text")
        summary = payload.get("summary")
        if not (isinstance(summary, list) and all(isinstance(s, str) for s in summary)):
            summary = None
        return Reasoning(text=text if isinstance(text, str) else "", summary=summary,
                         redacted=bool(payload.get("redacted", False)),
                         opaque={k: v for k, v in payload.items() if k not in ("text", "summary", "redacted")})
    summ = item.get("summary")
    texts = _texts(summ, key, i, "summary") if summ is not None else []
    content = item.get("content")
    ctexts = _texts(content, key, i, "content") if content is not None else []
    rid = opt_str(item.get("id"), key, i, "id")
    text = "\n\n".join(texts) if texts else "\n\n".join(ctexts)
    return Reasoning(text=text, summary=texts or None,
                     opaque={"protocol": PROTOCOL, "id": rid, "encrypted_content": enc})


def _decode_input(inp: Any, w: list[str], key: str = "input") -> list[Message]:
    if inp is None:
        return []
    if isinstance(inp, str):
        return [Message("user", [Text(inp)])]
    if not isinstance(inp, list):
        raise expected("a string or an array of items", inp, key)
    msgs: list[Message] = []
    group: str | None = None  # "assistant" | "tools": the kind of the last message, when open for merging
    for i, item in enumerate(inp):
        if not isinstance(item, dict):
            raise expected("an object", item, key, i)
        t = item.get("type")
        if t is None and "role" in item or t == "message":
            role = item.get("role")
            if role not in _ROLES:
                fail(f"unknown role {role!r}", key, i, "role")
            c = item.get("content")
            parts: list[Part]
            if isinstance(c, list):
                parts = _parts(c, key, i, "content")
            elif isinstance(c, str):
                parts = [Text(c)]
            else:
                raise expected("a string or an array of content parts", c, key, i, "content")
            if role != "assistant":
                msgs.append(Message(role, parts))
                group = None
            elif not parts:
                pass  # nothing to join
            elif group == "assistant":
                msgs[-1].parts += parts
            else:
                msgs.append(Message("assistant", parts))
                group = "assistant"
            continue
        if t == "function_call" or t == "custom_tool_call":
            call_id = item.get("call_id")
            name = item.get("name")
            if not isinstance(call_id, str):
                raise expected("a string", call_id, key, i, "call_id")
            if not isinstance(name, str):
                raise expected("a string", name, key, i, "name")
            ns = item.get("namespace")
            if ns is not None and opt_str(ns, key, i, "namespace"):
                name = namespaced_tool_name(ns, name)
            field = "arguments" if t == "function_call" else "input"
            args = item.get(field)
            if not isinstance(args, str):
                args = opt_str(args, key, i, field) or ""
            iid = item.get("id")
            if iid is not None and not isinstance(iid, str):
                raise expected("a string", iid, key, i, "id")
            part: Part = ToolCall(call_id, name, args, "function" if t == "function_call" else "custom", iid)
            kind = "assistant"
        elif t == "function_call_output" or t == "custom_tool_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise expected("a string", call_id, key, i, "call_id")
            out = item.get("output")
            tkind: ToolKind = "function" if t == "function_call_output" else "custom"
            if isinstance(out, str):  # a text, or nothing
                part = ToolResult(call_id, [Text(out)] if out else [], None, tkind)
            else:
                part = ToolResult(call_id, _tool_output(out, key, i), None, tkind)
            kind = "tools"
        elif t == "reasoning":
            part, kind = _reasoning(item, key, i, w), "assistant"
        elif t in _ASSISTANT_OPAQUE:
            part, kind = Opaque(PROTOCOL, item, t), "assistant"
        elif t in _USER_OPAQUE:
            part, kind = Opaque(PROTOCOL, item, t), "tools"
        else:
            fail(f"unknown item type {t!r}", key, i, "type")
        if group == kind:
            msgs[-1].parts.append(part)
        else:
            msgs.append(Message("assistant" if kind == "assistant" else "user", [part]))
            group = kind
    return msgs


def _decode_tools(tools: Any, req: Request) -> None:
    if tools is None:
        return
    server: list[dict[str, Any]] = []
    if not isinstance(tools, list):
        raise expected("an array", tools, "tools")
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise expected("an object", t, "tools", i)
        tt = t.get("type")
        if tt == "function" or tt == "custom":
            req.tools.append(_tool(t, tt, "tools", i))
        elif tt == "namespace":
            # its function/custom tools, flattened (the namespace description prefixes each one's)
            ns = req_str(t.get("name"), "tools", i, "name")
            if not ns:
                fail("expected a non-empty string", "tools", i, "name")
            about = opt_str(t.get("description"), "tools", i, "description")
            for j, it in enumerate(req_list(t.get("tools"), "tools", i, "tools")):
                it_type = req_obj(it, "tools", i, "tools", j).get("type")
                if it_type != "function" and it_type != "custom":
                    fail(f"expected 'function' or 'custom', got {it_type!r}", "tools", i, "tools", j, "type")
                tool = _tool(it, it_type, "tools", i, "tools", j)
                tool.namespace = (ns, tool.name)
                tool.name = namespaced_tool_name(ns, tool.name)
                if about:
                    tool.description = f"{about}\n\n{tool.description}" if tool.description else about
                req.tools.append(tool)
        elif isinstance(tt, str) and tt:
            server.append(t)
            ws = web_search_tool(t)
            if ws is not None:
                req.web_search = ws
        else:
            fail(f"unknown tool type {tt!r}", "tools", i, "type")
    if server:
        req.extra["server_tools"] = server


def _tool(t: dict[str, Any], tt: str, *path: str | int) -> Tool:
    """A function or custom tool definition."""
    name = t.get("name")
    description = t.get("description")
    if not isinstance(name, str):
        raise expected("a string", name, *path, "name")
    if description is not None and not isinstance(description, str):
        raise expected("a string", description, *path, "description")
    if tt == "function":
        params = t.get("parameters")
        strict = t.get("strict")
        if params is not None and not isinstance(params, dict):
            raise expected("an object", params, *path, "parameters")
        if strict is not None and not isinstance(strict, bool):
            raise expected("a boolean", strict, *path, "strict")
        return Tool(name, description, params, "function", strict)
    return Tool(name=name, description=description, kind="custom", format=opt_obj(t.get("format"), *path, "format"))


_CHOICE_MODES: dict[str, ToolChoiceMode] = {"none": "none", "auto": "auto", "required": "required"}


def _decode_tool_choice(tc: Any, req: Request) -> None:
    if tc is None:
        return
    if isinstance(tc, str):
        mode = _CHOICE_MODES.get(tc)
        if mode is None:
            fail(f"unknown tool_choice {tc!r}", "tool_choice")
        req.tool_choice = ToolChoice(mode)
        return
    if not isinstance(tc, dict):
        raise expected("a string or an object", tc, "tool_choice")
    t = tc.get("type")
    if t == "function" or t == "custom":
        req.tool_choice = ToolChoice(mode="tool", name=req_str(tc.get("name"), "tool_choice", "name"), kind=t)
    elif t == "allowed_tools":
        mode = tc.get("mode")
        if mode not in ("auto", "required"):
            fail(f"expected 'auto' or 'required', got {mode!r}", "tool_choice", "mode")
        names: list[str] = []
        hosted = False
        for i, x in enumerate(req_list(tc.get("tools"), "tool_choice", "tools")):
            if req_obj(x, "tool_choice", "tools", i).get("type") in ("function", "custom"):
                names.append(req_str(x.get("name"), "tool_choice", "tools", i, "name"))
            else:
                hosted = True
        if hosted:
            req.extra["server_tool_choice"] = tc
        req.tool_choice = ToolChoice(mode="allowed", allowed=names, allowed_required=mode == "required")
    elif isinstance(t, str) and t:  # hosted tool (web_search, mcp, ...)
        req.extra["server_tool_choice"] = tc
    else:
        fail(f"unknown tool_choice type {t!r}", "tool_choice", "type")


def _decode_text(text: Any, req: Request) -> None:
    if text is None:
        return
    fmt = req_obj(text, "text").get("format")
    if fmt is not None:
        ft = req_obj(fmt, "text", "format").get("type")
        if ft == "text" or ft == "json_object":
            req.output_format = OutputFormat(type=ft)
        elif ft == "json_schema":
            req.output_format = OutputFormat(
                type="json_schema", schema=req_obj(fmt.get("schema"), "text", "format", "schema"),
                name=opt_str(fmt.get("name"), "text", "format", "name"),
                strict=opt_bool(fmt.get("strict"), "text", "format", "strict"),
                description=opt_str(fmt.get("description"), "text", "format", "description"),
            )
        else:
            fail(f"unknown format type {ft!r}", "text", "format", "type")
    verb = text.get("verbosity")
    if verb is not None:
        req.extra["verbosity"] = req_str(verb, "text", "verbosity")


def _decode_reasoning(r: Any, req: Request) -> None:
    if r is None:
        return
    req_obj(r, "reasoning")
    effort = opt_str(r.get("effort"), "reasoning", "effort")
    summary = opt_str(r.get("summary"), "reasoning", "summary")
    if summary is None:
        summary = opt_str(r.get("generate_summary"), "reasoning", "generate_summary")
    if effort is None and summary is None:
        return
    req.reasoning = ReasoningConfig(effort=effort, summary=summary, disabled=effort == "none")


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    if not isinstance(body, dict):
        raise expected("an object", body, "body")
    w = warnings
    req = Request()
    v = body.get("model")
    if v is not None:
        req.model = opt_str(v, "model")
    instr = body.get("instructions")
    if instr is not None:
        if isinstance(instr, str):
            if instr:
                req.system.append(Text(instr))
        elif isinstance(instr, list):
            for m in _decode_input(instr, w, "instructions"):
                for p in m.parts:
                    if isinstance(p, Text):
                        req.system.append(p)
        else:
            raise expected("a string or an array of items", instr, "instructions")
    req.messages = _decode_input(body.get("input"), w)
    v = body.get("tools")
    if v is not None:
        _decode_tools(v, req)
    v = body.get("tool_choice")
    if v is not None:
        _decode_tool_choice(v, req)
    v = body.get("parallel_tool_calls")
    if v is not None:
        req.parallel_tool_calls = opt_bool(v, "parallel_tool_calls")
    v = body.get("max_output_tokens")
    if v is not None:
        req.max_output_tokens = opt_int(v, "max_output_tokens")
    v = body.get("temperature")
    if v is not None:
        req.temperature = opt_num(v, "temperature")
    v = body.get("top_p")
    if v is not None:
        req.top_p = opt_num(v, "top_p")
    v = body.get("reasoning")
    if v is not None:
        _decode_reasoning(v, req)
    v = body.get("text")
    if v is not None:
        _decode_text(v, req)
    v = body.get("stream")
    if v is not None:
        req.stream = v if isinstance(v, bool) else bool(opt_bool(v, "stream"))
    sid = body.get("safety_identifier")
    user = body.get("user")
    if sid is not None or user is not None:
        sid = opt_str(sid, "safety_identifier")
        user = opt_str(user, "user")
        req.user = sid or user
        if user is not None and sid is not None and user != sid:
            req.extra["user"] = user
    read_tail(body, req, w, _TAIL)
    return req


# ============================================================================= encode
def _input_image(p: Image) -> dict[str, Any]:
    d: dict[str, Any] = {"type": "input_image", "detail": p.detail or "auto"}
    if p.source == "base64":
        d["image_url"] = data_url(p.media_type or "image/png", p.data or "")
    elif p.source == "url":
        d["image_url"] = p.url or ""
    else:
        d["file_id"] = p.file_id
    return d


def _input_file(p: Document) -> dict[str, Any]:
    d: dict[str, Any] = {"type": "input_file"}
    if p.source == "text":
        # a text file stays a file: input_file takes text/plain data URLs, and the name survives
        media = p.media_type or "text/plain"
        d["file_data"] = data_url(media, base64.b64encode((p.data or "").encode()).decode())
        d["filename"] = p.filename or p.title or default_filename(media)
        return d
    if p.source == "base64":
        d["file_data"] = data_url(p.media_type, p.data or "") if p.media_type else (p.data or "")
        d["filename"] = p.filename or p.title or default_filename(p.media_type)
        return d
    if p.source == "url":
        d["file_url"] = p.url
    else:
        d["file_id"] = p.file_id
    if p.filename:
        d["filename"] = p.filename
    return d


def _input_part(p: Part) -> dict[str, Any] | None:
    if isinstance(p, Text):
        return {"type": "input_text", "text": p.text}
    if isinstance(p, Image):
        return _input_image(p)
    if isinstance(p, Document):
        return _input_file(p)
    return None


def _tool_result(p: ToolResult, w: list[str]) -> dict[str, Any]:
    out: Any
    content = p.content
    if len(content) == 1 and isinstance(content[0], Text):  # one text (the usual output)
        out = content[0].text
    else:
        texts = [c.text for c in content if isinstance(c, Text)]
        if len(texts) == len(content):
            out = "".join(texts)
        else:
            out = [x for x in map(_input_part, content) if x is not None]
    if p.is_error:
        w.append(f"tool result {p.call_id}: is_error dropped (Responses tool outputs have no error flag)")
    return {"type": "custom_tool_call_output" if p.kind == "custom" else "function_call_output",
            "call_id": p.call_id, "output": out}


def _reasoning_item(p: Reasoning) -> dict[str, Any] | None:
    op = p.opaque
    if not op or op.get("protocol") != PROTOCOL or not isinstance(op.get("id"), str):
        return None
    d: dict[str, Any] = {"type": "reasoning", "id": op["id"]}
    if p.summary is not None:
        d["summary"] = [{"type": "summary_text", "text": s} for s in p.summary]
    else:
        d["summary"] = []
        if p.text:
            d["content"] = [{"type": "reasoning_text", "text": p.text}]
    enc = op.get("encrypted_content")
    if isinstance(enc, str):
        d["encrypted_content"] = enc
    return d


def _encode_messages(req: Request, w: list[str], names: dict[str, str]) -> tuple[list[dict[str, Any]], bool]:
    """The input items, message by message (one loop: per-message calls cost more than the items).
    ``names``: tool name -> its short name, filled as met."""
    items: list[dict[str, Any]] = []
    dropped_reasoning = 0  # what was dropped, warned about once at the end
    dropped_opaque: list[str] | None = None
    had_reasoning = False
    for mi, m in enumerate(req.messages):
        role = m.role
        parts = m.parts
        if len(parts) == 1 and isinstance(parts[0], Text) and not parts[0].citations:
            # one plain text (the usual message), whatever the role
            text = parts[0].text
            items.append({"type": "message", "role": role, "content": [
                {"type": "output_text", "text": text, "annotations": []} if role == "assistant" else
                {"type": "input_text", "text": text}]})
            continue
        if role == "user":
            buf: list[dict[str, Any]] | None = None  # the input parts of the user message being built
            for p in parts:
                if isinstance(p, (WebSearchCall, WebSearchResults)):
                    issued = web_search_as_opaque(p, PROTOCOL)
                    if issued is None:
                        continue
                    p = issued
                if isinstance(p, ToolResult) or isinstance(p, Opaque):  # an item of its own: the message so far goes first
                    if buf:
                        items.append({"type": "message", "role": "user", "content": buf})
                        buf = None
                    if isinstance(p, ToolResult):
                        items.append(_tool_result(p, w))
                    elif p.protocol == PROTOCOL:
                        items.append(p.raw)
                    else:
                        if dropped_opaque is None:
                            dropped_opaque = []
                        dropped_opaque.append(p.label or p.protocol)
                    continue
                if isinstance(p, Text):
                    ip = {"type": "input_text", "text": p.text}
                elif isinstance(p, Image):
                    ip = _input_image(p)
                elif isinstance(p, Document):
                    ip = _input_file(p)
                else:
                    w.append(f"messages[{mi}]: {p.type} part in a user message dropped")
                    continue
                if buf is None:
                    buf = [ip]
                else:
                    buf.append(ip)
            if buf:
                items.append({"type": "message", "role": "user", "content": buf})
        elif role == "assistant":
            start = len(items)
            content: list[dict[str, Any]] | None = None  # the output parts of the message being built
            reasoned = False
            for p in parts:
                if isinstance(p, (WebSearchCall, WebSearchResults)):
                    issued = web_search_as_opaque(p, PROTOCOL)
                    if issued is None:
                        continue
                    p = issued
                if isinstance(p, Text):
                    cits = p.citations
                    op = {"type": "output_text", "text": p.text,
                          "annotations": citations_to_annotations(cits, p.text, w) if cits else []}
                elif isinstance(p, Refusal):
                    op = {"type": "refusal", "refusal": p.text}
                else:
                    it: dict[str, Any] | None
                    if isinstance(p, ToolCall):
                        short = names.get(p.name)
                        if short is None:
                            short = names[p.name] = short_tool_name(p.name)
                        iid = p.item_id
                        if p.kind == "custom":
                            it = {"type": "custom_tool_call", "call_id": p.id,
                                  "name": short, "input": p.arguments}
                            if iid and iid.startswith("ctc_"):
                                it["id"] = iid
                        else:
                            it = {"type": "function_call", "call_id": p.id,
                                  "name": short, "arguments": p.arguments or "{}"}
                            if iid and iid.startswith("fc_"):
                                it["id"] = iid
                    elif isinstance(p, Reasoning):
                        it = _reasoning_item(p)
                        if it is None:
                            dropped_reasoning += 1
                            continue
                        had_reasoning = reasoned = True
                    elif isinstance(p, Opaque) and p.protocol == PROTOCOL:
                        it = p.raw
                        reasoned = True  # (a raw item is checked like a reasoning item below)
                    elif isinstance(p, Opaque):
                        if dropped_opaque is None:
                            dropped_opaque = []
                        dropped_opaque.append(p.label or p.protocol)
                        continue
                    elif isinstance(p, ToolResult):
                        it = _tool_result(p, w)
                    else:
                        w.append(f"messages[{mi}]: {p.type} part in an assistant message dropped")
                        continue
                    # an item of its own: the message so far goes first
                    if content:
                        items.append({"type": "message", "role": "assistant", "content": content})
                        content = None
                    items.append(it)
                    continue
                if content is None:
                    content = [op]
                else:
                    content.append(op)
            if content:
                items.append({"type": "message", "role": "assistant", "content": content})
            elif reasoned and len(items) > start and items[-1].get("type") == "reasoning":
                # lesson #32: a reasoning item must be followed by the item it produced
                while len(items) > start and items[-1].get("type") == "reasoning":
                    items.pop()
                    w.append(f"messages[{mi}]: reasoning item without a following output item dropped")
        else:  # system / developer inside the conversation
            sys_content = []
            for p in parts:
                if isinstance(p, Text):
                    sys_content.append({"type": "input_text", "text": p.text})
                else:
                    w.append(f"messages[{mi}]: {p.type} part in a {role} message dropped")
            if sys_content:
                items.append({"type": "message", "role": role, "content": sys_content})
    if dropped_reasoning:
        w.append(f"{dropped_reasoning} reasoning part(s) not issued by OpenAI Responses dropped "
                 "(their continuity payload cannot be forwarded)")
    if dropped_opaque:
        w.append("parts only their own protocol understands dropped: " + ", ".join(sorted(set(dropped_opaque))))
    return items, had_reasoning


def _encode_tools(req: Request, w: list[str], names: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in req.tools:
        short = names.get(t.name)
        if short is None:
            short = names[t.name] = short_tool_name(t.name)
        about = t.description
        if t.kind == "custom":
            d: dict[str, Any] = {"type": "custom", "name": short}
            if about:
                d["description"] = about
            if t.format:
                d["format"] = t.format
        else:
            params = t.parameters
            d = {"type": "function", "name": short,
                 "parameters": params if params is not None else {"type": "object", "properties": {}},
                 "strict": t.strict is True}  # (a bool or None)
            if about:
                d["description"] = about
        out.append(d)
    server = req.extra.get("server_tools") if req.extra else None
    ws = req.web_search
    native_ws = False
    if isinstance(server, list):
        for x in server:
            tt = x.get("type") if isinstance(x, dict) else None
            # Responses hosted tools have plain type names; Anthropic server tools carry a date
            # suffix (web_search_20250305) and gateway tools a prefix (openrouter:web_search)
            if isinstance(tt, str) and not re.search(r"_\d{8}$|:", tt):
                out.append(x)
                native_ws = native_ws or (ws is not None and x is ws.raw)
            elif ws is not None and x is ws.raw:
                continue  # another provider's web search: the Responses one is added below
            else:
                w.append(f"tools: server tool {tt!r} of another provider dropped (no Responses equivalent)")
    if ws is not None and not native_ws:
        out.append(web_search_tool_wire(ws, w))
    return out


def _encode_tool_choice(req: Request) -> Any:
    tc = req.tool_choice
    raw = req.extra.get("server_tool_choice")
    if isinstance(raw, dict) and (tc is None or tc.mode == "allowed"):
        return raw
    if tc is None:
        return None
    if tc.mode in ("auto", "none", "required"):
        return tc.mode
    kinds = {t.name: t.kind for t in req.tools}
    if tc.mode == "tool":
        kind = "custom" if tc.kind == "custom" or kinds.get(tc.name or "") == "custom" else "function"
        return {"type": kind, "name": short_tool_name(tc.name or "")}
    tools = [{"type": "custom" if kinds.get(n) == "custom" else "function", "name": short_tool_name(n)}
             for n in (tc.allowed or [])]
    return {"type": "allowed_tools", "mode": "required" if tc.allowed_required else "auto", "tools": tools}


def _encode_reasoning(rc: ReasoningConfig, w: list[str]) -> tuple[dict[str, Any] | None, bool]:
    """(reasoning object, whether reasoning is on)."""
    d: dict[str, Any] = {}
    effort = rc.effort
    if effort == "max":
        w.append("reasoning effort 'max' sent as 'xhigh'")
        effort = "xhigh"
    if effort is not None and effort not in EFFORTS:
        w.append(f"reasoning effort {effort!r} unknown to Responses: omitted")
        effort = None
    if effort is None and rc.budget_tokens is not None and not rc.disabled:
        effort = effort_for_budget(rc.budget_tokens)
        w.append(f"thinking budget {rc.budget_tokens} sent as reasoning effort {effort!r}")
    if rc.disabled and effort is None:
        w.append("reasoning disabled: Responses has no off switch valid for every model; effort omitted")
    if effort is not None:
        d["effort"] = effort
    if rc.summary is not None:
        d["summary"] = rc.summary
    on = not rc.disabled and effort != "none" and (effort is not None or rc.adaptive or rc.budget_tokens is not None)
    return (d or None), on


def encode_request(req: Request, warnings: list[str]) -> dict[str, Any]:
    w = warnings
    ex = req.extra
    body: dict[str, Any] = {}
    if req.model is not None:
        body["model"] = req.model
    system = req.system
    if system:
        body["instructions"] = system[0].text if len(system) == 1 else "\n\n".join([t.text for t in system])
    names: dict[str, str] = {}  # tool name -> its short name, worked out once per request
    items, had_reasoning = _encode_messages(req, w, names)
    body["input"] = items
    tools = _encode_tools(req, w, names)
    if tools:
        body["tools"] = tools
    tc = _encode_tool_choice(req)
    if tc is not None and (tools or tc in ("none", "auto")):
        body["tool_choice"] = tc
    elif tc is not None:
        w.append("tool_choice dropped: no tool is left for the upstream")
    if req.parallel_tool_calls is not None and tools:
        body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.max_output_tokens is not None:
        mot = req.max_output_tokens
        if mot < 16:
            w.append(f"max_output_tokens {mot} raised to 16 (the Responses minimum)")
            mot = 16
        body["max_output_tokens"] = mot
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.top_k is not None:
        w.append("top_k dropped (Responses has no top_k)")
    if req.stop:
        w.append("stop sequences dropped (Responses has no stop parameter; the answer may run past them)")
    if req.seed is not None:
        w.append("seed dropped (Responses has no seed parameter)")
    reasoning_on = False
    if req.reasoning is not None:
        r, reasoning_on = _encode_reasoning(req.reasoning, w)
        if r:
            body["reasoning"] = r
    text: dict[str, Any] = {}
    of = req.output_format
    if of is not None:
        if of.type == "json_schema":
            f: dict[str, Any] = {"type": "json_schema", "name": of.name or "response",
                                 "schema": of.schema or {"type": "object"}}
            if of.strict is not None:
                f["strict"] = of.strict
            if of.description:
                f["description"] = of.description
            text["format"] = f
        elif of.type in ("text", "json_object"):
            text["format"] = {"type": of.type}
        else:
            w.append(f"output format {of.type!r} unknown to Responses: dropped")
    verb = ex.get("verbosity") if ex else None
    if isinstance(verb, str):
        text["verbosity"] = verb
    if text:
        body["text"] = text
    if req.stream:
        body["stream"] = True
    if req.user:
        body["safety_identifier"] = req.user[:128]
    if req.metadata:
        md: dict[str, str] = {}
        for k, v in req.metadata.items():
            if isinstance(v, str):
                md[str(k)] = v
            elif v is not None:
                md[str(k)] = str(v)
        body["metadata"] = md
    for k in _EXTRA_PASS if ex else ():
        v = ex.get(k)
        if v is None:
            continue
        if k == "service_tier" and v not in _SERVICE_TIERS:
            w.append(f"service_tier {v!r} unknown to Responses: dropped")
            continue
        if k == "store" and not isinstance(v, bool):
            continue
        if k == "top_logprobs" and not isinstance(v, int):
            continue
        if k == "include" and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            continue
        if k == "stream_options" and not (isinstance(v, dict) and set(v) <= {"include_obfuscation"}):
            continue
        body[k] = v
    if reasoning_on or had_reasoning:
        if "store" not in body:
            body["store"] = False
        inc = body.get("include")
        inc = list(inc) if isinstance(inc, list) else []
        if "reasoning.encrypted_content" not in inc:
            inc.append("reasoning.encrypted_content")
        body["include"] = inc
    return body
