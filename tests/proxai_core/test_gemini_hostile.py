"""Hostile Gemini stream events (issue 21, rows 1 and 2), through the stream translator both
translated (to each other protocol) and pass-through (Gemini to Gemini, decoded only to observe):

- a ``partialArgs`` index far past its list's end (``$.a[60000000]``) is dropped with a warning
  instead of growing a list of nulls to that index; so are paths nested over 128 deep, an index
  of thousands of digits and an index on an object (which the JSON writer could not write);
- 30,000 ``willContinue`` pieces of one string are joined in linear time;
- 1,100 distinct 100 KB ``jsonPath``s leave nothing behind once the stream is gone (no
  process-wide cache of attacker-chosen paths).
"""

from __future__ import annotations

import gc
import json
import time
import tracemalloc

import pytest

from proxai_core import StopReason, StreamTranslator
from proxai_core.codecs.gemini import StreamDecoder
from proxai_core.neutral import BlockEnd, ToolCall

from ..sdk import A, C, G, R, accumulate_stream

TARGETS = (C, R, A, G)  # G: pass-through
MB = 1024 * 1024
BEYOND = "points beyond what the arguments can hold"


def _chunk(fc: dict, finish: str | None = None) -> dict:
    cand: dict = {"content": {"role": "model", "parts": [{"functionCall": fc}]}}
    if finish:
        cand["finishReason"] = finish
    return {"candidates": [cand], "modelVersion": "gemini-2.5-flash", "responseId": "r1"}


def _frame(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


def _call_stream(pieces: list[list[dict]]) -> list[bytes]:
    """A call named ``f`` whose arguments arrive as the given partialArgs lists (one chunk each), then STOP."""
    frames = [_frame(_chunk({"name": "f", "willContinue": True}))]
    frames += [_frame(_chunk({"partialArgs": p, "willContinue": True})) for p in pieces]
    frames.append(_frame(_chunk({}, "STOP")))
    return frames


def _run(target, frames: list[bytes], keep: bool = True) -> tuple[StreamTranslator, bytes]:
    """The translator after the stream, and what the client got (``keep``; else sent and forgotten)."""
    t = StreamTranslator(G, target)
    if not keep:
        for f in frames:
            t.feed(f)
        t.close()
        return t, b""
    out = b"".join(t.feed(f) for f in frames) + t.close()
    return t, out


def _args(target, out: bytes, frames: list[bytes]) -> dict:
    """The call's arguments as the client reads them; pass-through forwards the upstream's own bytes,
    so there: the arguments the proxy observed (its decoder's finished call)."""
    if target is G:
        assert out == b"".join(frames)
        dec = StreamDecoder([])
        events = [e for f in frames for e in dec.feed(None, f[6:-4].decode())] + dec.finish()
        calls = [e.part for e in events if isinstance(e, BlockEnd) and isinstance(e.part, ToolCall)]
        assert [c.name for c in calls] == ["f"], calls
        return json.loads(calls[0].arguments)
    acc = accumulate_stream(target, out)
    assert [name for name, _ in acc.tool_calls] == ["f"], acc.tool_calls
    return acc.tool_calls[0][1]


# ----------------------------------------------------------------------------- row 1: far indexes
@pytest.mark.parametrize("target", TARGETS)
def test_far_index_is_dropped_with_a_warning_and_memory_stays_flat(target):
    frames = _call_stream([[{"jsonPath": "$.a[60000000]", "stringValue": "x"},
                            {"jsonPath": "$.b", "stringValue": "kept"}]])
    tracemalloc.start()
    try:
        start = time.perf_counter()
        t, out = _run(target, frames)
        took = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MB, peak  # (the old code grew a list of 60 million nulls: 480 MB)
    assert took < 2.0, took
    assert any(BEYOND in w for w in t.warnings), t.warnings
    assert t.stop.reason is StopReason.TOOL_USE
    assert _args(target, out, frames) == {"a": [], "b": "kept"}


@pytest.mark.parametrize("target", (C, G))
def test_index_bound_is_a_small_margin_past_the_items_seen(target):
    frames = _call_stream([[{"jsonPath": "$.a[0]", "numberValue": 1},
                            {"jsonPath": "$.a[9]", "numberValue": 9},  # 8 nulls between: taken
                            {"jsonPath": "$.a[19]", "numberValue": 19},  # 9 past the end: dropped
                            {"jsonPath": "$.b[8].c", "boolValue": True},  # a fresh list: 8 nulls first
                            {"jsonPath": "$.d[9].c", "boolValue": True}]])  # dropped, container too
    t, out = _run(target, frames)
    assert _args(target, out, frames) == {"a": [1, *[None] * 8, 9], "b": [*[None] * 8, {"c": True}], "d": []}
    assert any(BEYOND in w for w in t.warnings)


@pytest.mark.parametrize("target", (C, G))
@pytest.mark.parametrize("path", ["$.a[" + "9" * 5000 + "]", "$.a" + ".b" * 200, "$.a" + "[0]" * 200])
def test_huge_or_deep_paths_are_dropped(target, path):
    """An index of 5,000 digits (int() would refuse it) and paths 200 deep (orjson writes 254 levels,
    and every level costs a container)."""
    frames = _call_stream([[{"jsonPath": path, "stringValue": "x"}, {"jsonPath": "$.ok", "numberValue": 1}]])
    t, out = _run(target, frames)
    args = _args(target, out, frames)
    assert args["ok"] == 1 and "b" not in json.dumps(args)
    assert any(BEYOND in w for w in t.warnings), t.warnings


@pytest.mark.parametrize("target", (C, G))
def test_index_on_an_object_takes_nothing(target):
    """``$[0]`` (an index on the arguments object) and ``$.a[0]`` after ``$.a.b``: before, an int key
    reached the JSON writer, which raised on the whole stream."""
    frames = _call_stream([[{"jsonPath": "$[0]", "stringValue": "x"},
                            {"jsonPath": "$.a.b", "stringValue": "y"},
                            {"jsonPath": "$.a[0]", "stringValue": "z"},
                            {"jsonPath": "$.a[1].c", "stringValue": "w"}]])
    t, out = _run(target, frames)
    assert _args(target, out, frames) == {"a": {"b": "y"}}
    assert t.stop.reason is StopReason.TOOL_USE


def test_non_stream_response_applies_the_same_bound():
    from proxai_core import translate_response_result

    body = {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "f", "partialArgs": [
        {"jsonPath": "$.a[60000000]", "stringValue": "x"}, {"jsonPath": "$.s", "stringValue": "a", "willContinue": True},
        {"jsonPath": "$.s", "stringValue": "b"}]}}]}, "finishReason": "STOP"}]}
    res = translate_response_result(body, G, C)
    call = res.body["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"a": [], "s": "ab"}
    assert any(BEYOND in w for w in res.warnings)


# ----------------------------------------------------------------------------- row 2: many pieces
@pytest.mark.parametrize("target", TARGETS)
def test_30000_pieces_of_one_string_join_in_linear_time(target):
    piece = "0123456789" * 40
    n = 30_000
    one = [{"jsonPath": "$.text", "stringValue": piece, "willContinue": True} for _ in range(n - 1)]
    one.append({"jsonPath": "$.text", "stringValue": "end"})
    frames = _call_stream([one])
    start = time.perf_counter()
    t, out = _run(target, frames)
    took = time.perf_counter() - start
    assert _args(target, out, frames) == {"text": piece * (n - 1) + "end"}
    # joining by prev + value copied 30,000 growing strings (~180 GB for these 12 MB: about a minute);
    # joined once: about half a second
    assert took < 5.0, took


@pytest.mark.parametrize("target", (C, G))
def test_pieces_spread_over_chunks_and_a_string_left_open(target):
    """Pieces of one string in many chunks, interleaved with another string; a string whose last
    piece never came is still written when the call ends."""
    chunks = []
    for i in range(2000):
        chunks.append([{"jsonPath": "$.x", "stringValue": f"{i},", "willContinue": True},
                       {"jsonPath": "$.y[0]", "stringValue": "y", "willContinue": True}])
    chunks.append([{"jsonPath": "$.x", "stringValue": "end"}])
    frames = _call_stream(chunks)
    t, out = _run(target, frames)
    assert _args(target, out, frames) == {"x": "".join(f"{i}," for i in range(2000)) + "end", "y": ["y" * 2000]}


@pytest.mark.parametrize("target", (C, G))
@pytest.mark.parametrize("readable", [True, False])
def test_1100_distinct_100kb_paths_leave_nothing_behind(target, readable):
    """Each path in its own chunk: readable ones run through a string (``$.s.<100 KB>``: parsed, take
    nothing), unreadable ones do not start a path. Nothing keeps them while the stream runs, and once
    it is gone memory is back where it was: no process-wide cache keeps the paths (the old one kept up
    to 4,096 of them)."""
    pre = [{"jsonPath": "$.s", "stringValue": "str"}]
    key = "k" * (100 * 1024)
    paths = [("$.s." if readable else "$!") + f"{i:05d}" + key for i in range(1100)]
    frames = _call_stream([pre] + [[{"jsonPath": p, "stringValue": "v", "willContinue": True}] for p in paths])
    del paths
    _run(target, frames[:3])  # (warm: imports, the codec's own tables)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        t, out = _run(target, frames, keep=target is not G)  # (pass-through: 110 MB to the client)
        peak = tracemalloc.get_traced_memory()[1] - base
        warnings = t.warnings
        assert t.stop.reason is StopReason.TOOL_USE
        if target is not G:
            assert _args(target, out, frames) == {"s": "str"}
        del t, out
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert peak < 8 * MB, peak  # (the stream is 110 MB: no path is kept while it runs either)
    assert left < 1 * MB, left
    if not readable:
        assert any("could not be read" in w for w in warnings)


@pytest.mark.parametrize("target", (C, G))
def test_paths_through_scalars_take_nothing_without_a_warning(target):
    frames = _call_stream([[{"jsonPath": "$.f", "boolValue": False}, {"jsonPath": "$.f.x", "stringValue": "a"},
                            {"jsonPath": "$.n", "numberValue": 0}, {"jsonPath": "$.n[0]", "numberValue": 1},
                            {"jsonPath": "$.s", "stringValue": ""}, {"jsonPath": "$.s.t.u", "nullValue": None}]])
    t, out = _run(target, frames)
    assert _args(target, out, frames) == {"f": False, "n": 0, "s": ""}
    assert not t.warnings, t.warnings
