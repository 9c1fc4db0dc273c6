"""The ``flow.response.stream`` callable: upstream SSE in, client SSE out, event by event.

mitmproxy calls it synchronously inside its event loop, once per received body chunk and once with
``b""`` at the end of the message (not on a disconnect: then only the ``error`` hook runs, which
calls :meth:`StreamHandler.finish` with the reason). Rules it keeps (notes/mitmproxy.md §1):
never ``b""`` mid-stream (``[]`` instead), every exception caught and turned into the client's
native error frame, content-encoding decoded defensively (the upstream was asked for identity).
For the recording it keeps the decoded upstream chunks with their arrival times (replay pacing) and
everything it sent to the client (mitmproxy stores nothing of a streamed body by default).
"""

from __future__ import annotations

import logging
import time
import zlib
from typing import Any

from proxai_core import Protocol, StreamTranslator

from .protocols import fallback_error_frame

logger = logging.getLogger(__name__)

__all__ = ["StreamHandler", "make_decoder", "native_error_frame"]


# ----------------------------------------------------------------------------- content-encoding
class _Zlib:
    __slots__ = ("_d", "_raw_fallback")

    def __init__(self, wbits: int):
        self._d = zlib.decompressobj(wbits)
        self._raw_fallback = wbits == 15  # "deflate" is zlib-wrapped or raw in the wild

    def decompress(self, data: bytes) -> bytes:
        try:
            return self._d.decompress(data)
        except zlib.error:
            if not self._raw_fallback:
                raise
            self._raw_fallback = False
            self._d = zlib.decompressobj(-15)
            return self._d.decompress(data)

    def flush(self) -> bytes:
        return self._d.flush()


class _Brotli:
    __slots__ = ("_d",)

    def __init__(self) -> None:
        import brotli

        self._d = brotli.Decompressor()

    def decompress(self, data: bytes) -> bytes:
        return self._d.process(data)

    def flush(self) -> bytes:
        return b""


class _Zstd:
    __slots__ = ("_d", "_mod")

    def __init__(self) -> None:
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
        except ImportError:
            from backports import zstd  # type: ignore[no-redef]
        self._mod = zstd
        self._d = zstd.ZstdDecompressor()

    def decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._d.eof:  # concatenated frames
                data = self._d.unused_data + data if self._d.unused_data else data
                self._d = self._mod.ZstdDecompressor()
            out.append(self._d.decompress(data))
            data = b""
        return b"".join(out)

    def flush(self) -> bytes:
        return b""


def make_decoder(content_encoding: str | None) -> Any:
    """An incremental decoder for a response's content-encoding, or None for identity.

    Raises ValueError for an encoding we cannot decode.
    """
    ce = (content_encoding or "").strip().lower()
    if ce in ("", "identity"):
        return None
    if ce in ("gzip", "x-gzip"):
        return _Zlib(47)  # gzip or zlib header, auto-detected
    if ce == "deflate":
        return _Zlib(15)
    if ce == "br":
        return _Brotli()
    if ce == "zstd":
        return _Zstd()
    raise ValueError(f"unsupported content-encoding {content_encoding!r}")


# ----------------------------------------------------------------------------- error frames
def native_error_frame(protocol: Protocol, message: str, kind: str = "api_error", status: int = 500) -> bytes:
    """The client's native SSE error frame, built without the codec (last-resort fallback)."""
    try:
        from proxai_core.codecs import codec
        from proxai_core.neutral import Error

        return codec(protocol).error_frame(Error(kind=kind, message=message, status=status))
    except Exception:  # noqa: BLE001 - the fallback must not fail
        return fallback_error_frame(protocol, message)


# ----------------------------------------------------------------------------- the callable
class StreamHandler:
    """Per-flow stream state. ``passthrough``: forward the upstream bytes unchanged and only observe
    them (StopInfo, usage); otherwise forward what the translator produces."""

    __slots__ = (
        "_out_bytes",
        "chunk_times",
        "chunks",
        "client_protocol",
        "decoder",
        "extra_warnings",
        "failed",
        "finished",
        "idle_message",
        "interrupted",
        "last_activity",
        "observe_ok",
        "out",
        "passthrough",
        "t0",
        "translator",
    )

    def __init__(self, translator: StreamTranslator, client_protocol: Protocol, *, passthrough: bool,
                 content_encoding: str | None = None) -> None:
        self.translator = translator
        self.client_protocol = client_protocol
        self.passthrough = passthrough
        self.chunks: list[bytes] = []  # decoded upstream bytes (for metadata)
        #: per upstream chunk: [offset in ms since the response headers, decoded byte count] (replay pacing)
        self.chunk_times: list[list[float | int]] = []
        #: what the client got (the recorded client body: mitmproxy keeps nothing of a streamed body)
        self.out: list[bytes] = []
        self.t0 = self.last_activity = time.monotonic()
        #: set by the idle watchdog just before it ends the upstream message (see idle.py)
        self.idle_message: str | None = None
        self.finished = False
        self.failed = False
        self.observe_ok = True
        self.extra_warnings: list[str] = []
        self.interrupted: str | None = None
        self._out_bytes = 0
        try:
            self.decoder = make_decoder(content_encoding)
        except ValueError as e:
            self.decoder = None
            self.observe_ok = False
            self.extra_warnings.append(f"{e}; stream not observed")

    # mitmproxy entry point -------------------------------------------------------------------
    def __call__(self, data: bytes) -> Any:
        if data:
            self.last_activity = time.monotonic()
        elif self.idle_message is not None:
            res = self._idle_end()
            self.out.extend(res)
            return res
        res = self._call(data)
        if isinstance(res, bytes):
            if res:
                self.out.append(res)
        else:
            self.out.extend(c for c in res if c)
        return res

    def _call(self, data: bytes) -> Any:
        if self.passthrough:
            if data:
                self._observe(data)
                return data
            self._finish_quietly()
            return []
        try:
            if not data:
                return self._end()
            if self.finished:
                return []
            chunk = self._decode(data)
            if not chunk:
                return []
            self._add_chunk(chunk)
            if self.failed:
                return []
            out = self.translator.feed(chunk)
            if out:
                self._out_bytes += len(out)
                return [out]
            return []
        except Exception as exc:  # noqa: BLE001 - never let mitmproxy drop a chunk silently
            return self._fail(exc)

    # -------------------------------------------------------------------------------------------
    @property
    def upstream_bytes(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def client_bytes(self) -> bytes:
        """Everything sent to the client so far."""
        return b"".join(self.out)

    def _add_chunk(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.chunk_times.append([round((time.monotonic() - self.t0) * 1000.0, 1), len(chunk)])

    @property
    def warnings(self) -> list[str]:
        return list(self.translator.warnings) + self.extra_warnings

    def _decode(self, data: bytes) -> bytes:
        if self.decoder is None:
            return data
        return self.decoder.decompress(data)

    def _observe(self, data: bytes) -> None:
        if not self.observe_ok:
            return
        try:
            chunk = self._decode(data)
            if chunk:
                self._add_chunk(chunk)
                self.translator.feed(chunk)
        except Exception as exc:
            self.observe_ok = False
            self.extra_warnings.append(f"stream not observed: {type(exc).__name__}: {exc}")
            logger.debug("proxai: pass-through observation failed", exc_info=True)

    def _finish_quietly(self) -> None:
        if self.finished:
            return
        self.finished = True
        if not self.observe_ok:
            return
        try:
            if self.decoder is not None:
                tail = self.decoder.flush()
                if tail:
                    self._add_chunk(tail)
                    self.translator.feed(tail)
            self.translator.close()
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
            tail = self.decoder.flush()
            if tail:
                self._add_chunk(tail)
                out = self.translator.feed(tail)
        out += self.translator.close()
        return [out] if out else []

    def _idle_end(self) -> list[bytes]:
        """The idle watchdog ended a silent upstream: the client's native error, StopInfo interrupted
        (what arrived of a half event stays unsent)."""
        if self.finished:
            return []
        self.finished = True
        if not self.translator.finished:  # a stream whose terminal event arrived is complete
            self.interrupted = self.idle_message
            self.extra_warnings.append(self.idle_message or "idle timeout")
        if self.failed or (self.passthrough and not self.observe_ok):
            frame = b"" if self.failed else native_error_frame(self.client_protocol, self.idle_message or "")
            return [frame] if frame else []
        try:
            frame = self.translator.abort(self.idle_message or "idle timeout")
        except Exception:  # noqa: BLE001
            frame = native_error_frame(self.client_protocol, self.idle_message or "idle timeout")
        return [frame] if frame else []

    def _fail(self, exc: BaseException) -> list[bytes]:
        if self.failed:
            return []
        self.failed = True
        msg = f"proxai could not translate the upstream stream: {type(exc).__name__}: {exc}"
        logger.error("proxai: %s", msg, exc_info=exc)
        self.extra_warnings.append(msg)
        try:
            frame = self.translator.abort(msg)
        except Exception:  # noqa: BLE001
            frame = native_error_frame(self.client_protocol, msg)
        return [frame] if frame else []

    def finish(self, interrupted: str | None = None) -> None:
        """Called from the ``error`` hook (disconnects skip the EOF call) or defensively from
        ``response``. Records StopInfo ``interrupted`` when the stream did not end properly."""
        if self.finished:
            return
        self.finished = True
        self.interrupted = interrupted
        try:
            if interrupted and not self.translator.finished:
                self.translator.abort(interrupted)
            elif not interrupted:
                self.translator.close()
        except Exception as exc:  # noqa: BLE001
            self.extra_warnings.append(f"stream finalization failed: {type(exc).__name__}: {exc}")
