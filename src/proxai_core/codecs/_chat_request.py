"""Chat Completions requests: client body -> neutral, neutral -> upstream body (private).

Budget -> effort table (inverse of the Anthropic codec's effort -> budget table
minimal 1024, low 2048, medium 8192, high 16384, xhigh 32768): the largest effort whose budget
does not exceed the given budget, so effort -> budget -> effort is the identity. Below 1024 the
effort is "minimal".
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, cast

import orjson

from ..context import short_tool_name
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
    ToolChoiceMode,
    ToolKind,
    ToolResult,
    WebSearchTool,
)
from ._chat_common import PROTOCOL, reasoning_parts, thinking_text, web_search_options, web_search_tool
from ._openai_common import EFFORTS, effort_for_budget
from ._request_common import (
    Tail,
    expected,
    fail,
    invalid,
    is_json_int,
    opt_bool,
    opt_int,
    opt_num,
    opt_obj,
    opt_str,
    read_tail,
    req_list,
    req_obj,
    req_str,
    where,
)

#: Top-level request fields that go to Request.extra unchanged (Chat names).
_EXTRA_KEYS = (
    "service_tier", "prompt_cache_key", "store", "safety_identifier", "frequency_penalty",
    "presence_penalty", "logit_bias", "logprobs", "top_logprobs", "prediction", "verbosity",
    "web_search_options", "prompt_cache_retention",
)
_KNOWN = frozenset({
    "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "max_completion_tokens",
    "max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "reasoning_effort", "reasoning",
    "response_format", "stream", "stream_options", "user", "metadata", "n", "functions",
    "function_call", "modalities", "audio", "thinking", *_EXTRA_KEYS,
})

_TAIL = Tail(_EXTRA_KEYS, _KNOWN, "request field {!r} is not translated")


# ============================================================================= decode
def _parse_data_url(url: str) -> tuple[str | None, str] | None:
    """``data:<mt>;base64,<data>`` -> (media type, data); None when not a base64 data URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    mt = head[: -len(";base64")] or None
    return mt, data


def _decode_image(part: dict[str, Any], *path: str | int) -> Image:
    iu = part.get("image_url")
    if isinstance(iu, str):
        url, detail = iu, None
    else:
        iu = req_obj(iu, *path, "image_url")
        url = req_str(iu.get("url"), *path, "image_url", "url")
        detail = opt_str(iu.get("detail"), *path, "image_url", "detail")
    du = _parse_data_url(url)
    if du is not None:
        return Image(source="base64", media_type=du[0], data=du[1], detail=detail)
    return Image(source="url", url=url, detail=detail)


def _decode_file(part: dict[str, Any], *path: str | int) -> Document:
    f = req_obj(part.get("file"), *path, "file")
    filename = opt_str(f.get("filename"), *path, "file", "filename")
    fd = opt_str(f.get("file_data"), *path, "file", "file_data")
    if fd is not None:
        du = _parse_data_url(fd)
        if du is not None:
            return Document(source="base64", media_type=du[0] or "application/pdf", data=du[1],
                            filename=filename)
        mt = "application/pdf"
        if filename and "." in filename and not filename.lower().endswith(".pdf"):
            mt = "application/octet-stream"
        return Document(source="base64", media_type=mt, data=fd, filename=filename)
    fid = f.get("file_id")
    if isinstance(fid, str):
        return Document(source="file", file_id=fid, filename=filename)
    fail("needs file_data or file_id", *path, "file")


#: Vendor content parts a Chat upstream may understand but no other protocol can carry: kept as
#: Opaque parts (a Chat encoder sends them back unchanged; other encoders drop them with a warning).
_VENDOR_PARTS = frozenset({"video_url", "input_video"})


def _decode_user_part(part: Any, *path: str | int) -> Text | Image | Document | Opaque:
    if not isinstance(part, dict):
        raise expected("an object", part, *path)
    t = part.get("type")
    if t == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise expected("a string", text, *path, "text")
        return Text(text, None, part.get("cache_control"))
    if t == "image_url":
        img = _decode_image(part, *path)
        img.cache_control = part.get("cache_control")
        return img
    if t == "file":
        doc = _decode_file(part, *path)
        doc.cache_control = part.get("cache_control")
        return doc
    if t == "input_audio":
        fail("input_audio (audio input) cannot be translated", *path)
    if t in _VENDOR_PARTS:
        return Opaque(PROTOCOL, part, label=t)
    if not isinstance(t, str):
        raise expected("a string", t, *path, "type")
    fail(f"unknown or untranslatable content part type {t!r}", *path, "type")


def _decode_parts(content: Any, i: int) -> list[Any]:
    """A user or tool message's content other than a string (read where the message is)."""
    if not isinstance(content, list):
        raise expected("a string or an array of parts", content, "messages", i, "content")
    return [_decode_user_part(p, "messages", i, "content", j) for j, p in enumerate(content)]


def _decode_text_parts(content: Any, i: int) -> list[Text]:
    """A system or developer message's content other than a string."""
    if not isinstance(content, list):
        raise expected("a string or an array of text parts", content, "messages", i, "content")
    out = []
    for j, p in enumerate(content):
        if req_obj(p, "messages", i, "content", j).get("type") != "text":
            fail(f"expected 'text', got {p.get('type')!r}", "messages", i, "content", j, "type")
        out.append(Text(req_str(p.get("text"), "messages", i, "content", j, "text"), None, p.get("cache_control")))
    return out


#: Assistant message fields beyond role/content/tool_calls/name (looked at only when present).
_ASSISTANT_PLAIN = frozenset({"role", "content", "tool_calls", "name"})


def _assistant_extras(m: dict[str, Any], i: int, parts: list[Any]) -> None:
    """Reasoning (it precedes the answer), checked before the content is read."""
    for field in ("reasoning_content", "reasoning"):
        opt_str(m.get(field), "messages", i, field)
    if m.get("audio") is not None:
        fail("audio output in the history cannot be translated", "messages", i, "audio")
    rfield = "reasoning_content" if isinstance(m.get("reasoning_content"), str) else "reasoning"
    parts.extend(reasoning_parts(m.get(rfield), rfield, m.get("reasoning_details")))


def _custom_call(tc: dict[str, Any], tid: str, i: int, j: int) -> ToolCall:
    c = req_obj(tc.get("custom"), "messages", i, "tool_calls", j, "custom")
    name = req_str(c.get("name"), "messages", i, "tool_calls", j, "custom", "name")
    inp = opt_str(c.get("input"), "messages", i, "tool_calls", j, "custom", "input")
    return ToolCall(tid, name, inp or "", kind="custom")


def _index_of(seq: list[Any], item: Any) -> int:
    """The index of ``item`` (that very object) in ``seq``: the loops that check each element count
    only when they raise."""
    for j, x in enumerate(seq):
        if x is item:
            return j
    raise ValueError(item)


def _assistant_content(content: list[Any], i: int, parts: list[Any]) -> None:
    for j, p in enumerate(content):
        t = req_obj(p, "messages", i, "content", j).get("type")
        if t == "text":
            parts.append(Text(req_str(p.get("text"), "messages", i, "content", j, "text"), None,
                              p.get("cache_control")))
        elif t == "refusal":
            parts.append(Refusal(req_str(p.get("refusal"), "messages", i, "content", j, "refusal")))
        elif t == "thinking":  # Mistral thinking part
            parts.append(Reasoning(text=thinking_text(p.get("thinking")),
                                   opaque={"protocol": PROTOCOL, "field": "content_thinking"}))
        else:
            fail(f"unknown assistant content part type {t!r}", "messages", i, "content", j, "type")


def _decode_assistant(m: dict[str, Any], content: Any, i: int, kinds: dict[str, str]) -> Message:
    """An assistant message other than role and a string content (``content``: its content)."""
    parts: list[Any] = []
    # with tool_calls / name only: no extras to look at
    extras = not _ASSISTANT_PLAIN.issuperset(m)
    if extras:
        _assistant_extras(m, i, parts)
    lead = len(parts)  # the text goes after the reasoning
    text = None
    if isinstance(content, str):
        if content:
            text = content
    elif isinstance(content, list):
        _assistant_content(content, i, parts)
    elif content is not None:
        raise expected("a string, an array or null", content, "messages", i, "content")
    if extras:
        refusal = opt_str(m.get("refusal"), "messages", i, "refusal")
        if refusal:
            parts.append(Refusal(refusal))
    tcs = m.get("tool_calls")
    if tcs is not None:  # (kinds: only custom calls are noted, a result of any other id is a function's)
        if not isinstance(tcs, list):
            raise expected("an array", tcs, "messages", i, "tool_calls")
        for tc in tcs:
            if not isinstance(tc, dict):
                raise expected("an object", tc, "messages", i, "tool_calls", _index_of(tcs, tc))
            tid = tc.get("id")
            if not isinstance(tid, str):
                raise expected("a string", tid, "messages", i, "tool_calls", _index_of(tcs, tc), "id")
            ttype = tc.get("type")
            fn = tc.get("function")
            if (ttype == "function" or ttype is None) and isinstance(fn, dict):
                name = fn.get("name")
                args = fn.get("arguments")
                if not isinstance(name, str):
                    raise expected("a string", name, "messages", i, "tool_calls", _index_of(tcs, tc), "function", "name")
                if not isinstance(args, str):
                    if args is None:
                        args = ""
                    elif isinstance(args, dict) or isinstance(args, list):
                        args = dumps(args).decode()
                    else:
                        raise expected("a string", args, "messages", i, "tool_calls", _index_of(tcs, tc), "function",
                                       "arguments")
                kinds.pop(tid, None)  # a custom call of the same id before: this one is a function
                parts.append(ToolCall(tid, name, args))
            elif ttype == "custom":
                parts.append(_custom_call(tc, tid, i, _index_of(tcs, tc)))
                kinds[tid] = "custom"
            elif ttype is None or ttype == "function":
                raise expected("an object", fn, "messages", i, "tool_calls", _index_of(tcs, tc), "function")
            else:
                fail(f"unknown tool call type {ttype!r}", "messages", i, "tool_calls", _index_of(tcs, tc), "type")
    if extras:
        fc = opt_obj(m.get("function_call"), "messages", i, "function_call")
        if fc is not None and isinstance(fc.get("name"), str) and fc["name"]:
            args = fc.get("arguments")
            call = ToolCall(f"call_legacy_{i}", fc["name"], args if isinstance(args, str) else "")
            kinds.pop(call.id, None)  # a custom call of the same id before: this one is a function
            parts.append(call)
    name = m.get("name")
    if not isinstance(name, str):
        name = None
    if text is not None:
        parts.insert(lead, Text(text))
    return Message("assistant", parts, name)


def _decode_messages(msgs: Any, req: Request, warnings: list[str]) -> None:
    """One pass: each message is checked while it is read."""
    if not isinstance(msgs, list):
        raise expected("an array", msgs, "messages")
    kinds: dict[str, str] = {}  # the custom calls' ids (a result of any other id is a function's)
    leading = True
    tool_turn = False  # the last message is a user turn of tool results only (the next tool result joins it)
    out = req.messages
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise expected("an object", m, "messages", i)
        role = m.get("role")
        content = m.get("content")
        if role == "user":
            leading = tool_turn = False
            name = None
            if len(m) > 2:  # more than role and content
                if m.get("tool_calls"):
                    warnings.append(f"messages[{i}].tool_calls on a user message ignored")
                name = m.get("name")
                if not isinstance(name, str):
                    name = None
            if isinstance(content, str):
                out.append(Message("user", [Text(content)], name))
            else:
                out.append(Message("user", _decode_parts(content, i), name))
        elif role == "assistant":
            leading = tool_turn = False
            if isinstance(content, str) and len(m) == 2:  # role and a string content: the usual answer
                out.append(Message("assistant", [Text(content)] if content else []))
            else:
                out.append(_decode_assistant(m, content, i, kinds))
        elif role == "tool":
            leading = False
            cid = m.get("tool_call_id")
            if not isinstance(cid, str):
                raise expected("a string", cid, "messages", i, "tool_call_id")
            kind: ToolKind = "custom" if kinds.get(cid) == "custom" else "function"
            if isinstance(content, str):
                tr = ToolResult(cid, [Text(content)], None, kind)
            else:
                tr = ToolResult(cid, [] if content is None else _decode_parts(content, i), None, kind)
            # consecutive tool messages: separate ToolResults, in order, in one user turn
            if tool_turn:
                out[-1].parts.append(tr)
            else:
                out.append(Message("user", [tr]))
                tool_turn = True
        elif role == "system" or role == "developer":
            texts = [Text(content)] if isinstance(content, str) else _decode_text_parts(content, i)
            if leading and (not req.system or req.system_role == role):
                if not req.system:
                    req.system_role = role
                req.system.extend(texts)
                continue
            leading = tool_turn = False
            name = m.get("name")
            out.append(Message(role, cast("list[Part]", texts), name if isinstance(name, str) else None))
        elif role == "function":
            fail("legacy role 'function' cannot be translated; use tool messages with tool_call_id",
                 "messages", i, "role")
        elif isinstance(role, str):
            fail(f"unknown role {role!r}", "messages", i, "role")
        else:
            raise expected("a string", role, "messages", i, "role")


def _decode_tools(tools: Any, req: Request, key: str = "tools") -> None:
    if not isinstance(tools, list):
        raise expected("an array", tools, key)
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise expected("an object", t, key, i)
        ttype = t.get("type", "function")
        if ttype == "function":
            fn = t.get("function")
            if not isinstance(fn, dict):
                raise expected("an object", fn, key, i, "function")
            name = fn.get("name")
            if not isinstance(name, str):
                raise expected("a string", name, key, i, "function", "name")
            params = fn.get("parameters")
            if params is not None and not isinstance(params, dict):
                raise expected("an object", params, key, i, "function", "parameters")
            desc = fn.get("description")
            strict = fn.get("strict")
            req.tools.append(Tool(name, desc if isinstance(desc, str) else None, params, "function",
                                  strict if isinstance(strict, bool) else None, None, t.get("cache_control")))
        elif ttype == "custom":
            c = req_obj(t.get("custom"), key, i, "custom")
            desc = c.get("description")
            req.tools.append(Tool(req_str(c.get("name"), key, i, "custom", "name"),
                                  desc if isinstance(desc, str) else None, kind="custom",
                                  format=opt_obj(c.get("format"), key, i, "custom", "format")))
        elif isinstance(ttype, str):
            # provider-hosted (server) tools, e.g. OpenRouter "openrouter:web_search"
            req.extra.setdefault("server_tools", []).append(t)
        else:
            raise expected("a string", ttype, key, i, "type")


def _named_choice(obj: dict[str, Any], key: str) -> ToolChoice:
    t = obj.get("type", "function")
    if t in ("function", "custom"):
        inner = obj.get(t)
        name = inner.get("name") if isinstance(inner, dict) else None
        return ToolChoice("tool", name=req_str(name, key, t, "name"), kind=t)
    if t == "allowed_tools":
        at = req_obj(obj.get("allowed_tools"), key, "allowed_tools")
        mode = at.get("mode", "auto")
        if mode not in ("auto", "required"):
            fail(f"expected 'auto' or 'required', got {mode!r}", key, "allowed_tools", "mode")
        names = []
        for j, x in enumerate(req_list(at.get("tools"), key, "allowed_tools", "tools")):
            xt = req_obj(x, key, "allowed_tools", "tools", j).get("type", "function")
            inner = x.get(xt)
            name = inner.get("name") if isinstance(inner, dict) else x.get("name")
            if not isinstance(name, str):
                fail("needs a tool name", key, "allowed_tools", "tools", j)
            names.append(name)
        return ToolChoice("allowed", allowed=names, allowed_required=mode == "required")
    fail(f"unknown tool_choice type {t!r}", key, "type")


#: the tool_choice strings ("any" is Mistral's spelling of "required")
_CHOICE_MODES: dict[str, ToolChoiceMode] = {"auto": "auto", "none": "none", "required": "required",
                                            "any": "required"}


def _decode_tool_choice(tc: Any, key: str = "tool_choice") -> ToolChoice:
    if isinstance(tc, str):
        mode = _CHOICE_MODES.get(tc)
        if mode is not None:
            return ToolChoice(mode)
        fail(f"expected 'auto', 'none', 'required' or an object, got {tc!r}", key)
    if isinstance(tc, dict):
        return _named_choice(tc, key)
    raise expected("a string or an object", tc, key)


def _decode_response_format(rf: Any) -> OutputFormat:
    t = req_obj(rf, "response_format").get("type")
    if t in ("text", "json_object"):
        return OutputFormat(t)
    if t == "json_schema":
        js = req_obj(rf.get("json_schema"), "response_format", "json_schema")
        name = js.get("name")
        strict = js.get("strict")
        desc = js.get("description")
        return OutputFormat("json_schema", schema=opt_obj(js.get("schema"), "response_format", "json_schema", "schema"),
                            name=name if isinstance(name, str) else None,
                            strict=strict if isinstance(strict, bool) else None,
                            description=desc if isinstance(desc, str) else None)
    fail(f"unknown response format type {t!r}", "response_format", "type")


#: The fields of a usual request; a body of only these skips the checks of the others.
_USUAL = frozenset({"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "max_completion_tokens",
                    "max_tokens", "temperature", "response_format", "stream", "stream_options", "user",
                    "metadata"})


def _decode_rare(body: dict[str, Any], req: Request) -> None:
    """The fields a usual request does not have (checked after messages and tools)."""
    req.top_p = opt_num(body.get("top_p"), "top_p")
    req.top_k = opt_int(body.get("top_k"), "top_k")
    stop = body.get("stop")
    if isinstance(stop, str):
        req.stop = [stop]
    elif isinstance(stop, list):
        req.stop = [req_str(s, "stop", j) for j, s in enumerate(stop)]
    elif stop is not None:
        raise expected("a string or an array of strings", stop, "stop")
    req.seed = opt_int(body.get("seed"), "seed")
    effort = opt_str(body.get("reasoning_effort"), "reasoning_effort")
    if effort is not None:
        req.reasoning = ReasoningConfig(effort=effort, disabled=effort == "none")
    rz = opt_obj(body.get("reasoning"), "reasoning")  # OpenRouter style
    if rz is not None:
        rc = req.reasoning or ReasoningConfig()
        if isinstance(rz.get("effort"), str) and rc.effort is None:
            rc.effort = rz["effort"]
        mx = rz.get("max_tokens")
        if is_json_int(mx):
            rc.budget_tokens = mx
        if rz.get("enabled") is False or rc.effort == "none":
            rc.disabled = True
        req.reasoning = rc
    th = body.get("thinking")  # Z.ai / DeepSeek style
    if isinstance(th, dict) and th.get("type") in ("enabled", "disabled") and req.reasoning is None:
        req.reasoning = ReasoningConfig(disabled=th.get("type") == "disabled")
    sid = opt_str(body.get("safety_identifier"), "safety_identifier")
    if req.user is None:
        req.user = sid


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    if not isinstance(body, dict):
        raise expected("an object", body, "body")
    rare = not body.keys() <= _USUAL
    req = Request()
    v = body.get("model")
    if v is not None:
        req.model = opt_str(v, "model")
    if rare:
        n = opt_int(body.get("n"), "n")
        if n is not None and n > 1:
            fail("only one choice can be translated", "n")
        mods = body.get("modalities")
        if isinstance(mods, list) and "audio" in mods or body.get("audio") is not None:
            fail("audio output cannot be translated", "audio" if body.get("audio") is not None else "modalities")
    _decode_messages(body.get("messages"), req, warnings)
    v = body.get("tools")
    if v is not None:
        _decode_tools(v, req)
    if rare:
        funcs = body.get("functions")  # legacy
        if funcs is not None:
            for j, f in enumerate(req_list(funcs, "functions")):
                req_obj(f, "functions", j)
            _decode_tools([{"type": "function", "function": f} for f in funcs], req, "functions")
    v = body.get("tool_choice")
    if v is not None:
        req.tool_choice = _decode_tool_choice(v)
    if rare:
        fc = body.get("function_call")
        if req.tool_choice is None and fc is not None:
            if isinstance(fc, dict):
                req.tool_choice = _named_choice({"type": "function", "function": fc}, "function_call")
            else:
                req.tool_choice = _decode_tool_choice(fc, "function_call")
    v = body.get("parallel_tool_calls")
    if v is not None:
        req.parallel_tool_calls = opt_bool(v, "parallel_tool_calls")
    v = body.get("max_completion_tokens")
    if v is not None:
        req.max_output_tokens = opt_int(v, "max_completion_tokens")
    v = body.get("max_tokens")
    if v is not None:
        mt = opt_int(v, "max_tokens")
        if req.max_output_tokens is None:
            req.max_output_tokens = mt
    v = body.get("temperature")
    if v is not None:
        req.temperature = opt_num(v, "temperature")
    v = body.get("response_format")
    if v is not None:
        req.output_format = _decode_response_format(v)
    v = body.get("stream")
    if v is not None:
        req.stream = v if isinstance(v, bool) else bool(opt_bool(v, "stream"))
    v = body.get("stream_options")
    if v is not None:
        req.include_usage = bool(req_obj(v, "stream_options").get("include_usage"))
    v = body.get("user")
    if v is not None:
        req.user = opt_str(v, "user")
    if rare:
        _decode_rare(body, req)
    read_tail(body, req, warnings, _TAIL)
    wso = req.extra.get("web_search_options") if req.extra else None
    if isinstance(wso, dict):
        req.web_search = web_search_tool(wso)
    return req


# ============================================================================= encode
def _custom_params(t: Tool) -> dict[str, Any]:
    desc = "The raw input for this tool (free text, not JSON)."
    fmt = t.format
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        syntax = fmt.get("syntax")
        definition = fmt.get("definition")
        desc += f" It must follow this {syntax or fmt.get('type')} grammar:\n{definition}" \
            if definition else f" Format: {dumps(fmt).decode()}"
    return {"type": "object", "properties": {"input": {"type": "string", "description": desc}},
            "required": ["input"], "additionalProperties": False}


def _encode_tool(t: Tool) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": short_tool_name(t.name)}
    if t.kind == "custom":
        fn["description"] = (t.description + "\n\n" if t.description else "") + \
            "Call this tool with a JSON object whose only field `input` holds the raw tool input."
        fn["parameters"] = _custom_params(t)
        return {"type": "function", "function": fn}
    if t.description is not None:
        fn["description"] = t.description
    if t.parameters is not None:
        fn["parameters"] = t.parameters
    if t.strict is not None:
        fn["strict"] = t.strict
    return {"type": "function", "function": fn}


def _encode_tool_choice(tc: ToolChoice) -> Any:
    if tc.mode in ("auto", "none", "required"):
        return tc.mode
    if tc.mode == "tool":
        return {"type": "function", "function": {"name": short_tool_name(tc.name or "")}}
    return {"type": "allowed_tools", "allowed_tools": {
        "mode": "required" if tc.allowed_required else "auto",
        "tools": [{"type": "function", "function": {"name": short_tool_name(n)}} for n in tc.allowed or []],
    }}


def _effort(rc: ReasoningConfig, warnings: list[str]) -> str | None:
    if rc.effort:
        e = rc.effort
        if e == "max":
            warnings.append("reasoning effort 'max' sent as 'xhigh' (the highest Chat effort)")
            return "xhigh"
        if e not in EFFORTS:
            warnings.append(f"reasoning effort {e!r} is not a Chat value; sent unchanged")
        return e
    if rc.disabled:
        return None
    if rc.budget_tokens is not None:
        return effort_for_budget(rc.budget_tokens)
    return None


def _text_part(t: Text) -> dict[str, Any]:
    # cache_control hints are not sent: OpenAI caches automatically and rejects unknown part keys
    return {"type": "text", "text": t.text}


def _image_part(img: Image, path: str) -> dict[str, Any]:
    if img.source == "base64":
        url = f"data:{img.media_type or 'image/png'};base64,{img.data or ''}"
    elif img.source == "url" and img.url:
        url = img.url
    else:
        raise invalid("an image given by file id cannot be sent to a Chat Completions upstream", path)
    iu: dict[str, Any] = {"url": url}
    if img.detail:
        iu["detail"] = img.detail
    return {"type": "image_url", "image_url": iu}


def _text_file(text: str, doc: Document, warnings: list[str]) -> dict[str, Any]:
    """A text file as a text part: Chat file parts take PDF files only, so the file must become
    text (its title first), and the client is told its file did not stay a file."""
    msg = (f"{doc.media_type or 'text/plain'} files were sent as text parts (Chat Completions has no "
           "file part for text: its file parts take PDF only)")
    if msg not in warnings:
        warnings.append(msg)
    return {"type": "text", "text": f"{doc.title}\n\n{text}" if doc.title else text}


def _document_part(doc: Document, path: str, warnings: list[str]) -> dict[str, Any]:
    if doc.source == "text":
        return _text_file(doc.data or "", doc, warnings)
    if doc.source == "base64":
        mt = doc.media_type or "application/pdf"
        if mt.startswith("text/"):
            try:
                decoded: str | None = base64.b64decode(doc.data or "", validate=False).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                decoded = None
            if decoded is not None:
                return _text_file(decoded, doc, warnings)
        f: dict[str, Any] = {"file_data": f"data:{mt};base64,{doc.data or ''}",
                             "filename": doc.filename or doc.title or
                             ("document.pdf" if mt == "application/pdf" else "document")}
        return {"type": "file", "file": f}
    if doc.source == "file" and doc.file_id:
        f = {"file_id": doc.file_id}
        if doc.filename:
            f["filename"] = doc.filename
        return {"type": "file", "file": f}
    raise invalid("a document given by URL cannot be sent to a Chat Completions upstream", path)


def _user_message(buf: list[Any], name: str | None) -> dict[str, Any]:
    """``buf``: text strings and other content parts, in order; one text travels as a string."""
    b0 = buf[0]
    if len(buf) == 1 and (isinstance(b0, str) or b0["type"] == "text" and len(b0) == 2):
        content: Any = b0 if isinstance(b0, str) else b0["text"]
    else:
        content = [{"type": "text", "text": x} if isinstance(x, str) else x for x in buf]
    if name:
        return {"role": "user", "content": content, "name": name}
    return {"role": "user", "content": content}


def _encode_user(msg: Message, parts: list[Any], i: int, out: list[dict[str, Any]], warnings: list[str]) -> None:
    buf: list[Any] = []
    moved: list[dict[str, Any]] | None = None  # media of the preceding tool results: first in the next user message
    for p in parts:
        if isinstance(p, Text):
            if moved:
                buf += moved
                moved = None
            buf.append(p.text)
            continue
        if isinstance(p, ToolResult):
            if buf:
                out.append(_user_message(buf, msg.name))
                buf = []
            moved = _encode_tool_result(p, moved, out, warnings, i, parts)
            continue
        if moved:
            buf += moved
            moved = None
        if isinstance(p, Image):
            buf.append(_image_part(p, where("messages", i, "parts", parts.index(p))))
        elif isinstance(p, Document):
            buf.append(_document_part(p, where("messages", i, "parts", parts.index(p)), warnings))
        elif isinstance(p, Opaque) and p.protocol == PROTOCOL:
            buf.append(p.raw)
        elif isinstance(p, Opaque):
            warnings.append(f"{where('messages', i, 'parts', parts.index(p))}: "
                            f"{p.label or p.raw.get('type') or 'provider'} part from {p.protocol} "
                            "dropped (Chat Completions cannot carry it)")
        else:
            warnings.append(f"{where('messages', i, 'parts', parts.index(p))}: {p.type} part in a user message "
                            "dropped")
    if moved:
        buf += moved
    if buf:
        out.append(_user_message(buf, msg.name))


def _encode_tool_result(tr: ToolResult, moved: list[dict[str, Any]] | None, out: list[dict[str, Any]], warnings: list[str],
                        i: int, parts: list[Any]) -> list[dict[str, Any]] | None:
    """A tool message into ``out``; its images/files are added to ``moved`` (Chat tool messages carry
    text only), which is returned (None while there are none)."""
    content: Any = None  # one text: a string; several: a list of strings
    media: list[dict[str, Any]] | None = None
    for c in tr.content:
        if isinstance(c, Text):
            t = c.text
        else:
            path = where("messages", i, "parts", parts.index(tr), "content", tr.content.index(c))
            if isinstance(c, Image):
                media = (media or []) + [_image_part(c, path)]
                continue
            if not isinstance(c, Document):
                continue
            d = _document_part(c, path, warnings)
            if d["type"] != "text":
                media = (media or []) + [d]
                continue
            t = d["text"]
        if content is None:
            content = t
        elif isinstance(content, str):
            content = [content, t]
        else:
            content.append(t)
    if media:
        moved = (moved or []) + [{"type": "text", "text": f"[content returned by tool call {tr.call_id}]"}] + media
        warnings.append(f"{where('messages', i, 'parts', parts.index(tr))}: images/files of tool result "
                        f"{tr.call_id} moved to a following user message (Chat tool messages carry text only)")
    if tr.is_error:
        warnings.append(f"{where('messages', i, 'parts', parts.index(tr))}: is_error of tool result {tr.call_id} "
                        "dropped (Chat has no error flag)")
    if content is None:
        content = "(see the following user message)" if media else ""
    elif isinstance(content, list):
        content = [{"type": "text", "text": t} for t in content]
    out.append({"role": "tool", "tool_call_id": tr.call_id, "content": content})
    return moved


def _encode_assistant(msg: Message, parts: list[Any], i: int, names: dict[str, str],
                      warnings: list[str]) -> dict[str, Any]:
    """``names``: tool name -> its short name, filled as met."""
    text: str | None = None
    calls: list[dict[str, Any]] | None = None
    refusals: list[str] | None = None
    rfields: dict[str, list[str]] | None = None
    details: list[Any] | None = None
    thinking_parts: list[dict[str, Any]] | None = None
    for p in parts:
        if isinstance(p, Text):
            text = p.text if text is None else text + p.text
        elif isinstance(p, ToolCall):
            args = p.arguments or "{}" if p.kind != "custom" else orjson.dumps(
                {"input": p.arguments}).decode()
            name = names.get(p.name)
            if name is None:
                name = names[p.name] = short_tool_name(p.name)
            call = {"id": p.id, "type": "function", "function": {"name": name, "arguments": args}}
            if calls is None:
                calls = [call]
            else:
                calls.append(call)
        elif isinstance(p, Refusal):
            refusals = (refusals or []) + [p.text]
        elif isinstance(p, Reasoning):
            op = p.opaque
            if op is not None and op.get("protocol") == PROTOCOL:
                field = op.get("field") or "reasoning_content"
                if field == "content_thinking":
                    thinking_parts = (thinking_parts or []) + [
                        {"type": "thinking", "thinking": [{"type": "text", "text": p.text}]}]
                else:
                    if field not in ("reasoning_content", "reasoning"):
                        field = "reasoning_content"
                    rfields = rfields or {}
                    rfields.setdefault(field, []).append(p.text)
                if isinstance(op.get("details"), list):
                    details = (details or []) + op["details"]
            else:
                issuer = op.get("protocol") if op else "an unknown issuer"
                # (the path as where() spells it: this warning comes on every turn of some histories)
                warnings.append(f"messages[{i}].parts[{parts.index(p)}]: reasoning issued by {issuer} dropped "
                                "(a Chat Completions upstream cannot verify it)")
        elif isinstance(p, Opaque):
            warnings.append(f"{where('messages', i, 'parts', parts.index(p))}: "
                            f"{p.label or p.raw.get('type') or 'provider'} part from {p.protocol} "
                            "dropped (Chat Completions cannot carry it)")
        else:
            warnings.append(f"{where('messages', i, 'parts', parts.index(p))}: {p.type} part in an assistant "
                            "message dropped")
    m: dict[str, Any] = {"role": "assistant"}
    if thinking_parts:
        m["content"] = thinking_parts + ([{"type": "text", "text": text}] if text else [])
    elif text is not None or not (calls or refusals):
        m["content"] = text or ""
    if refusals:
        m["refusal"] = "".join(refusals)
    if rfields:
        for field, vals in rfields.items():
            m[field] = "".join(vals)
    if details:
        m["reasoning_details"] = details
    if calls:
        m["tool_calls"] = calls
    if msg.name:
        m["name"] = msg.name
    return m


def _system_message(role: str, texts: list[Text]) -> dict[str, Any]:
    return {"role": role, "content": texts[0].text if len(texts) == 1 else "\n\n".join([t.text for t in texts])}


def _extra_checks(ex: dict[str, Any], warnings: list[str], ws: WebSearchTool | None) -> list[dict[str, Any]]:
    """Reject or warn about other protocols' server-side features; the Chat gateway tools to keep."""
    st = ex.get("server_tools")
    if isinstance(st, list) and ws is not None:
        st = [t for t in st if t is not ws.raw]  # (translated to web_search_options)
    chat_server_tools: list[dict[str, Any]] = []
    if isinstance(st, list):
        # gateway tools of Chat upstreams (openrouter:web_search) stay; other providers' go
        chat_server_tools = [t for t in st if isinstance(t, dict) and ":" in str(t.get("type", ""))]
        st = [t for t in st if not (isinstance(t, dict) and ":" in str(t.get("type", "")))]
    if st:
        # Same rule as the other encoders: a hosted/server tool of another provider cannot run here;
        # it is dropped with a warning (the model simply does not get that tool), never silently.
        kinds = sorted({str(t.get("type")) if isinstance(t, dict) else str(t) for t in st}) \
            if isinstance(st, list) else [str(st)]
        warnings.append(f"tools: server tool(s) {', '.join(kinds)} dropped: a Chat Completions upstream "
                        "cannot run them")
    if ex.get("previous_response_id"):
        raise TranslationError("previous_response_id: a Chat Completions upstream keeps no server-side "
                               "conversation; send the full input (store=false)", field="previous_response_id")
    if ex.get("conversation"):
        raise TranslationError("conversation: a Chat Completions upstream keeps no server-side conversation; "
                               "send the full input", field="conversation")
    stc = ex.get("server_tool_choice")
    if stc:
        warnings.append(f"tool_choice: hosted tool choice {stc!r} dropped (the tool is not available)")
    return chat_server_tools


def encode_request(req: Request, warnings: list[str]) -> dict[str, Any]:
    ex = req.extra
    chat_server_tools = _extra_checks(ex, warnings, req.web_search) if ex else []
    body: dict[str, Any] = {}
    if req.model is not None:
        body["model"] = req.model
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append(_system_message(req.system_role, req.system))
    names: dict[str, str] = {}  # tool name -> its short name, worked out once per request
    for i, msg in enumerate(req.messages):
        parts = msg.parts
        if len(parts) == 1 and isinstance(parts[0], Text):
            # one plain text part: the content is that string, whatever the role
            text = parts[0].text
            name = msg.name
            messages.append({"role": msg.role, "content": text, "name": name} if name else
                            {"role": msg.role, "content": text})
            continue
        role = msg.role
        if role == "assistant":
            messages.append(_encode_assistant(msg, parts, i, names, warnings))
            continue
        if role != "system" and role != "developer":
            _encode_user(msg, parts, i, messages, warnings)
            continue
        texts = [p for p in parts if isinstance(p, Text)]
        if len(texts) != len(parts):
            warnings.append(f"messages[{i}]: non-text parts of a {role} message dropped")
        if texts:
            m = _system_message(role, texts)
            if msg.name:
                m["name"] = msg.name
            messages.append(m)
    body["messages"] = messages
    if req.tools or chat_server_tools:
        # OpenAI rejects tool_choice / parallel_tool_calls without tools (400)
        body["tools"] = [_encode_tool(t) for t in req.tools] + chat_server_tools
        if req.tool_choice is not None:
            body["tool_choice"] = _encode_tool_choice(req.tool_choice)
        if req.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.max_output_tokens is not None:
        body["max_completion_tokens"] = req.max_output_tokens
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.top_k is not None:
        warnings.append("top_k dropped (Chat Completions has no top_k)")
    if req.stop:
        body["stop"] = list(req.stop)
    if req.seed is not None:
        body["seed"] = req.seed
    if req.reasoning is not None:
        rc = req.reasoning
        e = _effort(rc, warnings)
        if e is not None:
            body["reasoning_effort"] = e
        elif rc.disabled:
            warnings.append("disabled reasoning not sent (Chat reasoning_effort has no portable 'off')")
    of = req.output_format
    if of is not None:
        if of.type == "json_schema":
            js: dict[str, Any] = {"name": of.name or "response"}
            if of.description is not None:
                js["description"] = of.description
            if of.schema is not None:
                js["schema"] = of.schema
            if of.strict is not None:
                js["strict"] = of.strict
            body["response_format"] = {"type": "json_schema", "json_schema": js}
        elif of.type == "json_object":
            body["response_format"] = {"type": "json_object"}
        else:
            body["response_format"] = {"type": "text"}
    if req.user is not None and req.user != ex.get("safety_identifier"):
        body["user"] = req.user
    if req.metadata:
        if ex.get("store") is not True:
            # OpenAI: "The 'metadata' parameter is only allowed when 'store' is enabled." (400)
            warnings.append("metadata not sent (Chat accepts it only with store: true)")
        elif all(isinstance(v, str) for v in req.metadata.values()):
            body["metadata"] = req.metadata
        else:
            warnings.append("metadata dropped (Chat metadata values must be strings)")
    if ex:
        for k in _EXTRA_KEYS:
            v = ex.get(k)
            if v is not None:
                body[k] = v
    if req.web_search is not None and "web_search_options" not in body:
        wso = web_search_options(req.web_search, req.model, warnings)
        if wso is not None:
            body["web_search_options"] = wso
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body
