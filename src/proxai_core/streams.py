"""One upstream stream, event by event: translated for the client, or passed through and observed.

:class:`StreamTranslator` is the stream engine of :class:`~proxai_core.exchange.Exchange` (which the
proxy uses); it is public for library users who translate a stream without an exchange.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from . import neutral as n
from .client import request_context
from .codecs import get
from .codecs.base import Codec, StreamDecoder, StreamEncoder
from .collect import Collector
from .context import ClientContext
from .jsonutil import dumps
from .protocol import Protocol, as_protocol
from .stop import StopInfo, StopReason, classify_stop
from .strict import MalformedEvent, internal_warning, is_strict, malformed_warning

__all__ = ["CONTENT_DELTAS", "StreamTranslator", "content_id", "error_of_interrupted_stop", "interrupted_error",
           "is_content", "stop_of_error", "unwrap_custom"]

#: delta kinds that carry what the model produced (signatures do not)
CONTENT_DELTAS = frozenset({"text", "refusal", "reasoning", "summary", "arguments"})
#: neutral events that carry no start, stop, usage, error or terminal fact
_PLAIN = (n.Delta, n.BlockStart, n.BlockEnd)


def is_content(ev: n.Event) -> bool:
    """The first event of what the model produced (time to first token): a text, refusal, reasoning or
    tool-call delta, a tool call starting or a block opening with text; the stop of an answer that has
    no content at all (a bare refusal)."""
    if isinstance(ev, n.Delta):
        return ev.kind in CONTENT_DELTAS and bool(ev.value)
    if isinstance(ev, n.Stop):
        return True
    if isinstance(ev, n.BlockStart):
        p = ev.part
        if isinstance(p, n.ToolCall):
            return True
        text = getattr(p, "text", None)
        return isinstance(text, str) and bool(text)
    return False


def content_id(data: Any) -> str:
    """A deterministic id for an upstream response that gave none (the same bytes, the same id)."""
    try:
        raw = data if isinstance(data, (bytes, str)) else dumps(data, sort_keys=True)
    except (TypeError, ValueError):
        raw = b"unencodable"
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "replace")
    return "px" + hashlib.sha1(raw).hexdigest()[:22]


def unwrap_custom(arguments: str) -> str:
    """A custom (free-text) tool's input carried as a function's ``{"input": ...}`` arguments."""
    try:
        obj = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(obj, dict) and isinstance(obj.get("input"), str):
        return str(obj["input"])
    return arguments


def error_of_interrupted_stop(stop: StopInfo) -> n.Error:
    raw = (stop.raw or "").lower()
    kind = n.ErrorKind.OVERLOADED if raw in ("insufficient_system_resource",) else n.ErrorKind.INTERRUPTED
    msg = stop.message or f"the upstream ended the response without finishing it ({stop.raw or 'interrupted'})"
    return n.Error(kind=kind, message=msg, status=529 if kind == "overloaded" else 502, code=stop.raw)


def interrupted_error(stop: StopInfo | None, client: Codec) -> n.Error | None:
    """The rule for an interrupted upstream turn: a protocol with an interrupted status carries it as
    a status; every other client gets its native error, never an invented stop reason. Returns that
    error, or None when the stop reaches the client as it is."""
    if stop is None or stop.reason is not StopReason.INTERRUPTED or client.capabilities.interrupted_is_status:
        return None
    return error_of_interrupted_stop(stop)


def stop_of_error(error: n.Error) -> StopInfo:
    return classify_stop(
        "error" if error.kind != "interrupted" else "aborted",
        category=error.kind if error.kind != "interrupted" else "interrupted",
        message=error.message,
        detail={k: v for k, v in (("kind", error.kind), ("code", error.code), ("status", error.status))
                if v is not None},
    )


def _complete_payload(data: str) -> bool:
    """A frame handed over at EOF is forwarded only if it is whole (a cut half event is not)."""
    if data.strip() == "[DONE]":
        return True
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


class StreamTranslator:
    """Upstream stream bytes in ``source`` -> client bytes in ``target``, event by event.

    ``feed`` returns what is ready now (possibly ``b""``); ``close`` at upstream end of stream returns
    the rest. Same protocol: bytes pass through unchanged (only whole events are forwarded) while
    StopInfo is still observed. Observations: ``stop``, ``usage``, ``model``, ``error``, ``warnings``
    and ``first_content`` (how many upstream bytes had been fed when the first content event was
    decoded: the time-to-first-token mark, for every framing).

    Every upstream event is decoded once and its neutral events observed, then encoded for the client
    (:meth:`_translate`) or, same protocol, its own bytes forwarded (:meth:`_forward`). A pass-through
    decodes only what it must observe (the codec's ``stream_observes``) once the first content passed;
    ``collector``: every event decoded and accumulated (a neutral complete response, for views).
    """

    def __init__(self, source: Protocol | str, target: Protocol | str,
                 request: dict[str, Any] | None = None, *, path: str | None = None,
                 refusal_in_content: bool = False, context: ClientContext | None = None,
                 collector: Collector | None = None, warnings: list[str] | None = None) -> None:
        src, client = get(as_protocol(source)), get(as_protocol(target))
        self.source = src.protocol
        self.target = client.protocol
        self._client = client
        self.warnings: list[str] = warnings if warnings is not None else []
        self.stop: StopInfo | None = None
        self.usage: n.Usage | None = None
        self.model: str | None = None
        self.error: n.Error | None = None
        self.first_content: int | None = None
        #: SSE (or the protocol's own framing) events read from the upstream
        self.events = 0
        self.closed = False
        self._fed = 0
        self._terminal = False
        self._dead = False  # the client stream already ended (error frame sent)
        #: blocks and deltas go straight to the encoder: nothing left to observe in them (the first
        #: content passed, nothing collected), no tool names to restore, the client stream open
        self._direct = False
        self._collector = collector
        # custom tools carried as functions: index -> buffered JSON arguments
        self._custom: dict[int, list[str]] = {}
        self._reader = src.stream_reader()
        self._dec: StreamDecoder = src.StreamDecoder(self.warnings)
        self._pass = src is client
        #: a pass-through decodes only the events its codec says carry facts (after the first content)
        self._observes = None if collector is not None else src.stream_observes
        if self._pass:
            self._ctx = ClientContext(client.protocol)
            self._restore = False
            return
        ctx = context if context is not None else request_context(request, client, path)
        if refusal_in_content:
            ctx.refusal_in_content = True
        self._ctx = ctx
        self._enc: StreamEncoder = client.StreamEncoder(ctx, self.warnings)
        self._restore = bool(ctx.name_map or ctx.custom_tools)

    @property
    def finished(self) -> bool:
        """The upstream's terminal (or an error) was seen."""
        return self._terminal

    def feed(self, chunk: bytes) -> bytes:
        self._fed += len(chunk)
        if self._pass:
            if self.closed:
                return b""
            events, blobs = self._reader.feed_raw(chunk)
            if events and not self._terminal:  # (byte-exact after the terminal too: nothing decoded)
                self._forward(events)
            return b"".join(blobs)  # the upstream's own bytes, whole events only
        if self._terminal or self.closed:
            return b""
        read = self._reader.feed(chunk)
        return self._translate(read) if read else b""  # (empty: a read in the middle of a long event)

    def close(self) -> bytes:
        if self.closed:
            return b""
        self.closed = True
        out: list[bytes] = []
        if self._pass:
            events, blobs = self._reader.close_raw()
            if blobs:
                out = self._tail(events, blobs)
        elif self._terminal:
            return b""
        else:
            rest = self._reader.close()
            if rest:
                out.append(self._translate(rest))
        if self._terminal:
            return b"".join(out)
        try:
            evs = self._dec.finish()
        except Exception as exc:  # (finish reads no upstream bytes: always ours)
            if is_strict():
                raise
            self.warnings.append(internal_warning(exc, f"ending an upstream {self.source.value} stream"))
            evs = [n.ErrorEvent(n.Error(kind=n.ErrorKind.INTERRUPTED, status=502,
                                        message="the upstream stream could not be finished"))]
        for ev in evs:
            if self._pass:
                self._observe(ev)
                if isinstance(ev, n.ErrorEvent):
                    out.append(self._client.error_frame(ev.error))
            else:
                self._emit(ev, "", out)
        return b"".join(out)

    def abort(self, message: str = "stream interrupted") -> bytes:
        """The upstream connection failed: the client's native error frame, StopInfo interrupted."""
        if self._terminal:
            return b""
        err = n.Error(kind=n.ErrorKind.INTERRUPTED, message=message, status=502)
        ev = n.ErrorEvent(err)
        self._observe(ev)
        self.closed = True
        if self._pass:
            return self._client.error_frame(err)
        if self._dead:
            return b""
        self._dead, self._direct = True, False
        return self._enc.encode(ev)

    # ------------------------------------------------------------------ the route
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

    def _translate(self, events: list[tuple[str | None, str]]) -> bytes:
        """Upstream events -> client bytes: each decoded once, its neutral events observed and encoded."""
        out: list[bytes] = []
        self.events += len(events)
        decode, encode = self._dec.feed, self._enc.encode
        for name, data in events:
            try:
                evs = decode(name, data)
            except Exception as exc:
                evs = self._failed(exc)
            for ev in evs:
                if self._direct and isinstance(ev, _PLAIN):
                    out.append(encode(ev))  # a block or delta once the first content passed
                else:
                    self._emit(ev, data, out)
            if self._terminal:
                break
        return b"".join(out)

    def _forward(self, events: list[tuple[str | None, str] | None]) -> None:
        """Pass-through: each event decoded once and observed (unless its codec says it carries
        nothing observed and the first content already passed), up to the terminal; the caller
        forwards the events' own bytes."""
        for sev in events:
            if sev is None:  # comments, blank lines
                continue
            name, data = sev
            observes = self._observes
            if observes is not None and self.first_content is not None and not observes(name, data):
                continue
            self.events += 1
            try:
                evs = self._dec.feed(name, data)
            except Exception as exc:
                evs = self._failed(exc)
            for ev in evs:
                if isinstance(ev, n.Start) and not ev.id:
                    ev.id = content_id(data)
                self._observe(ev)
            if self._terminal:
                return

    def _tail(self, events: list[tuple[str | None, str] | None], blobs: list[bytes]) -> list[bytes]:
        """Pass-through at EOF: what the reader held, each event observed like any other and its
        bytes forwarded only where its payload is whole (a cut half event is not)."""
        out = []
        for sev, blob in zip(events, blobs, strict=True):
            if sev is None:
                out.append(blob)
                continue
            decoded = not self._terminal
            if decoded:
                self._forward([sev])
            if _complete_payload(sev[1]):
                out.append(blob)  # unchanged, even without its final blank line
            elif decoded and self.error is not None:
                # the upstream's own error frame was cut: the client still gets one
                out.append(self._client.error_frame(self.error))
        return out

    def _emit(self, ev: n.Event, data: str, out: list[bytes]) -> None:
        """Observe one neutral event, restore the client's tool names, encode it for the client."""
        if isinstance(ev, n.Start) and not ev.id:
            ev.id = content_id(data)  # deterministic ids when the upstream gave none
        self._observe(ev)
        if self._restore:
            for ev2 in self._glue(ev):
                self._encode(ev2, out)
        elif isinstance(ev, _PLAIN):
            if not self._dead:
                out.append(self._enc.encode(ev))  # (a block or a delta never ends the client stream)
        else:
            self._encode(ev, out)

    def _observe(self, ev: n.Event) -> None:
        if self.first_content is None and is_content(ev):
            self.first_content = self._fed
            self._direct = not (self._pass or self._restore or self._dead or self._collector is not None)
        if self._collector is not None:
            self._collector.add(ev)
        if isinstance(ev, _PLAIN):
            return
        if isinstance(ev, n.Stop):
            self.stop = ev.stop
        elif isinstance(ev, n.UsageEvent):
            self.usage = ev.usage if self.usage is None else self.usage.merge(ev.usage)
        elif isinstance(ev, n.End):
            self._terminal = True
            if self.stop is None:
                self.stop = classify_stop(None)
        elif isinstance(ev, n.Start):
            self.model = ev.model
            if ev.usage is not None:
                self.usage = ev.usage if self.usage is None else self.usage.merge(ev.usage)
        elif isinstance(ev, n.ErrorEvent):
            self.error = ev.error
            self.stop = stop_of_error(ev.error)
            self._terminal = True

    def _glue(self, ev: n.Event) -> list[n.Event]:
        """Tool names back to the client's; custom tool input unwrapped from its JSON carrier."""
        if isinstance(ev, n.BlockStart) and isinstance(ev.part, n.ToolCall):
            p = ev.part
            p.name = self._ctx.original_name(p.name)
            if p.kind == "function" and p.name in self._ctx.custom_tools and self._client.capabilities.custom_tools:
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
                    final.arguments = unwrap_custom(args)
                value = unwrap_custom(args)
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
        if isinstance(ev, n.Stop):
            err = interrupted_error(ev.stop, self._client)
            if err is not None:
                ev = n.ErrorEvent(err)
        if isinstance(ev, n.ErrorEvent):
            self._dead = True
            self._direct = False
        out.append(self._enc.encode(ev))
