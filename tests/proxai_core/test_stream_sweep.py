"""Every recorded stream through StreamTranslator into every protocol, judged by the SDKs' stream
accumulators; chunking invariance; honest endings at every cut point; stream/JSON cross cases."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai_core import (
    Protocol,
    StopReason,
    StreamTranslator,
    response_from_stream,
    stop_info,
    stream_from_response,
)
from proxai_core.api import decode_response
from proxai_core.codecs import get
from proxai_core.collect import Collector
from proxai_core.eventstream import EventStreamReader

from ..sdk import (
    ANTHROPIC_BODIES,
    EVENTSTREAM,
    FIXTURES,
    PROTOCOLS,
    StreamError,
    accumulate_stream,
    client_events,
    fixture_files,
    frame_ends,
    summarize_response,
    validate_response,
)
from .semantics import assert_same_semantics, summary_from_neutral

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/fixtures absent")


def _streams():
    for p in PROTOCOLS:
        for f in fixture_files(p, ".sse"):
            yield pytest.param(p, f, id=f"{p.name}/{f.name[:90]}")


STREAMS = list(_streams())


def neutral_of_stream(proto: Protocol, data: bytes):
    w: list[str] = []
    dec = get(proto).StreamDecoder(w)
    col = Collector()
    reader = get(proto).stream_reader()  # (Gemini: SSE or one JSON array)
    for name, d in reader.feed(data) + reader.close():
        for ev in dec.feed(name, d):
            col.add(ev)
    if not dec.done:
        for ev in dec.finish():
            col.add(ev)
    return col, col.finish()


def _reason_of_client_stream(target, out: bytes):
    """The StopInfo our own decoder reads from the client stream (also checks it is well formed)."""
    t = StreamTranslator(target, target)
    t.feed(out)
    t.close()
    return t.stop


@pytest.mark.parametrize("proto,path", STREAMS)
def test_stream_fixture_into_every_protocol(proto, path):
    data = path.read_bytes()
    col, src_resp = neutral_of_stream(proto, data)
    src = summary_from_neutral(src_resp)
    for target in PROTOCOLS:
        t = StreamTranslator(proto, target)
        out = t.feed(data) + t.close()
        if target is proto:
            assert out.replace(b"\r\n", b"\n") == data.replace(b"\r\n", b"\n") or t.stop.reason is StopReason.INTERRUPTED
            continue
        if col.error is not None:
            with pytest.raises(StreamError):
                accumulate_stream(target, out)
            assert t.stop.reason is StopReason.INTERRUPTED
            continue
        dst = accumulate_stream(target, out)
        dst_reason = _reason_of_client_stream(target, out).reason
        assert t.stop is not None and t.stop.reason is src_resp.stop.reason
        assert_same_semantics(src, dst, src_resp.stop.reason, dst_reason, target, where=f"{proto}->{target}")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_chunking_gives_identical_output(data):
    proto, path = data.draw(st.sampled_from([p.values for p in STREAMS]))
    raw = path.read_bytes()
    target = data.draw(st.sampled_from(PROTOCOLS))
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(raw)), max_size=30))))

    def run(pieces):
        t = StreamTranslator(proto, target)
        out = b"".join(t.feed(p) for p in pieces) + t.close()
        return _strip_volatile(out)

    pieces = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
    assert run(pieces) == run([raw])


def _strip_volatile(out: bytes) -> bytes:
    # minted ids/timestamps are deterministic per translator only if derived from the source;
    # "created" fields may come from the clock
    import re

    return re.sub(rb'"created(_at)?":\d+', b'"created":0', out)


def _boundaries(raw: bytes, proto: Protocol | None = None) -> list[int]:
    if raw[:1] == b"\x00":  # an event stream: after each frame
        return frame_ends(raw)
    out = []
    i = 0
    if proto is Protocol.BEDROCK_CONVERSE:  # event-stream frames: each says its own length
        while i + 4 <= len(raw):
            i += int.from_bytes(raw[i:i + 4], "big")
            out.append(i)
        return out
    norm = raw.replace(b"\r\n", b"\n")
    if norm != raw:
        return [len(raw) * k // 10 for k in range(1, 10)]
    while True:
        j = raw.find(b"\n\n", i)
        if j == -1:
            break
        out.append(j + 2)
        i = j + 2
    return out


_TERMINALS = (b"message_stop", b"response.completed", b"response.incomplete", b"[DONE]", b"messageStop")


@pytest.mark.parametrize("proto,path", STREAMS)
def test_every_cut_point_ends_honestly(proto, path):
    """Truncate after each event boundary and inside each event: no exception escapes, the output
    ends with the native error event, StopInfo is interrupted and no terminal was fabricated —
    unless the stop information had already arrived (then the turn is complete).

    One translator is fed event by event; at each cut a deep copy of it is closed (the same as
    feeding the truncated bytes from scratch, without the quadratic cost)."""
    raw = path.read_bytes()
    bounds = _boundaries(raw, proto)
    for target in PROTOCOLS:
        t = StreamTranslator(proto, target)
        so_far = b""
        prev = 0
        for b in bounds + ([len(raw)] if not bounds or bounds[-1] != len(raw) else []):
            event = raw[prev:b]
            mid = len(event) // 2
            for cut_bytes in (event[:mid],):  # inside the event
                c = copy.deepcopy(t)
                out = so_far + c.feed(cut_bytes) + c.close()
                _check_cut(proto, target, c, out, f"cut {prev + mid} {proto}->{target}")
            so_far += t.feed(event)
            prev = b
            if b == len(raw):
                break
            c = copy.deepcopy(t)  # after the boundary
            out = so_far + c.close()
            _check_cut(proto, target, c, out, f"cut {b} {proto}->{target}")


def _check_cut(proto, target, t, out: bytes, where: str) -> None:
    assert t.stop is not None, f"{where}: no StopInfo"
    if t.stop.reason is not StopReason.INTERRUPTED:
        return  # the stop information had arrived before the cut: complete
    _assert_ends_with_native_error(target, out, where=where)
    if target is proto or t.error is None or t.error.kind != "interrupted":
        return
    written = b"".join(d.encode() for _, d in client_events(target, out)) if target in EVENTSTREAM else out
    for term in _TERMINALS:
        assert term not in written, f"{where}: {term!r} fabricated"
    if target is Protocol.CHAT:
        assert b'"finish_reason":"' not in out, f"{where}: finish_reason fabricated"
    if target is Protocol.GEMINI:
        assert b'"finishReason":"' not in out, f"{where}: finishReason fabricated"


def _assert_ends_with_native_error(target, out: bytes, where: str):
    if target is Protocol.BEDROCK_CONVERSE:  # an exception frame
        frames = EventStreamReader().frames(out)
        assert frames, f"{where}: empty output"
        assert frames[-1].message_type == "exception", where
        return
    events = client_events(target, out)
    assert events, f"{where}: empty output"
    name, data = events[-1]
    obj = json.loads(data)
    if target in EVENTSTREAM:  # an exception frame
        assert name == "error" and isinstance(obj["message"], str), where
    elif target in ANTHROPIC_BODIES:
        assert name == "error" and obj["type"] == "error", where
    elif target is Protocol.CHAT or target is Protocol.GEMINI:
        assert "error" in obj and isinstance(obj["error"], dict), where
    else:
        assert obj["type"] in ("error", "response.failed"), where


def _json_responses():
    for p in PROTOCOLS:
        for f in fixture_files(p, ".json"):
            body = json.loads(f.read_text())
            if isinstance(body, dict) and (body.get("choices") or body.get("output") is not None
                                           or body.get("type") == "message" or body.get("candidates")):
                yield pytest.param(p, f, id=f"{p.name}/{f.name[:90]}")


@pytest.mark.parametrize("proto,path", list(_json_responses()))
def test_json_answer_to_streaming_client(proto, path):
    body = json.loads(path.read_text())
    src_resp = decode_response(body, proto)
    for target in PROTOCOLS:
        out, stop, _ = stream_from_response(body, proto, target)
        if src_resp.extra.get("error") is not None:
            with pytest.raises(StreamError):
                accumulate_stream(target, out)
            continue
        box = []
        if not _sdk_judges(target, proto, src_resp, lambda: box.append(accumulate_stream(target, out))):
            continue
        dst = box[0]
        assert_same_semantics(summary_from_neutral(src_resp), dst, src_resp.stop.reason,
                              _reason_of_client_stream(target, out).reason, target,
                              where=f"{proto}->{target} json->sse")


@pytest.mark.parametrize("proto,path", STREAMS)
def test_stream_answer_to_non_streaming_client(proto, path):
    raw = path.read_bytes()
    col, src_resp = neutral_of_stream(proto, raw)
    for target in PROTOCOLS:
        res = response_from_stream(raw, proto, target)
        if col.error is not None:
            assert res.status >= 400
            continue
        if not _sdk_judges(target, proto, src_resp, lambda: validate_response(target, res.body)):
            continue
        dst = summarize_response(target, res.body)
        assert_same_semantics(summary_from_neutral(src_resp), dst, src_resp.stop.reason,
                              stop_info(res.body, target).reason, target, where=f"{proto}->{target} sse->json")


def _sdk_judges(target, proto, src_resp, check) -> bool:
    """Run the SDK check. Same-protocol output that carries the upstream's own opaque items (server
    tool blocks) unchanged is only as valid as the recording: real traffic the SDK types reject
    (wire-facts §7) is tolerated there, never in translated output."""
    import pydantic

    from proxai_core import neutral as n

    try:
        check()
        return True
    except (pydantic.ValidationError, StreamError, AssertionError):
        if target is proto and any(isinstance(p, (n.Opaque, n.WebSearchCall)) for p in src_resp.parts):
            return False
        raise
