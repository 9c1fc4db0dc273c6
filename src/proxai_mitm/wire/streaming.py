"""The ``flow.response.stream`` callable: upstream SSE in, client SSE out, event by event.

mitmproxy calls it synchronously inside its event loop, once per received body chunk and once with
``b""`` at the end of the message (not on a disconnect: then only the ``error`` hook runs, which
calls :meth:`StreamHandler.finish` with the reason). Rules it keeps: never ``b""`` mid-stream
(``[]`` instead: on HTTP/1.1 an empty chunk is the chunked terminator), every exception caught and turned into the client's
native error frame, content-encoding decoded defensively (the upstream was asked for identity).
For the recording it keeps the decoded upstream chunks with their arrival times (replay pacing) and
what it sent to the client (mitmproxy stores nothing of a streamed body by default), each capped at
``proxai_record_limit`` (recordcap.py).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from proxai_core import Exchange, Protocol

from .bodies import BadEncoding, BodyError, Decoder, body_limit, codings
from .protocols import fallback_error_frame
from .recordcap import CappedBuffer, record_limit, truncation_note

logger = logging.getLogger(__name__)
_monotonic = time.monotonic

__all__ = ["ErrorOnce", "StreamHandler", "make_decoder"]


# ----------------------------------------------------------------------------- content-encoding
#: decoded bytes one network chunk of a compressed stream may produce (a ratio no event stream reaches)
CHUNK_LIMIT = 8 * 1024 * 1024


def make_decoder(content_encoding: str | None) -> Decoder | None:
    """An incremental decoder for a response's content-encoding, or None for identity: no total cap,
    but no network chunk inflates past the body cap (a bomb).

    Raises ValueError for an encoding we cannot decode.
    """
    if not codings(content_encoding):
        return None
    try:
        return Decoder(content_encoding, sys.maxsize, feed_limit=min(body_limit(), CHUNK_LIMIT))
    except BadEncoding as e:
        raise ValueError(f"unsupported content-encoding {content_encoding!r}") from e


# ----------------------------------------------------------------------------- the callable
class StreamHandler:
    """Per-flow stream state. ``passthrough``: forward the upstream bytes unchanged and only observe
    them (StopInfo, usage); otherwise forward what the translator produces."""

    __slots__ = (
        "_forwarded", "_out_bytes", "_times", "chunks", "client_protocol", "decoder", "exchange", "extra_warnings",
        "failed", "finished", "first_content", "idle_message", "interrupted", "last_activity",
        "mirror", "observe_ok", "out", "passthrough", "t0",
    )

    def __init__(self, exchange: Exchange, client_protocol: Protocol, *, passthrough: bool,
                 content_encoding: str | None = None) -> None:
        self.exchange = exchange
        self.client_protocol = client_protocol
        self.passthrough = passthrough
        # recording copies, capped (recordcap.py): decoded upstream bytes with their timings
        # ([offset ms since the headers, bytes] per chunk: replay pacing), and what the client got
        # (mitmproxy keeps nothing of a streamed body)
        cap = record_limit()
        self.out = CappedBuffer(cap)
        self.t0 = self.last_activity = _monotonic()
        #: set by the idle watchdog just before it ends the upstream message (see idle.py)
        self.idle_message: str | None = None
        self.finished = False
        self.failed = False
        self.observe_ok = True
        self.extra_warnings: list[str] = []
        self.interrupted: str | None = None
        self._out_bytes = 0
        # epoch time of the first content event (time to first token, metrics.py)
        self.first_content: float | None = None
        try:
            self.decoder = make_decoder(content_encoding)
        except ValueError as e:
            self.decoder = None
            self.observe_ok = False
            self.extra_warnings.append(f"{e}; stream not observed")
        #: identity pass-through: the client gets the upstream's bytes, so they are kept once (``out``)
        #: and only their timings are noted
        self.mirror = passthrough and self.decoder is None
        self.chunks = CappedBuffer(0 if self.mirror else cap)
        #: (monotonic time, bytes) per mirrored chunk, made [ms since the headers, bytes] when read
        self._times: list[tuple[float, int]] = []
        self._forwarded = 0

    # mitmproxy entry point -------------------------------------------------------------------
    def __call__(self, data: bytes) -> Any:
        if data:
            now = self.last_activity = _monotonic()
            if self.mirror:  # identity pass-through, the common case: forwarded as it came
                out = self.out
                self._forwarded += len(data)
                if self.observe_ok:
                    try:
                        if out.kept < out.limit:  # timings of the recorded head only: bounded too
                            self._times.append((now, len(data)))
                        self._feed(data)
                    except Exception as exc:
                        self._observe_failed(exc)
                out.add(data)
                return data
        elif self.idle_message is not None:
            res = self._idle_end()
            self.out.extend(res)
            return res
        res = self._call(data)
        if isinstance(res, bytes):
            self.out.add(res)
        else:
            self.out.extend(res)
        return res

    def _call(self, data: bytes) -> Any:
        if self.passthrough:
            if data:
                self._forwarded += len(data)
                self._observe(data)
                return data
            self._finish_quietly()
            return []
        try:
            if not data:
                return self._end()
            if self.finished or (self.failed and self.decoder is not None):
                return []  # after a failure, compressed input is not decoded again (a bomb)
            chunk = self._decode(data)
            if not chunk:
                return []
            self._add_chunk(chunk)
            if self.failed:
                return []
            out = self._feed(chunk)
            if out:
                self._out_bytes += len(out)
                return [out]
            return []
        except Exception as exc:  # noqa: BLE001 - never let mitmproxy drop a chunk silently
            return self._fail(exc)

    # -------------------------------------------------------------------------------------------
    @property
    def upstream_bytes(self) -> bytes:
        if not self.mirror:
            return self.chunks.value()
        head = self.out.head()[: self._forwarded]  # without a frame ProxAI added at the end
        return head + truncation_note(len(head), self._forwarded) if self._forwarded > len(head) else head

    @property
    def client_bytes(self) -> bytes:
        """What was sent to the client so far (up to the recording cap, then a note)."""
        return self.out.value()

    @property
    def chunk_times(self) -> list[tuple[float, int]]:
        """(ms since the response headers, bytes) per recorded upstream chunk (replay pacing): the
        recorded head only, its last chunk counted up to the cap."""
        if not self.mirror:
            return [(float(at), int(n)) for at, n in self.chunks.times]
        t0, times = self.t0, self._times
        if not self.out.truncated:
            return [(round((t - t0) * 1000.0, 1), n) for t, n in times]
        out, room = [], self.out.limit
        for t, n in times:
            out.append((round((t - t0) * 1000.0, 1), min(n, room)))
            room -= n
            if room <= 0:
                break
        return out

    @property
    def truncations(self) -> list[tuple[str, int, int]]:
        """(part, kept, total) of each recording copy the cap cut."""
        return [(part, buf.kept, buf.total) for part, buf in (("upstream_response", self.chunks),
                                                               ("response", self.out)) if buf.truncated]

    def _add_chunk(self, chunk: bytes) -> None:
        """A decoded upstream chunk of a stream that is not mirrored (:meth:`__call__` notes those)."""
        self.chunks.add(chunk, round((_monotonic() - self.t0) * 1000.0, 1))

    def _feed(self, chunk: bytes) -> bytes:
        """Decoded upstream bytes to the exchange; the time of the chunk that carried the first
        content event is the time to first token."""
        out = self.exchange.feed(chunk)
        if self.first_content is None and self.exchange.first_content is not None:
            self.first_content = time.time()
        return out

    def _decode(self, data: bytes) -> bytes:
        if self.decoder is None:
            return data
        return self.decoder.feed(data)

    def _observe(self, data: bytes) -> None:
        if not self.observe_ok:
            return
        try:
            chunk = self._decode(data)
            if chunk:
                self._add_chunk(chunk)
                self._feed(chunk)
        except Exception as exc:
            self._observe_failed(exc)

    def _observe_failed(self, exc: Exception) -> None:
        self.observe_ok = False
        self.extra_warnings.append(f"stream not observed: {type(exc).__name__}: {exc}")
        logger.debug("proxai: pass-through observation failed", exc_info=exc)

    def _finish_quietly(self) -> None:
        if self.finished:
            return
        self.finished = True
        if not self.observe_ok:
            return
        try:
            if self.decoder is not None:
                tail = self.decoder.close()
                if tail:
                    self._add_chunk(tail)
                    self._feed(tail)
            self.exchange.close()
        except Exception as exc:  # noqa: BLE001
            self.extra_warnings.append(f"stream not observed: {type(exc).__name__}: {exc}")

    def _end(self) -> list[bytes]:
        if self.finished:
            return []
        self.finished = True
        if self.failed:
            return []
        out = b""
        if self.decoder is not None:
            tail = self.decoder.close()
            if tail:
                self._add_chunk(tail)
                out = self._feed(tail)
        out += self.exchange.close()
        if self.first_content is None and self.exchange.first_content is not None:
            self.first_content = time.time()
        return [out] if out else []

    def _idle_end(self) -> list[bytes]:
        """The idle watchdog ended a silent upstream: the client's native error, StopInfo interrupted
        (what arrived of a half event stays unsent)."""
        if self.finished:
            return []
        self.finished = True
        if not self.exchange.finished:  # a stream whose terminal event arrived is complete
            self.interrupted = self.idle_message
            self.extra_warnings.append(self.idle_message or "idle timeout")
        if self.failed or (self.passthrough and not self.observe_ok):
            frame = b"" if self.failed else fallback_error_frame(self.client_protocol, self.idle_message or "")
            return [frame] if frame else []
        try:
            frame = self.exchange.abort(self.idle_message or "idle timeout")
        except Exception:  # noqa: BLE001
            frame = fallback_error_frame(self.client_protocol, self.idle_message or "idle timeout")
        return [frame] if frame else []

    def _fail(self, exc: BaseException) -> list[bytes]:
        if self.failed:
            return []
        self.failed = True
        msg = f"proxai could not translate the upstream stream: {type(exc).__name__}: {exc}"
        logger.error("proxai: %s", msg, exc_info=None if isinstance(exc, BodyError) else exc)  # a bomb: no traceback
        self.extra_warnings.append(msg)
        try:
            frame = self.exchange.abort(msg)
        except Exception:  # noqa: BLE001
            frame = fallback_error_frame(self.client_protocol, msg)
        return [frame] if frame else []

    def finish(self, interrupted: str | None = None) -> None:
        """Called from the ``error`` hook (disconnects skip the EOF call) or defensively from
        ``response``. Records StopInfo ``interrupted`` when the stream did not end properly."""
        if self.finished:
            return
        self.finished = True
        self.interrupted = interrupted
        try:
            if interrupted and not self.exchange.finished:
                self.exchange.abort(interrupted)
            elif not interrupted:
                self.exchange.close()
        except Exception as exc:  # noqa: BLE001
            self.extra_warnings.append(f"stream finalization failed: {type(exc).__name__}: {exc}")


class ErrorOnce:
    """Stream callable used when no translator can be built: one native error frame, then nothing."""

    def __init__(self, frame: bytes) -> None:
        self.frame = frame
        self.sent = False

    def __call__(self, data: bytes) -> Any:
        if self.sent:
            return []
        self.sent = True
        return [self.frame]

