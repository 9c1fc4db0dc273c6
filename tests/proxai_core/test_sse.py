from __future__ import annotations

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
