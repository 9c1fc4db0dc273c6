"""Incremental SSE codec.

Accepts LF / CRLF / CR line ends, multi-line ``data:``, comments, ``data:`` without a space, a UTF-8
character or a line split across chunks. Buffers nothing beyond the current event. Also reports the
raw bytes of the events it completed, so a pass-through never forwards a half event.
"""

from __future__ import annotations

import re
from typing import Any, cast

import orjson

from .jsonutil import dumps

__all__ = ["SSEReader", "SSEEvent", "frame", "frame_data", "DONE_FRAME"]

SSEEvent = tuple[str | None, str]  # (event name or None, data joined with "\n")

DONE_FRAME = b"data: [DONE]\n\n"


_LINE_ENDS = re.compile(rb"\r\n|\r|\n")


class SSEReader:
    """One parser (:meth:`_read`) for every read, linear in the bytes read however they are split:
    each read is scanned once; an unfinished line (and, reading raw, the bytes not yet handed over)
    wait as lists of pieces, joined once when the line ends. The complete lines of a read are decoded
    at once (a line end never splits a UTF-8 character) and cut into events at their blank lines."""

    __slots__ = ("_line", "_raw", "_event", "_data", "_pending_cr", "_idle", "_only_line")

    def __init__(self) -> None:
        self._line: list[bytes] = []  # pieces of the unfinished line (no line end in them)
        self._raw: list[bytes] = []  # raw reads: bytes read since the last entry handed over
        self._event: str | None = None
        self._data: list[str] = []
        self._pending_cr = False  # the last read ended with CR: a LF first in the next is its CRLF
        self._idle = True  # nothing of the above pending
        self._only_line = False  # only an unfinished line pending (_raw, reading raw, is that line)

    def close(self) -> list[SSEEvent]:
        """At end of stream: an event cut before its blank line is handed over as it is."""
        return [e for e in self._close(None) if e is not None]  # (None only where raw bytes are asked for)

    def feed_raw(self, chunk: bytes) -> tuple[list[SSEEvent | None], list[bytes]]:
        """Events (None where the bytes handed over complete no event: comments, blank lines) and,
        for each, the raw bytes since the previous one (a pass-through forwards only whole events)."""
        blobs: list[bytes] = []
        return self._read(chunk, blobs), blobs

    def close_raw(self) -> tuple[list[SSEEvent | None], list[bytes]]:
        blobs: list[bytes] = []
        return self._close(blobs), blobs

    def _read(self, chunk: bytes, blobs: list[bytes] | None = None) -> list[Any]:
        """The events this read completes (``feed``); with ``blobs`` (``feed_raw``), also None
        entries where the bytes handed over complete no event, and each entry's raw bytes."""
        if self._idle:
            # Nothing pending: the whole events of the usual shape ("data: ..." after an optional
            # "event: ..." line) at the head of the read are cut here, a few C-level finds and
            # compares each; whatever follows them (any other shape, a cut event) goes to _lines.
            try:
                s = chunk.decode()
            except UnicodeDecodeError:  # (a character cut at the end of the read, or invalid)
                return self._lines(chunk, blobs)
            t = s
            if "\r" in s:  # CRLF line ends (as some upstreams write): read as LF unless a CR is alone
                t = s.replace("\r\n", "\n")
                if "\r" in t:
                    return self._lines(chunk, blobs)
            end = len(t)
            out: list[Any] = []
            ends: list[int] | None = None  # where each event ends, if the read holds more than one
            p = 0
            while True:
                i = t.find("\n", p)  # the end of the event's first line
                if i < 0:
                    break
                c = t[p]
                if c == "d" and t[p:p + 6] == "data: ":
                    if t[i + 1:i + 2] != "\n":  # the blank line ending the event
                        break
                    out.append((None, t[p + 6:i]))
                elif c == "e" and t[p:p + 7] == "event: " and t[i + 1:i + 7] == "data: ":
                    j = t.find("\n", i + 7)
                    if j < 0 or t[j + 1:j + 2] != "\n":
                        break
                    out.append((t[p + 7:i], t[i + 7:j]))
                    i = j
                else:
                    break
                p = i + 2
                if p == end:
                    break
                if ends is None:
                    ends = [p]
                else:
                    ends.append(p)
            if ends is None:
                if p == end and out:  # the usual read: one whole event
                    if blobs is not None:
                        blobs.append(chunk)
                    return out
                if not out:
                    return self._lines(chunk, blobs)
                ends = [p]
            elif p == end:
                ends.append(end)
            crlf = t is not s
            if crlf or len(s) != len(chunk):  # character offsets in t -> byte offsets in chunk
                if crlf and len(s) - len(t) != t.count("\n"):  # LF alone next to CRLF: offsets unknown
                    return self._lines(chunk, blobs)
                ends = _byte_ends(t, ends, crlf)
            if blobs is not None:
                blobs.extend(map(chunk.__getitem__, map(slice, [0, *ends], ends)))
            if p < end:
                out += self._lines(chunk[ends[-1]:], blobs)
            return out
        if self._only_line:  # a long line (a long event) arriving in many reads
            if chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0:
                self._line.append(chunk)
                if blobs is not None:
                    self._raw.append(chunk)
                return []
            self._line.append(chunk)  # its end: read as if it had come in one read
            chunk = b"".join(self._line)
            self._line.clear()
            self._raw.clear()
            self._only_line = False
            self._idle = True
            return self._read(chunk, blobs)
        return self._lines(chunk, blobs)

    def _lines(self, chunk: bytes, blobs: list[bytes] | None) -> list[Any]:
        """Any read, line by line: whole lines decoded at once and cut into events at blank lines."""
        skip = 0
        if self._pending_cr and chunk:
            self._pending_cr = False
            if chunk[0] == 10:
                skip = 1  # the LF of a CRLF split across reads
        # (bytes.find, not `in`: `in` first tries the needle as an int, 4x slower on small reads)
        cr = chunk.rfind(b"\r")
        end = len(chunk) - 1 if chunk[-1:] == b"\n" else chunk.rfind(b"\n")
        if cr > end:
            end = cr
        if end < skip:  # no line end: a long line arriving in many reads is only kept
            if len(chunk) > skip:
                self._line.append(chunk[skip:])
            if blobs is not None and chunk:
                self._raw.append(chunk)
            self._only_line = self._idle and skip == 0
            self._idle = False
            return []
        pieces = self._line
        waited = 0
        if pieces:
            waited = sum(map(len, pieces))
            pieces.append(chunk[skip:end + 1])
            text = b"".join(pieces)
            pieces.clear()
        else:
            text = chunk if skip == 0 and end + 1 == len(chunk) else chunk[skip:end + 1]
        if end + 1 < len(chunk):
            pieces.append(chunk[end + 1:])
        elif cr == end:
            self._pending_cr = True
        try:
            s = text.decode()
        except UnicodeDecodeError:
            s = text.decode("utf-8", "replace")
        if cr >= 0:
            s = s.replace("\r\n", "\n").replace("\r", "\n")
        # s: whole lines. Each "\n\n" ends an event; what follows the last one waits for its blank line.
        lead = s[:1] == "\n"  # a blank line first: it ends what earlier reads left pending
        blocks = cast("list[str | None]", s[1:].split("\n\n") if lead else s.split("\n\n"))
        rest = blocks.pop()
        if lead:
            blocks.insert(0, None)  # (no lines; one line end)
        out: list[SSEEvent | None] = []
        data = self._data
        event = self._event
        sizes: list[int] = []  # raw reads: byte size of each block with its "\n\n"
        if blobs is not None:
            if cr >= 0:
                sizes = _raw_sizes(text, blocks)
            elif len(s) == len(text):  # ASCII: one byte per character
                sizes = [1 if b is None else len(b) + 2 for b in blocks]
            else:
                sizes = [len(b) + 2 for b in (text[1:] if lead else text).split(b"\n\n")[:len(blocks) - lead]]
                if lead:
                    sizes.insert(0, 1)
            at = skip - waited  # chunk offset of the end of the last block handed over
            cut = 0  # chunk offset of the bytes not yet handed over
        for j, block in enumerate(blocks):
            for line in block.split("\n") if block is not None else ():
                if not line:  # a blank line at the start of a block (blank lines in a row)
                    if data:
                        out.append((event, data[0] if len(data) == 1 else "\n".join(data)))
                        data = []
                    event = None
                elif line[:5] == "data:":
                    data.append(line[6:] if line[5:6] == " " else line[5:])
                elif line[:6] == "event:":
                    event = line[7:] if line[6:7] == " " else line[6:]
                elif line[0] != ":":  # (":" starts a comment)
                    name, colon, value = line.partition(":")
                    if name == "data":
                        data.append(value[1:] if value[:1] == " " else value)
                    elif name == "event":
                        event = value[1:] if value[:1] == " " else value
            if data:  # the blank line ending the block
                out.append((event, data[0] if len(data) == 1 else "\n".join(data)))
                data = []
            elif blobs is None:
                event = None
                continue
            else:
                out.append(None)  # no event (comments, an event without data): its bytes all the same
            event = None
            if blobs is not None:
                at += sizes[j]
                if self._raw:
                    self._raw.append(chunk[:at])
                    blobs.append(b"".join(self._raw))
                    self._raw.clear()
                else:
                    blobs.append(chunk[cut:at] if cut or at < len(chunk) else chunk)
                cut = at
        if rest:  # lines of an event whose blank line has not come yet
            lines = rest.split("\n")
            lines.pop()
            for line in lines:
                if not line:
                    event = None  # (a blank line right after the last "\n\n": nothing pending)
                elif line[:5] == "data:":
                    data.append(line[6:] if line[5:6] == " " else line[5:])
                elif line[:6] == "event:":
                    event = line[7:] if line[6:7] == " " else line[6:]
                elif line[0] != ":":
                    name, colon, value = line.partition(":")
                    if name == "data":
                        data.append(value[1:] if value[:1] == " " else value)
                    elif name == "event":
                        event = value[1:] if value[:1] == " " else value
        self._data = data
        self._event = event
        if blobs is not None and cut < len(chunk):
            self._raw.append(chunk[cut:] if cut else chunk)
        self._idle = not (data or pieces or self._pending_cr or self._raw) and event is None
        return out

    feed = _read  # (no wrapper call: this runs once per upstream read)

    def _close(self, blobs: list[bytes] | None) -> list[SSEEvent | None]:
        if self._idle:  # (the usual end: the last read ended with an event's blank line)
            return []
        if self._line:  # a last line without its line end (its bytes are in _raw already)
            self._only_line = False  # (its raw bytes stay: they are handed over below)
            self._read(b"\n", None)
        data, event, raw = self._data, self._event, b"".join(self._raw)
        self._data, self._event, self._raw, self._pending_cr, self._idle = [], None, [], False, True
        self._only_line = False
        if not data:
            # whole lines without an event (e.g. the LF of a last CRLF): forwarded all the same; a
            # cut line is not (what a pass-through writes after it would join that line)
            if blobs is not None and raw[-1:] in (b"\n", b"\r"):
                blobs.append(raw)
                return [None]
            return []
        if blobs is not None:
            blobs.append(raw)
        # an event cut before its blank line: handed over as it arrived; decoders judge it
        return [(event, data[0] if len(data) == 1 else "\n".join(data))]


def _byte_ends(text: str, ends: list[int], crlf: bool) -> list[int]:
    """Character offsets in ``text`` -> byte offsets in the read it came from (UTF-8; each LF a
    CRLF when ``crlf``). (Not inline: a closure in SSEReader._read would cost every read.)"""
    out = []
    at = prev = 0
    for e in ends:
        piece = text[prev:e]
        at += len(piece.encode()) + (piece.count("\n") if crlf else 0)
        out.append(at)
        prev = e
    return out


def _raw_sizes(text: bytes, blocks: list[str | None]) -> list[int]:
    """Byte size of each block with its blank line, in ``text`` that has CR line ends too."""
    ends = [m.end() for m in _LINE_ENDS.finditer(text)]
    sizes = []
    k = prev = 0
    for b in blocks:
        k += 1 if b is None else b.count("\n") + 2
        sizes.append(ends[k - 1] - prev)
        prev = ends[k - 1]
    return sizes


def frame(event: str | None, obj: object) -> bytes:
    """One SSE frame: ``event:`` line (when given) and a compact JSON ``data:`` line."""
    try:
        data = orjson.dumps(obj)
    except orjson.JSONEncodeError:
        data = _deep_dumps(obj)
    if event:
        return b"".join((b"event: ", event.encode(), b"\ndata: ", data, b"\n\n"))
    return b"".join((b"data: ", data, b"\n\n"))


def frame_data(obj: object) -> bytes:
    try:
        return b"data: " + orjson.dumps(obj) + b"\n\n"
    except orjson.JSONEncodeError:
        return b"data: " + _deep_dumps(obj) + b"\n\n"


def _deep_dumps(obj: object) -> bytes:
    # bodies nested deeper than orjson writes (an upstream's own) still become a frame
    return dumps(obj)
