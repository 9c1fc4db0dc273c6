"""Bounded decoding: every coding, stacked codings, bombs stopped at the cap, corrupt input."""

import asyncio
import gzip
import threading
import tracemalloc
import zlib

import brotli
import orjson
import pytest
from backports import zstd
from mitmproxy.test import taddons

from proxai_core import Protocol
from proxai_mitm.wire import bodies
from proxai_mitm.wire.bodies import BadEncoding, BodyLimit, BodyTooLarge, Decoder, adecode, decode

TEXT = b'{"model":"m","messages":[{"role":"user","content":"' + b"hello " * 5000 + b'"}]}'
ENC = {
    "gzip": lambda b: gzip.compress(b),
    "deflate": lambda b: zlib.compress(b),
    "br": lambda b: brotli.compress(b),
    "zstd": lambda b: zstd.compress(b),
}


def bomb(coding: str, size: int) -> bytes:
    """``size`` zero bytes compressed, built in 1 MiB steps so the test itself stays small."""
    block = b"\0" * (1 << 20)
    if coding == "br":
        c = brotli.Compressor()
        return b"".join(c.process(block) for _ in range(size >> 20)) + c.finish()
    c = {"gzip": lambda: zlib.compressobj(wbits=31), "deflate": zlib.compressobj,
         "zstd": zstd.ZstdCompressor}[coding]()
    return b"".join(c.compress(block) for _ in range(size >> 20)) + c.flush()


@pytest.mark.parametrize("coding", [*ENC, "x-gzip"])
def test_each_coding_round_trips(coding):
    raw = ENC["gzip" if coding == "x-gzip" else coding](TEXT)
    assert decode(raw, coding) == TEXT
    assert decode(raw, coding.upper()) == TEXT


def test_raw_deflate_and_identity():
    c = zlib.compressobj(wbits=-15)
    raw = c.compress(TEXT) + c.flush()
    assert decode(raw, "deflate") == TEXT
    assert decode(TEXT, None) is TEXT
    assert decode(TEXT, "identity") is TEXT
    assert decode(None, "gzip") == b""


def test_stacked_codings_are_undone_in_reverse():
    raw = brotli.compress(gzip.compress(TEXT))  # gzip applied first, then br
    assert decode(raw, "gzip, br") == TEXT
    raw = zstd.compress(zlib.compress(brotli.compress(TEXT)))
    assert decode(raw, "br,deflate, zstd") == TEXT


def test_multi_member_gzip():
    assert decode(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip") == b"abcd"


@pytest.mark.parametrize("coding", list(ENC))
def test_incremental_any_slicing(coding):
    raw = ENC[coding](TEXT)
    for step in (1, 7, 1000):
        d = Decoder(coding, 1 << 20)
        out = b"".join(d.feed(raw[i:i + step]) for i in range(0, len(raw), step)) + d.close()
        assert out == TEXT


@pytest.mark.parametrize("coding", list(ENC))
def test_bomb_stops_at_the_cap_without_inflating(coding):
    raw = bomb(coding, 200 * 1024 * 1024)  # 200 MiB of zeros, a few hundred KB compressed or less
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge) as ei:
            decode(raw, coding, 1024 * 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ei.value.limit == 1024 * 1024
    assert 1024 * 1024 < ei.value.seen <= 1024 * 1024 + bodies.STEP
    assert peak < 4 * 1024 * 1024


def _peak_of(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("coding", list(ENC))
def test_decoded_body_exists_once(coding):
    """A body decoded whole is held once while it grows (no list of pieces joined into a second
    copy) and handed over without a copy: the peak is the body plus the buffer's growth margin."""
    size = 16 * 1024 * 1024
    raw = bomb(coding, size)
    out, peak = _peak_of(lambda: decode(raw, coding, 32 * 1024 * 1024))
    assert len(out) == size
    assert peak < size * 1.3, f"peak {peak / size:.2f}x the body"


@pytest.mark.parametrize("coding", list(ENC))
def test_bomb_at_the_real_cap_peaks_at_one_copy(coding):
    """A bomb against the default 32 MiB cap: at most one partial body (the cap) exists, and it is
    freed before the error reaches the caller."""
    raw = bomb(coding, 128 * 1024 * 1024)
    before = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0

    def run():
        with pytest.raises(BodyTooLarge):
            decode(raw, coding)
        return tracemalloc.get_traced_memory()[0]

    after, peak = _peak_of(run)
    assert peak < bodies.DEFAULT_LIMIT * 1.3, f"peak {peak / 2**20:.0f} MiB"
    assert after - before < 1024 * 1024  # nothing of it is kept


def test_release_memory_is_safe_to_call():
    bodies.release_memory()  # glibc: malloc_trim; elsewhere a no-op
    threads = [threading.Thread(target=bodies.release_memory) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_bomb_in_an_inner_stage_is_stopped_too():
    raw = brotli.compress(bomb("gzip", 50 * 1024 * 1024))
    with pytest.raises(BodyTooLarge):
        decode(raw, "gzip, br", 100_000)


def test_identity_over_the_cap():
    with pytest.raises(BodyTooLarge) as ei:
        decode(b"x" * 11, None, 10)
    assert (ei.value.limit, ei.value.seen) == (10, 11)


def test_exactly_the_cap_is_allowed():
    assert decode(gzip.compress(b"x" * 1000), "gzip", 1000) == b"x" * 1000


@pytest.mark.parametrize("coding", list(ENC))
def test_corrupt_and_truncated(coding):
    raw = ENC[coding](TEXT)
    with pytest.raises(BadEncoding) as ei:
        decode(raw[: len(raw) // 2], coding)
    assert ei.value.encoding == coding and "truncated" in ei.value.reason
    with pytest.raises(BadEncoding):
        decode(b"\xff" * 64 + raw, coding)


def test_unknown_coding_and_empty_body():
    with pytest.raises(BadEncoding, match="unknown"):
        decode(b"abc", "compress")
    for c in ENC:
        assert decode(b"", c) == b""


def test_adecode_runs_big_work_off_the_loop():
    raw = bomb("gzip", 8 * 1024 * 1024)
    seen_threads = []
    orig = bodies.decode

    def spy(*a):
        seen_threads.append(threading.current_thread() is threading.main_thread())
        return orig(*a)

    async def main():
        bodies.decode = spy
        try:
            assert await adecode(raw, "gzip", 16 * 1024 * 1024) == b"\0" * (8 * 1024 * 1024)
            assert await adecode(b"{}", None) == b"{}"
        finally:
            bodies.decode = orig

    asyncio.run(main())
    assert seen_threads == [False, True]


def test_body_limit_option_and_body_size_limit():
    with taddons.context(BodyLimit()) as tctx:
        assert bodies.body_limit() == bodies.DEFAULT_LIMIT
        tctx.configure(tctx.master.addons.get("bodylimit"), proxai_body_limit=5000)
        assert bodies.body_limit() == 5000
        from mitmproxy.addons.proxyserver import Proxyserver
        tctx.master.addons.add(Proxyserver())
        tctx.options.update(body_size_limit="2k")
        assert bodies.body_limit() == 2048
        from mitmproxy import exceptions
        with pytest.raises(exceptions.OptionsError, match="proxai_body_limit"):
            tctx.options.update(proxai_body_limit=0)


@pytest.mark.parametrize("proto,etype", [
    (Protocol.ANTHROPIC, "request_too_large"), (Protocol.CHAT, "invalid_request_error"),
    (Protocol.RESPONSES, "invalid_request_error")])
def test_native_replies(proto, etype):
    r = bodies.too_large_reply(BodyTooLarge(10, 11), proto)
    assert r.status_code == 413
    body = orjson.loads(r.content)
    err = body["error"]
    assert err["type"] == etype and "too large" in err["message"]
    if proto is Protocol.ANTHROPIC:
        assert body["type"] == "error"
    else:
        assert err["code"] == "request_too_large"
    r = bodies.too_large_reply(BodyTooLarge(10, 11), proto, request=False)
    assert r.status_code == 502
    r = bodies.too_large_reply(BadEncoding("br", "truncated stream"), proto)
    assert r.status_code == 400 and "br" in orjson.loads(r.content)["error"]["message"]


def test_stream_decoder_bounds_each_feed_not_the_total():
    import math

    raw = ENC["gzip"](b"data: x\n\n" * 100_000)
    d = Decoder("gzip", math.inf, feed_limit=600_000)
    out = b"".join(d.feed(raw[i:i + 500]) for i in range(0, len(raw), 500)) + d.close()
    assert len(out) == 900_000  # more than feed_limit in total: fine
    d = Decoder("gzip", math.inf, feed_limit=1_000_000)
    with pytest.raises(BodyTooLarge) as ei:
        d.feed(bomb("gzip", 64 * 1024 * 1024))  # one chunk inflating past feed_limit: a bomb
    assert ei.value.limit == 1_000_000
