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

from proxai_core import Exchange, Protocol
from proxai_core.streams import CONTENT_DELTAS

__all__ = ["CONTENT_DELTAS", "Timings", "first_content_offset", "fmt_ms", "fmt_usd", "summary_line", "timings"]

#: a generation span shorter than this gives no meaningful rate (the answer came in one read)
_MIN_SPAN_MS = 50.0


def first_content_offset(protocol: Protocol, body: bytes, chunks: list[tuple[float, int]] | None,
                         *, stream: bool = True) -> tuple[float | None, str | None]:
    """For a recorded stream: the offset (ms after the response headers, as recorded per chunk) of the
    chunk that carried the first content event (None when unknown), and the model the stream named.
    Every framing of the protocol (SSE, a JSON array) is read by its exchange."""
    if not chunks or not body:
        return None, None
    ex = Exchange(protocol, None, stream=stream)
    ctype = "application/json" if body.lstrip()[:1] == b"[" else "text/event-stream"
    ex.respond(protocol, 200, ctype)
    if not ex.streaming:
        return None, None
    pos = 0
    for off, size in chunks:
        piece = body[pos:pos + int(size)]
        pos += int(size)
        if not piece:
            break  # the recording was cut before the content
        ex.feed(piece)
        if ex.first_content is not None:
            return float(off), ex.model
    return None, ex.model


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
