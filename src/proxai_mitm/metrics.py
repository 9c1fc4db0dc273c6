"""Per-flow measures: time to first token, duration, output tokens per second, and the one-line summary.

Pure functions over timestamps and the record (no mitmproxy import). Times are epoch seconds as
mitmproxy stores them; every measure is in milliseconds from the start of the client's request.

Time to first token (TTFT) is the arrival of the first *content* event of the upstream stream — a
text, refusal, reasoning or tool-call delta, or a tool call starting — not the first byte (a stream
opens with metadata events and keep-alives); an answer that has no content at all (a bare refusal)
has its TTFT at the stop event. For a complete (non-streamed) answer it is the time the
whole body arrived: that is when the client could read the first token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxai_core import Protocol
from proxai_core import neutral as n
from proxai_core.codecs import codec
from proxai_core.sse import SSEReader

__all__ = ["CONTENT_DELTAS", "FirstContent", "Timings", "first_content_offset", "fmt_ms", "fmt_usd",
           "summary_line", "timings"]

#: delta kinds that carry what the model produced (signatures do not)
CONTENT_DELTAS = frozenset({"text", "refusal", "reasoning", "summary", "arguments"})
#: a generation span shorter than this gives no meaningful rate (the answer came in one read)
_MIN_SPAN_MS = 50.0


def _is_content(ev: Any) -> bool:
    t = type(ev)
    if t is n.Delta:
        return ev.kind in CONTENT_DELTAS and bool(ev.value)
    if t is n.Stop:  # an answer without content (e.g. a bare refusal) is complete here
        return True
    if t is n.BlockStart:
        p = ev.part
        if isinstance(p, n.ToolCall):
            return True
        text = getattr(p, "text", None)
        return isinstance(text, str) and bool(text)
    return False


class FirstContent:
    """Watches an upstream SSE stream until its first content event; then costs nothing more.

    A second decoder of the upstream protocol reads only the events before the first content (a few
    small events), so the translated stream is not slowed down; a stream without content for its first
    ``budget`` bytes is not watched further (its TTFT stays unknown)."""

    __slots__ = ("_budget", "_dec", "_reader", "found", "model")

    def __init__(self, protocol: Protocol, budget: int = 1 << 20) -> None:
        self._reader = SSEReader()
        self._dec = codec(protocol).StreamDecoder([])
        self._budget = budget
        self.found = False
        self.model: str | None = None  # the model named by the stream's opening event

    def feed(self, chunk: bytes) -> bool:
        """Feed decoded upstream bytes; True once the first content event has been seen."""
        if self.found:
            return True
        if self._budget <= 0:
            return False
        self._budget -= len(chunk)
        try:
            for name, data in self._reader.feed(chunk):
                for ev in self._dec.feed(name, data):
                    if type(ev) is n.Start and ev.model:
                        self.model = ev.model
                    if _is_content(ev):
                        self.found = True
                        self._reader = self._dec = None  # type: ignore[assignment]
                        return True
        except Exception:  # noqa: BLE001 - a malformed event is not content; the translator reports it
            return False
        return False


def first_content_offset(protocol: Protocol, body: bytes, chunks: list[tuple[float, int]] | None
                         ) -> tuple[float | None, str | None]:
    """For a recorded stream: the offset (ms after the response headers, as recorded per chunk) of the
    chunk that carried the first content event (None when unknown), and the model the stream named."""
    if not chunks or not body:
        return None, None
    watch = FirstContent(protocol)
    pos = 0
    for off, size in chunks:
        piece = body[pos:pos + int(size)]
        pos += int(size)
        if not piece:
            break  # the recording was cut before the content
        if watch.feed(piece):
            return float(off), watch.model
    return None, watch.model


@dataclass(slots=True)
class Timings:
    """Milliseconds from the start of the client's request (None: unknown)."""

    headers_ms: float | None = None  # the response headers arrived (waiting ends)
    ttft_ms: float | None = None
    duration_ms: float | None = None
    output_tps: float | None = None  # output tokens per second of generation


def _ms(t: float | None, start: float) -> float | None:
    return None if t is None or t < start else round((t - start) * 1000.0, 1)


def timings(start: float | None, headers: float | None, first_content: float | None, end: float | None,
            output_tokens: int | None, *, streamed: bool) -> Timings:
    """Timings of one flow. ``streamed``: the upstream answered with a stream (then TTFT is the first
    content event, unknown when none came); else TTFT is the body's arrival (``end``). Tokens per
    second: output tokens over the generation (first content to end) when it lasted at least 50 ms,
    else over the whole duration."""
    if not start:
        return Timings()
    out = Timings(headers_ms=_ms(headers, start), duration_ms=_ms(end, start))
    out.ttft_ms = _ms(first_content, start) if streamed else out.duration_ms
    if output_tokens and out.duration_ms:
        span = out.duration_ms - out.ttft_ms if streamed and out.ttft_ms is not None else 0.0
        if span < _MIN_SPAN_MS:
            span = out.duration_ms
        if span > 0:
            out.output_tps = round(output_tokens / (span / 1000.0), 1)
    return out


# ----------------------------------------------------------------------------- formatting
def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "?"
    if ms < 1000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.2f} s"


def fmt_usd(usd: float | None) -> str:
    if usd is None:
        return "cost unknown"
    if usd == 0:
        return "$0"
    if usd < 0.0001:
        return f"${usd:.6f}"
    if usd < 1:
        return f"${usd:.4f}"
    return f"${usd:.2f}"


def _tok(v: int | None) -> str:
    return "?" if v is None else str(v)


def summary_line(model: str | None, stop: str | None, input_tokens: int | None, output_tokens: int | None,
                 ttft_ms: float | None, cost_usd: float | None, notes: tuple[str, ...] = ()) -> str:
    """``stop · in→out tok · TTFT · cost · model`` and any ``notes`` (unknowns shown as such, never as
    0). The stop comes first: a flow list cut at its default width still shows it."""
    return " · ".join((
        stop or "stop ?",
        f"{_tok(input_tokens)}→{_tok(output_tokens)} tok",
        f"TTFT {fmt_ms(ttft_ms)}",
        fmt_usd(cost_usd),
        model or "model ?",
        *notes,
    ))
