"""Offline upstream replay: canonical keys, the recording index, and the loopback server."""

from __future__ import annotations

import orjson
import pytest
from mitmproxy import http
from mitmproxy import io as mio
from mitmproxy.test import tflow, tutils

from proxai_mitm.replay.index import (
    RecordingIndex,
    canonical_key,
    split_sse_events,
)

SSE = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":5,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hello"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
    b'"stop_sequence":null},"usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
JSON_BODY = (b'{"id":"msg_2","type":"message","role":"assistant","model":"claude-x","content":'
             b'[{"type":"text","text":"Hi there"}],"stop_reason":"end_turn","stop_sequence":null,'
             b'"usage":{"input_tokens":5,"output_tokens":3}}')
REQ = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}


def make_flow(req_body: dict | bytes, resp_body: bytes | None, *, ctype="application/json", status=200,
              meta: dict | None = None, path="/v1/messages", t0=1000.0, t1=1000.0, err=False):
    content = req_body if isinstance(req_body, bytes) else orjson.dumps(req_body)
    req = tutils.treq(method=b"POST", scheme=b"https", host="api.anthropic.com", port=443, path=path.encode(),
                      headers=http.Headers([(b"content-type", b"application/json")]), content=content)
    resp = tutils.tresp(status_code=status, headers=http.Headers([(b"content-type", ctype.encode())]),
                        content=resp_body, timestamp_start=t0, timestamp_end=t1)
    f = tflow.tflow(req=req, resp=resp, err=err)
    if meta is not None:
        f.metadata["proxai"] = meta
    return f


def write(path, flows):
    with open(path, "wb") as fh:
        w = mio.FlowWriter(fh)
        for f in flows:
            w.add(f)
    return path


# ----------------------------------------------------------------------------- keys
def test_key_ignores_volatile_fields_order_and_whitespace():
    base = canonical_key("POST", "/v1/messages", orjson.dumps(REQ))
    noisy = dict(REQ, stream=True, stream_options={"include_usage": True}, metadata={"user_id": "u-42"},
                 user="someone", safety_identifier="s", prompt_cache_key="k", store=False,
                 include=["reasoning.encrypted_content"], service_tier="auto")
    reordered = b'{ "messages": [ {"content": "hello", "role": "user"} ],\n "max_tokens": 64, "model": "claude-x" }'
    assert canonical_key("post", "/v1/messages?beta=true", orjson.dumps(noisy)) == base
    assert canonical_key("POST", "https://h.example/v1/messages", reordered) == base
    assert base.startswith("POST /v1/messages ")


@pytest.mark.parametrize("change", [
    {"max_tokens": 65},
    {"model": "claude-y"},
    {"messages": [{"role": "user", "content": "hello!"}]},
    {"temperature": 0.5},
    {"parallel_tool_calls": False},
    {"tools": [{"name": "t", "input_schema": {"type": "object"}}]},
])
def test_key_sees_content_changes(change):
    assert canonical_key("POST", "/v1/messages", orjson.dumps(dict(REQ, **change))) != \
        canonical_key("POST", "/v1/messages", orjson.dumps(REQ))


def test_key_of_other_bodies_methods_paths():
    assert canonical_key("POST", "/x", b"raw bytes") != canonical_key("POST", "/x", b"raw  bytes")
    assert canonical_key("POST", "/x", b"") == canonical_key("POST", "/x", None)
    assert canonical_key("GET", "/v1/messages", b"") != canonical_key("POST", "/v1/messages", b"")
    assert canonical_key("POST", "/v1/responses", b"{}") != canonical_key("POST", "/v1/messages", b"{}")
    nested = b'{"a":{"y":1,"x":2},"stream":true}'
    assert canonical_key("POST", "/x", nested) == canonical_key("POST", "/x", b'{"a":{"x":2,"y":1}}')


def test_split_sse_events_is_lossless():
    events = split_sse_events(SSE)
    assert len(events) == 6 and b"".join(events) == SSE
    cut = SSE[:-10]
    assert b"".join(split_sse_events(cut)) == cut
    assert b"".join(split_sse_events(SSE.replace(b"\n", b"\r\n"))) == SSE.replace(b"\n", b"\r\n")


# ----------------------------------------------------------------------------- index
def test_index_prefers_upstream_response_and_reads_folders(tmp_path):
    # a translated flow: the client got Chat JSON, the upstream sent Anthropic SSE
    translated = make_flow(dict(REQ, stream=True), b'{"object":"chat.completion","choices":[]}',
                           meta={"client_protocol": "openai_chat_completions",
                                 "upstream_protocol": "anthropic_messages",
                                 "upstream_response": SSE.decode(),
                                 "upstream_chunks": [[0, 200], [100, len(SSE) - 200]]})
    plain = make_flow(dict(REQ, max_tokens=10), JSON_BODY)
    no_response = tflow.tflow(err=True)
    write(tmp_path / "a.mitm", [translated, no_response])
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "b.mitm", [plain])
    idx = RecordingIndex.load(tmp_path)
    assert len(idx) == 2 and idx.skipped == 1
    rec = idx.find("POST", "/v1/messages", orjson.dumps(REQ))
    assert rec is not None and rec.sse and rec.body == SSE
    assert [(d, len(c)) for d, c in rec.chunks] == [(0.0, 200), (100.0, len(SSE) - 200)]
    assert ("content-type", "text/event-stream; charset=utf-8") in rec.headers
    rec2 = idx.find("POST", "/v1/messages", orjson.dumps(dict(REQ, max_tokens=10)))
    assert rec2 is not None and not rec2.sse and rec2.body == JSON_BODY
    single = RecordingIndex.load(tmp_path / "sub" / "b.mitm")
    assert len(single) == 1
    with pytest.raises(FileNotFoundError):
        RecordingIndex.load(tmp_path / "missing.mitm")


def test_derived_pacing_spreads_events_over_the_recorded_duration():
    f = make_flow(REQ, SSE, ctype="text/event-stream", t0=1000.0, t1=1001.0)
    idx = RecordingIndex.from_flows([f])
    rec = idx.find("POST", "/v1/messages", orjson.dumps(REQ))
    assert len(rec.chunks) == 6
    assert rec.chunks[0][0] == 0.0
    assert all(abs(d - 200.0) < 1e-6 for d, _ in rec.chunks[1:])
    assert abs(rec.total_delay_ms - 1000.0) < 1e-6


def test_same_key_recordings_cycle_in_order():
    flows = [make_flow(REQ, b'{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}', status=429),
             make_flow(REQ, JSON_BODY)]
    idx = RecordingIndex.from_flows(flows)
    body = orjson.dumps(REQ)
    assert idx.find("POST", "/v1/messages", body).status == 429  # find does not consume
    assert [idx.take("POST", "/v1/messages", body).status for _ in range(5)] == [429, 200, 429, 200, 429]
    idx.reset()
    assert idx.take("POST", "/v1/messages", body).status == 429


def test_a_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO (or a device) as the recording, or inside the folder, is never opened: reading it would
    block start-up until a writer comes."""
    import os
    import threading

    fifo = tmp_path / "pipe.mitm"
    os.mkfifo(fifo)
    done: list[object] = []

    def load() -> None:
        try:
            done.append(RecordingIndex.load(fifo))
        except FileNotFoundError as e:
            done.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(5)
    assert done and isinstance(done[0], FileNotFoundError) and "not a regular file" in str(done[0])
    idx = RecordingIndex.load(tmp_path)  # the folder: the FIFO is skipped, not opened
    assert idx.sources == []
