"""Complete upstream bodies: a JSON response translated for the client, streamed to it, or a stream
collected into one; an upstream error's StopInfo. Used by :class:`~proxai_core.exchange.Exchange`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import neutral as n
from .codecs.base import Codec
from .collect import Collector, response_to_events
from .context import ClientContext
from .errors import TranslationError, parse_error
from .stop import StopInfo, StopReason, classify_stop
from .streams import StreamTranslator, content_id, interrupted_error, stop_of_error, unwrap_custom
from .strict import MalformedEvent, internal_warning, is_strict

__all__ = ["ResponseResult", "collect_result", "complete_result", "error_stop_info", "stop_of_http_error",
           "stream_result"]


# ----------------------------------------------------------------------------- complete responses
@dataclass(slots=True)
class ResponseResult:
    """Everything known about one complete upstream response once translated for the client."""

    status: int
    body: dict[str, Any]
    stop: StopInfo
    usage: n.Usage | None
    warnings: list[str] = field(default_factory=list)
    model: str | None = None
    #: the upstream's failure, carried as the client's native error
    error: n.Error | None = None
    #: the neutral response (None where the body could not be read)
    response: n.Response | None = None


def _restore_parts(parts: list[n.Part], ctx: ClientContext, client: Codec) -> None:
    """Upstream tool names back to the client's; custom tools carried as functions restored."""
    for part in parts:
        if not isinstance(part, n.ToolCall):
            continue
        part.name = ctx.original_name(part.name)
        if part.kind == "function" and part.name in ctx.custom_tools and client.capabilities.custom_tools:
            part.kind = "custom"
            if part.arguments:
                part.arguments = unwrap_custom(part.arguments)


#: what reading an upstream body of a shape no decoder foresaw raises (MalformedEvent is a ValueError)
_UNREADABLE = (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError)


def _failed(err: n.Error, client: Codec, w: list[str], resp: n.Response | None = None) -> ResponseResult:
    """A body that could not be translated: the client's native error, the failure named in warnings."""
    st, out = client.error_response(err)
    w.append(err.message)
    return ResponseResult(st, out, stop_of_error(err), resp.usage if resp else None, w,
                          resp.model if resp else None, err, resp)


def _internal_error(exc: Exception, what: str) -> n.Error:
    """A ProxAI bug met outside strict mode: named as ours (logged once), the client's native 500."""
    return n.Error(kind=n.ErrorKind.API_ERROR, status=500, message=internal_warning(exc, what))


def _unreadable(exc: Exception, source: Codec, what: str = "read") -> n.Error:
    """An upstream body that could not be read: the upstream's fault, the client's native 502."""
    return n.Error(kind=n.ErrorKind.INTERRUPTED, status=502,
                   message=f"the upstream {source.protocol.value} response could not be {what} "
                           f"({type(exc).__name__}: {str(exc)[:200]})")


def complete_result(body: dict[str, Any], source: Codec, client: Codec, ctx: ClientContext | None, *,
                    status: int = 200) -> ResponseResult:
    """A complete upstream JSON response -> the client's (``ctx`` None: same protocol, only read).

    Whose fault is a failure: reading the upstream body (a shape its decoder did not foresee, or
    nesting too deep to walk anywhere) is the upstream's, the client's native 502; anything else
    (building the client's body from the neutral response) is ours: raised in strict mode, else
    named as ProxAI's internal error (logged once) in the client's native 500."""
    w: list[str] = []
    try:
        resp = source.decode_response(body, w)
    except TranslationError:
        raise
    except _UNREADABLE as exc:
        return _failed(_unreadable(exc, source), client, w)
    if not resp.id:
        resp.id = content_id(body)
    stop = resp.stop or classify_stop(None)
    err = resp.extra.get("error")
    error = err if isinstance(err, n.Error) else None
    if source is client:
        return ResponseResult(status, body, stop, resp.usage, w, resp.model, error, resp)
    if error is None:
        error = interrupted_error(stop, client)
    if error is not None:
        st, out = client.error_response(error)
        return ResponseResult(st, out, stop, resp.usage, w, resp.model, error, resp)
    try:
        assert ctx is not None, "a translation needs the client's context"
        _restore_parts(resp.parts, ctx, client)
        out = client.encode_response(resp, ctx, w)
    except TranslationError:
        raise
    except RecursionError as exc:  # nesting too deep to walk: the upstream's body, not our bug
        return _failed(_unreadable(exc, source), client, w, resp)
    except Exception as exc:
        if is_strict():
            raise
        return _failed(_internal_error(exc, f"translating a complete upstream {source.protocol.value} response"),
                       client, w, resp)
    return ResponseResult(status, out, stop, resp.usage, w, resp.model, None, resp)


def stream_result(body: dict[str, Any], source: Codec, client: Codec, ctx: ClientContext
                  ) -> tuple[bytes, ResponseResult]:
    """The client asked to stream but the upstream answered with complete JSON: a correct stream
    (its frames) and what the response said."""
    w: list[str] = []
    resp: n.Response | None = None
    try:
        resp = source.decode_response(body, w)
        if not resp.id:
            resp.id = content_id(body)
        _restore_parts(resp.parts, ctx, client)
        enc = client.StreamEncoder(ctx, w)
        events = response_to_events(resp)
        err = resp.extra.get("error")
        error = err if isinstance(err, n.Error) else None
        if source is not client and error is None:
            error = interrupted_error(resp.stop, client)
            if error is not None:  # the interrupted turn ends as the client's error, not a stop
                events = [ev for ev in events if not isinstance(ev, (n.Stop, n.End))]
                events.append(n.ErrorEvent(error))
        out = b"".join(enc.encode(ev) for ev in events)
    except (MalformedEvent, RecursionError) as exc:  # the upstream's body, not our bug
        error = _unreadable(exc, source, "streamed")
        return client.error_frame(error), _failed(error, client, w, resp)
    except Exception as exc:
        if is_strict():
            raise
        error = _internal_error(exc, f"streaming a complete upstream {source.protocol.value} response")
        return client.error_frame(error), _failed(error, client, w, resp)
    stop = stop_of_error(err) if isinstance(err, n.Error) else (resp.stop or classify_stop(None))
    return out, ResponseResult(200, {}, stop, resp.usage, w, resp.model, error, resp)


def collect_result(data: bytes, source: Codec, client: Codec, ctx: ClientContext) -> ResponseResult:
    """The client did not stream but the upstream did: the stream collected into a complete response."""
    w: list[str] = []
    col = Collector()
    try:
        t = StreamTranslator(source.protocol, source.protocol, collector=col, warnings=w)
        t.feed(data)
        t.close()
        resp = col.finish()
        if col.error is not None:
            st, out = client.error_response(col.error)
            return ResponseResult(st, out, stop_of_error(col.error), resp.usage, w, resp.model, col.error, resp)
        _restore_parts(resp.parts, ctx, client)
        body = client.encode_response(resp, ctx, w)
    except Exception as exc:  # (a malformed upstream event is skipped inside: this one is ours)
        if is_strict():
            raise
        return _failed(_internal_error(exc, f"collecting an upstream {source.protocol.value} stream"), client, w)
    return ResponseResult(200, body, resp.stop or classify_stop(None), resp.usage, w, resp.model, None, resp)



# ----------------------------------------------------------------------------- errors
def error_stop_info(status: int | None, body: bytes | str | dict[str, Any] | None,
                    headers: Mapping[str, str] | None = None) -> StopInfo:
    """StopInfo for an upstream HTTP error: context overflow errors are context_full; a request
    refused before the model ran (a 4xx other than 408 / 429) is rejected, since retrying it
    unchanged will not help; the rest (5xx, 408, 429, 529) is interrupted. ``headers``: the error
    response's, whose ``retry-after`` / ``retry-after-ms`` the detail keeps (and whose error type
    header, where a protocol has one, names the error's type)."""
    return stop_of_http_error(parse_error(status, body, headers), status, headers)


def stop_of_http_error(err: n.Error, status: int | None, headers: Mapping[str, str] | None = None) -> StopInfo:
    """:func:`error_stop_info` of an error body already read (``parse_error``)."""
    raw = err.code or err.kind
    msg = err.message
    detail: dict[str, Any] = {"status": status, "error_kind": err.kind}
    if headers is not None:
        for name in ("retry-after", "retry-after-ms"):
            value = headers.get(name)
            if value:
                detail[name.replace("-", "_")] = value
    # a code the stop vocabulary reads as context_full, or a message that says so
    if (err.code is not None and classify_stop(err.code).reason is StopReason.CONTEXT_FULL) or (
        isinstance(msg, str) and ("prompt is too long" in msg or "context length" in msg.lower())
    ):
        return StopInfo(StopReason.CONTEXT_FULL, raw=raw, message=msg, detail=detail)
    code = err.status if err.status is not None else status  # (a body read without its status: the kind's)
    if code is not None and 400 <= code < 500 and code not in (408, 429) and err.kind not in _INFRASTRUCTURE_KINDS:
        return StopInfo(StopReason.REJECTED, raw="error", category=raw, message=msg, detail=detail)
    return classify_stop("error", category=raw, message=msg, detail=detail)


#: error kinds that say infrastructure ended the request whatever 4xx status carried them
_INFRASTRUCTURE_KINDS = frozenset({"rate_limit", "timeout", "overloaded", "interrupted"})


