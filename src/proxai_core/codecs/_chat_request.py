"""Chat Completions requests: client body -> neutral, neutral -> upstream body (private).

Budget -> effort table (inverse of the Anthropic codec's effort -> budget table
minimal 1024, low 2048, medium 8192, high 16384, xhigh 32768): the largest effort whose budget
does not exceed the given budget, so effort -> budget -> effort is the identity. Below 1024 the
effort is "minimal".
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

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
from ._chat_common import PROTOCOL, reasoning_parts, thinking_text
from ._request_common import Tail, read_tail

_BUDGET_EFFORT = ((32768, "xhigh"), (16384, "high"), (8192, "medium"), (2048, "low"))
_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh"})

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


def _err(path: str, why: str) -> TranslationError:
    return TranslationError(f"{path}: {why}", field=path)


def _tname(v: Any) -> str:
    return "null" if v is None else type(v).__name__


# ============================================================================= decode
def _opt(body: dict, key: str, types: tuple[type, ...], what: str) -> Any:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) and bool not in types:
        raise _err(key, f"expected {what}, got {_tname(v)}")
    if not isinstance(v, types):
        raise _err(key, f"expected {what}, got {_tname(v)}")
    return v


def _parse_data_url(url: str) -> tuple[str | None, str] | None:
    """``data:<mt>;base64,<data>`` -> (media type, data); None when not a base64 data URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    mt = head[: -len(";base64")] or None
    return mt, data


def _text_of(part: dict, path: str) -> str:
    t = part.get("text")
    if not isinstance(t, str):
        raise _err(f"{path}.text", f"expected a string, got {_tname(t)}")
    return t


def _decode_image(part: dict, path: str) -> Image:
    iu = part.get("image_url")
    if isinstance(iu, str):
        url, detail = iu, None
    elif isinstance(iu, dict):
        url, detail = iu.get("url"), iu.get("detail")
        if not isinstance(url, str):
            raise _err(f"{path}.image_url.url", f"expected a string, got {_tname(url)}")
        if detail is not None and not isinstance(detail, str):
            raise _err(f"{path}.image_url.detail", f"expected a string, got {_tname(detail)}")
    else:
        raise _err(f"{path}.image_url", f"expected an object, got {_tname(iu)}")
    du = _parse_data_url(url)
    if du is not None:
        return Image(source="base64", media_type=du[0], data=du[1], detail=detail)
    return Image(source="url", url=url, detail=detail)


def _decode_file(part: dict, path: str) -> Document:
    f = part.get("file")
    if not isinstance(f, dict):
        raise _err(f"{path}.file", f"expected an object, got {_tname(f)}")
    filename = f.get("filename")
    if filename is not None and not isinstance(filename, str):
        raise _err(f"{path}.file.filename", f"expected a string, got {_tname(filename)}")
    fd = f.get("file_data")
    if fd is not None:
        if not isinstance(fd, str):
            raise _err(f"{path}.file.file_data", f"expected a string, got {_tname(fd)}")
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
    raise _err(f"{path}.file", "needs file_data or file_id")


#: Vendor content parts a Chat upstream may understand but no other protocol can carry: kept as
#: Opaque parts (a Chat encoder sends them back unchanged; other encoders drop them with a warning).
_VENDOR_PARTS = frozenset({"video_url", "input_video"})


def _decode_user_part(part: Any, path: str) -> Text | Image | Document | Opaque:
    if not isinstance(part, dict):
        raise _err(path, f"expected an object, got {_tname(part)}")
    t = part.get("type")
    if t == "text":
        return Text(_text_of(part, path), cache_control=part.get("cache_control"))
    if t == "image_url":
        img = _decode_image(part, path)
        img.cache_control = part.get("cache_control")
        return img
    if t == "file":
        doc = _decode_file(part, path)
        doc.cache_control = part.get("cache_control")
        return doc
    if t == "input_audio":
        raise _err(path, "input_audio (audio input) cannot be translated")
    if t in _VENDOR_PARTS:
        return Opaque(PROTOCOL, part, label=t)
    if not isinstance(t, str):
        raise _err(f"{path}.type", f"expected a string, got {_tname(t)}")
    raise _err(f"{path}.type", f"unknown or untranslatable content part type {t!r}")


def _decode_text_content(content: Any, path: str) -> list[Text]:
    if isinstance(content, str):
        return [Text(content)]
    if isinstance(content, list):
        out = []
        for j, p in enumerate(content):
            pp = f"{path}[{j}]"
            if not isinstance(p, dict):
                raise _err(pp, f"expected an object, got {_tname(p)}")
            if p.get("type") != "text":
                raise _err(f"{pp}.type", f"expected 'text', got {p.get('type')!r}")
            out.append(Text(_text_of(p, pp), cache_control=p.get("cache_control")))
        return out
    raise _err(path, f"expected a string or a list of text parts, got {_tname(content)}")


def _decode_tool_call(tc: Any, path: str) -> ToolCall:
    if not isinstance(tc, dict):
        raise _err(path, f"expected an object, got {_tname(tc)}")
    tid = tc.get("id")
    if not isinstance(tid, str):
        raise _err(f"{path}.id", f"expected a string, got {_tname(tid)}")
    ttype = tc.get("type") or "function"
    if ttype == "custom":
        c = tc.get("custom")
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise _err(f"{path}.custom", "expected an object with a string name")
        inp = c.get("input")
        if inp is not None and not isinstance(inp, str):
            raise _err(f"{path}.custom.input", f"expected a string, got {_tname(inp)}")
        return ToolCall(tid, c["name"], inp or "", kind="custom")
    if ttype != "function":
        raise _err(f"{path}.type", f"unknown tool call type {ttype!r}")
    fn = tc.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _err(f"{path}.function", "expected an object with a string name")
    args = fn.get("arguments")
    if args is None:
        args = ""
    elif isinstance(args, (dict, list)):
        args = dumps(args).decode()
    elif not isinstance(args, str):
        raise _err(f"{path}.function.arguments", f"expected a string, got {_tname(args)}")
    return ToolCall(tid, fn["name"], args)


def _decode_assistant(m: dict, path: str, i: int, kinds: dict[str, str]) -> Message:
    parts: list[Any] = []
    # reasoning first (it precedes the answer)
    for field in ("reasoning_content", "reasoning"):
        v = m.get(field)
        if v is not None and not isinstance(v, str):
            raise _err(f"{path}.{field}", f"expected a string, got {_tname(v)}")
    rfield = "reasoning_content" if isinstance(m.get("reasoning_content"), str) else "reasoning"
    rtext = m.get(rfield)
    parts.extend(reasoning_parts(rtext, rfield, m.get("reasoning_details")))
    content = m.get("content")
    if isinstance(content, str):
        if content:
            parts.append(Text(content))
    elif isinstance(content, list):
        for j, p in enumerate(content):
            pp = f"{path}.content[{j}]"
            if not isinstance(p, dict):
                raise _err(pp, f"expected an object, got {_tname(p)}")
            t = p.get("type")
            if t == "text":
                parts.append(Text(_text_of(p, pp), cache_control=p.get("cache_control")))
            elif t == "refusal":
                r = p.get("refusal")
                if not isinstance(r, str):
                    raise _err(f"{pp}.refusal", f"expected a string, got {_tname(r)}")
                parts.append(Refusal(r))
            elif t == "thinking":  # Mistral thinking part
                parts.append(Reasoning(text=thinking_text(p.get("thinking")),
                                       opaque={"protocol": PROTOCOL, "field": "content_thinking"}))
            else:
                raise _err(f"{pp}.type", f"unknown assistant content part type {t!r}")
    elif content is not None:
        raise _err(f"{path}.content", f"expected a string, a list or null, got {_tname(content)}")
    refusal = m.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        raise _err(f"{path}.refusal", f"expected a string, got {_tname(refusal)}")
    if refusal:
        parts.append(Refusal(refusal))
    if m.get("audio") is not None:
        raise _err(f"{path}.audio", "audio output in the history cannot be translated")
    tcs = m.get("tool_calls")
    if tcs is not None:
        if not isinstance(tcs, list):
            raise _err(f"{path}.tool_calls", f"expected a list, got {_tname(tcs)}")
        for j, tc in enumerate(tcs):
            call = _decode_tool_call(tc, f"{path}.tool_calls[{j}]")
            kinds[call.id] = call.kind
            parts.append(call)
    fc = m.get("function_call")
    if isinstance(fc, dict) and isinstance(fc.get("name"), str) and fc["name"]:
        args = fc.get("arguments")
        call = ToolCall(f"call_legacy_{i}", fc["name"], args if isinstance(args, str) else "")
        kinds[call.id] = "function"
        parts.append(call)
    elif fc is not None and not isinstance(fc, dict):
        raise _err(f"{path}.function_call", f"expected an object, got {_tname(fc)}")
    name = m.get("name")
    return Message("assistant", parts, name=name if isinstance(name, str) else None)


def _decode_tool_message(m: dict, path: str, kinds: dict[str, str]) -> ToolResult:
    cid = m.get("tool_call_id")
    if not isinstance(cid, str):
        raise _err(f"{path}.tool_call_id", f"expected a string, got {_tname(cid)}")
    content = m.get("content")
    parts: list[Text | Image | Document] = []
    if isinstance(content, str):
        parts.append(Text(content))
    elif isinstance(content, list):
        for j, p in enumerate(content):
            parts.append(_decode_user_part(p, f"{path}.content[{j}]"))
    elif content is not None:
        raise _err(f"{path}.content", f"expected a string or a list of parts, got {_tname(content)}")
    return ToolResult(cid, parts, kind=kinds.get(cid, "function"))  # type: ignore[arg-type]


#: Assistant message fields that need the full decoder when set (reasoning, refusals, audio, legacy call).
_ASSISTANT_SLOW = ("reasoning_content", "reasoning", "reasoning_details", "refusal", "audio", "function_call")
_ASSISTANT_PLAIN = frozenset({"role", "content", "tool_calls", "name"})


def _fast_tool_call_in(tc: Any) -> ToolCall | None:
    """A plain function call with string arguments, else None (``_decode_tool_call`` decides)."""
    if tc.__class__ is not dict:
        return None
    tid = tc.get("id")
    tt = tc.get("type")
    fn = tc.get("function")
    if tid.__class__ is not str or (tt != "function" and tt is not None) or fn.__class__ is not dict:
        return None
    name = fn.get("name")
    args = fn.get("arguments")
    if name.__class__ is not str or (args.__class__ is not str and args is not None):
        return None
    return ToolCall(tid, name, args or "")


def _fast_assistant_in(m: dict, kinds: dict[str, str]) -> Message | None:
    """``_decode_assistant`` for text content and plain function calls, else None."""
    if not m.keys() <= _ASSISTANT_PLAIN:
        for k in _ASSISTANT_SLOW:
            if m.get(k) is not None:
                return None
    content = m.get("content")
    if content.__class__ is str:
        parts: list[Any] = [Text(content)] if content else []
    elif content is None:
        parts = []
    else:
        return None
    tcs = m.get("tool_calls")
    if tcs is not None:
        if tcs.__class__ is not list:
            return None
        calls = [_fast_tool_call_in(tc) for tc in tcs]
        if not all(calls):  # a None (parts are always truthy)
            return None
        for call in calls:
            kinds[call.id] = "function"  # type: ignore[union-attr]
        parts += calls
    name = m.get("name")
    return Message("assistant", parts, name if isinstance(name, str) else None)


def _fast_user_part_in(p: Any) -> Text | None:
    if p.__class__ is dict and p.get("type") == "text":
        t = p.get("text")
        if t.__class__ is str:
            return Text(t, None, p.get("cache_control"))
    return None


def _decode_messages(msgs: Any, req: Request, warnings: list[str]) -> None:
    if not isinstance(msgs, list):
        raise _err("messages", f"expected a list, got {_tname(msgs)}")
    kinds: dict[str, str] = {}
    leading = True
    tool_turn = False  # the last message is a user turn of tool results only (the next tool result joins it)
    out = req.messages
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise _err(f"messages[{i}]", f"expected an object, got {_tname(m)}")
        role = m.get("role")
        if role is None:
            raise _err(f"messages[{i}].role", "required")
        if role == "user":
            leading = tool_turn = False
            content = m.get("content")
            if isinstance(content, str):
                parts: list[Any] = [Text(content)]
            elif isinstance(content, list):
                parts = [_fast_user_part_in(p) or _decode_user_part(p, f"messages[{i}].content[{j}]")
                         for j, p in enumerate(content)]
            else:
                raise _err(f"messages[{i}].content",
                           f"expected a string or a list of parts, got {_tname(content)}")
            if m.get("tool_calls"):
                warnings.append(f"messages[{i}].tool_calls on a user message ignored")
            name = m.get("name")
            out.append(Message("user", parts, name if isinstance(name, str) else None))
        elif role == "assistant":
            leading = tool_turn = False
            msg = _fast_assistant_in(m, kinds)
            out.append(msg if msg is not None else _decode_assistant(m, f"messages[{i}]", i, kinds))
        elif role == "tool":
            leading = False
            cid = m.get("tool_call_id")
            content = m.get("content")
            if cid.__class__ is str and content.__class__ is str:
                tr = ToolResult(cid, [Text(content)], None, kinds.get(cid, "function"))  # type: ignore[arg-type]
            else:
                tr = _decode_tool_message(m, f"messages[{i}]", kinds)
            # consecutive tool messages: separate ToolResults, in order, in one user turn
            if tool_turn:
                out[-1].parts.append(tr)
            else:
                out.append(Message("user", [tr]))
                tool_turn = True
        elif role in ("system", "developer"):
            content = m.get("content")
            texts = [Text(content)] if content.__class__ is str else \
                _decode_text_content(content, f"messages[{i}].content")
            if leading and (not req.system or req.system_role == role):
                if not req.system:
                    req.system_role = role
                req.system.extend(texts)
                continue
            leading = tool_turn = False
            name = m.get("name")
            out.append(Message(role, texts, name if isinstance(name, str) else None))
        elif role == "function":
            raise _err(f"messages[{i}].role", "legacy role 'function' cannot be translated; use tool messages "
                                              "with tool_call_id")
        elif isinstance(role, str):
            raise _err(f"messages[{i}].role", f"unknown role {role!r}")
        else:
            raise _err(f"messages[{i}].role", f"expected a string, got {_tname(role)}")


def _decode_tools(tools: Any, req: Request, key: str = "tools") -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _err(key, f"expected a list, got {_tname(tools)}")
    for i, t in enumerate(tools):
        if t.__class__ is dict and t.get("type", "function") == "function":
            fn = t.get("function")
            if fn.__class__ is dict:
                name = fn.get("name")
                params = fn.get("parameters")
                if name.__class__ is str and (params is None or params.__class__ is dict):
                    desc = fn.get("description")
                    strict = fn.get("strict")
                    req.tools.append(Tool(name, desc if isinstance(desc, str) else None, params,
                                          "function", strict if isinstance(strict, bool) else None, None,
                                          t.get("cache_control")))
                    continue
        path = f"{key}[{i}]"
        if not isinstance(t, dict):
            raise _err(path, f"expected an object, got {_tname(t)}")
        ttype = t.get("type", "function")
        if ttype == "function":
            fn = t.get("function")
            if not isinstance(fn, dict):
                raise _err(f"{path}.function", f"expected an object, got {_tname(fn)}")
            name = fn.get("name")
            if not isinstance(name, str):
                raise _err(f"{path}.function.name", f"expected a string, got {_tname(name)}")
            params = fn.get("parameters")
            if params is not None and not isinstance(params, dict):
                raise _err(f"{path}.function.parameters", f"expected an object, got {_tname(params)}")
            desc = fn.get("description")
            strict = fn.get("strict")
            req.tools.append(Tool(name, desc if isinstance(desc, str) else None, params,
                                  strict=strict if isinstance(strict, bool) else None,
                                  cache_control=t.get("cache_control")))
        elif ttype == "custom":
            c = t.get("custom")
            if not isinstance(c, dict):
                raise _err(f"{path}.custom", f"expected an object, got {_tname(c)}")
            name = c.get("name")
            if not isinstance(name, str):
                raise _err(f"{path}.custom.name", f"expected a string, got {_tname(name)}")
            fmt = c.get("format")
            if fmt is not None and not isinstance(fmt, dict):
                raise _err(f"{path}.custom.format", f"expected an object, got {_tname(fmt)}")
            desc = c.get("description")
            req.tools.append(Tool(name, desc if isinstance(desc, str) else None, kind="custom", format=fmt))
        elif isinstance(ttype, str):
            # provider-hosted (server) tools, e.g. OpenRouter "openrouter:web_search"
            req.extra.setdefault("server_tools", []).append(t)
        else:
            raise _err(f"{path}.type", f"expected a string, got {_tname(ttype)}")


def _named_choice(obj: dict, path: str) -> ToolChoice:
    t = obj.get("type", "function")
    if t in ("function", "custom"):
        inner = obj.get(t)
        name = inner.get("name") if isinstance(inner, dict) else None
        if not isinstance(name, str):
            raise _err(f"{path}.{t}.name", f"expected a string, got {_tname(name)}")
        return ToolChoice("tool", name=name, kind=t)
    if t == "allowed_tools":
        at = obj.get("allowed_tools")
        if not isinstance(at, dict):
            raise _err(f"{path}.allowed_tools", f"expected an object, got {_tname(at)}")
        mode = at.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise _err(f"{path}.allowed_tools.mode", f"expected 'auto' or 'required', got {mode!r}")
        tl = at.get("tools")
        if not isinstance(tl, list):
            raise _err(f"{path}.allowed_tools.tools", f"expected a list, got {_tname(tl)}")
        names = []
        for j, x in enumerate(tl):
            if not isinstance(x, dict):
                raise _err(f"{path}.allowed_tools.tools[{j}]", f"expected an object, got {_tname(x)}")
            xt = x.get("type", "function")
            inner = x.get(xt)
            name = inner.get("name") if isinstance(inner, dict) else x.get("name")
            if not isinstance(name, str):
                raise _err(f"{path}.allowed_tools.tools[{j}]", "needs a tool name")
            names.append(name)
        return ToolChoice("allowed", allowed=names, allowed_required=mode == "required")
    raise _err(f"{path}.type", f"unknown tool_choice type {t!r}")


def _decode_tool_choice(tc: Any, path: str = "tool_choice") -> ToolChoice | None:
    if tc is None:
        return None
    if isinstance(tc, str):
        if tc in ("auto", "none", "required"):
            return ToolChoice(tc)  # type: ignore[arg-type]
        if tc == "any":  # Mistral's spelling of "required"
            return ToolChoice("required")
        raise _err(path, f"expected 'auto', 'none', 'required' or an object, got {tc!r}")
    if isinstance(tc, dict):
        return _named_choice(tc, path)
    raise _err(path, f"expected a string or an object, got {_tname(tc)}")


def _decode_response_format(rf: Any) -> OutputFormat | None:
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise _err("response_format", f"expected an object, got {_tname(rf)}")
    t = rf.get("type")
    if t in ("text", "json_object"):
        return OutputFormat(t)
    if t == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise _err("response_format.json_schema", f"expected an object, got {_tname(js)}")
        schema = js.get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise _err("response_format.json_schema.schema", f"expected an object, got {_tname(schema)}")
        name = js.get("name")
        strict = js.get("strict")
        desc = js.get("description")
        return OutputFormat("json_schema", schema=schema, name=name if isinstance(name, str) else None,
                            strict=strict if isinstance(strict, bool) else None,
                            description=desc if isinstance(desc, str) else None)
    raise _err("response_format.type", f"unknown response format type {t!r}")


#: The fields of a usual request; a body of only these skips the checks of the others.
_USUAL = frozenset({"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "max_completion_tokens",
                    "max_tokens", "temperature", "response_format", "stream", "stream_options", "user",
                    "metadata"})


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    if not isinstance(body, dict):
        raise _err("body", "request body must be a JSON object")
    get = body.get
    # the usual fields take inline type checks (``_opt`` names the field on a mismatch); the rarer
    # fields are looked at only when the body has any
    rare = not body.keys() <= _USUAL
    req = Request()
    v = get("model")
    if v is not None:
        req.model = v if v.__class__ is str else _opt(body, "model", (str,), "a string")
    if rare:
        n = get("n")
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int):
                raise _err("n", f"expected an integer, got {_tname(n)}")
            if n > 1:
                raise _err("n", "only one choice can be translated")
        mods = get("modalities")
        if isinstance(mods, list) and "audio" in mods or get("audio") is not None:
            raise _err("audio" if get("audio") is not None else "modalities",
                       "audio output cannot be translated")
    _decode_messages(get("messages"), req, warnings)
    v = get("tools")
    if v is not None:
        _decode_tools(v, req)
    if rare:
        funcs = get("functions")  # legacy
        if funcs is not None:
            if not isinstance(funcs, list):
                raise _err("functions", f"expected a list, got {_tname(funcs)}")
            for j, f in enumerate(funcs):
                if not isinstance(f, dict):
                    raise _err(f"functions[{j}]", f"expected an object, got {_tname(f)}")
            _decode_tools([{"type": "function", "function": f} for f in funcs], req, "functions")
    v = get("tool_choice")
    if v is not None:
        req.tool_choice = ToolChoice(v) if v == "auto" else _decode_tool_choice(v)  # type: ignore[arg-type]
    if rare:
        fc = get("function_call")
        if req.tool_choice is None and fc is not None:
            if isinstance(fc, dict):
                req.tool_choice = _named_choice({"type": "function", "function": fc}, "function_call")
            else:
                req.tool_choice = _decode_tool_choice(fc, "function_call")
    v = get("parallel_tool_calls")
    if v is not None:
        req.parallel_tool_calls = v if v.__class__ is bool else _opt(body, "parallel_tool_calls", (bool,), "a boolean")
    v = get("max_completion_tokens")
    mct = None if v is None else v if v.__class__ is int else \
        _opt(body, "max_completion_tokens", (int,), "an integer")
    v = get("max_tokens")
    mt = None if v is None else v if v.__class__ is int else _opt(body, "max_tokens", (int,), "an integer")
    req.max_output_tokens = mct if mct is not None else mt
    v = get("temperature")
    if v is not None:
        req.temperature = v if v.__class__ is float or v.__class__ is int else \
            _opt(body, "temperature", (int, float), "a number")
    if rare:
        if get("top_p") is not None:
            req.top_p = _opt(body, "top_p", (int, float), "a number")
        if get("top_k") is not None:
            req.top_k = _opt(body, "top_k", (int,), "an integer")
        stop = get("stop")
        if isinstance(stop, str):
            req.stop = [stop]
        elif isinstance(stop, list):
            for j, s in enumerate(stop):
                if not isinstance(s, str):
                    raise _err(f"stop[{j}]", f"expected a string, got {_tname(s)}")
            req.stop = list(stop)
        elif stop is not None:
            raise _err("stop", f"expected a string or a list of strings, got {_tname(stop)}")
        if get("seed") is not None:
            req.seed = _opt(body, "seed", (int,), "an integer")
        effort = _opt(body, "reasoning_effort", (str,), "a string") if get("reasoning_effort") is not None \
            else None
        if effort is not None:
            req.reasoning = ReasoningConfig(effort=effort, disabled=effort == "none")
        rz = get("reasoning")  # OpenRouter style
        if isinstance(rz, dict):
            rc = req.reasoning or ReasoningConfig()
            if isinstance(rz.get("effort"), str) and rc.effort is None:
                rc.effort = rz["effort"]
            mx = rz.get("max_tokens")
            if isinstance(mx, int) and not isinstance(mx, bool):
                rc.budget_tokens = mx
            if rz.get("enabled") is False or rc.effort == "none":
                rc.disabled = True
            req.reasoning = rc
        elif rz is not None:
            raise _err("reasoning", f"expected an object, got {_tname(rz)}")
        th = get("thinking")  # Z.ai / DeepSeek style
        if isinstance(th, dict) and th.get("type") in ("enabled", "disabled") and req.reasoning is None:
            req.reasoning = ReasoningConfig(disabled=th.get("type") == "disabled")
    v = get("response_format")
    if v is not None:
        req.output_format = _decode_response_format(v)
    v = get("stream")
    if v is not None:
        req.stream = v if v.__class__ is bool else bool(_opt(body, "stream", (bool,), "a boolean"))
    so = get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise _err("stream_options", f"expected an object, got {_tname(so)}")
        req.include_usage = bool(so.get("include_usage"))
    v = get("user")
    user = None if v is None else v if v.__class__ is str else _opt(body, "user", (str,), "a string")
    if rare and get("safety_identifier") is not None:
        sid = _opt(body, "safety_identifier", (str,), "a string")
        req.user = user if user is not None else sid
    else:
        req.user = user
    read_tail(body, req, warnings, _TAIL)
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
        if e not in _EFFORTS:
            warnings.append(f"reasoning effort {e!r} is not a Chat value; sent unchanged")
        return e
    if rc.disabled:
        return None
    if rc.budget_tokens is not None:
        for limit, name in _BUDGET_EFFORT:
            if rc.budget_tokens >= limit:
                return name
        return "minimal"
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
        raise _err(path, "an image given by file id cannot be sent to a Chat Completions upstream")
    iu: dict[str, Any] = {"url": url}
    if img.detail:
        iu["detail"] = img.detail
    return {"type": "image_url", "image_url": iu}


def _document_part(doc: Document, path: str) -> dict[str, Any]:
    if doc.source == "text":
        text = doc.data or ""
        if doc.title:
            text = f"{doc.title}\n\n{text}"
        return {"type": "text", "text": text}
    if doc.source == "base64":
        mt = doc.media_type or "application/pdf"
        if mt.startswith("text/"):
            try:
                text = base64.b64decode(doc.data or "", validate=False).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                text = None
            if text is not None:
                return {"type": "text", "text": f"{doc.title}\n\n{text}" if doc.title else text}
        f: dict[str, Any] = {"file_data": f"data:{mt};base64,{doc.data or ''}",
                             "filename": doc.filename or doc.title or
                             ("document.pdf" if mt == "application/pdf" else "document")}
        return {"type": "file", "file": f}
    if doc.source == "file" and doc.file_id:
        f = {"file_id": doc.file_id}
        if doc.filename:
            f["filename"] = doc.filename
        return {"type": "file", "file": f}
    raise _err(path, "a document given by URL cannot be sent to a Chat Completions upstream")


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0]["type"] == "text" and len(parts[0]) == 2:
        return parts[0]["text"]
    return parts


def _encode_user(msg: Message, path: str, out: list[dict], warnings: list[str]) -> None:
    buf: list[dict[str, Any]] = []

    def flush() -> None:
        if buf:
            m: dict[str, Any] = {"role": "user", "content": _content(list(buf))}
            if msg.name:
                m["name"] = msg.name
            out.append(m)
            buf.clear()

    moved: list[dict[str, Any]] = []
    for j, p in enumerate(msg.parts):
        pp = f"{path}.parts[{j}]"
        if isinstance(p, ToolResult):
            if buf:
                flush()
            out.append(_encode_tool_result(p, pp, moved, warnings))
            continue
        if moved:  # media from the preceding tool results go first in the following user message
            buf.extend(moved)
            moved.clear()
        if isinstance(p, Text):
            buf.append(_text_part(p))
        elif isinstance(p, Image):
            buf.append(_image_part(p, pp))
        elif isinstance(p, Document):
            buf.append(_document_part(p, pp))
        elif isinstance(p, Opaque):
            if p.protocol == PROTOCOL:
                buf.append(p.raw)
            else:
                warnings.append(f"{pp}: {p.label or p.raw.get('type') or 'provider'} part from {p.protocol} "
                                "dropped (Chat Completions cannot carry it)")
        else:
            warnings.append(f"{pp}: {p.type} part in a user message dropped")
    if moved:
        buf.extend(moved)
    flush()


def _encode_tool_result(tr: ToolResult, path: str, moved: list[dict[str, Any]],
                        warnings: list[str]) -> dict[str, Any]:
    texts: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    for j, c in enumerate(tr.content):
        cp = f"{path}.content[{j}]"
        if isinstance(c, Text):
            texts.append({"type": "text", "text": c.text})
        elif isinstance(c, Image):
            media.append(_image_part(c, cp))
        elif isinstance(c, Document):
            d = _document_part(c, cp)
            (texts if d["type"] == "text" else media).append(d)
    if media:
        moved.append({"type": "text", "text": f"[content returned by tool call {tr.call_id}]"})
        moved.extend(media)
        warnings.append(f"{path}: images/files of tool result {tr.call_id} moved to a following user "
                        "message (Chat tool messages carry text only)")
    if tr.is_error:
        warnings.append(f"{path}: is_error of tool result {tr.call_id} dropped (Chat has no error flag)")
    if not texts:
        content: Any = "" if not media else "(see the following user message)"
    elif len(texts) == 1:
        content = texts[0]["text"]
    else:
        content = texts
    return {"role": "tool", "tool_call_id": tr.call_id, "content": content}


def _encode_assistant(msg: Message, path: str, warnings: list[str]) -> dict[str, Any]:
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    rfields: dict[str, list[str]] = {}
    details: list[Any] = []
    thinking_parts: list[dict[str, Any]] = []
    for j, p in enumerate(msg.parts):
        pp = f"{path}.parts[{j}]"
        if isinstance(p, Text):
            texts.append(p.text)
        elif isinstance(p, ToolCall):
            if p.kind == "custom":
                args = orjson.dumps({"input": p.arguments}).decode()
            else:
                args = p.arguments or "{}"
            calls.append({"id": p.id, "type": "function",
                          "function": {"name": short_tool_name(p.name), "arguments": args}})
        elif isinstance(p, Refusal):
            refusals.append(p.text)
        elif isinstance(p, Reasoning):
            op = p.opaque
            if op is not None and op.get("protocol") == PROTOCOL:
                field = op.get("field") or "reasoning_content"
                if field == "content_thinking":
                    thinking_parts.append({"type": "thinking", "thinking": [{"type": "text", "text": p.text}]})
                else:
                    if field not in ("reasoning_content", "reasoning"):
                        field = "reasoning_content"
                    rfields.setdefault(field, []).append(p.text)
                if isinstance(op.get("details"), list):
                    details.extend(op["details"])
            else:
                issuer = op.get("protocol") if op else "an unknown issuer"
                warnings.append(f"{pp}: reasoning issued by {issuer} dropped (a Chat Completions upstream "
                                "cannot verify it)")
        elif isinstance(p, Opaque):
            warnings.append(f"{pp}: {p.label or p.raw.get('type') or 'provider'} part from {p.protocol} "
                            "dropped (Chat Completions cannot carry it)")
        else:
            warnings.append(f"{pp}: {p.type} part in an assistant message dropped")
    m: dict[str, Any] = {"role": "assistant"}
    text = "".join(texts)
    if thinking_parts:
        m["content"] = thinking_parts + ([{"type": "text", "text": text}] if text else [])
    elif texts or not (calls or refusals):
        m["content"] = text
    if refusals:
        m["refusal"] = "".join(refusals)
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


def _fast_user_out(msg: Message, out: list[dict[str, Any]]) -> bool:
    """``_encode_user`` for a message of only texts or only plain tool results (no media, no error
    flag): appended to ``out``, True. Anything else: False, nothing appended."""
    parts = msg.parts
    first = parts[0] if parts else None
    if first.__class__ is Text:
        for p in parts:
            if p.__class__ is not Text:
                return False
        m: dict[str, Any] = {"role": "user", "content": first.text if len(parts) == 1 else  # type: ignore[union-attr]
                             [{"type": "text", "text": p.text} for p in parts]}  # type: ignore[union-attr]
        if msg.name:
            m["name"] = msg.name
        out.append(m)
        return True
    if first.__class__ is ToolResult:
        msgs = []
        for p in parts:
            if p.__class__ is not ToolResult or p.is_error:  # type: ignore[union-attr]
                return False
            content = p.content  # type: ignore[union-attr]
            if not content:
                text = ""
            elif len(content) == 1 and content[0].__class__ is Text:
                text = content[0].text  # type: ignore[union-attr]
            else:
                return False
            msgs.append({"role": "tool", "tool_call_id": p.call_id, "content": text})  # type: ignore[union-attr]
        out.extend(msgs)
        return True
    return False


def _fast_assistant_out(msg: Message) -> dict[str, Any] | None:
    """``_encode_assistant`` for a message of only texts and function calls, else None."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for p in msg.parts:
        c = p.__class__
        if c is Text:
            texts.append(p.text)  # type: ignore[union-attr]
        elif c is ToolCall and p.kind == "function":  # type: ignore[union-attr]
            calls.append({"id": p.id, "type": "function",  # type: ignore[union-attr]
                          "function": {"name": short_tool_name(p.name),  # type: ignore[union-attr]
                                       "arguments": p.arguments or "{}"}})  # type: ignore[union-attr]
        else:
            return None
    m: dict[str, Any] = {"role": "assistant"}
    if texts or not calls:
        m["content"] = texts[0] if len(texts) == 1 else "".join(texts)
    if calls:
        m["tool_calls"] = calls
    if msg.name:
        m["name"] = msg.name
    return m


def _extra_checks(ex: dict[str, Any], warnings: list[str]) -> list[dict[str, Any]]:
    """Reject or warn about other protocols' server-side features; the Chat gateway tools to keep."""
    st = ex.get("server_tools")
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
    chat_server_tools = _extra_checks(ex, warnings) if ex else []
    body: dict[str, Any] = {}
    if req.model is not None:
        body["model"] = req.model
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append(_system_message(req.system_role, req.system))
    for i, msg in enumerate(req.messages):
        role = msg.role
        if role == "assistant":
            m = _fast_assistant_out(msg)
            messages.append(m if m is not None else _encode_assistant(msg, f"messages[{i}]", warnings))
            continue
        if role != "system" and role != "developer":
            parts = msg.parts
            if len(parts) == 1 and parts[0].__class__ is Text and not msg.name:  # the usual user turn
                messages.append({"role": "user", "content": parts[0].text})  # type: ignore[union-attr]
            elif not _fast_user_out(msg, messages):
                _encode_user(msg, f"messages[{i}]", messages, warnings)
            continue
        texts = [p for p in msg.parts if isinstance(p, Text)]
        if len(texts) != len(msg.parts):
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
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body
