"""Incremental SSE codec.

Accepts LF / CRLF / CR line ends, multi-line ``data:``, comments, ``data:`` without a space, a UTF-8
character or a line split across chunks. Buffers nothing beyond the current event. Also reports the
raw bytes of the events it completed, so a pass-through never forwards a half event.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

__all__ = ["SSEReader", "SSEEvent", "frame", "frame_data", "DONE_FRAME"]

SSEEvent = tuple[str | None, str]  # (event name or None, data joined with "\n")

DONE_FRAME = b"data: [DONE]\n\n"


class SSEReader:
    """Linear in the bytes read however they are split: each read is scanned once, and what waits
    (an unfinished line, the raw bytes of the event in progress) is kept as a list of pieces,
    joined once when its line or event completes."""

    __slots__ = ("_line", "_raw", "_keep_raw", "_event", "_data", "_pending_cr", "_idle")

    def __init__(self) -> None:
        self._line: list[bytes] = []  # pieces of the unfinished line (no line end in them)
        self._raw: list[bytes] = []  # raw bytes read since the last yield (pass-through)
        self._keep_raw = False  # set by feed_raw / close_raw (a reader is read one way)
        self._event: str | None = None
        self._data: list[str] = []
        self._pending_cr = False
        self._idle = True  # none of the above pending (kept by _iter_raw): the fast path applies

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events this read completes."""
        # Fast paths: nothing pending, LF line ends, and the chunk ends on an event boundary. The
        # whole chunk is decoded once (a UTF-8 character cannot be split when the chunk ends on a
        # blank line); str searches are cheaper than bytes ones.
        # mid-line (a long event in many reads). (bytes.find: `in` first tries the needle as an int)
        if chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0:
            if chunk:
                self._line.append(chunk)
                self._pending_cr = self._idle = False
            return []
        if self._idle and chunk[-2:] == b"\n\n":
            try:
                s = chunk.decode()
            except UnicodeDecodeError:
                s = chunk.decode("utf-8", "replace")
            if "\r" not in s:
                body = s[6:-2]
                if "\n" not in body and s[:6] == "data: ":
                    return [(None, body)]  # one bare data: event
                out: list[SSEEvent] = []
                for block in s.split("\n\n"):
                    if not block:
                        continue
                    event = None
                    data: list[str] = []
                    for line in block.split("\n"):
                        if line.startswith("data:"):
                            v = line[5:]
                            data.append(v[1:] if v[:1] == " " else v)
                        elif line.startswith("event:"):
                            v = line[6:]
                            event = v[1:] if v[:1] == " " else v
                        elif not line:
                            if data:
                                out.append((event, "\n".join(data)))
                            event, data = None, []
                    if data:
                        out.append((event, data[0] if len(data) == 1 else "\n".join(data)))
                return out
        return [ev for ev, _ in self._iter_raw(chunk, False) if ev is not None]

    def close(self) -> list[SSEEvent]:
        return [ev for ev, _ in self._iter_raw(b"", True) if ev is not None]

    def feed_raw(self, chunk: bytes) -> tuple[list[SSEEvent], list[bytes]]:
        """Events, and for each yield the raw bytes that made it (pass-through)."""
        self._keep_raw = True
        if chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0:
            if chunk:
                self._line.append(chunk)
                self._raw.append(chunk)
                self._pending_cr = self._idle = False
            return [], []
        return self._collect(self._iter_raw(chunk, False))

    def close_raw(self) -> tuple[list[SSEEvent], list[bytes]]:
        self._keep_raw = True
        return self._collect(self._iter_raw(b"", True))

    @staticmethod
    def _collect(it: Iterator[tuple[SSEEvent | None, bytes]]) -> tuple[list[SSEEvent], list[bytes]]:
        events: list[SSEEvent] = []
        blobs: list[bytes] = []
        for ev, blob in it:
            events.append(ev)  # type: ignore[arg-type]
            blobs.append(blob)
        return events, blobs

    def _iter_raw(self, chunk: bytes, final: bool) -> Iterator[tuple[SSEEvent | None, bytes]]:
        """Yields (event or None for a bare boundary, raw bytes since the previous yield). Scans
        only ``chunk``: the pieces kept from earlier reads hold no line end."""
        buf = chunk
        pos = 0
        if self._pending_cr and (buf or final):
            if buf[:1] == b"\n":
                pos = 1  # second half of a CRLF split across reads
            self._pending_cr = False
        raw_start = 0
        n = len(buf)
        has_cr = buf.find(b"\r") >= 0
        pieces = self._line
        while True:
            if has_cr:
                i_lf = buf.find(b"\n", pos)
                i_cr = buf.find(b"\r", pos)
                if i_cr != -1 and (i_lf == -1 or i_cr < i_lf):
                    end = i_cr
                    if end + 1 < n:
                        nxt = end + 2 if buf[end + 1] == 10 else end + 1
                    else:
                        nxt = end + 1
                        self._pending_cr = not final
                else:
                    end = i_lf
                    nxt = end + 1
            else:
                end = buf.find(b"\n", pos)
                nxt = end + 1
            if end == -1:
                break
            if pieces:
                pieces.append(buf[pos:end])
                line = b"".join(pieces)
                pieces.clear()
            else:
                line = buf[pos:end]
            pos = nxt
            pending = bool(self._data) or self._event is not None
            ev = self._line_of(line)
            if ev is not None or (not line and not pending):
                if self._raw:  # (only a raw reader keeps pieces)
                    self._raw.append(buf[raw_start:pos])
                    blob = b"".join(self._raw)
                    self._raw.clear()
                else:
                    blob = buf[raw_start:pos]
                raw_start = pos
                yield ev, blob
        if final:
            if pos < n:
                pieces.append(buf[pos:])
            if pieces:
                self._line_of(b"".join(pieces))
                pieces.clear()
            if raw_start < n and self._keep_raw:
                self._raw.append(buf[raw_start:])
            blob = b"".join(self._raw)
            self._raw.clear()
            data, event = self._data, self._event
            self._event, self._data = None, []
            self._idle = True
            if data:
                # an event cut before its blank line: hand over what arrived; decoders judge it
                yield (event, "\n".join(data)), blob
            return
        if pos < n:
            pieces.append(buf[pos:])
        if raw_start < n and self._keep_raw:
            self._raw.append(buf[raw_start:] if raw_start else buf)
        self._idle = not (pieces or self._raw or self._data or self._pending_cr) and self._event is None

    def _line_of(self, line: bytes) -> SSEEvent | None:
        if not line:
            if not self._data:
                self._event = None
                return None
            ev = (self._event, "\n".join(self._data))
            self._event, self._data = None, []
            return ev
        if line[:1] == b":":
            return None
        colon = line.find(b":")
        if colon == -1:
            name, value = line, b""
        else:
            name = line[:colon]
            start = colon + 2 if line[colon + 1 : colon + 2] == b" " else colon + 1
            # a data line can be megabytes: decoded in place, no copy of the bytes first
            value = line[start:] if len(line) < 4096 else memoryview(line)[start:]
        if name == b"data":
            self._data.append(str(value, "utf-8", "replace"))
        elif name == b"event":
            self._event = str(value, "utf-8", "replace")
        return None


def frame(event: str | None, obj: object) -> bytes:
    """One SSE frame: ``event:`` line (when given) and a compact JSON ``data:`` line."""
    data = orjson.dumps(obj)
    if event:
        return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"
    return b"data: " + data + b"\n\n"


def frame_data(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"
