"""Anthropic Messages <-> Chat Completions requests of the usual shapes, without the neutral model.

The neutral path (decode into ``neutral.Request``, encode from it) builds one object per message and
part and dispatches twice; for these two directions it cost more than the peers' direct converters.
Here the usual shapes (text, tool calls and results, function tools, plain sampling fields) are
translated in one pass. Anything else (an unknown or unusual field or block, a value of a wrong type,
a case where the neutral path would warn, rewrite or reject) returns None and the neutral path
translates the request (or names the error). For the shapes accepted here the output and the
warnings are the neutral path's, byte for byte: tests/proxai_core/test_direct_request.py compares
both on recorded, built-in and generated requests. A change to the mapping rules of these two
directions must be made in both places (that test fails until it is).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..context import short_tool_name
from ..jsonutil import dumps
from ..protocol import Protocol
from ._anthropic_request import DEFAULT_MAX_TOKENS, EMPTY_SCHEMA, _tool_id_ok

_A_FIELDS = frozenset({"model", "messages", "system", "max_tokens", "temperature", "top_p", "stop_sequences",
                       "stream", "tools", "tool_choice", "metadata"})
_C_FIELDS = frozenset({"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "max_tokens",
                       "max_completion_tokens", "temperature", "top_p", "stop", "stream", "stream_options",
                       "user"})
_A_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_C_CHOICES = {"auto": "auto", "none": "none", "required": "any", "any": "any"}
_C_ASSISTANT = frozenset({"role", "content", "tool_calls", "name"})
_C_ASSISTANT_SLOW = ("reasoning_content", "reasoning", "reasoning_details", "refusal", "audio", "function_call")
_NO_MAX_TOKENS = f"max_tokens is required by Anthropic; sent the default {DEFAULT_MAX_TOKENS}"
_METADATA_NOT_SENT = "metadata not sent (Chat accepts it only with store: true)"


def _num(v: Any) -> bool:
    return v.__class__ is float or v.__class__ is int


def _a_text(b: Any) -> str | None:
    """The text of an Anthropic text block without citations, else None."""
    if b.__class__ is dict and b.get("type") == "text":
        text = b.get("text")
        cc = b.get("cache_control")
        if text.__class__ is str and (cc is None or cc.__class__ is dict) and b.get("citations") is None:
            return text
    return None


# ============================================================================= Anthropic -> Chat
def anthropic_to_chat(body: dict[str, Any], warnings: list[str]) -> dict[str, Any] | None:
    if not body.keys() <= _A_FIELDS:
        return None
    get = body.get
    model = get("model")
    msgs = get("messages")
    if (model is not None and model.__class__ is not str) or msgs.__class__ is not list:
        return None
    messages: list[dict[str, Any]] = []
    system = get("system")
    if system.__class__ is str:
        if system:
            messages.append({"role": "system", "content": system})
    elif system.__class__ is list:
        texts = [_a_text(b) for b in system]
        if None in texts:
            return None
        if texts:
            messages.append({"role": "system", "content": texts[0] if len(texts) == 1 else "\n\n".join(texts)})
    elif system is not None:
        return None
    for m in msgs:
        if m.__class__ is not dict:
            return None
        role = m.get("role")
        content = m.get("content")
        if role != "user" and role != "assistant":
            return None
        if content.__class__ is str:
            messages.append({"role": role, "content": content})
        elif content.__class__ is not list or not content:
            return None
        elif not (_a2c_user(content, messages) if role == "user" else _a2c_assistant(content, messages)):
            return None
    out: dict[str, Any] = {}
    if model is not None:
        out["model"] = model
    out["messages"] = messages
    tools = get("tools")
    if tools is not None:
        if tools.__class__ is not list:
            return None
        chat_tools = []
        for t in tools:
            if t.__class__ is not dict:
                return None
            tt = t.get("type")
            name = t.get("name")
            schema = t.get("input_schema")
            strict = t.get("strict")
            desc = t.get("description")
            cc = t.get("cache_control")
            if not ((tt is None or tt == "custom") and name.__class__ is str
                    and (schema is None or schema.__class__ is dict) and (strict is None or strict.__class__ is bool)
                    and (desc is None or desc.__class__ is str) and (cc is None or cc.__class__ is dict)):
                return None
            fn: dict[str, Any] = {"name": short_tool_name(name)}
            if desc is not None:
                fn["description"] = desc
            if schema is not None:
                fn["parameters"] = schema
            if strict is not None:
                fn["strict"] = strict
            chat_tools.append({"type": "function", "function": fn})
    tc = get("tool_choice")
    choice: Any = None
    parallel = None
    if tc is not None:
        if tc.__class__ is not dict:
            return None
        t = tc.get("type")
        dpt = tc.get("disable_parallel_tool_use")
        if dpt is not None and dpt.__class__ is not bool:
            return None
        if t == "tool":
            name = tc.get("name")
            if name.__class__ is not str:
                return None
            choice = {"type": "function", "function": {"name": short_tool_name(name)}}
        else:
            choice = _A_CHOICES.get(t) if t.__class__ is str else None
            if choice is None:
                return None
        if dpt:
            parallel = False
    if tools:
        out["tools"] = chat_tools
        if choice is not None:
            out["tool_choice"] = choice
        if parallel is not None:
            out["parallel_tool_calls"] = parallel
    v = get("max_tokens")
    if v is not None:
        if v.__class__ is not int:
            return None
        out["max_completion_tokens"] = v
    v = get("temperature")
    if v is not None:
        if not _num(v):
            return None
        out["temperature"] = v
    v = get("top_p")
    if v is not None:
        if not _num(v):
            return None
        out["top_p"] = v
    v = get("stop_sequences")
    if v is not None:
        if v.__class__ is not list or not all(s.__class__ is str for s in v):
            return None
        if v:
            out["stop"] = list(v)
    md = get("metadata")
    if md is not None:
        uid = md.get("user_id") if md.__class__ is dict else 0
        if uid is not None and uid.__class__ is not str:
            return None
        if uid is not None:
            out["user"] = uid
        if md:
            warnings.append(_METADATA_NOT_SENT)
    v = get("stream")
    if v is not None:
        if v.__class__ is not bool:
            return None
        if v:
            out["stream"] = True
            out["stream_options"] = {"include_usage": True}
    return out


def _a2c_user(content: list[Any], messages: list[dict[str, Any]]) -> bool:
    """A user turn of text and tool_result blocks: tool messages, the texts between them as user
    messages (in order)."""
    buf: list[str] = []
    for b in content:
        text = _a_text(b)
        if text is not None:
            buf.append(text)
            continue
        if b.__class__ is not dict or b.get("type") != "tool_result":
            return False
        cid = b.get("tool_use_id")
        err = b.get("is_error")
        cc = b.get("cache_control")
        rc = b.get("content")
        if cid.__class__ is not str or (err is not None and err is not False) or (cc is not None and cc.__class__ is not dict):
            return False
        if rc.__class__ is str:
            texts = [rc] if rc else []
        elif rc is None:
            texts = []
        elif rc.__class__ is list:
            texts = [_a_text(c) for c in rc]  # type: ignore[misc]
            if None in texts:
                return False
        else:
            return False
        if buf:
            messages.append({"role": "user", "content": buf[0] if len(buf) == 1 else
                             [{"type": "text", "text": t} for t in buf]})
            buf = []
        messages.append({"role": "tool", "tool_call_id": cid, "content": "" if not texts else texts[0]
                         if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]})
    if buf:
        messages.append({"role": "user", "content": buf[0] if len(buf) == 1 else
                         [{"type": "text", "text": t} for t in buf]})
    return True


def _a2c_assistant(content: list[Any], messages: list[dict[str, Any]]) -> bool:
    """An assistant turn of text and tool_use blocks: one assistant message."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for b in content:
        text = _a_text(b)
        if text is not None:
            texts.append(text)
            continue
        if b.__class__ is not dict or b.get("type") != "tool_use":
            return False
        tid = b.get("id")
        name = b.get("name")
        if tid.__class__ is not str or name.__class__ is not str:
            return False
        inp = b.get("input")
        calls.append({"id": tid, "type": "function", "function": {
            "name": short_tool_name(name), "arguments": "{}" if inp is None else dumps(inp).decode()}})
    m: dict[str, Any] = {"role": "assistant"}
    if texts or not calls:
        m["content"] = texts[0] if len(texts) == 1 else "".join(texts)
    if calls:
        m["tool_calls"] = calls
    messages.append(m)
    return True


# ============================================================================= Chat -> Anthropic
def chat_to_anthropic(body: dict[str, Any], warnings: list[str]) -> dict[str, Any] | None:
    if not body.keys() <= _C_FIELDS:
        return None
    get = body.get
    model = get("model")
    msgs = get("messages")
    if model.__class__ is not str or msgs.__class__ is not list:
        return None
    # ---- messages: leading system prompt, then turns of alternating roles (blocks of one role
    # merge into one turn; a plain text block stays a str until its turn has more blocks)
    system: list[str] = []
    system_role = None
    turns: list[list[Any]] = []  # [role, content] pairs
    turn: list[Any] = [None, None]
    leading = True
    for m in msgs:
        if m.__class__ is not dict:
            return None
        role = m.get("role")
        content = m.get("content")
        if role == "user":
            leading = False
            if content.__class__ is str:
                if content:
                    turn = _c_block(turns, turn, "user", content)
            elif content.__class__ is list:
                for p in content:
                    if p.__class__ is not dict or p.get("type") != "text" or p.get("cache_control") is not None:
                        return None
                    t = p.get("text")
                    if t.__class__ is not str:
                        return None
                    if t:
                        turn = _c_block(turns, turn, "user", t)
            else:
                return None
            if m.get("tool_calls"):
                return None
        elif role == "assistant":
            leading = False
            if not m.keys() <= _C_ASSISTANT:
                for k in _C_ASSISTANT_SLOW:
                    if m.get(k) is not None:
                        return None
            if content.__class__ is str:
                if content:
                    turn = _c_block(turns, turn, "assistant", content)
            elif content is not None:
                return None
            tcs = m.get("tool_calls")
            if tcs is not None:
                if tcs.__class__ is not list:
                    return None
                for tc in tcs:
                    block = _c_tool_use(tc, warnings)
                    if block is None:
                        return None
                    turn = _c_block(turns, turn, "assistant", block)
        elif role == "tool":
            leading = False
            cid = m.get("tool_call_id")
            if cid.__class__ is not str or content.__class__ is not str or not _tool_id_ok(cid):
                return None
            block = {"type": "tool_result", "tool_use_id": cid}
            if content:
                block["content"] = content
            turn = _c_block(turns, turn, "user", block)
        elif (role == "system" or role == "developer") and leading and (system_role is None or role == system_role):
            if content.__class__ is not str:
                return None
            system_role = role
            if content:
                system.append(content)
        else:
            return None
    messages: list[dict[str, Any]] = []
    for role, content in turns:
        if content.__class__ is list:
            if role == "user":
                seen_other = False
                for b in content:
                    if b.__class__ is str or b["type"] != "tool_result":
                        seen_other = True
                    elif seen_other:
                        return None  # the neutral path moves the results first, with a warning
            content = [{"type": "text", "text": b} if b.__class__ is str else b for b in content]
        messages.append({"role": role, "content": content})
    # ---- tools
    tools = get("tools")
    anthropic_tools: list[dict[str, Any]] = []
    if tools is not None:
        if tools.__class__ is not list:
            return None
        for t in tools:
            if t.__class__ is not dict or t.get("type", "function") != "function":
                return None
            fn = t.get("function")
            if fn.__class__ is not dict:
                return None
            name = fn.get("name")
            params = fn.get("parameters")
            if name.__class__ is not str or (params is not None and params.__class__ is not dict):
                return None
            desc = fn.get("description")
            strict = fn.get("strict")
            cc = t.get("cache_control")
            schema = params if params else EMPTY_SCHEMA
            if "type" not in schema:
                schema = {"type": "object", **schema}
            d: dict[str, Any] = {"name": short_tool_name(name)}
            if desc and isinstance(desc, str):
                d["description"] = desc
            d["input_schema"] = schema
            if strict is True:
                d["strict"] = True
            if cc:
                d["cache_control"] = cc
            anthropic_tools.append(d)
    parallel = get("parallel_tool_calls")
    if parallel is not None and parallel.__class__ is not bool:
        return None
    tc = get("tool_choice")
    choice: dict[str, Any] | None = None
    if tc is not None:
        if tc.__class__ is str:
            t = _C_CHOICES.get(tc)
            if t is None:
                return None
            choice = {"type": t}
        elif tc.__class__ is dict and tc.get("type", "function") == "function":
            inner = tc.get("function")
            name = inner.get("name") if inner.__class__ is dict else None
            if name.__class__ is not str or not name:
                return None
            choice = {"type": "tool", "name": short_tool_name(name)}
        else:
            return None
    if parallel is False:
        if choice is None:
            choice = {"type": "auto"}
        if choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
    if not anthropic_tools and choice is not None:
        if choice["type"] in ("any", "tool"):
            return None  # the neutral path warns
        choice = None
    # ---- scalars
    mct = get("max_completion_tokens")
    mt = get("max_tokens")
    if (mct is not None and mct.__class__ is not int) or (mt is not None and mt.__class__ is not int):
        return None
    temperature = get("temperature")
    top_p = get("top_p")
    if (temperature is not None and (not _num(temperature) or temperature > 1)) or \
            (top_p is not None and (not _num(top_p) or temperature is not None)):
        return None  # a clamp or a dropped top_p: the neutral path warns
    stop = get("stop")
    if stop is not None:
        if stop.__class__ is str:
            stop = [stop]
        elif stop.__class__ is not list or not all(s.__class__ is str for s in stop):
            return None
    stream = get("stream")
    so = get("stream_options")
    user = get("user")
    if (stream is not None and stream.__class__ is not bool) or (so is not None and so.__class__ is not dict) \
            or (user is not None and user.__class__ is not str):
        return None
    out: dict[str, Any] = {"model": model}
    max_tokens = mct if mct is not None else mt
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
        warnings.append(_NO_MAX_TOKENS)
    out["max_tokens"] = max_tokens
    out["messages"] = messages
    if system:
        out["system"] = system[0] if len(system) == 1 else [{"type": "text", "text": s} for s in system]
    if temperature is not None:
        out["temperature"] = temperature
    if top_p is not None:
        out["top_p"] = top_p
    if stop:
        out["stop_sequences"] = list(stop)
    if anthropic_tools:
        out["tools"] = anthropic_tools
        if choice is not None:
            out["tool_choice"] = choice
    if user:
        out["metadata"] = {"user_id": user}
    if stream:
        out["stream"] = True
    return out


def _c_block(turns: list[list[Any]], turn: list[Any], role: str, block: Any) -> list[Any]:
    """Add a block to the current turn, or start the next turn; the current turn."""
    if turn[0] == role:
        content = turn[1]
        if content.__class__ is str:
            turn[1] = [content, block]
        else:
            content.append(block)
        return turn
    turn = [role, block if block.__class__ is str else [block]]
    turns.append(turn)
    return turn


def _c_tool_use(tc: Any, warnings: list[str]) -> dict[str, Any] | None:
    """A Chat function call as an Anthropic tool_use block, or None."""
    if tc.__class__ is not dict:
        return None
    tid = tc.get("id")
    tt = tc.get("type")
    fn = tc.get("function")
    if tid.__class__ is not str or (tt != "function" and tt is not None) or fn.__class__ is not dict \
            or not _tool_id_ok(tid):
        return None
    name = fn.get("name")
    args = fn.get("arguments")
    if name.__class__ is not str:
        return None
    if args is None or args == "" or (args.__class__ is str and args.isspace()):
        inp: Any = {}
    elif args.__class__ is str:
        try:
            inp = orjson.loads(args)
        except orjson.JSONDecodeError:
            return None
        if inp.__class__ is not dict:
            return None
    else:
        return None
    return {"type": "tool_use", "id": tid, "name": short_tool_name(name), "input": inp}


#: (source, target) -> the direct translation for that direction
DIRECT = {
    (Protocol.ANTHROPIC, Protocol.CHAT): anthropic_to_chat,
    (Protocol.CHAT, Protocol.ANTHROPIC): chat_to_anthropic,
}
