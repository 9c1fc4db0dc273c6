"""The ``application/vnd.amazon.eventstream`` framing (Amazon Bedrock streams), both ways.

A frame (all integers big-endian)::

    total length (4) | headers length (4) | CRC32 of those 8 bytes (4)
    headers | payload | CRC32 of every byte before it (4)

A header is: name length (1), name, value type (1), value. String headers (type 7) carry a 2-byte
length; the other types are read too (booleans, integers, byte arrays, timestamps, UUIDs).
``:message-type`` says what a frame is: ``event`` (``:event-type`` names it), ``exception`` (a
modelled error inside the stream, ``:exception-type`` names it) or ``error`` (``:error-code``,
``:error-message``).

:class:`EventStreamReader` reads frames from bytes in any chunking and is the
:class:`~proxai_core.codecs.base.StreamReader` of a codec whose streams come in this framing.
A stream that can no longer be trusted (a bad CRC, a length out of bounds, a stream cut inside a
frame) is handed to the decoder as one last event named :data:`CORRUPT` or :data:`CUT` whose data
says what happened; nothing is read after it. :func:`frame` writes one frame.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

__all__ = [
    "CORRUPT",
    "CUT",
    "ERROR",
    "MAX_FRAME",
    "EventStreamReader",
    "Frame",
    "FrameError",
    "HeaderValue",
    "encode_headers",
    "frame",
    "frame_headers",
]

#: the largest frame read (the whole frame, prelude and CRCs included); longer is corrupt
MAX_FRAME = 16 * 1024 * 1024
#: the largest headers section read (the framing's own limit)
MAX_HEADERS = 128 * 1024
_PRELUDE = 12  # total length, headers length, prelude CRC
_MIN_FRAME = _PRELUDE + 4  # no headers, no payload, the message CRC

#: the event handed over for a frame that breaks the framing (data: what is wrong); the last one
CORRUPT = ":corrupt"
#: the event handed over at the end of a stream cut inside a frame (data: how much was cut)
CUT = ":cut"
#: the event name of a ``:message-type: error`` frame (data: ``{"code", "message"}`` as JSON)
ERROR = ":error"

HeaderValue = bool | int | bytes | str | uuid.UUID

_U32 = struct.Struct(">I")
_PRELUDE_S = struct.Struct(">III")
_INTS = {2: struct.Struct(">b"), 3: struct.Struct(">h"), 4: struct.Struct(">i"), 5: struct.Struct(">q"),
         8: struct.Struct(">q")}


class FrameError(ValueError):
    """Bytes that are not a valid frame (a bad CRC, a length out of bounds, a bad header)."""

    #: the whole frames read before the corrupt one (by the same call)
    frames: list[Frame] = []


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: its headers (in wire order) and its payload."""

    headers: dict[str, HeaderValue]
    payload: bytes

    @property
    def message_type(self) -> str:
        """``event``, ``exception`` or ``error`` (a frame without the header is an event)."""
        mt = self.headers.get(":message-type", "event")
        return mt if isinstance(mt, str) else "event"

    @property
    def name(self) -> str:
        """What the frame is called: ``:event-type`` of an event, ``:exception-type`` of an
        exception, :data:`ERROR` for an error frame."""
        mt = self.message_type
        if mt == "error":
            return ERROR
        v = self.headers.get(":exception-type" if mt == "exception" else ":event-type", "")
        return v if isinstance(v, str) else ""

    @property
    def data(self) -> str:
        """The payload as text (an error frame: its code and message as a JSON object)."""
        if self.message_type == "error":
            return orjson.dumps({"code": self.headers.get(":error-code"),
                                 "message": self.headers.get(":error-message")},
                                default=str).decode()
        return self.payload.decode("utf-8", "replace")


def _headers(buf: bytes | bytearray | memoryview) -> dict[str, HeaderValue]:
    out: dict[str, HeaderValue] = {}
    i, end = 0, len(buf)
    while i < end:
        n = buf[i]
        i += 1
        if i + n + 1 > end:
            raise FrameError("a header name runs past the headers section")
        name = bytes(buf[i:i + n]).decode("utf-8", "replace")
        i += n
        t = buf[i]
        i += 1
        value: HeaderValue
        if t == 0 or t == 1:
            value = t == 0
        elif t in _INTS:
            s = _INTS[t]
            if i + s.size > end:
                raise FrameError(f"header {name!r}: its value runs past the headers section")
            value = s.unpack_from(buf, i)[0]
            i += s.size
        elif t == 6 or t == 7:
            if i + 2 > end:
                raise FrameError(f"header {name!r}: its length runs past the headers section")
            ln = buf[i] << 8 | buf[i + 1]
            i += 2
            if i + ln > end:
                raise FrameError(f"header {name!r}: its value runs past the headers section")
            raw = bytes(buf[i:i + ln])
            i += ln
            value = raw.decode("utf-8", "replace") if t == 7 else raw
        elif t == 9:
            if i + 16 > end:
                raise FrameError(f"header {name!r}: its value runs past the headers section")
            value = uuid.UUID(bytes=bytes(buf[i:i + 16]))
            i += 16
        else:
            raise FrameError(f"header {name!r}: unknown value type {t}")
        out[name] = value
    return out


class EventStreamReader:
    """Frames from bytes in any chunking; the codecs' :class:`StreamReader` for this framing.

    Events are ``(name, data text)`` (see :attr:`Frame.name`, :attr:`Frame.data`). Bytes wait in
    one buffer until their frame is whole; a frame's length is known from its first 12 bytes and
    bounded by :data:`MAX_FRAME`, so nothing waits beyond one frame."""

    __slots__ = ("_buf", "_need", "_last", "broken", "frames_read")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need = _PRELUDE  # bytes the next step needs in the buffer: the prelude, or the frame
        #: why the stream can no longer be read (a corrupt frame), or None
        self.broken: str | None = None
        self.frames_read = 0
        self._last = b""  # the bytes from a corrupt frame on (handed over with its event)

    # ---------------------------------------------------------------- frames
    def frames(self, chunk: bytes) -> list[Frame]:
        """The frames these bytes complete. A corrupt frame raises :class:`FrameError` (its
        ``frames``: the whole frames before it)."""
        if self.broken is not None:
            raise FrameError(self.broken)
        out = self._read(chunk, None)
        if self.broken is not None:
            exc = FrameError(self.broken)
            exc.frames = out
            raise exc
        return out

    def _read(self, chunk: bytes, raws: list[bytes] | None) -> list[Frame]:
        """The frames these bytes complete (with ``raws``: each one's own bytes appended to it).
        At a corrupt frame: the frames before it, :attr:`broken` set, the buffer dropped."""
        buf = self._buf
        buf += chunk
        out: list[Frame] = []
        at = 0
        n = len(buf)
        try:
            while n - at >= self._need:
                total, hlen, crc = _PRELUDE_S.unpack_from(buf, at)
                if self._need == _PRELUDE:
                    if zlib.crc32(buf[at:at + 8]) != crc:
                        raise FrameError(f"frame {self.frames_read + 1}: the prelude CRC does not match")
                    if not _MIN_FRAME <= total <= MAX_FRAME:
                        raise FrameError(f"frame {self.frames_read + 1}: length {total} out of bounds "
                                         f"({_MIN_FRAME}..{MAX_FRAME})")
                    if hlen > total - _MIN_FRAME or hlen > MAX_HEADERS:
                        raise FrameError(f"frame {self.frames_read + 1}: headers length {hlen} out of bounds")
                    self._need = total
                    if n - at < total:
                        break
                raw = bytes(memoryview(buf)[at:at + total])
                if zlib.crc32(memoryview(raw)[:-4]) != _U32.unpack_from(raw, total - 4)[0]:
                    raise FrameError(f"frame {self.frames_read + 1}: the message CRC does not match")
                out.append(Frame(_headers(memoryview(raw)[_PRELUDE:_PRELUDE + hlen]),
                                 raw[_PRELUDE + hlen:total - 4]))
                if raws is not None:
                    raws.append(raw)
                self.frames_read += 1
                at += total
                self._need = _PRELUDE
        except FrameError as exc:
            self.broken = str(exc)
            self._last = bytes(buf[at:])
            buf.clear()
            return out
        if at:
            del buf[:at]
        return out

    def pending(self) -> int:
        """Bytes read of a frame not yet whole."""
        return len(self._buf)

    # ---------------------------------------------------------------- the StreamReader protocol
    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        return [e for e in self.feed_raw(chunk)[0] if e is not None]

    def close(self) -> list[tuple[str | None, str]]:
        return [e for e in self.close_raw()[0] if e is not None]

    def feed_raw(self, chunk: bytes) -> tuple[list[tuple[str | None, str] | None], list[bytes]]:
        """Events and, for each, its frame's bytes. Once the stream is corrupt the bytes that
        follow are handed over as they come (a pass-through forwards what the upstream sent; the
        client's own parser meets the same fault)."""
        if self.broken is not None:
            return ([None], [chunk]) if chunk else ([], [])
        blobs: list[bytes] = []
        events: list[tuple[str | None, str] | None] = [(f.name, f.data) for f in self._read(chunk, blobs)]
        if self.broken is not None:
            events.append((CORRUPT, self.broken))
            blobs.append(self._last)
            self._last = b""
        return events, blobs

    def close_raw(self) -> tuple[list[tuple[str | None, str] | None], list[bytes]]:
        """At the end of the stream: a frame cut before its end is one :data:`CUT` event (its
        bytes with it, so a pass-through can tell what it withholds)."""
        if self.broken is not None or not self._buf:
            return [], []
        rest = bytes(self._buf)
        self._buf.clear()
        self.broken = f"the stream ended inside frame {self.frames_read + 1} ({len(rest)} bytes of it arrived)"
        return [(CUT, self.broken)], [rest]


# ----------------------------------------------------------------------------- writing
def _encode_header(name: str, value: HeaderValue) -> bytes:
    nb = name.encode()
    if len(nb) > 255:
        raise ValueError(f"header name too long: {name!r}")
    head = bytes((len(nb),)) + nb
    if isinstance(value, bool):
        return head + (b"\x00" if value else b"\x01")
    if isinstance(value, int):
        return head + b"\x05" + _INTS[5].pack(value)
    if isinstance(value, uuid.UUID):
        return head + b"\x09" + value.bytes
    raw, t = (value, 6) if isinstance(value, bytes) else (value.encode(), 7)
    if len(raw) > 0xFFFF:
        raise ValueError(f"header {name!r}: value too long")
    return head + bytes((t,)) + len(raw).to_bytes(2, "big") + raw


def encode_headers(headers: Mapping[str, HeaderValue]) -> bytes:
    """The headers section (in the mapping's order)."""
    return b"".join(_encode_header(k, v) for k, v in headers.items())


def frame_headers(headers: Mapping[str, HeaderValue], payload: bytes) -> bytes:
    """One frame of these headers and payload."""
    hb = encode_headers(headers)
    total = _PRELUDE + len(hb) + len(payload) + 4
    prelude = struct.pack(">II", total, len(hb))
    prelude += _U32.pack(zlib.crc32(prelude))
    body = prelude + hb + payload
    return body + _U32.pack(zlib.crc32(body))


def frame(event_type: str, payload: bytes, message_type: str = "event") -> bytes:
    """One JSON frame as Bedrock writes it: ``:event-type`` (or ``:exception-type`` when
    ``message_type`` is ``exception``), ``:content-type: application/json``, ``:message-type``."""
    key = ":exception-type" if message_type == "exception" else ":event-type"
    return frame_headers({key: event_type, ":content-type": "application/json", ":message-type": message_type},
                         payload)
