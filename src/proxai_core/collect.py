"""Neutral stream <-> neutral complete response (for the stream/non-stream cross cases)."""

from __future__ import annotations

from .neutral import (
    BlockEnd,
    BlockStart,
    Delta,
    End,
    Error,
    ErrorEvent,
    Event,
    Opaque,
    Part,
    Reasoning,
    Refusal,
    Response,
    Start,
    Stop,
    Text,
    ToolCall,
    UsageEvent,
    WebSearchCall,
    WebSearchResults,
)
from .stop import StopReason, classify_stop


class Collector:
    """Accumulates neutral events into a :class:`Response` (plus the terminal error, if any)."""

    def __init__(self) -> None:
        self.response = Response()
        self.error: Error | None = None
        self.ended = False
        self._open: dict[int, Part] = {}
        self._order: list[int] = []

    def add(self, ev: Event) -> None:
        r = self.response
        if isinstance(ev, Delta):
            part = self._open.get(ev.index)
            if part is None:
                return
            k = ev.kind
            if k == "text" and isinstance(part, Text):
                part.text += ev.value
            elif k == "refusal" and isinstance(part, Refusal):
                part.text += ev.value
            elif k in ("reasoning", "summary") and isinstance(part, Reasoning):
                part.text += ev.value
            elif k == "arguments" and isinstance(part, ToolCall):
                part.arguments += ev.value
        elif isinstance(ev, BlockStart):
            p = ev.part
            # copy so the caller's objects stay untouched
            if isinstance(p, Text):
                p = Text(p.text, list(p.citations) if p.citations else None)
            elif isinstance(p, Refusal):
                p = Refusal(p.text)
            elif isinstance(p, Reasoning):
                p = Reasoning(p.text, p.summary, p.opaque, p.redacted)
            elif isinstance(p, ToolCall):
                p = ToolCall(p.id, p.name, p.arguments, p.kind, p.item_id)
            self._open[ev.index] = p
            self._order.append(ev.index)
        elif isinstance(ev, BlockEnd):
            final = ev.part
            if final is not None and ev.index in self._open:
                cur = self._open[ev.index]
                if isinstance(final, ToolCall) and isinstance(cur, ToolCall):
                    if final.arguments and not cur.arguments:
                        cur.arguments = final.arguments
                elif isinstance(final, Reasoning) and isinstance(cur, Reasoning):
                    cur.opaque = final.opaque or cur.opaque
                    cur.summary = final.summary or cur.summary
                    cur.redacted = final.redacted or cur.redacted
                    if final.text and not cur.text:
                        cur.text = final.text
                elif isinstance(final, Text) and isinstance(cur, Text):
                    if final.citations:
                        cur.citations = final.citations
                    if final.text and not cur.text:
                        cur.text = final.text
                elif isinstance(final, Refusal) and isinstance(cur, Refusal):
                    if final.text and not cur.text:
                        cur.text = final.text
                elif isinstance(final, (Opaque, WebSearchCall, WebSearchResults)):
                    self._open[ev.index] = final
        elif isinstance(ev, Start):
            r.id = ev.id
            r.model = ev.model
            r.created = ev.created
            if ev.usage is not None:
                r.usage = ev.usage if r.usage is None else r.usage.merge(ev.usage)
        elif isinstance(ev, UsageEvent):
            r.usage = ev.usage if r.usage is None else r.usage.merge(ev.usage)
        elif isinstance(ev, Stop):
            r.stop = ev.stop
            r.stop_sequence = ev.stop_sequence
        elif isinstance(ev, End):
            self.ended = True
        elif isinstance(ev, ErrorEvent):
            self.error = ev.error
            r.stop = classify_stop(
                "error", category=ev.error.kind if ev.error.kind != "interrupted" else "interrupted",
                message=ev.error.message, detail={"error": {"kind": ev.error.kind, "code": ev.error.code}},
            )

    def finish(self) -> Response:
        r = self.response
        r.parts = [self._open[i] for i in self._order]
        if r.stop is None and self.ended:
            r.stop = classify_stop(None, has_tool_calls=any(isinstance(p, ToolCall) for p in r.parts))
        return r


def collect(events: list[Event]) -> Collector:
    c = Collector()
    for ev in events:
        c.add(ev)
    c.finish()
    return c


def response_to_events(resp: Response) -> list[Event]:
    """A complete response as the neutral event sequence a stream of it would produce."""
    out: list[Event] = [Start(resp.id, resp.model, None, resp.created)]
    for i, p in enumerate(resp.parts):
        if isinstance(p, Text):
            out.append(BlockStart(i, Text("")))
            if p.text:
                out.append(Delta(i, "text", p.text))
            out.append(BlockEnd(i, p))
        elif isinstance(p, Refusal):
            out.append(BlockStart(i, Refusal("")))
            if p.text:
                out.append(Delta(i, "refusal", p.text))
            out.append(BlockEnd(i, p))
        elif isinstance(p, Reasoning):
            out.append(BlockStart(i, Reasoning(redacted=p.redacted, opaque=p.opaque)))
            if p.text:
                out.append(Delta(i, "reasoning", p.text))
            out.append(BlockEnd(i, p))
        elif isinstance(p, ToolCall):
            out.append(BlockStart(i, ToolCall(p.id, p.name, "", p.kind, p.item_id)))
            if p.arguments:
                out.append(Delta(i, "arguments", p.arguments))
            out.append(BlockEnd(i, p))
        else:
            out.append(BlockStart(i, p))
            out.append(BlockEnd(i, p))
    if resp.usage is not None:
        out.append(UsageEvent(resp.usage))
    error = resp.extra.get("error")
    if isinstance(error, Error):
        out.append(ErrorEvent(error))
        return out
    out.append(Stop(resp.stop or classify_stop(None), resp.stop_sequence))
    out.append(End())
    return out


def has_visible_output(parts: list[Part]) -> bool:
    for p in parts:
        if isinstance(p, (Text, Refusal)) and p.text:
            return True
        if isinstance(p, ToolCall):
            return True
    return False


__all__ = ["Collector", "collect", "response_to_events", "has_visible_output", "StopReason"]
