from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxai_core.sse import SSEReader, frame

SAMPLE = (
    b"event: a\r\ndata: {\"x\":1}\r\n\r\n"
    b": keep-alive comment\n\n"
    b"data:{\"y\":\"\xc3\xa9\xf0\x9f\x98\x80\"}\ndata: 2\r\r"
    b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    b"data: [DONE]\n\n"
)


def _whole(data: bytes):
    r = SSEReader()
    return r.feed(data) + r.close()


def test_line_endings_multiline_comments_and_nospace():
    assert _whole(SAMPLE) == [
        ("a", '{"x":1}'),
        (None, '{"y":"é😀"}\n2'),
        ("message_stop", '{"type":"message_stop"}'),
        (None, "[DONE]"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SAMPLE)), max_size=20))
def test_any_chunking_gives_the_same_events(cuts):
    cuts = sorted(set(cuts))
    r = SSEReader()
    out = []
    prev = 0
    for c in cuts + [len(SAMPLE)]:
        out += r.feed(SAMPLE[prev:c])
        prev = c
    out += r.close()
    assert out == _whole(SAMPLE)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SAMPLE)), max_size=20))
def test_raw_blobs_reassemble_the_input(cuts):
    cuts = sorted(set(cuts))
    r = SSEReader()
    blobs = []
    prev = 0
    for c in cuts + [len(SAMPLE)]:
        blobs += r.feed_raw(SAMPLE[prev:c])[1]
        prev = c
    blobs += r.close_raw()[1]
    assert b"".join(blobs) == SAMPLE


def test_cut_event_is_handed_over_at_close():
    r = SSEReader()
    assert r.feed(b'data: {"a":') == []
    assert r.close() == [(None, '{"a":')]


def test_event_without_data_is_not_dispatched():
    assert _whole(b"event: ping\n\n") == []


def test_frame():
    assert frame("x", {"a": 1}) == b'event: x\ndata: {"a":1}\n\n'
    assert frame(None, {"a": 1}) == b'data: {"a":1}\n\n'


def _cpu(fn, rounds=5):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.parametrize("raw", [False, True], ids=["events", "raw"])
def test_long_event_in_many_reads_costs_about_one_read(raw):
    """Linear, not quadratic: a 1 MB event in 1 KB reads costs about what one read costs (a reader
    that re-joins and rescans what waits on every read costs ~10x; the bound is generous, CPU time)."""
    event = b'data: {"a":"' + "xé ".encode() * (1 << 18) + b'"}\n\n'
    reads = [event[i:i + 1024] for i in range(0, len(event), 1024)]

    def run(chunks):
        r = SSEReader()
        feed = r.feed_raw if raw else r.feed
        got = [feed(c) for c in chunks]
        got.append(r.close_raw() if raw else r.close())
        return got

    whole, split = run([event]), run(reads)
    if raw:  # same events, and the raw bytes reassemble the input
        assert [e for evs, _ in whole for e in evs] == [e for evs, _ in split for e in evs]
        assert b"".join(b for _, bl in split for b in bl) == event
    else:
        assert [e for evs in whole for e in evs] == [e for evs in split for e in evs]
    assert len([e for evs in whole for e in (evs[0] if raw else evs)]) == 1
    ratio = _cpu(lambda: run(reads)) / _cpu(lambda: run([event]))
    assert ratio < 4, f"1 KB reads cost {ratio:.1f}x one read"


def test_crlf_split_across_reads_and_an_empty_read_between():
    r = SSEReader()
    out = r.feed(b"data: 1\r") + r.feed(b"") + r.feed(b"\n\r") + r.feed(b"\n")
    assert out + r.close() == [(None, "1")]


def _reference(raw: bytes):
    """The rules SSEReader follows, written plainly: lines end at CRLF, CR or LF; "data"/"event"
    fields (one optional space after the colon); ":" starts a comment; a blank line dispatches an
    event that has data; at the end, an event without its blank line is handed over as it is."""
    import re

    events, event, data = [], None, []
    lines = re.split(rb"\r\n|\r|\n", raw)
    tail = lines.pop()  # after the last line end: a line without its end
    for line in lines + ([tail] if tail else []):
        line = line.decode("utf-8", "replace")
        if not line:
            if data:
                events.append((event, "\n".join(data)))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        events.append((event, "\n".join(data)))
    return events


_piece = st.sampled_from([b"data: ", b"data:", b"data", b"event: x\n", b"event:y", b": c\n", b"id: 1\n", b"{}",
                          b"x", b" ", b"\n", b"\r", b"\r\n", b"\n\n", b"\xc3", b"\xa9", b"\xe2\x82\xac", b"\xff"])


@settings(max_examples=600, deadline=None)
@given(st.lists(_piece, max_size=30).map(b"".join), st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_events_follow_the_rules_however_the_bytes_are_split(raw, cuts):
    """Behaviour, not a comparison of two paths: every chunking of any byte mix gives the events the
    rules give, and the raw bytes handed over reassemble the input up to the last event."""
    cuts = sorted({c for c in cuts if c < len(raw)})
    chunks = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)], strict=True)]
    r = SSEReader()
    got = [e for c in chunks for e in r.feed(c)] + r.close()
    assert got == _reference(raw)
    r = SSEReader()
    evs, blobs = [], []
    for c in chunks:
        e, b = r.feed_raw(c)
        evs += e
        blobs += b
    e, b = r.close_raw()
    evs += e
    blobs += b
    assert [e for e in evs if e is not None] == _reference(raw)
    assert raw.startswith(b"".join(blobs))
    if e:  # an event cut at the end: handed over with all the bytes that were left
        assert b"".join(blobs) == raw
    assert len(evs) == len(blobs)


def test_a_cut_event_read_raw_in_pieces_is_handed_over_with_its_bytes():
    r = SSEReader()
    assert r.feed_raw(b'data: {"a":') == ([], [])
    assert r.feed_raw(b'"b') == ([], [])
    assert r.close_raw() == ([(None, '{"a":"b')], [b'data: {"a":"b'])


def test_frame_of_a_body_nested_deeper_than_orjson_writes():
    """An upstream's own deeply nested body passed through same-protocol still becomes a frame."""
    from proxai_core.sse import frame, frame_data

    deep: dict = {}
    node = deep
    for _ in range(300):
        node["a"] = {}
        node = node["a"]
    out = frame("x", deep)
    assert out.startswith(b"event: x\ndata: {\"a\":{\"a\":") and out.endswith(b"}\n\n")
    assert frame_data(deep) == out[len(b"event: x\n"):]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([b'data: {"a":1}', b"data: \xc3\xa9\xe2\x82\xac", b"event: x\ndata: 2", b"event: \xc3\xa9\ndata:3",
                                 b"data: a\ndata: b", b": c", b"event: ping", b"id: 7\ndata: 4"]), max_size=8),
       st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(min_value=0, max_value=200), max_size=4))
def test_each_raw_blob_is_its_own_event(blocks, eol, cuts):
    """Several whole events in a read (LF, CRLF or CR ends, non-ASCII): each blob handed over is
    exactly the bytes of the event it comes with (a pass-through forwards it as that event)."""
    raw = b"".join(b.replace(b"\n", eol) + eol + eol for b in blocks)
    cuts = sorted({c for c in cuts if c < len(raw)})
    r = SSEReader()
    pairs = []
    for a, b in zip([0] + cuts, cuts + [len(raw)], strict=True):
        evs, blobs = r.feed_raw(raw[a:b])
        pairs += zip(evs, blobs, strict=True)
    evs, blobs = r.close_raw()
    pairs += zip(evs, blobs, strict=True)
    assert b"".join(b for _, b in pairs) == raw
    for ev, blob in pairs:
        assert _whole(blob) == ([] if ev is None else [ev]), (blob, ev)


@pytest.mark.parametrize("tail", [b"event: x", b"event: message_stop", b"event: x\ndata: {}", b"event: x\n"])
def test_a_read_ending_in_an_unfinished_event_line_completes(tail):
    """A whole event, then the start of an ``event:`` line without its line end: the reader must not
    search back before that line (it once looped for ever there, growing memory, on such a read)."""
    import signal

    def _hang(*_):
        raise TimeoutError("the SSE reader did not finish a read")

    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(5)
    try:
        for raw in (False, True):
            r = SSEReader()
            got = r.feed_raw(b"data: {}\n\n" + tail)[0] if raw else r.feed(b"data: {}\n\n" + tail)
            assert got[0] == (None, "{}")
            rest = r.feed_raw(b"\n\ndata: {\"a\":1}\n\n")[0] if raw else r.feed(b"\n\ndata: {\"a\":1}\n\n")
            assert [e for e in got[1:] + rest if e is not None][-1][1] == '{"a":1}'
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("read", [
    b"data: \xc3\xa9\r\n\r\nevent: x\ndata: 2\n\ndata: 3\r\n\r\n",  # CRLF and LF events in one read
    b"data: 1\r\n\r\ndata: \xe2\x82\xac\n\r\ndata: 3",  # an LF then a CRLF ending one event; a cut one after
    b"event: \xc3\xa9\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n: c\r\n\r\n",  # CRLF, non-ASCII, a comment
    b"data: 1\n\ndata: 2\r\ndata: 3\r\r\n",  # a CR alone ends a line too
])
def test_whole_events_of_mixed_line_ends_in_one_read(read):
    """Several whole events in one read whose line ends differ (the reader maps its character
    offsets back to bytes): the events the rules give, each blob exactly its own event's bytes."""
    r = SSEReader()
    assert r.feed(read) + r.close() == _reference(read)
    r = SSEReader()
    evs, blobs = r.feed_raw(read)
    tail_evs, tail_blobs = r.close_raw()
    evs, blobs = evs + tail_evs, blobs + tail_blobs
    assert [e for e in evs if e is not None] == _reference(read)
    assert b"".join(blobs) == read
    for ev, blob in zip(evs, blobs, strict=True):
        assert _whole(blob) == ([] if ev is None else [ev]), (blob, ev)
