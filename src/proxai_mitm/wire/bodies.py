"""Bounded, incremental decoding of HTTP bodies (identity, gzip, deflate, br, zstd, stacked).

API (for the hooks):

- ``decode(raw, content_encoding, limit) -> bytes``: the decoded body; never holds more than
  ``limit`` decoded bytes (plus one 64 KiB step), whatever the compression ratio. Raises
  ``BodyTooLarge(limit, seen)`` past the cap and ``BadEncoding(encoding, reason)`` for an unknown
  coding or corrupt data. ``raw`` is never modified.
- ``await offload(fn, *args)``: run heavy work (decode, parse, scan) on ProxAI's single worker
  thread: off the event loop, and one at a time so memory has one ceiling.
- ``await adecode(raw, content_encoding, limit)``: the same, run in a worker thread when the work
  is real (compressed input over 4 KiB: a bomb can inflate to the cap), so one large body never
  holds up mitmproxy's event loop. Use it from ``async def`` hooks.
- ``Decoder(content_encoding, limit, feed_limit=None)``: the incremental form: ``feed(chunk) ->
  bytes`` and ``close() -> bytes`` (raises ``BadEncoding`` on a truncated compressed stream);
  ``pieces(chunk, last=...)`` yields the output as produced (a scanner then holds one piece). For a
  stream pass ``limit=math.inf`` and ``feed_limit``: no total cap, but no chunk inflates past it.
- ``body_limit() -> int``: the cap in effect: the ``proxai_body_limit`` option (declared by the
  ``BodyLimit`` addon below), lowered to mitmproxy's ``body_size_limit`` when that is smaller.
- ``too_large_reply(exc, protocol, request=True) -> http.Response``: the client's native error:
  413 ``request_too_large`` for a request body, 502 for an upstream body, in the client's protocol.
- ``release_memory()``: give freed heap memory back to the OS (glibc ``malloc_trim``; a no-op
  elsewhere). ``decode`` calls it when a body over the cap is dropped.

``BodyError`` is the common base class of both exceptions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import io
import logging
import sys
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import brotli
import orjson
from mitmproxy import ctx, exceptions, http
from mitmproxy.utils import human

from proxai_core import Protocol
from proxai_core.codecs import all_codecs, native_error
from proxai_core.neutral import Error, ErrorKind

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LIMIT", "BodyError", "BodyTooLarge", "BadEncoding", "Decoder", "decode", "adecode",
    "body_limit", "too_large_reply", "BodyLimit", "codings", "offload", "release_memory",
]

DEFAULT_LIMIT = 32 * 1024 * 1024
#: decoded bytes produced per decompressor call: memory above the cap stays below this
STEP = 64 * 1024
_KNOWN = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd"})


class BodyError(Exception):
    """A body that cannot be decoded within the rules."""


class BodyTooLarge(BodyError):
    def __init__(self, limit: int, seen: int) -> None:
        super().__init__(f"body larger than {limit} bytes once decoded (stopped at {seen})")
        self.limit = limit
        self.seen = seen


class BadEncoding(BodyError):
    def __init__(self, encoding: str, reason: str) -> None:
        super().__init__(f"cannot decode content-encoding {encoding!r}: {reason}")
        self.encoding = encoding
        self.reason = reason


def codings(content_encoding: str | None) -> list[str]:
    """The codings of a content-encoding header in the order they were applied (identity dropped)."""
    if not content_encoding:
        return []
    out = [c.strip().lower() for c in content_encoding.split(",")]
    return [c for c in out if c and c not in ("identity", "none")]


class _Stage:
    """One decompressor. ``feed`` returns at most STEP bytes per call of the inner loop; the caller
    checks the running total after every step, so a bomb is stopped at the cap."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._z: Any = None
        self._head = b""  # deflate: zlib-wrapped or raw is decided on the first two bytes
        if coding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(47)
        elif coding == "br":
            self._z = brotli.Decompressor()
        elif coding == "zstd":
            self._z = zstd.ZstdDecompressor()
        elif coding != "deflate":
            raise BadEncoding(coding, "unknown coding")
        self.done = False
        self.fed = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        self.fed = self.fed or bool(data)
        try:
            yield from self._feed(data)
        except BodyError:
            raise
        except (zlib.error, brotli.error, zstd.ZstdError, EOFError, ValueError) as e:
            raise BadEncoding(self.coding, str(e) or type(e).__name__) from None

    def _feed(self, data: bytes) -> Iterator[bytes]:
        if self.coding == "deflate" and self._z is None:
            self._head += data
            if len(self._head) < 2:
                return
            b0, b1 = self._head[0], self._head[1]
            zlib_wrapped = (b0 & 0x0F) == 8 and (b0 * 256 + b1) % 31 == 0
            self._z = zlib.decompressobj(15 if zlib_wrapped else -15)
            data, self._head = self._head, b""
        if self.done:
            return  # trailing bytes after the end of the stream are ignored, as mitmproxy does
        if self.coding == "br":
            out = self._z.process(data, output_buffer_limit=STEP)
            empty = False
            while True:
                if out:
                    yield out
                if self._z.is_finished():
                    self.done = True
                    return
                # it may accept input and still have output from input it already took (a highly
                # compressed body): only an empty answer proves it needs more input
                if not out and (self._z.can_accept_more_data() or empty):
                    return
                empty = not out
                out = self._z.process(b"", output_buffer_limit=STEP)
        elif self.coding == "zstd":
            out = self._z.decompress(data, STEP)
            while True:
                if out:
                    yield out
                if self._z.eof:
                    self.done = True
                    return
                if self._z.needs_input:
                    return
                out = self._z.decompress(b"", STEP)
        else:
            z = self._z
            out = z.decompress(data, STEP)
            while True:
                if out:
                    yield out
                if z.eof:
                    rest = z.unused_data
                    if self.coding != "deflate" and rest[:2] == b"\x1f\x8b":  # another gzip member
                        self._z = z = zlib.decompressobj(47)
                        out = z.decompress(rest, STEP)
                        continue
                    self.done = True
                    return
                if not z.unconsumed_tail:
                    return
                out = z.decompress(z.unconsumed_tail, STEP)

    def close(self) -> None:
        """Raise ``BadEncoding`` when the compressed stream ended before its end marker."""
        if self.fed and not self.done:  # an empty body with a content-encoding header is fine
            raise BadEncoding(self.coding, "truncated stream")


class Decoder:
    """Incremental decoder for a content-encoding header with a decoded-size cap.

    Every intermediate stage is capped too (at ``limit`` plus a little for incompressible data),
    so ``gzip, br`` cannot inflate in the middle stage either."""

    def __init__(self, content_encoding: str | None, limit: int = DEFAULT_LIMIT, *,
                 feed_limit: int | None = None) -> None:
        self.limit = limit
        #: streams: no total cap, but one ``feed`` may not produce more than this
        self.feed_limit = feed_limit
        self.seen = 0
        self._fed_from = 0
        # applied in order a, b → decoded in order b, a
        self._stages = [_Stage(c) for c in reversed(codings(content_encoding))]
        self._stage_seen = [0] * len(self._stages)
        self._stage_cap = limit + limit // 64 + 4096

    def _run(self, data: bytes, i: int, closing: bool) -> Iterator[bytes]:
        if i == len(self._stages):
            if data:
                self.seen += len(data)
                if self.seen > self.limit:
                    raise BodyTooLarge(self.limit, self.seen)
                if self.feed_limit is not None and self.seen - self._fed_from > self.feed_limit:
                    raise BodyTooLarge(self.feed_limit, self.seen - self._fed_from)
                yield data
            return
        stage = self._stages[i]
        if data:
            for piece in stage.feed(data):
                if i + 1 < len(self._stages):
                    self._stage_seen[i] += len(piece)
                    if self._stage_seen[i] > self._stage_cap:
                        raise BodyTooLarge(self.limit, self._stage_seen[i])
                yield from self._run(piece, i + 1, False)
        if closing:
            stage.close()
            yield from self._run(b"", i + 1, True)

    def pieces(self, data: bytes, *, last: bool = False) -> Iterator[bytes]:
        """The decoded output of ``data`` as it is produced, in pieces of at most STEP bytes: a
        reader that does not keep them holds one piece at a time, whatever the ratio."""
        self._fed_from = self.seen
        view = memoryview(data)
        for off in range(0, len(data), STEP):
            yield from self._run(bytes(view[off:off + STEP]), 0, False)
        if last:
            yield from self._run(b"", 0, True)

    def feed(self, data: bytes) -> bytes:
        return b"".join(self.pieces(data))

    def close(self) -> bytes:
        return b"".join(self.pieces(b"", last=True))


def decode(raw: bytes | None, content_encoding: str | None, limit: int = DEFAULT_LIMIT) -> bytes:
    """Decode a whole body within ``limit`` decoded bytes (see the module docstring).

    The decoded body exists once: each piece is appended to one growing buffer as it is produced
    (a list of pieces joined at the end would hold it twice), and the buffer becomes the result
    without a copy. A body over the cap is dropped as soon as the cap is crossed."""
    raw = raw or b""
    if not codings(content_encoding):
        if len(raw) > limit:
            raise BodyTooLarge(limit, len(raw))
        return raw
    d = Decoder(content_encoding, limit)
    out = io.BytesIO()
    try:
        for piece in d.pieces(raw, last=True):
            out.write(piece)
    except BodyTooLarge:
        out = io.BytesIO()  # drop the partial body before giving its memory back
        if d.seen >= 1 << 20:  # megabytes were decoded for nothing (a bomb reaches the cap)
            release_memory()
        raise
    return out.getvalue()  # BytesIO hands over its buffer when nothing else refers to it


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None  # not glibc: its allocator returns memory by itself or not at all


_TRIM = _malloc_trim()


def release_memory() -> None:
    """Give freed heap memory back to the OS. glibc keeps freed memory mapped for reuse, so a body
    decoded up to the cap and dropped would stay in the proxy's resident size for good; call it after
    such a body (in a worker thread: ctypes releases the GIL, and a trim takes a few ms)."""
    if _TRIM is not None:
        _TRIM(0)


_WORKER: concurrent.futures.ThreadPoolExecutor | None = None


async def offload[T](fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` off the event loop on ProxAI's one worker thread. One thread, not a pool:
    big decodes and scans run one at a time, so their memory has one ceiling (the body cap) however
    many arrive together, and the allocator reuses one arena instead of growing one per thread."""
    global _WORKER
    if _WORKER is None:
        _WORKER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="proxai-work")
    return await asyncio.get_running_loop().run_in_executor(_WORKER, fn, *args)


async def adecode(raw: bytes | None, content_encoding: str | None, limit: int = DEFAULT_LIMIT) -> bytes:
    """``decode`` that leaves the event loop for compressed or large bodies."""
    raw = raw or b""
    if not codings(content_encoding):
        return decode(raw, content_encoding, limit)  # identity: a length check, no copy
    if len(raw) <= 4096:
        return decode(raw, content_encoding, limit)  # tiny input: the thread hop costs more
    return await offload(decode, raw, content_encoding, limit)


def body_limit() -> int:
    """The decoded-size cap in effect (``proxai_body_limit``, or ``body_size_limit`` if smaller)."""
    opts = ctx.options
    try:
        limit = int(opts.proxai_body_limit)
    except (AttributeError, TypeError, ValueError):
        limit = DEFAULT_LIMIT
    try:
        mitm = human.parse_size(opts.body_size_limit)
    except (AttributeError, ValueError):
        mitm = None
    if mitm:
        limit = min(limit, mitm)
    return limit


def too_large_reply(exc: BodyError, protocol: Protocol | str | None, request: bool = True) -> http.Response:
    """The client's native error for a body over the cap or badly encoded.

    A request body: 413 ``request_too_large`` (400 for a bad encoding); an upstream body: 502."""
    proto = Protocol(protocol) if protocol else all_codecs()[0].protocol
    if request and isinstance(exc, BodyTooLarge):
        err = Error(kind=ErrorKind.REQUEST_TOO_LARGE, status=413,
                    message=f"request body too large: over {exc.limit} bytes once decoded")
    elif request:
        err = Error(kind=ErrorKind.INVALID_REQUEST, status=400, message=f"request body: {exc}")
    else:
        err = Error(kind=ErrorKind.API_ERROR, status=502, message=f"upstream response body: {exc}")
    status, body = native_error(err, proto)
    return http.Response.make(status, orjson.dumps(body), {
        "content-type": "application/json",
        "x-should-retry": "false",
    })


class BodyLimit:
    """Declares ``proxai_body_limit`` and validates it (the hooks read it through ``body_limit()``)."""

    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_body_limit", int, DEFAULT_LIMIT,
            "Largest request or complete response body ProxAI decodes, in bytes after "
            "content-encoding (gzip, deflate, br, zstd). Larger bodies get the client's native "
            "413 (request) or 502 (response); the raw bytes stay as they were. mitmproxy's "
            "body_size_limit lowers it when smaller.",
        )

    def running(self) -> None:
        release_memory()  # start-up garbage (imports, option parsing) back to the OS: a smaller idle proxy

    def configure(self, updated: set[str]) -> None:
        if "proxai_body_limit" in updated and ctx.options.proxai_body_limit <= 0:
            raise exceptions.OptionsError("proxai_body_limit must be a positive number of bytes")
