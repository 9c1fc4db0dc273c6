"""replay_server.py: the loopback HTTP/1.1 server (h11) answering from recordings."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import orjson

from proxai_mitm.replay.index import MISS_HEADER, RecordingIndex, split_sse_events
from proxai_mitm.replay.server import ReplayServer

from .test_replay import JSON_BODY, REQ, SSE, make_flow


# ----------------------------------------------------------------------------- server
async def fetch(port: int, path: str, body: bytes, method: str = "POST"):
    """A raw HTTP/1.1 client that timestamps every chunk of a chunked body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nhost: api.anthropic.com\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    chunks: list[tuple[float, bytes]] = []
    complete = True
    if headers.get("transfer-encoding") == "chunked":
        while True:
            try:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            except asyncio.IncompleteReadError:
                complete = False
                break
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            chunks.append((time.monotonic(), data))
    else:
        data = await reader.readexactly(int(headers["content-length"]))
        chunks.append((time.monotonic(), data))
    writer.close()
    return status, headers, chunks, complete


def serve(idx, coro_fn, **kw):
    async def main():
        server = ReplayServer(idx, **kw)
        await server.start()
        try:
            return await coro_fn(server)
        finally:
            await server.stop()
    return asyncio.run(main())


def test_stream_replays_event_by_event_with_recorded_gaps():
    events = split_sse_events(SSE)
    offsets = [0, 120, 240, 240, 360, 360]
    meta = {"upstream_response": SSE.decode(),
            "upstream_chunks": [[o, len(e)] for o, e in zip(offsets, events)]}
    idx = RecordingIndex.from_flows([make_flow(dict(REQ, stream=True), None, ctype="text/event-stream",
                                               meta=meta)])

    async def go(server):
        return await fetch(server.port, "/v1/messages", orjson.dumps(dict(REQ, stream=True)))

    status, headers, chunks, complete = serve(idx, go)
    assert status == 200 and complete
    assert headers["content-type"].startswith("text/event-stream") and headers[MISS_HEADER] == "hit"
    assert b"".join(c for _, c in chunks) == SSE
    assert len(chunks) == 6
    times = [t for t, _ in chunks]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for got, want in zip(gaps, [0.12, 0.12, 0.0, 0.12, 0.0]):
        if want:
            assert got >= want - 0.01, gaps  # (the server sleeps the full gap; allow timer jitter)


def test_fast_mode_has_no_delays():
    f = make_flow(dict(REQ, stream=True), SSE, ctype="text/event-stream", t0=1000.0, t1=1005.0)
    idx = RecordingIndex.from_flows([f])

    async def go(server):
        t = time.monotonic()
        res = await fetch(server.port, "/v1/messages", orjson.dumps(dict(REQ, stream=True)))
        return time.monotonic() - t, res

    elapsed, (status, _h, chunks, complete) = serve(idx, go, fast=True)
    assert status == 200 and complete and b"".join(c for _, c in chunks) == SSE
    assert elapsed < 1.0  # recorded: 5 s


def test_json_hit_and_miss():
    idx = RecordingIndex.from_flows([make_flow(REQ, JSON_BODY)])

    async def go(server):
        hit = await fetch(server.port, "/v1/messages", orjson.dumps(REQ))
        miss = await fetch(server.port, "/v1/messages", orjson.dumps(dict(REQ, max_tokens=1)))
        return hit, miss, server.hits, server.misses

    (hs, hh, hc, _), (ms, mh, mc, _), hits, misses = serve(idx, go)
    assert hs == 200 and hh["content-length"] == str(len(JSON_BODY)) and hc[0][1] == JSON_BODY
    assert ms == 404 and mh[MISS_HEADER] == "miss" and mh["content-type"] == "application/json"
    err = orjson.loads(mc[0][1])
    assert err["error"]["type"] == "not_found_error"
    assert err["error"]["message"].startswith("proxai replay: no recording matches POST /v1/messages (key POST ")
    assert hits == 1 and misses == 1


def test_stream_flag_mismatch_is_adapted():
    idx = RecordingIndex.from_flows([make_flow(dict(REQ, stream=True), SSE, ctype="text/event-stream")])

    async def go(server):
        as_json = await fetch(server.port, "/v1/messages", orjson.dumps(REQ))  # stream absent
        return as_json

    status, headers, chunks, _ = serve(idx, go, fast=True)
    assert status == 200 and headers["content-type"] == "application/json"
    body = orjson.loads(chunks[0][1])
    assert body["content"][0]["text"] == "Hello" and body["stop_reason"] == "end_turn"


def test_cut_stream_is_replayed_cut():
    cut = SSE[: SSE.index(b"event: message_delta")]
    f = make_flow(dict(REQ, stream=True), cut, ctype="text/event-stream", err=True)
    f.error.msg = "HTTP/1 protocol error: peer closed connection without sending complete message body"
    idx = RecordingIndex.from_flows([f])

    async def go(server):
        return await fetch(server.port, "/v1/messages", orjson.dumps(dict(REQ, stream=True)))

    status, _h, chunks, complete = serve(idx, go, fast=True)
    assert status == 200 and not complete
    assert b"".join(c for _, c in chunks) == cut


def test_keep_alive_serves_several_requests_on_one_connection():
    idx = RecordingIndex.from_flows([make_flow(REQ, JSON_BODY), make_flow(dict(REQ, stream=True), SSE,
                                                                          ctype="text/event-stream")])
    body = orjson.dumps(REQ)
    sbody = orjson.dumps(dict(REQ, stream=True))

    async def go(server):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        out = []
        for b in (body, sbody):
            writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(b), b))
            await writer.drain()
            head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
            if "content-length" in head:
                n = int(head.split("content-length:")[1].split("\r\n")[0])
                out.append(await reader.readexactly(n))
            else:
                data = b""
                while (size := int((await reader.readuntil(b"\r\n")).strip(), 16)):
                    data += await reader.readexactly(size)
                    await reader.readexactly(2)
                await reader.readuntil(b"\r\n")
                out.append(data)
        writer.close()
        return out

    assert serve(idx, go, fast=True) == [JSON_BODY, SSE]


def test_compressed_request_matches_and_a_bomb_is_not_inflated():
    import gzip

    from proxai_mitm.replay import server as replay_server

    idx = RecordingIndex.from_flows([make_flow(REQ, JSON_BODY)])

    async def go(server, body: bytes):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-encoding: gzip\r\n"
                     b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        data = await reader.read()
        writer.close()
        return data

    hit = serve(idx, lambda s: go(s, gzip.compress(orjson.dumps(REQ))), fast=True)
    assert hit.startswith(b"HTTP/1.1 200") and hit.endswith(JSON_BODY)
    old = replay_server.MAX_REQUEST_BODY
    replay_server.MAX_REQUEST_BODY = 1 << 20
    try:
        miss = serve(idx, lambda s: go(s, gzip.compress(b"{" + b" " * (8 << 20))), fast=True)
    finally:
        replay_server.MAX_REQUEST_BODY = old
    assert miss.startswith(b"HTTP/1.1 404")  # hashed as it arrived, never inflated to 8 MB


# ----------------------------------------------------------------------------- idle connections, cap
def test_idle_and_stalled_connections_are_closed_after_the_timeout():
    """Issue 21 row 12: nothing sent (before a request, or mid-request) or nothing read closes the
    connection after idle_timeout."""
    idx = RecordingIndex.from_flows([make_flow(dict(REQ, stream=True), SSE, ctype="text/event-stream",
                                               t0=1000.0, t1=1060.0)])

    async def closed_after(reader) -> float:
        t = time.monotonic()
        while await asyncio.wait_for(reader.read(65536), 5):
            pass
        return time.monotonic() - t

    async def go(server):
        idle_r, _idle_w = await asyncio.open_connection("127.0.0.1", server.port)
        half_r, half_w = await asyncio.open_connection("127.0.0.1", server.port)
        half_w.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n{")
        waits = await asyncio.gather(closed_after(idle_r), closed_after(half_r))
        assert not server._writers  # both gone from the server's side too
        return waits

    for waited in serve(idx, go, idle_timeout=0.3):
        assert 0.2 < waited < 2.0


def test_at_the_cap_the_longest_idle_connection_makes_room():
    idx = RecordingIndex.from_flows([make_flow(REQ, JSON_BODY)])

    async def go(server):
        held = []
        for _ in range(3):  # idle: waiting for a request
            held.append(await asyncio.open_connection("127.0.0.1", server.port))
            await asyncio.sleep(0.05)
        status, _h, chunks, _c = await fetch(server.port, "/v1/messages", orjson.dumps(REQ))
        oldest = await asyncio.wait_for(held[0][0].read(), 5)  # evicted: closed without a word
        alive = [not r.at_eof() for r, _w in held[1:]]
        return status, b"".join(c for _, c in chunks), oldest, alive

    status, body, oldest, alive = serve(idx, go, max_connections=3)
    assert status == 200 and body == JSON_BODY
    assert oldest == b"" and alive == [True, True]


def test_at_the_cap_with_none_idle_a_new_connection_gets_503():
    idx = RecordingIndex.from_flows([make_flow(REQ, JSON_BODY)])

    async def go(server):
        held = []
        for _ in range(3):  # each in the middle of a request: none may be dropped for a newcomer
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n{")
            held.append((r, w))
        await asyncio.sleep(0.2)
        r, _w = await asyncio.open_connection("127.0.0.1", server.port)
        refused = await asyncio.wait_for(r.read(), 5)  # answered and closed at once
        held[0][1].close()
        await asyncio.sleep(0.2)
        status, _h, _chunks, _c = await fetch(server.port, "/v1/messages", orjson.dumps(REQ))
        return refused, status

    refused, status = serve(idx, go, max_connections=3)
    assert refused.startswith(b"HTTP/1.1 503 ") and b"too many connections" in refused
    assert status == 200  # room again once one closed


def test_a_client_that_reads_nothing_is_dropped_after_the_timeout():
    big = b'{"pad": "' + b"x" * (16 * 1024 * 1024) + b'"}'
    idx = RecordingIndex.from_flows([make_flow(REQ, big)])

    async def go(server):
        _r, w = await asyncio.open_connection("127.0.0.1", server.port, limit=1024)
        body = orjson.dumps(REQ)
        w.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await w.drain()
        await asyncio.sleep(0.2)
        busy = len(server._writers)
        await asyncio.sleep(1.0)  # the 16 MB answer cannot drain into a client that never reads
        return busy, len(server._writers)

    assert serve(idx, go, idle_timeout=0.3) == (1, 0)


def test_a_request_trickling_in_is_cut_at_the_timeout():
    idx = RecordingIndex.from_flows([make_flow(REQ, JSON_BODY)])

    async def go(server):
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n")
        t = time.monotonic()
        with contextlib.suppress(ConnectionError):
            while not r.at_eof() and time.monotonic() - t < 5:
                w.write(b" ")  # a byte every 0.05 s: never idle, never complete
                await w.drain()
                await asyncio.sleep(0.05)
        waited = time.monotonic() - t
        await asyncio.sleep(0.1)
        return waited, len(server._writers)

    waited, open_on_server = serve(idx, go, idle_timeout=0.5)
    assert 0.3 < waited < 2.0 and open_on_server == 0
