"""What the client's encoders need to know about its request (:class:`~proxai_core.context.ClientContext`),
built from the decoded request: one reader of the client's tools, the codec's request decoder."""

from __future__ import annotations

from typing import Any

from . import neutral as n
from .codecs.base import Codec
from .context import ClientContext, short_tool_name
from .errors import TranslationError

__all__ = ["context_of_body", "context_of_request", "request_context"]


def _path_context(client: Codec, path: str | None) -> tuple[ClientContext, bool]:
    """A context with what the path says (model, stream, framing), and whether it said anything."""
    ctx = ClientContext(client.protocol)
    parse = client.wire.endpoints.parse_path
    facts = parse(path) if path and parse is not None else None
    if facts is not None:
        ctx.model, ctx.stream, ctx.sse = facts.model, facts.stream, facts.sse
    return ctx, facts is not None


def context_of_body(body: dict[str, Any] | None, client: Codec, path: str | None = None) -> ClientContext:
    """The context of a request no decoder reads (e.g. a recording's): its path's facts and its plain
    fields (model, stream flag, usage option, stop sequences); no tools."""
    ctx, in_path = _path_context(client, path)
    if not isinstance(body, dict):
        return ctx
    f = client.wire.fields
    model = body.get(f.model)
    if isinstance(model, str) or not in_path:
        ctx.model = model if isinstance(model, str) else None
    if not in_path:
        ctx.stream = bool(body.get(f.stream))
    if f.stream_options is not None:
        so = body.get(f.stream_options)
        ctx.include_usage = isinstance(so, dict) and bool(so.get("include_usage"))
    stop = body.get(f.stop)
    if isinstance(stop, str):
        ctx.stop = [stop]
    elif isinstance(stop, list):
        ctx.stop = [s for s in stop if isinstance(s, str)]
    return ctx


def context_of_request(req: n.Request | None, client: Codec, path: str | None = None) -> ClientContext:
    """What the client's encoders need to know about its request, from the decoded request: model,
    stream flags, stop sequences and its tools (names shortened for upstreams are restored, free-text
    custom tools and tools flattened out of a namespace recognized)."""
    ctx, in_path = _path_context(client, path)
    if req is None:
        return ctx
    if req.model is not None or not in_path:
        ctx.model = req.model
    if not in_path:
        ctx.stream = req.stream
    ctx.include_usage = req.include_usage
    for tool in req.tools:
        short = short_tool_name(tool.name)
        if short != tool.name:
            ctx.name_map[short] = tool.name
        if tool.kind == "custom":
            ctx.custom_tools.add(tool.name)
        if tool.namespace is not None:
            ctx.namespaces[tool.name] = tool.namespace
    ctx.stop = list(req.stop) if req.stop is not None else None
    return ctx


def request_context(body: dict[str, Any] | None, client: Codec, path: str | None = None) -> ClientContext:
    """The context of a client request body: decoded by the client's codec (a request it cannot read
    gives the facts of its plain fields and path only)."""
    if not isinstance(body, dict):
        return context_of_body(None, client, path)
    try:
        req = client.decode_request(body, [])
    except (TranslationError, TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError):
        return context_of_body(body, client, path)
    return context_of_request(req, client, path)
