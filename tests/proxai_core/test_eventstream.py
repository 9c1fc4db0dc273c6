"""The event-stream framing: every recorded Bedrock stream read frame by frame and written back
byte for byte, in any chunking; a stream cut anywhere or corrupted is told honestly."""

from __future__ import annotations

import random
import struct
import uuid
import zlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai_core.eventstream import (
    CORRUPT,
    CUT,
    ERROR,
    MAX_FRAME,
    EventStreamReader,
    Frame,
    FrameError,
    frame,
    frame_headers,
)
from tests.conftest import FIXTURES

RECORDED = sorted([*FIXTURES.glob("bedrock-converse/*.eventstream"), *FIXTURES.glob("bedrock-invoke/*.eventstream")])
needs_recordings = pytest.mark.skipif(not RECORDED, reason="no recorded event streams in ../shared/fixtures")


def _ids(paths):
    return [f"{p.parent.name}/{p.stem[-60:]}" for p in paths]


def _read_all(data: bytes, sizes: list[int] | None = None) -> tuple[list, list[bytes], list]:
    """Events and their bytes (feed_raw) of ``data`` fed in pieces of ``sizes`` (cycled), then closed."""
    r = EventStreamReader()
    events, blobs = [], []
    at = 0
    k = 0
    while at < len(data):
        n = sizes[k % len(sizes)] if sizes else len(data)
        k += 1
        ev, bl = r.feed_raw(data[at:at + n])
        events += ev
        blobs += bl
        at += n
    ev, bl = r.close_raw()
    return events, blobs, ev


def _sample() -> bytes:
    return b"".join([
        frame("messageStart", b'{"role":"assistant","p":"abc"}'),
        frame("contentBlockDelta", '{"contentBlockIndex":0,"delta":{"text":"h\u00e9llo"}}'.encode()),
        frame("contentBlockStop", b'{"contentBlockIndex":0}'),
        frame("messageStop", b'{"stopReason":"end_turn"}'),
    ])


# ----------------------------------------------------------------------------- recordings
@needs_recordings
@pytest.mark.parametrize("path", RECORDED, ids=_ids(RECORDED))
def test_recorded_stream_reads_and_reframes_byte_identically(path):
    data = path.read_bytes()
    r = EventStreamReader()
    frames = r.frames(data)
    assert frames and r.pending() == 0 and r.broken is None
    assert b"".join(frame_headers(f.headers, f.payload) for f in frames) == data
    for f in frames:
        assert f.message_type == "event"
        assert f.headers[":content-type"] == "application/json"
        assert isinstance(orjson.loads(f.payload), dict)
        # the writer of Bedrock's own frames gives the same bytes
        assert frame(f.name, f.payload) == frame_headers(f.headers, f.payload)
    events, blobs, tail = _read_all(data)
    assert tail == [] and b"".join(blobs) == data
    assert [e for e in events] == [(f.name, f.payload.decode()) for f in frames]
    if "bedrock-converse" in str(path):
        assert frames[0].name == "messageStart"


@needs_recordings
@pytest.mark.parametrize("path", RECORDED, ids=_ids(RECORDED))
def test_recorded_stream_chunking_invariance(path):
    data = path.read_bytes()
    whole, whole_blobs, _ = _read_all(data)
    one, one_blobs, tail = _read_all(data, [1])
    assert one == whole and b"".join(one_blobs) == data and tail == []
    assert [len(b) for b in one_blobs] == [len(b) for b in whole_blobs]
    rnd = random.Random(path.name)
    for _ in range(5):
        sizes = [rnd.randint(1, 300) for _ in range(40)]
        got, blobs, tail = _read_all(data, sizes)
        assert got == whole and blobs == whole_blobs and tail == []
    # feed() / close() (the translating path) give the same events
    r = EventStreamReader()
    evs = [e for i in range(0, len(data), 7) for e in r.feed(data[i:i + 7])]
    assert evs + r.close() == whole


@needs_recordings
@pytest.mark.parametrize("path", RECORDED[:4], ids=_ids(RECORDED[:4]))
def test_recorded_stream_every_cut_point(path):
    """A stream cut after any byte gives the frames whole before the cut, then one honest CUT at
    close (none when the cut falls between frames)."""
    data = path.read_bytes()
    ends = []
    at = 0
    while at < len(data):
        at += struct.unpack_from(">I", data, at)[0]
        ends.append(at)
    whole, _, _ = _read_all(data)
    for cut in range(len(data) + 1):
        r = EventStreamReader()
        evs, blobs = r.feed_raw(data[:cut])
        done = sum(1 for e in ends if e <= cut)
        assert evs == whole[:done], cut
        assert b"".join(blobs) == data[:ends[done - 1] if done else 0]
        tail, rest = r.close_raw()
        if cut in ends or cut == 0:
            assert tail == [] and rest == []
        else:
            assert len(tail) == 1 and tail[0][0] == CUT and "ended inside frame" in tail[0][1]
            assert b"".join(blobs + rest) == data[:cut]
        assert r.close_raw() == ([], [])  # (nothing twice)


# ----------------------------------------------------------------------------- chunking (hypothesis)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
       cuts=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=30))
def test_any_chunking_gives_the_same_frames(payloads, cuts):
    data = b"".join(frame_headers({":event-type": f"e{i}", ":message-type": "event"}, p)
                    for i, p in enumerate(payloads))
    events, blobs, tail = _read_all(data, cuts)
    assert tail == [] and b"".join(blobs) == data
    assert [e[0] for e in events] == [f"e{i}" for i in range(len(payloads))]
    r = EventStreamReader()
    frames = []
    for i in range(0, len(data), cuts[0]):
        frames += r.frames(data[i:i + cuts[0]])
    assert [f.payload for f in frames] == payloads


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) < 256),
                       st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.binary(max_size=40),
                                 st.text(max_size=40), st.uuids()), max_size=6))
def test_headers_of_every_type_round_trip(headers):
    data = frame_headers(headers, b"x")
    (f,) = EventStreamReader().frames(data)
    assert f.headers == headers and f.payload == b"x"


def test_narrow_integer_and_timestamp_headers_read():
    def h(name: bytes, t: int, value: bytes) -> bytes:
        return bytes((len(name),)) + name + bytes((t,)) + value
    hb = h(b"b", 2, b"\xff") + h(b"s", 3, b"\x01\x00") + h(b"i", 4, b"\x00\x00\x01\x00") + \
        h(b"ts", 8, struct.pack(">q", 1700000000000))
    prelude = struct.pack(">II", 12 + len(hb) + 4, len(hb))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    msg = prelude + hb
    msg += struct.pack(">I", zlib.crc32(msg))
    (f,) = EventStreamReader().frames(msg)
    assert f.headers == {"b": -1, "s": 256, "i": 256, "ts": 1700000000000} and f.payload == b""


# ----------------------------------------------------------------------------- message types
def test_event_exception_and_error_frames_told_apart():
    exc = frame("throttlingException", b'{"message":"slow down"}', message_type="exception")
    err = frame_headers({":message-type": "error", ":error-code": "InternalFailure",
                         ":error-message": "boom"}, b"")
    data = frame("messageStart", b'{"role":"assistant"}') + exc + err
    frames = EventStreamReader().frames(data)
    assert [f.message_type for f in frames] == ["event", "exception", "error"]
    assert frames[1].headers[":exception-type"] == "throttlingException"
    assert ":event-type" not in frames[1].headers
    r = EventStreamReader()
    assert r.feed(data) == [("messageStart", '{"role":"assistant"}'),
                            ("throttlingException", '{"message":"slow down"}'),
                            (ERROR, '{"code":"InternalFailure","message":"boom"}')]


def test_frame_writes_bedrock_header_order():
    f = frame("messageStop", b"{}")
    (got,) = EventStreamReader().frames(f)
    assert list(got.headers) == [":event-type", ":content-type", ":message-type"]
    e = frame("validationException", b"{}", "exception")
    (got,) = EventStreamReader().frames(e)
    assert list(got.headers) == [":exception-type", ":content-type", ":message-type"]


def test_a_frame_without_message_type_is_an_event():
    f = Frame({":event-type": "x"}, b"{}")
    assert f.message_type == "event" and f.name == "x" and f.data == "{}"


# ----------------------------------------------------------------------------- corruption
def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes((data[at] ^ 0x01,)) + data[at + 1:]


@pytest.mark.parametrize("where", ["prelude_crc", "length", "headers", "payload", "message_crc"])
def test_corrupt_crc_is_a_clear_error(where):
    data = _sample()
    first = struct.unpack_from(">I", data, 0)[0]
    second = struct.unpack_from(">I", data, first)[0]
    at = {"prelude_crc": first + 9, "length": first + 2, "headers": first + 14,
          "payload": first + second - 10, "message_crc": first + second - 1}[where]
    bad = _flip(data, at)
    with pytest.raises(FrameError, match="CRC does not match") as info:
        EventStreamReader().frames(bad)
    assert len(info.value.frames) == 1 and info.value.frames[0].name == "messageStart"
    for size in (1, 5, len(bad)):
        r = EventStreamReader()
        events, blobs = [], []
        for i in range(0, len(bad), size):
            ev, bl = r.feed_raw(bad[i:i + size])
            events += ev
            blobs += bl
        named = [e for e in events if e is not None]
        assert named[0][0] == "messageStart"
        assert named[1][0] == CORRUPT and "frame 2" in named[1][1] and len(named) == 2
        assert b"".join(blobs) == bad  # a pass-through forwards what the upstream sent
        assert r.close_raw() == ([], [])
        assert r.broken is not None
    r = EventStreamReader()
    assert [e[0] for e in r.feed(bad)] == ["messageStart", CORRUPT]
    assert r.feed(b"more") == [] and r.close() == []
    with pytest.raises(FrameError):
        r.frames(b"")


@pytest.mark.parametrize("total,hlen", [(MAX_FRAME + 1, 0), (15, 0), (0, 0), (100, 90), (2**32 - 1, 4)])
def test_absurd_lengths_are_corrupt_before_any_wait(total, hlen):
    head = struct.pack(">II", total, hlen)
    head += struct.pack(">I", zlib.crc32(head))
    r = EventStreamReader()
    with pytest.raises(FrameError, match="out of bounds"):
        r.frames(head)
    assert r.pending() == 0  # nothing kept waiting for a frame that cannot be


def test_unknown_header_type_and_overrunning_header_are_corrupt():
    for hb in (b"\x01a\x0b", b"\x05ab", b"\x01a\x07\x00\x09xy", b"\x01a\x04\x00"):
        prelude = struct.pack(">II", 12 + len(hb) + 4, len(hb))
        prelude += struct.pack(">I", zlib.crc32(prelude))
        msg = prelude + hb
        msg += struct.pack(">I", zlib.crc32(msg))
        r = EventStreamReader()
        assert r.feed(msg)[0][0] == CORRUPT


def test_random_garbage_never_hangs_or_raises_from_feed():
    rnd = random.Random(7)
    for _ in range(300):
        junk = rnd.randbytes(rnd.randint(0, 80))
        r = EventStreamReader()
        evs = r.feed(junk) + r.close()
        assert all(name in (CORRUPT, CUT) for name, _ in evs)
        assert len(evs) <= 1


def test_uuid_header_value():
    u = uuid.UUID(int=5)
    (f,) = EventStreamReader().frames(frame_headers({"id": u}, b""))
    assert f.headers["id"] == u
