"""Gemini ``generateContent`` requests: client body -> neutral, neutral -> upstream body (private).

The body carries no model and no stream flag (both live in the URL): the caller sets
``Request.model`` / ``Request.stream`` from :func:`._gemini_common.parse_endpoint`, and the
upstream path from :func:`._gemini_common.endpoint_path`.
"""

from __future__ import annotations

import base64
import mimetypes
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
    WebSearchCall,
    WebSearchResults,
)
from ._gemini_common import (
    MINTED_PREFIX,
    PACKED_HEAD,
    PROTOCOL,
    SKIP_SIGNATURE,
    is_packed_signature,
    mint_call_id,
    unpack_signature,
    warn_once,
    web_search_tool,
    web_search_tool_wire,
)
from ._request_common import web_search_as_opaque

_KNOWN = frozenset({"contents", "systemInstruction", "tools", "toolConfig",
                    "generationConfig", "safetySettings", "cachedContent", "labels", "model"})
#: the fields of a usual request; a body of only these skips the checks of the others
_USUAL = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"})
#: generationConfig fields read into the neutral request; the rest are kept for a Gemini target
_GEN_READ = frozenset({"maxOutputTokens", "temperature", "topP", "topK", "stopSequences", "seed", "candidateCount",
                       "responseMimeType", "responseSchema", "responseJsonSchema", "thinkingConfig",
                       "presencePenalty", "frequencyPenalty"})
#: the sampling fields most requests set; a config of only these skips the checks of the others
_GEN_SAMPLING = frozenset({"maxOutputTokens", "temperature", "topP", "topK"})
#: thinkingLevel <-> neutral effort
_LEVEL_TO_EFFORT = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high", "XHIGH": "xhigh"}
_EFFORT_TO_LEVEL = {"minimal": "MINIMAL", "low": "LOW", "medium": "MEDIUM", "high": "HIGH", "xhigh": "HIGH",
                    "max": "HIGH"}
#: effort -> thinkingBudget for models that take a budget (Gemini 2.5)
_EFFORT_BUDGET = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576, "xhigh": 32768, "max": 32768}


def _fail(path: str, why: str) -> TranslationError:
    return TranslationError(f"{path}: {why}", field=path)


def _camel_key(k: str) -> str:
    head, *rest = k.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


#: field names of the API's own objects (Content, Part, FunctionCall, Tool, configs...): an
#: object whose keys are all here has no snake_case spelling to convert (one C-level subset test)
_CAMEL = frozenset({
    "contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings",
    "cachedContent", "labels", "model", "generateContentRequest", "role", "parts", "text", "thought",
    "thoughtSignature", "functionCall", "functionResponse", "inlineData", "fileData", "executableCode",
    "codeExecutionResult", "toolCall", "toolResponse", "videoMetadata", "partMetadata", "mediaResolution",
    "id", "name", "args", "partialArgs", "willContinue", "response", "scheduling", "mimeType", "data",
    "displayName", "fileUri", "functionDeclarations", "description", "parameters", "parametersJsonSchema",
    "responseJsonSchema", "behavior", "googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext",
    "functionCallingConfig", "mode", "allowedFunctionNames", "streamFunctionCallArguments", "retrievalConfig",
    "maxOutputTokens", "temperature", "topP", "topK", "stopSequences", "seed", "candidateCount",
    "responseMimeType", "responseSchema", "thinkingConfig", "presencePenalty", "frequencyPenalty",
    "thinkingBudget", "thinkingLevel", "includeThoughts", "responseLogprobs", "logprobs",
    "responseModalities", "speechConfig", "imageConfig",
})
assert not any("_" in k for k in _CAMEL)


def _obj(v: Any, path: str) -> dict[str, Any]:
    """An object of the API's own structure: its snake_case field names (the API accepts both
    spellings, as proto JSON does) read as camelCase. Never applied to user data (arguments,
    function responses, schemas)."""
    if isinstance(v, dict) and v.keys() <= _CAMEL:
        return v
    if not isinstance(v, dict):
        raise _fail(path, f"expected an object, got {type(v).__name__}")
    for k in v:
        if "_" in k:
            return {(_camel_key(x) if "_" in x else x): y for x, y in v.items()}
    return v


def _data(v: Any, path: str) -> dict[str, Any]:
    """A user-data object (a schema, labels): kept exactly as sent."""
    if not isinstance(v, dict):
        raise _fail(path, f"expected an object, got {type(v).__name__}")
    return v


def _list(v: Any, path: str) -> list[Any]:
    if not isinstance(v, list):
        raise _fail(path, f"expected an array, got {type(v).__name__}")
    return v


def _str(v: Any, path: str) -> str:
    if not isinstance(v, str):
        raise _fail(path, f"expected a string, got {type(v).__name__}")
    return v


def _opt_int(d: dict[str, Any], key: str, path: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(f"{path}.{key}", f"expected an integer, got {type(v).__name__}")
    return v


def _opt_num(d: dict[str, Any], key: str, path: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _fail(f"{path}.{key}", f"expected a number, got {type(v).__name__}")
    return v


# ============================================================================= schemas
_TYPES = {"STRING": "string", "NUMBER": "number", "INTEGER": "integer", "BOOLEAN": "boolean", "ARRAY": "array",
          "OBJECT": "object", "NULL": "null"}
#: the usual spellings (upper or lower case) looked up once; others fall back to the case rules
_TYPE_OF = {**_TYPES, **{v: v for v in _TYPES.values()}}
#: schema keys with a conversion: 1 type, 2 properties, 3 a sub-schema, 0 dropped (no JSON Schema meaning:
#: ``nullable`` is folded into the type, ``propertyOrdering`` is Gemini's output-order hint)
_SCHEMA_KEYS = {"type": 1, "properties": 2, "items": 3, "anyOf": 3, "oneOf": 3, "allOf": 3, "not": 3,
                "additionalProperties": 3, "nullable": 0, "propertyOrdering": 0}


def schema_to_json(s: Any) -> Any:
    """Gemini's OpenAPI-subset ``Schema`` (upper-case types, ``nullable``) as JSON Schema."""
    if not isinstance(s, dict) and not isinstance(s, dict):
        if isinstance(s, list):
            return [schema_to_json(x) for x in s]
        return s
    out: dict[str, Any] = {}
    keys = _SCHEMA_KEYS
    for k, v in s.items():
        h = keys.get(k)
        if h is None:
            out[k] = v
        elif h == 1:
            if isinstance(v, str):
                t = _TYPE_OF.get(v)
                out["type"] = t if t is not None else _TYPES.get(v.upper(), v.lower())
            else:
                out[k] = v
        elif h == 2:
            out[k] = {pk: schema_to_json(pv) for pk, pv in v.items()} if isinstance(v, dict) else v
        elif h == 3:
            out[k] = schema_to_json(v)
    if "nullable" in s and s["nullable"] is True:
        t = out.get("type")
        if isinstance(t, str):
            out["type"] = [t, "null"]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def _expected(path: str, what: str, v: Any) -> TranslationError:
    return _fail(path, f"expected {what}, got {type(v).__name__}")


# ============================================================================= decode
def _signature_reasoning(sig: str, on: str, turn: int, k: int, warnings: list[str]) -> Reasoning:
    """A ``thoughtSignature`` as a neutral reasoning part placed before the part it came on."""
    if sig.startswith(PACKED_HEAD):
        payload = unpack_signature(sig)
        if payload is None:
            warnings.append(f"contents[{turn}].parts[{k}].thoughtSignature: a damaged continuity envelope "
                            "was dropped")
            return Reasoning(text="", opaque={"protocol": PROTOCOL, "signature": "", "on": on})
        text = payload.pop("text", "")
        summary = payload.pop("summary", None)
        redacted = bool(payload.pop("redacted", False))
        return Reasoning(text=text if isinstance(text, str) else "", summary=summary, opaque=payload,
                         redacted=redacted)
    return Reasoning("", None, {"protocol": PROTOCOL, "signature": sig, "on": on})


def _media(d: dict[str, Any], path: str, kind: str) -> Image | Document:
    mime = d.get("mimeType")
    if mime is not None and not isinstance(mime, str):
        raise _fail(f"{path}.mimeType", "expected a string")
    if kind == "inline":
        data = _str(d.get("data"), f"{path}.data")
        if isinstance(mime, str) and mime.startswith("image/"):
            return Image("base64", media_type=mime, data=data)
        return Document("base64", media_type=mime or "application/octet-stream", data=data,
                        filename=d.get("displayName") if isinstance(d.get("displayName"), str) else None)
    uri = _str(d.get("fileUri"), f"{path}.fileUri")
    if isinstance(mime, str) and mime.startswith("image/"):
        return Image("url", media_type=mime, url=uri)
    return Document("url", media_type=mime, url=uri)


def _tool_result(fr: dict[str, Any], cid: str, turn: int, k: int) -> ToolResult:
    """A functionResponse as a tool result: its ``response`` object (and media ``parts``) as
    content, a content of one text given as that text (the usual result)."""
    resp = fr.get("response")
    is_error: bool | None = None
    if isinstance(resp, dict):
        # a one-field {"output"|"error"|"content": "..."} response is its text; another, its JSON
        text = resp.get("output") if len(resp) == 1 else None
        if not isinstance(text, str):
            text = resp.get("error") if len(resp) == 1 else None
            if isinstance(text, str):
                is_error = True
            else:
                text = resp.get("content") if len(resp) == 1 else None
                if not isinstance(text, str):
                    text = dumps(resp).decode()
                    if "error" in resp and "output" not in resp:
                        is_error = True
    elif resp is not None:
        raise _expected(f"contents[{turn}].parts[{k}].functionResponse.response", "an object", resp)
    else:
        text = None
    parts = fr.get("parts")
    content: list[Text | Image | Document] = [] if text is None else [Text(text)]
    if parts is None:
        return ToolResult(cid, content, is_error)
    path = f"contents[{turn}].parts[{k}].functionResponse"
    for j, p in enumerate(_list(parts, f"{path}.parts")):
        p = _obj(p, f"{path}.parts[{j}]")
        if "inlineData" in p:
            content.append(_media(_obj(p["inlineData"], f"{path}.parts[{j}].inlineData"),
                                  f"{path}.parts[{j}].inlineData", "inline"))
        elif "fileData" in p:
            content.append(_media(_obj(p["fileData"], f"{path}.parts[{j}].fileData"),
                                  f"{path}.parts[{j}].fileData", "file"))
    return ToolResult(cid, content, is_error)


# Ids for a history's function calls: Gemini's own, or minted from the turn and order, so a
# ``functionResponse`` without an id finds its call by name and order. ``unanswered``: the
# (id, name) of the calls without a response yet, in call order.
def _response_id(unanswered: list[tuple[str, str]], fid: Any, name: str, turn: int, n: int) -> str:
    if isinstance(fid, str) and fid:
        for k, (cid, _) in enumerate(unanswered):
            if cid == fid:
                del unanswered[k]
                break
        return fid
    for k, (cid, cname) in enumerate(unanswered):
        if cname == name:
            del unanswered[k]
            return cid
    return mint_call_id(f"response{turn}", n, name)


def _named(d: Any, field: str, usual: str, i: int, k: int) -> tuple[dict[str, Any], str]:
    """A part's ``functionCall`` / ``functionResponse`` object and its name. The usual object (name,
    id and ``usual``) is proven camelCase by ``in`` tests; the path is formatted only for an error."""
    if not isinstance(d, dict) or not (len(d) == 3 and "id" in d and usual in d and "name" in d
                                       or d.keys() <= _CAMEL):
        d = _obj(d, f"contents[{i}].parts[{k}].{field}")
    name = d.get("name")
    if not isinstance(name, str):
        raise _expected(f"contents[{i}].parts[{k}].{field}.name", "a string", name)
    return d, name


_SERVER_PARTS = ("executableCode", "codeExecutionResult", "toolCall", "toolResponse")


def _messages(contents: list[Any], req: Request, warnings: list[str]) -> None:
    """``contents`` as neutral messages, each part checked as it is built (one pass; paths for
    errors are formatted only when one is raised). An object whose field names are all the API's
    own needs no snake_case conversion."""
    unanswered: list[tuple[str, str]] = []
    for i, c in enumerate(contents):
        if not isinstance(c, dict) or not c.keys() <= _CAMEL:
            c = _obj(c, f"contents[{i}]")
        role = c.get("role", "user")
        if role != "user" and role != "model" and role != "function":
            raise _fail(f"contents[{i}].role", f"expected 'user' or 'model', got {role!r}")
        raw_parts = c.get("parts")
        if not isinstance(raw_parts, list):
            raw_parts = _list(raw_parts, f"contents[{i}].parts") if "parts" in c else []
        if len(raw_parts) == 1:  # a turn of one text part and nothing beside (the usual turn)
            p = raw_parts[0]
            text = p.get("text") if isinstance(p, dict) and len(p) == 1 else None
            if isinstance(text, str) and text:
                req.messages.append(Message("assistant" if role == "model" else "user", [Text(text)]))
                continue
        out: list[Any] = []
        results = False
        for k, p in enumerate(raw_parts):
            if not isinstance(p, dict) or not p.keys() <= _CAMEL:
                p = _obj(p, f"contents[{i}].parts[{k}]")
            n = len(p)
            single = n == 1  # the usual part: a text, a call or a result, nothing beside
            sig = None if single else p.get("thoughtSignature")
            if sig is not None and not isinstance(sig, str):
                raise _fail(f"contents[{i}].parts[{k}].thoughtSignature", "expected a string")
            if "text" in p:
                text = p["text"]
                if not isinstance(text, str):
                    raise _expected(f"contents[{i}].parts[{k}].text", "a string", text)
                if not single and p.get("thought") is True:
                    if sig and is_packed_signature(sig):
                        out.append(_signature_reasoning(sig, "thought", i, k, warnings))
                    else:
                        op: dict[str, Any] = {"protocol": PROTOCOL, "on": "thought"}
                        if sig:
                            op["signature"] = sig
                        out.append(Reasoning(text, None, op))
                    continue
                if sig:
                    out.append(_signature_reasoning(sig, "text", i, k, warnings))
                if text:
                    out.append(Text(text))
            elif "functionCall" in p:
                fc, name = _named(p["functionCall"], "functionCall", "args", i, k)
                args = fc.get("args")
                if args is not None and not isinstance(args, dict):
                    raise _expected(f"contents[{i}].parts[{k}].functionCall.args", "an object", args)
                if sig:
                    out.append(_signature_reasoning(sig, "call", i, k, warnings))
                fid = fc.get("id")
                # (a minted id numbers the call among the turn's calls)
                cid = fid if isinstance(fid, str) and fid else mint_call_id(
                    f"turn{i}", sum(isinstance(x, ToolCall) for x in out), name)
                unanswered.append((cid, name))
                out.append(ToolCall(cid, name, dumps(args).decode() if args else "{}"))
            elif "functionResponse" in p:
                fr, name = _named(p["functionResponse"], "functionResponse", "response", i, k)
                out.append(_tool_result(fr, _response_id(unanswered, fr.get("id"), name, i, k), i, k))
                results = True
            elif "inlineData" in p:
                pp = f"contents[{i}].parts[{k}]"
                out.append(_media(_obj(p["inlineData"], f"{pp}.inlineData"), f"{pp}.inlineData", "inline"))
            elif "fileData" in p:
                pp = f"contents[{i}].parts[{k}]"
                out.append(_media(_obj(p["fileData"], f"{pp}.fileData"), f"{pp}.fileData", "file"))
            elif any(k2 in p for k2 in _SERVER_PARTS):
                out.append(Opaque(PROTOCOL, p, next(k2 for k2 in _SERVER_PARTS if k2 in p)))
            elif sig and single:
                out.append(_signature_reasoning(sig, "text", i, k, warnings))
            else:
                keys = ", ".join(sorted(p)) or "none"
                raise _fail(f"contents[{i}].parts[{k}]", f"unknown part (fields: {keys})")
        if not results or role != "model":
            req.messages.append(Message("assistant" if role == "model" else "user", out))
        else:
            # a function the server ran (server-side MCP) is answered inside the model turn: its
            # result becomes a user turn of its own, where every other protocol puts results
            cur: list[Any] = []
            for part in out:
                if isinstance(part, ToolResult):
                    if cur:
                        req.messages.append(Message("assistant", cur))
                        cur = []
                    req.messages.append(Message("user", [part]))
                else:
                    cur.append(part)
            if cur or not out:
                req.messages.append(Message("assistant", cur))


def _system(v: Any, req: Request) -> None:
    if v is None:
        return
    if isinstance(v, str):
        req.system.append(Text(v))
        return
    d = v if isinstance(v, dict) and (len(v) == 1 and "parts" in v or v.keys() <= _CAMEL) else _obj(
        v, "systemInstruction")
    parts = d.get("parts")
    if not isinstance(parts, list):
        parts = _list(parts, "systemInstruction.parts") if "parts" in d else []
    for k, p in enumerate(parts):
        if not isinstance(p, dict) or not (len(p) == 1 and "text" in p or p.keys() <= _CAMEL):
            p = _obj(p, f"systemInstruction.parts[{k}]")
        if "text" not in p:
            raise _fail(f"systemInstruction.parts[{k}]", "only text parts can be system instructions here")
        t = p["text"]
        if not isinstance(t, str):
            raise _expected(f"systemInstruction.parts[{k}].text", "a string", t)
        req.system.append(Text(t))


def _tools(v: Any, req: Request, warnings: list[str]) -> None:
    if v is None:
        return
    other: list[dict[str, Any]] = []
    tools = req.tools
    for k, t in enumerate(v if isinstance(v, list) else _list(v, "tools")):
        if not isinstance(t, dict) or not (len(t) == 1 and "functionDeclarations" in t or t.keys() <= _CAMEL):
            t = _obj(t, f"tools[{k}]")
        decls = t.get("functionDeclarations")
        if decls is not None:
            if not isinstance(decls, list):
                decls = _list(decls, f"tools[{k}].functionDeclarations")
            for j, fd in enumerate(decls):
                if not isinstance(fd, dict) or not fd.keys() <= _CAMEL:
                    fd = _obj(fd, f"tools[{k}].functionDeclarations[{j}]")
                name = fd.get("name")
                if not isinstance(name, str):
                    raise _expected(f"tools[{k}].functionDeclarations[{j}].name", "a string", name)
                desc = fd.get("description")
                if desc is not None and not isinstance(desc, str):
                    raise _expected(f"tools[{k}].functionDeclarations[{j}].description", "a string", desc)
                schema = fd.get("parametersJsonSchema")
                if schema is None:
                    params = fd.get("parameters")
                    if params is not None:
                        if not isinstance(params, dict):
                            raise _expected(f"tools[{k}].functionDeclarations[{j}].parameters", "an object", params)
                        schema = schema_to_json(params)
                elif not isinstance(schema, dict):
                    raise _expected(f"tools[{k}].functionDeclarations[{j}].parametersJsonSchema", "an object", schema)
                tools.append(Tool(name, desc, schema))
        if decls is None or len(t) > 1:  # fields beside the declarations (search, code execution...)
            rest = {x: y for x, y in t.items() if x != "functionDeclarations"}
            if rest:
                other.append(rest)
                ws = web_search_tool(rest)
                if ws is not None:
                    req.web_search = ws
    if other:
        req.extra["gemini_tools"] = other


def _tool_config(v: Any, req: Request) -> None:
    if v is None:
        return
    d = v if isinstance(v, dict) and (len(v) == 1 and "functionCallingConfig" in v or v.keys() <= _CAMEL) else _obj(
        v, "toolConfig")
    fcc = d.get("functionCallingConfig")
    if fcc is not None:
        fcc = fcc if isinstance(fcc, dict) and (len(fcc) == 1 and "mode" in fcc or fcc.keys() <= _CAMEL) else _obj(
            fcc, "toolConfig.functionCallingConfig")
        mode = fcc.get("mode", "AUTO")
        names = fcc.get("allowedFunctionNames")
        allowed = [_str(x, "toolConfig.functionCallingConfig.allowedFunctionNames[]")
                   for x in _list(names, "toolConfig.functionCallingConfig.allowedFunctionNames")] if names else None
        if mode in ("AUTO", "MODE_UNSPECIFIED", "VALIDATED"):
            req.tool_choice = ToolChoice("allowed", allowed=allowed) if allowed else ToolChoice("auto")
            if mode == "VALIDATED":
                req.extra["gemini_validated_mode"] = True
        elif mode == "ANY":
            if allowed and len(allowed) == 1:
                req.tool_choice = ToolChoice("tool", name=allowed[0])
            elif allowed:
                req.tool_choice = ToolChoice("allowed", allowed=allowed, allowed_required=True)
            else:
                req.tool_choice = ToolChoice("required")
        elif mode == "NONE":
            req.tool_choice = ToolChoice("none")
        else:
            raise _fail("toolConfig.functionCallingConfig.mode", f"unknown mode {mode!r}")
        if fcc.get("streamFunctionCallArguments") is not None:
            req.extra["gemini_stream_function_call_arguments"] = fcc["streamFunctionCallArguments"]
    if fcc is None or len(d) > 1:  # fields beside the calling config (retrieval...)
        rest = {k: x for k, x in d.items() if k != "functionCallingConfig"}
        if rest:
            req.extra["gemini_tool_config"] = rest


def _generation(v: Any, req: Request) -> None:
    if v is None:
        return
    g = v if isinstance(v, dict) and v.keys() <= _CAMEL else _obj(v, "generationConfig")
    if not g:
        return
    p = "generationConfig"
    req.max_output_tokens = _opt_int(g, "maxOutputTokens", p)
    req.temperature = _opt_num(g, "temperature", p)
    req.top_p = _opt_num(g, "topP", p)
    req.top_k = _opt_int(g, "topK", p)
    if g.keys() <= _GEN_SAMPLING:
        return
    req.seed = _opt_int(g, "seed", p)
    if g.get("stopSequences") is not None:
        req.stop = [_str(s, f"{p}.stopSequences[]") for s in _list(g["stopSequences"], f"{p}.stopSequences")]
    n = _opt_int(g, "candidateCount", p)
    if n is not None and n > 1:
        raise _fail(f"{p}.candidateCount", "one candidate per request is translated; more cannot be")
    for k, wire in (("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty")):
        x = _opt_num(g, wire, p)
        if x is not None:
            req.extra[k] = x
    mime = g.get("responseMimeType")
    schema = g.get("responseJsonSchema")
    if schema is None and g.get("responseSchema") is not None:
        schema = schema_to_json(_data(g["responseSchema"], f"{p}.responseSchema"))
    if mime == "application/json" or schema is not None:
        if schema is not None:
            req.output_format = OutputFormat("json_schema", schema=_data(schema, f"{p}.responseJsonSchema"),
                                             name="response")
        else:
            req.output_format = OutputFormat("json_object")
    elif mime not in (None, "text/plain"):
        raise _fail(f"{p}.responseMimeType", f"{mime!r} has no equivalent in the other protocols")
    tc = g.get("thinkingConfig")
    if tc is not None:
        tc = _obj(tc, f"{p}.thinkingConfig")
        rc = ReasoningConfig()
        budget = _opt_int(tc, "thinkingBudget", f"{p}.thinkingConfig")
        level = tc.get("thinkingLevel")
        if budget == 0:
            rc.disabled = True
            rc.effort = "none"
        elif budget is not None and budget > 0:
            rc.budget_tokens = budget
        elif budget == -1:
            rc.adaptive = True
        if isinstance(level, str) and level in _LEVEL_TO_EFFORT:
            rc.effort = _LEVEL_TO_EFFORT[level]
        elif level is not None and level != "THINKING_LEVEL_UNSPECIFIED":
            raise _fail(f"{p}.thinkingConfig.thinkingLevel", f"unknown level {level!r}")
        if tc.get("includeThoughts") is True:
            rc.summary = "auto"
        req.reasoning = rc
    if not g.keys() <= _GEN_READ:
        req.extra["gemini_generation_config"] = {k: x for k, x in g.items() if k not in _GEN_READ}


def _decode_rare(body: dict[str, Any], req: Request, warnings: list[str]) -> None:
    """The request fields few clients send."""
    ss = body.get("safetySettings")
    if ss is not None:
        req.extra["safety_settings"] = _list(ss, "safetySettings")
        # (a Gemini request is decoded only to be sent to another protocol: Gemini to Gemini passes)
        warnings.append("safetySettings apply only to a Gemini upstream: another provider applies its own "
                        "policies (safety_settings not sent)")
    if body.get("cachedContent"):
        # the cached context lives on Google's servers: another upstream would answer without it
        raise _fail("cachedContent", "a Gemini cached content cannot be sent to another provider")
    if body.get("labels") is not None:
        req.extra["labels"] = _data(body["labels"], "labels")
    if not body.keys() <= _KNOWN:
        for k in body:
            if k not in _KNOWN:
                warnings.append(f"unknown Gemini request field {k!r} ignored")


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    if not isinstance(body, dict):
        raise TranslationError("request body must be a JSON object", field="body")
    usual = isinstance(body, dict) and body.keys() <= _USUAL  # (camelCase, no rare field: one test)
    if not usual:
        body = body if isinstance(body, dict) and body.keys() <= _CAMEL else _obj(body, "body")
        if "contents" not in body:
            inner = body.get("generateContentRequest")
            if isinstance(inner, dict):  # a countTokens body wraps the request
                body = _obj(inner, "generateContentRequest")
    req = Request()
    m = body.get("model")
    if isinstance(m, str) and m:
        req.model = m.removeprefix("models/")
    contents = body.get("contents")
    if contents is None:
        raise _fail("contents", "required field is missing")
    if isinstance(contents, dict):  # a single Content is accepted by the API
        contents = [contents]
    _messages(contents if isinstance(contents, list) else _list(contents, "contents"), req, warnings)
    if (v := body.get("systemInstruction")) is not None:  # (helpers only for the fields that are there)
        _system(v, req)
    if (v := body.get("tools")) is not None:
        _tools(v, req, warnings)
    if (v := body.get("toolConfig")) is not None:
        _tool_config(v, req)
    if (v := body.get("generationConfig")) is not None:
        _generation(v, req)
    if not usual and not body.keys() <= _USUAL:
        _decode_rare(body, req, warnings)
    return req


# ============================================================================= encode
def _data_url(url: str) -> tuple[str, str] | None:
    if not url.startswith("data:") or ";base64," not in url:
        return None
    head, data = url[5:].split(";base64,", 1)
    return head or "application/octet-stream", data


def _guess_mime(url: str, default: str) -> str:
    guess, _ = mimetypes.guess_type(url.split("?", 1)[0])
    return guess or default


def _enc_media(p: Image | Document, path: str, warnings: list[str]) -> dict[str, Any]:
    default = "image/jpeg" if isinstance(p, Image) else "application/pdf"
    if p.source == "base64":
        return {"inlineData": {"mimeType": p.media_type or default, "data": p.data or ""}}
    if p.source == "url" and p.url:
        du = _data_url(p.url)
        if du is not None:
            return {"inlineData": {"mimeType": du[0], "data": du[1]}}
        return {"fileData": {"mimeType": p.media_type or _guess_mime(p.url, default), "fileUri": p.url}}
    if p.source == "text" and isinstance(p, Document):
        # a text file stays a file (inline text/plain data), not a text part: it comes back as the
        # same document, and the model sees it as an attachment, not as the user's words
        return {"inlineData": {"mimeType": p.media_type or "text/plain",
                               "data": base64.b64encode((p.data or "").encode()).decode()}}
    if p.source == "file" and p.file_id:
        raise _fail(path, f"a file id ({p.file_id}) of another provider cannot be sent to Gemini")
    raise _fail(path, f"{p.type} without data")


def _tool_response(p: ToolResult, name: str, req: Request, msg: Message, warnings: list[str]) -> dict[str, Any]:
    media: list[Image | Document] | None = None
    content = p.content
    if len(content) == 1 and isinstance(content[0], Text):  # the usual result: one text
        text = content[0].text
    else:
        text = "".join(c.text for c in content if isinstance(c, Text))
        media = [c for c in content if isinstance(c, (Image, Document))]
    resp: dict[str, Any]
    if p.is_error:
        resp = {"error": text}
    else:
        resp = {"output": text}
        if text[:1] == "{":
            try:
                obj = orjson.loads(text)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                resp = obj
    fr: dict[str, Any] = {"name": name, "response": resp}
    cid = p.call_id
    if cid and not cid.startswith(MINTED_PREFIX):
        fr["id"] = cid
    if media:
        path = f"messages[{_index(req.messages, msg)}].parts[{_index(msg.parts, p)}]"
        fr["parts"] = [_enc_media(m, path, warnings) for m in media]
    return {"functionResponse": fr}


class _Sig:
    """A thought signature waiting for the part it belongs on."""

    __slots__ = ("sig", "on")

    def __init__(self, sig: str, on: str):
        self.sig = sig
        self.on = on


def _index(items: list[Any], item: Any) -> int:
    """Where ``item`` (this very object) is in ``items``: for the path of an error."""
    return next(k for k, x in enumerate(items) if x is item)


def _contents(req: Request, system: list[Text], warnings: list[str]) -> list[dict[str, Any]]:
    """The conversation as Gemini ``contents``: consecutive turns of one role merged (parallel tool
    results are one turn in Gemini), system messages moved to ``system``. One pass, parts built
    inline (a history has thousands)."""
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> the function name its response must carry
    short_names: dict[str, str] = {}  # tool name -> its short name, worked out once per request
    last_role = ""
    last_parts: list[dict[str, Any]] = []
    for m in req.messages:
        mrole = m.role
        if mrole == "assistant":
            role = "model"
        elif mrole == "system" or mrole == "developer":
            if contents:
                warn_once(warnings, "a system message inside the conversation was moved to systemInstruction "
                          "(Gemini has one system instruction)")
            system.extend(p for p in m.parts if isinstance(p, Text))
            continue
        else:
            role = "user"
        parts: list[dict[str, Any]]
        if len(m.parts) == 1 and isinstance(m.parts[0], Text):  # one plain text (the usual turn)
            parts = [{"text": m.parts[0].text}]
        else:
            # (a thought signature goes on the part it came before; the first function call of a
            # turn without one carries the skip value)
            parts = []
            pending: _Sig | None = None
            first_call = True
            for p in m.parts:
                if isinstance(p, Text):  # the usual part
                    if pending is None:
                        parts.append({"text": p.text})
                    else:
                        parts.append({"text": p.text, "thoughtSignature": pending.sig})
                        pending = None
                    continue
                if isinstance(p, ToolCall):
                    name = short_names.get(p.name)
                    if name is None:
                        name = short_names[p.name] = short_tool_name(p.name)
                    pid = p.id
                    names[pid] = name
                    arguments = p.arguments
                    if p.kind == "custom":
                        args: Any = {"input": arguments}
                    else:
                        try:
                            args = orjson.loads(arguments)
                        except orjson.JSONDecodeError:
                            if arguments.strip():
                                warnings.append(f"tool call {pid} had invalid JSON arguments; sent with empty args")
                            args = {}
                        else:
                            if not isinstance(args, dict):
                                args = {"value": args}
                    fc: dict[str, Any] = {"name": name, "args": args}
                    if pid and not pid.startswith(MINTED_PREFIX):
                        fc["id"] = pid
                    if pending is not None:
                        parts.append({"functionCall": fc, "thoughtSignature": pending.sig})
                        pending = None
                    elif first_call:
                        parts.append({"functionCall": fc, "thoughtSignature": SKIP_SIGNATURE})
                    else:
                        parts.append({"functionCall": fc})
                    first_call = False
                    continue
                if isinstance(p, Reasoning):
                    op = p.opaque
                    if role == "user":
                        continue
                    if not op or op.get("protocol") != PROTOCOL:
                        warn_once(warnings, "reasoning from another protocol was not sent to Gemini (it only accepts "
                                  "its own thought signatures)")
                        continue
                    sig = op.get("signature") if isinstance(op.get("signature"), str) else None
                    on = op.get("on")
                    if on == "thought" or (on is None and p.text):
                        part: dict[str, Any] = {"text": p.text, "thought": True}
                        if sig:
                            part["thoughtSignature"] = sig
                        parts.append(part)
                    elif sig is not None:
                        if pending is not None:
                            parts.append({"text": "", "thoughtSignature": pending.sig})
                        pending = _Sig(sig, on if isinstance(on, str) else "text")
                    continue
                if pending is not None:
                    parts.append({"text": "", "thoughtSignature": pending.sig})
                    pending = None
                if isinstance(p, ToolResult):
                    rname = names.get(p.call_id)
                    if rname is None:
                        i, j = _index(req.messages, m), _index(m.parts, p)
                        raise _fail(f"messages[{i}].parts[{j}].call_id", f"no earlier tool call has the id "
                                    f"{p.call_id!r} (Gemini names the function in every function response)")
                    parts.append(_tool_response(p, rname, req, m, warnings))
                elif isinstance(p, Refusal):
                    parts.append({"text": p.text})
                elif isinstance(p, Image) or isinstance(p, Document):
                    path = f"messages[{_index(req.messages, m)}].parts[{_index(m.parts, p)}]"
                    parts.append(_enc_media(p, path, warnings))
                elif isinstance(p, (Opaque, WebSearchCall, WebSearchResults)):
                    issued = p if isinstance(p, Opaque) else web_search_as_opaque(p, PROTOCOL)
                    if issued is None:
                        continue
                    if issued.protocol == PROTOCOL:
                        parts.append(issued.raw)
                    else:
                        warn_once(warnings, f"{issued.protocol} item {issued.label or 'opaque'!r} dropped: Gemini "
                                  "has no such part")
            if pending is not None:
                parts.append({"text": "", "thoughtSignature": pending.sig})
        if not parts:
            continue
        if role == last_role:
            last_parts.extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
            last_role, last_parts = role, parts
    return contents


def _enc_tools(req: Request, warnings: list[str]) -> list[dict[str, Any]]:
    decls: list[dict[str, Any]] = []
    for t in req.tools:
        d: dict[str, Any] = {"name": short_tool_name(t.name)}
        if t.kind == "custom":
            desc = t.description or ""
            fmt = t.format
            if isinstance(fmt, dict) and fmt.get("type") == "grammar":
                desc += f"\n(The input follows this {fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')})"
            d["description"] = desc.strip() or "Free-text input."
            d["parametersJsonSchema"] = {"type": "object", "properties": {"input": {"type": "string"}},
                                         "required": ["input"]}
        else:
            if t.description:
                d["description"] = t.description
            if t.parameters is not None:
                d["parametersJsonSchema"] = t.parameters
        decls.append(d)
    out: list[dict[str, Any]] = [{"functionDeclarations": decls}] if decls else []
    ws = req.web_search
    native_ws = False
    for t in req.extra.get("gemini_tools") or ():
        out.append(t)
        native_ws = native_ws or (ws is not None and t is ws.raw)
    st = req.extra.get("server_tools")
    if st and any(t is not (ws.raw if ws else None) for t in st):
        warn_once(warnings, "server tools of another protocol were not sent (Gemini has no such tools)")
    if ws is not None and not native_ws:
        out.append(web_search_tool_wire(ws, warnings))
    return out


def _enc_tool_config(req: Request, warnings: list[str]) -> dict[str, Any] | None:
    tc = req.tool_choice
    fcc: dict[str, Any] | None = None
    if tc is not None:
        if tc.mode == "auto":
            fcc = {"mode": "AUTO"}
        elif tc.mode == "none":
            fcc = {"mode": "NONE"}
        elif tc.mode == "required":
            fcc = {"mode": "ANY"}
        elif tc.mode == "tool":
            if not tc.name:
                raise _fail("tool_choice.name", "a named tool choice needs a tool name")
            fcc = {"mode": "ANY", "allowedFunctionNames": [short_tool_name(tc.name)]}
        else:
            fcc = {"mode": "ANY" if tc.allowed_required else "AUTO",
                   "allowedFunctionNames": [short_tool_name(n) for n in tc.allowed or ()]}
        if req.extra.get("gemini_validated_mode") and fcc["mode"] == "AUTO":
            fcc["mode"] = "VALIDATED"
    if req.extra.get("gemini_stream_function_call_arguments") is not None:
        fcc = fcc or {}
        fcc["streamFunctionCallArguments"] = req.extra["gemini_stream_function_call_arguments"]
    if req.parallel_tool_calls is False:
        warn_once(warnings, "parallel_tool_calls=false has no Gemini equivalent and was not sent")
    out: dict[str, Any] = dict(req.extra.get("gemini_tool_config") or {})
    if fcc is not None:
        out["functionCallingConfig"] = fcc
    return out or None


def _thinking(req: Request, warnings: list[str]) -> dict[str, Any] | None:
    rc = req.reasoning
    if rc is None:
        return None
    gemini3 = "gemini-3" in (req.model or "")
    out: dict[str, Any] = {}
    if rc.disabled or rc.effort == "none":
        if gemini3:
            out["thinkingLevel"] = "LOW"
            warnings.append("thinking cannot be turned off on Gemini 3 models; thinkingLevel LOW was sent")
        else:
            out["thinkingBudget"] = 0
        return out
    if rc.budget_tokens is not None:
        out["thinkingBudget"] = rc.budget_tokens
    elif rc.effort is not None and rc.effort in _EFFORT_TO_LEVEL:
        if gemini3:
            out["thinkingLevel"] = _EFFORT_TO_LEVEL[rc.effort]
        else:
            out["thinkingBudget"] = _EFFORT_BUDGET[rc.effort]
    elif rc.adaptive:
        out["thinkingBudget"] = -1
    # a client that asked for thinking wants to see it (and its continuity payload)
    out["includeThoughts"] = True
    return out


_DROPPED_EXTRA_OK = frozenset({"n", "presence_penalty", "frequency_penalty", "safety_settings", "cached_content",
                               "labels", "gemini_tools", "gemini_tool_config", "gemini_generation_config",
                               "gemini_validated_mode", "gemini_stream_function_call_arguments", "server_tools"})


def _check_extra(ex: dict[str, Any]) -> None:
    """Request features Gemini cannot serve: refused in the client's terms."""
    n = ex.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        raise _fail("n", "the client reads one candidate; more than one cannot be translated")
    if ex.get("previous_response_id"):
        raise _fail("previous_response_id", "Gemini keeps no server-side conversation; send the full input")
    if ex.get("conversation"):
        raise _fail("conversation", "Gemini keeps no server-side conversation; send the full input")
    mods = ex.get("modalities")
    if ex.get("audio") or (isinstance(mods, list) and "audio" in mods):
        raise _fail("audio", "audio output is not translated to Gemini")


def encode_request(req: Request, warnings: list[str]) -> dict[str, Any]:
    ex = req.extra
    if ex:  # (helpers only for what is there)
        _check_extra(ex)
    system = list(req.system)
    contents = _contents(req, system, warnings)
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": [{"text": t.text} for t in system]}
    if req.tools or ex or req.web_search:
        tools = _enc_tools(req, warnings)
        if tools:
            out["tools"] = tools
    if req.tool_choice is not None or ex or req.parallel_tool_calls is False:
        tcfg = _enc_tool_config(req, warnings)
        if tcfg:
            out["toolConfig"] = tcfg
    gen0 = ex.get("gemini_generation_config") if ex else None
    gen: dict[str, Any] = dict(gen0) if gen0 else {}
    if req.max_output_tokens is not None:
        gen["maxOutputTokens"] = req.max_output_tokens
    if req.temperature is not None:
        gen["temperature"] = req.temperature
    if req.top_p is not None:
        gen["topP"] = req.top_p
    if req.top_k is not None:
        gen["topK"] = req.top_k
    if req.stop:
        gen["stopSequences"] = list(req.stop)
    if req.seed is not None:
        gen["seed"] = req.seed
    if ex:
        for k, wire in (("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty")):
            if ex.get(k) is not None:
                gen[wire] = ex[k]
    of = req.output_format
    if of is not None and of.type != "text":
        gen["responseMimeType"] = "application/json"
        if of.type == "json_schema" and of.schema is not None:
            gen["responseJsonSchema"] = of.schema
    if req.reasoning is not None:
        th = _thinking(req, warnings)
        if th:
            gen["thinkingConfig"] = th
    if gen:
        out["generationConfig"] = gen
    if req.metadata:
        warn_once(warnings, "metadata has no Gemini equivalent and was not sent")
    if req.user:
        warn_once(warnings, "user has no Gemini equivalent and was not sent")
    if ex:
        if ex.get("safety_settings") is not None:
            out["safetySettings"] = ex["safety_settings"]
        if ex.get("cached_content"):
            out["cachedContent"] = ex["cached_content"]
        if ex.get("labels") is not None:
            out["labels"] = ex["labels"]
        ws_raw = req.web_search.raw if req.web_search is not None else None  # (translated: not ignored)
        ignored = sorted(k for k in ex if k not in _DROPPED_EXTRA_OK and ex[k] is not None and ex[k] is not ws_raw
                         and k not in ("previous_response_id", "conversation", "audio", "modalities"))
        if ignored:
            warnings.append(f"request fields without a Gemini equivalent were not sent: {', '.join(ignored)}")
    return out
