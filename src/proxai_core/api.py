"""Public entry points of the translator core."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import neutral as n
from .codecs import codec
from .codecs.base import Codec, StreamDecoder, StreamEncoder
from .collect import Collector, response_to_events
from .context import ClientContext, build_context, context_of
from .errors import TranslationError, native_error, parse_error, translation_error_response
from .jsonutil import dumps
from .protocol import Protocol, as_protocol
from .sse import SSEReader
from .stop import StopInfo, StopReason, classify_stop
from .strict import MalformedEvent, internal_warning, is_strict, malformed_warning


# ----------------------------------------------------------------------------- requests
def translate_request(
    body: dict[str, Any],
    source: Protocol | str,
    target: Protocol | str,
    *,
    warnings: list[str] | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """A client request in ``source`` becomes the upstream request in ``target``. ``path``: the
    client's request path, where ``source`` keeps the model and the stream flag in the URL (the
    upstream path of such a target comes from its ``endpoints.path_for``)."""
    try:
        pair = _REQUEST_CODECS[source, target]
    except (KeyError, TypeError):
        pair = _request_codecs(source, target)
    if pair is None:
        return body
    if not isinstance(body, dict):
        raise TranslationError("request body must be a JSON object", field="body")
    w = warnings if warnings is not None else []
    try:
        req = pair[1].decode_request(body, w)
        if path is not None:
            _facts_of_path(req, pair[1], path)
        return pair[2].encode_request(req, w)
    except TranslationError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as exc:
        # a shape the decoders' checks did not foresee: still the client's mistake, named as such
        raise TranslationError(f"body: malformed {pair[0].value} request ({type(exc).__name__}: {exc})",
                               field="body") from exc


#: (source, target) as given (enum or string) -> (source, its codec, the target's codec); None: same
_REQUEST_CODECS: dict[tuple[Any, Any], tuple[Protocol, Any, Any] | None] = {}


def _request_codecs(source: Protocol | str, target: Protocol | str) -> tuple[Protocol, Any, Any] | None:
    src, tgt = as_protocol(source), as_protocol(target)  # clear errors for unknown protocols
    pair = None if src is tgt else (src, codec(src), codec(tgt))
    _REQUEST_CODECS[src, tgt] = pair  # the enum and its string value are the same key
    return pair


def _facts_of_path(req: n.Request, c: Any, path: str) -> None:
    """The model and stream flag a protocol keeps in the URL, into the neutral request."""
    parse = c.endpoints.parse_path
    facts = parse(path) if parse is not None else None
    if facts is not None:
        req.model = req.model or facts.model
        req.stream = facts.stream


def decode_request(body: dict[str, Any], protocol: Protocol | str,
                   warnings: list[str] | None = None, *, path: str | None = None) -> n.Request:
    """Validate and read a client request into the neutral model (for views and reports)."""
    if not isinstance(body, dict):
        raise TranslationError("request body must be a JSON object", field="body")
    c = codec(as_protocol(protocol))
    req = c.decode_request(body, warnings if warnings is not None else [])
    if path is not None:
        _facts_of_path(req, c, path)
    return req


# ----------------------------------------------------------------------------- glue
def _restore_tool(part: n.ToolCall, ctx: ClientContext) -> None:
    """Upstream tool names back to the client's; custom tools carried as functions restored."""
    part.name = ctx.original_name(part.name)
    if part.kind == "function" and part.name in ctx.custom_tools and codec(ctx.protocol).capabilities.custom_tools:
        part.kind = "custom"
        if part.arguments:
            part.arguments = _unwrap_custom(part.arguments)


def _unwrap_custom(arguments: str) -> str:
    try:
        obj = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(obj, dict) and isinstance(obj.get("input"), str):
        return obj["input"]
    return arguments


def _restore_parts(parts: list[n.Part], ctx: ClientContext) -> None:
    for p in parts:
        if isinstance(p, n.ToolCall):
            _restore_tool(p, ctx)


def _complete_payload(data: str) -> bool:
    """A frame handed over at EOF is forwarded only if it is whole (a cut half event is not)."""
    if data.strip() == "[DONE]":
        return True
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _content_id(data: Any) -> str:
    try:
        raw = data if isinstance(data, (bytes, str)) else dumps(data, sort_keys=True)
    except (TypeError, TranslationError):
        raw = b"unencodable"
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "replace")
    return "px" + hashlib.sha1(raw).hexdigest()[:22]


# ----------------------------------------------------------------------------- responses
@dataclass(slots=True)
class ResponseResult:
    """Everything the addon needs from one complete upstream response."""

    status: int
    body: dict[str, Any]
    stop: StopInfo
    usage: n.Usage | None
    warnings: list[str] = field(default_factory=list)
    model: str | None = None


def translate_response_result(
    body: dict[str, Any],
    source: Protocol | str,
    target: Protocol | str,
    request: dict[str, Any] | None = None,
    *,
    status: int = 200,
    path: str | None = None,
    refusal_in_content: bool = False,
) -> ResponseResult:
    """``path``: the client's request path (model and stream framing of URL-keyed protocols);
    ``refusal_in_content``: a Chat client also gets a refusal's text in ``content``.

    Whose fault is a failure: reading the upstream body (a shape its decoder did not foresee, or
    nesting too deep to walk anywhere) is the upstream's, the client's native 502; anything else
    (building the client's body from the neutral response) is ours: raised in strict mode, else
    named as ProxAI's internal error (logged once) in the client's native 500."""
    source, target = as_protocol(source), as_protocol(target)
    w: list[str] = []
    try:
        resp = codec(source).decode_response(body, w)
    except TranslationError:
        raise
    except _UNREADABLE as exc:
        return _unreadable_response(exc, source, target)
    try:
        return _translate_response_result(body, resp, w, source, target, request, status, path,
                                          refusal_in_content)
    except TranslationError:
        raise
    except RecursionError as exc:  # nesting too deep to walk: the upstream's body, not our bug
        return _unreadable_response(exc, source, target)
    except Exception as exc:
        if is_strict():
            raise
        err = _internal_error(exc, f"translating a complete upstream {source.value} response")
        st, out = native_error(err, target)
        return ResponseResult(st, out, stop_of_error(err), None, [err.message], None)


#: what reading an upstream body of a shape no decoder foresaw raises (MalformedEvent is a ValueError)
_UNREADABLE = (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError)


def _unreadable_response(exc: Exception, source: Protocol, target: Protocol) -> ResponseResult:
    """An upstream body that could not be read: the client's native 502, never a crash."""
    err = n.Error(kind="interrupted", status=502,
                  message=f"the upstream {source.value} response could not be read "
                          f"({type(exc).__name__}: {str(exc)[:200]})")
    st, out = native_error(err, target)
    return ResponseResult(st, out, stop_of_error(err), None, [err.message], None)


def _translate_response_result(body: dict[str, Any], resp: n.Response, w: list[str], source: Protocol,
                               target: Protocol, request: dict[str, Any] | None, status: int,
                               path: str | None = None, refusal_in_content: bool = False) -> ResponseResult:
    if not resp.id:
        resp.id = _content_id(body)
    stop = resp.stop or classify_stop(None)
    if source is target:
        return ResponseResult(status, body, stop, resp.usage, w, resp.model)
    ctx = _context(request, target, path, refusal_in_content)
    err = resp.extra.get("error")
    if (not isinstance(err, n.Error) and stop.reason is StopReason.INTERRUPTED
            and not codec(target).capabilities.interrupted_is_status):
        # an interrupted upstream response is an error, never an invented stop reason
        err = error_of_interrupted_stop(stop)
    if isinstance(err, n.Error):
        st, out = native_error(err, target)
        return ResponseResult(st, out, stop, resp.usage, w, resp.model)
    _restore_parts(resp.parts, ctx)
    out = codec(target).encode_response(resp, ctx, w)
    return ResponseResult(status, out, stop, resp.usage, w, resp.model)


def _context(request: dict[str, Any] | None, target: Protocol, path: str | None,
             refusal_in_content: bool) -> ClientContext:
    ctx = build_context(request, target, path)
    if refusal_in_content:
        ctx.refusal_in_content = True
    return ctx


def translate_response(
    body: dict[str, Any],
    source: Protocol | str,
    target: Protocol | str,
    request: dict[str, Any] | None = None,
    *,
    warnings: list[str] | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """An upstream complete response in ``source`` becomes the client's response in ``target``.

    ``request`` is the client's original request (model name to echo, tool names to restore).
    An upstream failure body (Responses ``status: failed``) becomes the client's native error body;
    use :func:`translate_response_result` to also get the status.
    """
    res = translate_response_result(body, source, target, request, path=path)
    if warnings is not None:
        warnings.extend(res.warnings)
    return res.body


def decode_response(body: dict[str, Any], protocol: Protocol | str,
                    warnings: list[str] | None = None) -> n.Response:
    return codec(as_protocol(protocol)).decode_response(body, warnings if warnings is not None else [])


def stop_info(body: dict[str, Any], protocol: Protocol | str) -> StopInfo:
    """Classify a complete response."""
    resp = codec(as_protocol(protocol)).decode_response(body, [])
    return resp.stop or classify_stop(None)


# ----------------------------------------------------------------------------- errors
def translate_error(
    status: int, body: bytes | str | dict | None, source: Protocol | str, target: Protocol | str
) -> tuple[int, dict[str, Any]]:
    """An upstream HTTP error (any JSON shape, or HTML / text / empty) becomes the client
    protocol's native error body and the right status."""
    as_protocol(source)
    err = parse_error(status, body)
    return native_error(err, as_protocol(target))


def error_stop_info(status: int | None, body: bytes | str | dict | None,
                    headers: Mapping[str, str] | None = None) -> StopInfo:
    """StopInfo for an upstream HTTP error: context overflow errors are context_full; a request
    refused before the model ran (a 4xx other than 408 / 429) is rejected, since retrying it
    unchanged will not help; the rest (5xx, 408, 429, 529) is interrupted. ``headers``: the error
    response's, whose ``retry-after`` / ``retry-after-ms`` the detail keeps."""
    err = parse_error(status, body)
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


# ----------------------------------------------------------------------------- streams
# the stream hot path compares event types by identity (neutral events are never subclassed)
_Delta, _Start, _BlockStart, _BlockEnd = n.Delta, n.Start, n.BlockStart, n.BlockEnd
_Stop, _ErrorEvent, _UsageEvent, _End = n.Stop, n.ErrorEvent, n.UsageEvent, n.End
_INTERRUPTED = StopReason.INTERRUPTED
DecoderFactory = Callable[[list[str]], StreamDecoder]
EncoderFactory = Callable[[ClientContext, list[str]], StreamEncoder]
#: neutral events that go straight to the encoder when no names are restored (nothing to observe)
_PLAIN = frozenset((n.Delta, n.BlockStart, n.BlockEnd))


@dataclass(frozen=True, slots=True)
class _StreamPair:
    """What a stream of one direction is built from, looked up once per (source, target)."""

    source: Protocol
    target: Protocol
    reader: Callable[[], Any]
    decoder: DecoderFactory
    #: None: the same protocol, passed through
    encoder: EncoderFactory | None
    #: pass-through: which upstream events must be decoded (None: all)
    observes: Callable[[str | None, str], bool] | None
    #: the client's codec: its error frame and capabilities
    client: Codec
    #: the context of a stream whose request and path say nothing to the client's codec (the one
    #: build_context would make; shared: encoders only read a context)
    empty: ClientContext
    #: the client's codec reads nothing from a request path
    path_blind: bool
    #: the client's protocol has an interrupted status (else an interrupted turn is its error)
    interrupted_is_status: bool


#: (source, target) as given (enum or string) -> its _StreamPair
_STREAM_PAIRS: dict[tuple[Any, Any], _StreamPair] = {}


def _stream_pair(source: Protocol | str, target: Protocol | str) -> _StreamPair:
    src, tgt = as_protocol(source), as_protocol(target)  # clear errors for unknown protocols
    c, client = codec(src), codec(tgt)
    pair = _STREAM_PAIRS[src, tgt] = _StreamPair(  # (the enum and its string value are the same key)
        src, tgt, c.stream_reader or SSEReader, c.StreamDecoder, None if src is tgt else client.StreamEncoder,
        c.stream_observes, client, ClientContext(tgt), client.endpoints.parse_path is None,
        client.capabilities.interrupted_is_status)
    return pair


def error_of_interrupted_stop(stop: StopInfo) -> n.Error:
    raw = (stop.raw or "").lower()
    kind = "overloaded" if raw in ("insufficient_system_resource",) else "interrupted"
    msg = stop.message or f"the upstream ended the response without finishing it ({stop.raw or 'interrupted'})"
    return n.Error(kind=kind, message=msg, status=529 if kind == "overloaded" else 502, code=stop.raw)


def stop_of_error(error: n.Error) -> StopInfo:
    return classify_stop(
        "error" if error.kind != "interrupted" else "aborted",
        category=error.kind if error.kind != "interrupted" else "interrupted",
        message=error.message,
        detail={k: v for k, v in (("kind", error.kind), ("code", error.code), ("status", error.status))
                if v is not None},
    )


class StreamTranslator:
    """Upstream SSE bytes in ``source`` -> client SSE bytes in ``target``, event by event.

    ``feed`` returns what is ready now (possibly ``b""``); ``close`` at upstream end of stream returns
    the rest. ``stop`` is the StopInfo once known. Same protocol: bytes pass through unchanged (only
    whole events are forwarded) while StopInfo is still observed.

    One route per behaviour: every upstream event is decoded once and its neutral events observed,
    then encoded for the client (:meth:`_translate`) or, same protocol, its own bytes forwarded
    (:meth:`_forward`).
    """

    def __init__(self, source: Protocol | str, target: Protocol | str,
                 request: dict[str, Any] | None = None, *, path: str | None = None,
                 refusal_in_content: bool = False):
        try:
            pair = _STREAM_PAIRS[source, target]
        except (KeyError, TypeError):
            pair = _stream_pair(source, target)
        self._pair = pair
        self.source = pair.source
        self.target = pair.target
        self.warnings: list[str] = []
        self.stop: StopInfo | None = None
        self.usage: n.Usage | None = None
        self.model: str | None = None
        self.error: n.Error | None = None
        self.closed = False
        self._terminal = False
        self._dead = False  # the client stream already ended (error frame sent)
        # custom tools carried as functions: index -> buffered JSON arguments
        self._custom: dict[int, list[str]] = {}
        self._reader = reader = pair.reader()
        self._dec = dec = pair.decoder(self.warnings)
        self._dec_feed = dec.feed  # (bound once: the per-read loop looks up no method)
        self._observes = pair.observes
        enc = pair.encoder
        if enc is None:  # pass-through never encodes: no context, no encoder
            self._pass = True
            self._read = reader.feed_raw
            self._ctx = pair.empty
            self._restore = self._fast = False
            return
        self._pass = False
        self._read = reader.feed
        ctx = self._ctx = (pair.empty if request is None and (path is None or pair.path_blind)
                           and not refusal_in_content else context_of(request, pair.client, path))
        if refusal_in_content:
            ctx.refusal_in_content = True
        self._enc = e = enc(ctx, self.warnings)
        self._enc_encode = e.encode
        self._restore = restore = bool(ctx.name_map or ctx.custom_tools)
        # deltas go straight to the encoder (no names to restore, client stream not ended)
        self._fast = not restore

    @property
    def finished(self) -> bool:
        """The upstream's terminal (or an error) was seen."""
        return self._terminal

    def feed(self, chunk: bytes) -> bytes:
        if self._pass:
            if self.closed:
                return b""
            events, blobs = self._read(chunk)
            if events and not self._terminal:  # (byte-exact after the terminal too: nothing decoded)
                self._forward(events)
            return b"".join(blobs)  # the upstream's own bytes, whole events only
        if self._terminal or self.closed:
            return b""
        read = self._read(chunk)
        return self._translate(read) if read else b""  # (empty: a read in the middle of a long event)

    def close(self) -> bytes:
        if self.closed:
            return b""
        self.closed = True
        if self._pass:
            events, blobs = self._reader.close_raw()
            out = self._tail(events, blobs) if blobs else []
        elif self._terminal:
            return b""
        else:
            rest = self._reader.close()
            out = [self._translate(rest)] if rest else []
        if self._terminal:
            return b"".join(out)
        try:
            evs = self._dec.finish()
        except Exception as exc:  # (finish reads no upstream bytes: always ours)
            if is_strict():
                raise
            self.warnings.append(internal_warning(exc, f"ending an upstream {self.source.value} stream"))
            evs = [n.ErrorEvent(n.Error(kind="interrupted", status=502,
                                        message="the upstream stream could not be finished"))]
        if self._pass:
            for ev in evs:
                if type(ev) not in _PLAIN:
                    self._observe(ev)
                    if type(ev) is _ErrorEvent:
                        out.append(self._pair.client.error_frame(ev.error))
        else:
            for ev in evs:
                self._slow(ev, "", out)
        return b"".join(out)

    def abort(self, message: str = "stream interrupted") -> bytes:
        """The upstream connection failed: the client's native error frame, StopInfo interrupted."""
        if self._terminal:
            return b""
        err = n.Error(kind="interrupted", message=message, status=502)
        ev = n.ErrorEvent(err)
        self._observe(ev)
        self.closed = True
        if self._pass:
            return self._pair.client.error_frame(err)
        if self._dead:
            return b""
        self._dead = True
        self._fast = False
        return self._enc_encode(ev)

    # ------------------------------------------------------------------ the route
    def _translate(self, events: list[tuple[str | None, str]]) -> bytes:
        """Upstream SSE events -> client bytes: each decoded once, its neutral events observed and
        encoded (a delta has nothing to observe: straight to the encoder unless names are restored)."""
        out: list[bytes] = []
        feed, encode = self._dec_feed, self._enc_encode
        fast = self._fast
        for name, data in events:
            try:
                evs = feed(name, data)
            except Exception as exc:
                evs = self._failed(exc)
            for ev in evs:
                if fast and type(ev) in _PLAIN:
                    out.append(encode(ev))  # nothing to observe, no names to restore
                else:
                    self._slow(ev, data, out)
                    fast = self._fast
            if self._terminal:
                break
        return b"".join(out)

    def _forward(self, events: list[tuple[str | None, str] | None]) -> None:
        """Pass-through: each event decoded once and observed (unless its codec says it carries
        nothing observed: :attr:`Codec.stream_observes`), up to the terminal; the caller forwards
        the events' own bytes."""
        feed, observes = self._dec_feed, self._observes
        for sev in events:
            if sev is None:  # comments, blank lines
                continue
            name, data = sev
            if observes is None or observes(name, data):
                try:
                    evs = feed(name, data)
                except Exception as exc:
                    evs = self._failed(exc)
                for ev in evs:
                    if type(ev) not in _PLAIN:  # (blocks and deltas: nothing to observe)
                        if type(ev) is _Start and not ev.id:
                            ev.id = _content_id(data)
                        self._observe(ev)
                if self._terminal:
                    return

    def _tail(self, events: list[tuple[str | None, str] | None], blobs: list[bytes]) -> list[bytes]:
        """Pass-through at EOF: what the reader held, each event observed like any other and its
        bytes forwarded only where its payload is whole (a cut half event is not)."""
        observes = self._observes
        out = []
        for sev, blob in zip(events, blobs, strict=True):
            if sev is None:
                out.append(blob)
                continue
            decoded = not self._terminal and (observes is None or observes(*sev))
            if decoded:
                self._forward([sev])
            if _complete_payload(sev[1]):
                out.append(blob)  # unchanged, even without its final blank line
            elif decoded and self.error is not None:
                # the upstream's own error frame was cut: the client still gets one
                out.append(self._pair.client.error_frame(self.error))
        return out

    def _failed(self, exc: Exception) -> list[n.Event]:
        """The decoder raised: a malformed upstream event is skipped and named as the upstream's; any
        other exception is ours (raised in strict mode, else skipped and named as ours)."""
        if isinstance(exc, MalformedEvent):
            self.warnings.append(malformed_warning(self.source.value, exc))
            return []
        if is_strict():
            raise exc
        self.warnings.append(internal_warning(exc, f"decoding an upstream {self.source.value} stream event"))
        return []

    def _slow(self, ev: n.Event, data: str, out: list[bytes]) -> None:
        """An event that is observed, has names restored or may end the client stream."""
        t = type(ev)
        if type(ev) is _Start and not ev.id:
            ev.id = _content_id(data)  # deterministic ids when the upstream gave none
        self._observe(ev)
        if self._restore:
            for ev2 in self._glue(ev):
                self._encode(ev2, out)
        elif t is _Stop or t is _ErrorEvent:
            self._encode(ev, out)  # what may end the client stream
        elif not self._dead:
            out.append(self._enc_encode(ev))

    def _observe(self, ev: n.Event) -> None:
        t = type(ev)  # neutral events are never subclassed: identity checks
        if t is _Delta or t is _BlockStart or t is _BlockEnd:
            return
        # (type(ev) again, not t: that narrows for the type checker, where typing.cast is a call)
        if type(ev) is _Stop:
            self.stop = ev.stop
        elif type(ev) is _UsageEvent:
            u = ev.usage
            self.usage = u if self.usage is None else self.usage.merge(u)
        elif t is _End:
            self._terminal = True
            if self.stop is None:
                self.stop = classify_stop(None)
        elif type(ev) is _Start:
            self.model = ev.model
            if ev.usage is not None:
                self.usage = ev.usage if self.usage is None else self.usage.merge(ev.usage)
        elif type(ev) is _ErrorEvent:
            err = ev.error
            self.error = err
            self.stop = stop_of_error(err)
            self._terminal = True

    def _glue(self, ev: n.Event) -> list[n.Event]:
        """Tool names back to the client's; custom tool input unwrapped from its JSON carrier."""
        if isinstance(ev, n.BlockStart) and isinstance(ev.part, n.ToolCall):
            p = ev.part
            p.name = self._ctx.original_name(p.name)
            if (p.kind == "function" and p.name in self._ctx.custom_tools
                    and self._pair.client.capabilities.custom_tools):
                p.kind = "custom"
                self._custom[ev.index] = []
            return [ev]
        if self._custom:
            if isinstance(ev, n.Delta) and ev.index in self._custom:
                self._custom[ev.index].append(ev.value)
                return []
            if isinstance(ev, n.BlockEnd) and ev.index in self._custom:
                args = "".join(self._custom.pop(ev.index))
                final = ev.part
                if isinstance(final, n.ToolCall):
                    args = args or final.arguments
                    final.name = self._ctx.original_name(final.name)
                    final.kind = "custom"
                    final.arguments = _unwrap_custom(args)
                value = _unwrap_custom(args)
                out: list[n.Event] = []
                if value:
                    out.append(n.Delta(ev.index, "arguments", value))
                out.append(ev)
                return out
        if isinstance(ev, n.BlockEnd) and isinstance(ev.part, n.ToolCall):
            ev.part.name = self._ctx.original_name(ev.part.name)
        return [ev]

    def _encode(self, ev: n.Event, out: list[bytes]) -> None:
        if self._dead:
            return
        t = type(ev)
        if type(ev) is _Stop:
            if ev.stop.reason is _INTERRUPTED and not self._pair.interrupted_is_status:
                # an interrupted upstream turn reaches the client as its native error
                ev = n.ErrorEvent(error_of_interrupted_stop(ev.stop))
                self._dead = True
                self._fast = False
        elif t is _ErrorEvent:
            self._dead = True
            self._fast = False
        out.append(self._enc_encode(ev))


def stream_from_response(body: dict[str, Any], source: Protocol | str, target: Protocol | str,
                         request: dict[str, Any] | None = None, *, path: str | None = None,
                         refusal_in_content: bool = False) -> tuple[bytes, StopInfo, list[str]]:
    """The client asked to stream but the upstream answered with complete JSON: a correct stream."""
    source, target = as_protocol(source), as_protocol(target)
    try:
        return _stream_from_response(body, source, target, request, path, refusal_in_content)
    except MalformedEvent as exc:
        err = n.Error(kind="interrupted", status=502,
                      message=f"the upstream {source.value} response could not be streamed ({str(exc)[:200]})")
        return codec(target).error_frame(err), stop_of_error(err), [err.message]
    except RecursionError as exc:  # nesting too deep to walk: the upstream's body, not our bug
        err = n.Error(kind="interrupted", status=502,
                      message=f"the upstream {source.value} response could not be streamed ({exc})")
        return codec(target).error_frame(err), stop_of_error(err), [err.message]
    except Exception as exc:
        if is_strict():
            raise
        err = _internal_error(exc, f"streaming a complete upstream {source.value} response")
        return codec(target).error_frame(err), stop_of_error(err), [err.message]


def _internal_error(exc: Exception, what: str) -> n.Error:
    """A ProxAI bug met outside strict mode: named as ours (logged once), the client's native 500."""
    return n.Error(kind="api_error", status=500, message=internal_warning(exc, what))


def _stream_from_response(body: dict[str, Any], source: Protocol, target: Protocol,
                          request: dict[str, Any] | None, path: str | None = None,
                          refusal_in_content: bool = False) -> tuple[bytes, StopInfo, list[str]]:
    w: list[str] = []
    resp = codec(source).decode_response(body, w)
    if not resp.id:
        resp.id = _content_id(body)
    ctx = _context(request, target, path, refusal_in_content)
    _restore_parts(resp.parts, ctx)
    enc = codec(target).StreamEncoder(ctx, w)
    events = response_to_events(resp)
    if (source is not target and not codec(target).capabilities.interrupted_is_status and resp.stop is not None
            and resp.stop.reason is StopReason.INTERRUPTED and not isinstance(resp.extra.get("error"), n.Error)):
        events = [ev for ev in events if not isinstance(ev, (n.Stop, n.End))]
        events.append(n.ErrorEvent(error_of_interrupted_stop(resp.stop)))
    out = b"".join(enc.encode(ev) for ev in events)
    err = resp.extra.get("error")
    stop = stop_of_error(err) if isinstance(err, n.Error) else (resp.stop or classify_stop(None))
    return out, stop, w


def response_from_stream(sse: bytes, source: Protocol | str, target: Protocol | str,
                         request: dict[str, Any] | None = None, *, path: str | None = None,
                         refusal_in_content: bool = False) -> ResponseResult:
    """The client did not stream but the upstream did: collect it into a complete response."""
    source, target = as_protocol(source), as_protocol(target)
    try:
        return _response_from_stream(sse, source, target, request, path, refusal_in_content)
    except Exception as exc:  # (a malformed upstream event is skipped inside: this one is ours)
        if is_strict():
            raise
        err = _internal_error(exc, f"collecting an upstream {source.value} stream")
        st, out = native_error(err, target)
        return ResponseResult(st, out, stop_of_error(err), None, [err.message], None)


def _response_from_stream(sse: bytes, source: Protocol, target: Protocol,
                          request: dict[str, Any] | None, path: str | None = None,
                          refusal_in_content: bool = False) -> ResponseResult:
    w: list[str] = []
    reader = (codec(source).stream_reader or SSEReader)()
    dec = codec(source).StreamDecoder(w)
    col = Collector()
    for sev in reader.feed(sse) + reader.close():
        try:
            evs = dec.feed(sev[0], sev[1])
        except MalformedEvent as exc:  # as in StreamTranslator: skipped, the upstream named
            w.append(malformed_warning(source.value, exc))
            continue
        except Exception as exc:  # ours: raised in strict mode, else skipped and named as ours
            if is_strict():
                raise
            w.append(internal_warning(exc, f"decoding an upstream {source.value} stream event"))
            continue
        for ev in evs:
            col.add(ev)
    if not dec.done:
        for ev in dec.finish():
            col.add(ev)
    resp = col.finish()
    if col.error is not None:
        st, body = native_error(col.error, target)
        return ResponseResult(st, body, stop_of_error(col.error), resp.usage, w, resp.model)
    ctx = _context(request, target, path, refusal_in_content)
    _restore_parts(resp.parts, ctx)
    body = codec(target).encode_response(resp, ctx, w)
    return ResponseResult(200, body, resp.stop or classify_stop(None), resp.usage, w, resp.model)


def error_response(exc: Exception, target: Protocol | str) -> tuple[int, dict[str, Any]]:
    """A TranslationError (or malformed client input) as the client's native 400."""
    return translation_error_response(exc, as_protocol(target))


__all__ = [
    "translate_request",
    "translate_response",
    "translate_response_result",
    "translate_error",
    "stop_info",
    "StreamTranslator",
    "stream_from_response",
    "response_from_stream",
    "ResponseResult",
    "StopReason",
]
