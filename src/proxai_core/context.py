"""What the encoders of a client's response need to know about the client's request.

Built from the client's original body (never from the translated one), so it needs no state
between requests: tool-name shortening is a pure function and its reverse map is rebuilt here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from .protocol import Protocol

NAME_LIMIT = 64
_VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


#: name -> short name at the default limit (it is on every tool, call and choice of every request)
_SHORT: dict[str, str] = {}
_SHORT_MAX = 4096


def short_tool_name(name: str, limit: int = NAME_LIMIT) -> str:
    """A name every target accepts; unchanged when already valid. Deterministic (reversible via
    :class:`ClientContext`, which recomputes it from the client's tool list)."""
    if limit == NAME_LIMIT and name.__class__ is str:
        short = _SHORT.get(name)
        if short is None:
            short = _short_tool_name(name, limit)
            if len(_SHORT) < _SHORT_MAX:
                _SHORT[name] = short
        return short
    return _short_tool_name(name, limit)


def _short_tool_name(name: str, limit: int) -> str:
    if _VALID.match(name) and len(name) <= limit:
        return name
    clean = re.sub(r"[^a-zA-Z0-9_-]", "_", name) or "tool"
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return f"{clean[: limit - 9]}_{digest}"


@dataclass(slots=True)
class ClientContext:
    protocol: Protocol
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    #: Names of client tools that are Responses/Chat "custom" tools (free text input).
    custom_tools: set[str] = field(default_factory=set)
    #: shortened upstream name -> client's original name
    name_map: dict[str, str] = field(default_factory=dict)
    #: The client's requested stop sequences (to recover which one matched, where possible).
    stop: list[str] | None = None
    #: Gemini clients: a stream is SSE (``alt=sse``) or one JSON array (set from the URL).
    sse: bool = True

    def original_name(self, name: str) -> str:
        return self.name_map.get(name, name)


def _tool_names(body: dict[str, Any], protocol: Protocol) -> tuple[list[str], set[str]]:
    names: list[str] = []
    custom: set[str] = set()
    tools = body.get("tools")
    if not isinstance(tools, list):
        return names, custom
    if protocol is Protocol.GEMINI:
        for t in tools:
            decls = t.get("functionDeclarations") if isinstance(t, dict) else None
            for d in decls if isinstance(decls, list) else ():
                if isinstance(d, dict) and isinstance(d.get("name"), str):
                    names.append(d["name"])
        return names, custom
    for t in tools:
        if not isinstance(t, dict):
            continue
        ttype = t.get("type")
        if protocol is Protocol.CHAT:
            fn = t.get("function") if ttype in (None, "function") else t.get("custom")
            name = fn.get("name") if isinstance(fn, dict) else None
            if ttype == "custom" and isinstance(name, str):
                custom.add(name)
        else:
            name = t.get("name")
            if protocol is Protocol.RESPONSES and ttype == "custom" and isinstance(name, str):
                custom.add(name)
        if isinstance(name, str):
            names.append(name)
    return names, custom


def build_context(request: dict[str, Any] | None, protocol: Protocol | str) -> ClientContext:
    protocol = Protocol(protocol)
    ctx = ClientContext(protocol=protocol)
    if not isinstance(request, dict):
        return ctx
    model = request.get("model")
    ctx.model = model if isinstance(model, str) else None
    ctx.stream = bool(request.get("stream"))
    so = request.get("stream_options")
    ctx.include_usage = isinstance(so, dict) and bool(so.get("include_usage"))
    names, custom = _tool_names(request, protocol)
    ctx.custom_tools = custom
    for n in names:
        s = short_tool_name(n)
        if s != n:
            ctx.name_map[s] = n
    if protocol is Protocol.GEMINI:
        gc = request.get("generationConfig")
        stop = gc.get("stopSequences") if isinstance(gc, dict) else None
    else:
        stop = request.get("stop_sequences") if protocol is Protocol.ANTHROPIC else request.get("stop")
    if isinstance(stop, str):
        ctx.stop = [stop]
    elif isinstance(stop, list):
        ctx.stop = [s for s in stop if isinstance(s, str)]
    return ctx
