"""A Responses stream whose reasoning ``summary_index`` / ``content_index`` jumps far ahead: the
index is the upstream's number, and the separators between reasoning parts never grow with it (one
~200-byte event with ``summary_index: 50000000`` used to take seconds, 1.3 GB and send 200 MB)."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from proxai_core import StreamTranslator

from ..sdk import A, C, G, R

MB = 1024 * 1024


def _ev(obj: dict) -> bytes:
    return f"event: {obj['type']}\ndata: {json.dumps(obj)}\n\n".encode()


def _stream(index_key: str, far: int) -> list[bytes]:
    resp = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress", "model": "gpt-5",
            "output": []}
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    part, delta = (("response.reasoning_summary_part.added", "response.reasoning_summary_text.delta")
                   if index_key == "summary_index" else
                   ("response.content_part.added", "response.reasoning_text.delta"))
    evs = [{"type": "response.created", "response": resp},
           {"type": "response.output_item.added", "output_index": 0, "item": item},
           {"type": part, "item_id": "rs_1", "output_index": 0, index_key: 0,
            "part": {"type": "summary_text", "text": ""}},
           {"type": delta, "item_id": "rs_1", "output_index": 0, index_key: 0, "delta": "first thought"},
           {"type": part, "item_id": "rs_1", "output_index": 0, index_key: far,
            "part": {"type": "summary_text", "text": ""}},
           {"type": delta, "item_id": "rs_1", "output_index": 0, index_key: far, "delta": "second thought"},
           {"type": "response.completed", "response": dict(resp, status="completed", output=[],
                                                           usage={"input_tokens": 3, "output_tokens": 4,
                                                                  "total_tokens": 7})}]
    return [_ev(e) for e in evs]


@pytest.mark.parametrize("index_key", ["summary_index", "content_index"])
@pytest.mark.parametrize("target", [C, A, G])
def test_a_far_reasoning_index_never_sizes_the_text(target, index_key):
    frames = _stream(index_key, 50_000_000)
    tracemalloc.start()
    t0 = time.perf_counter()
    t = StreamTranslator(R, target)
    out = b"".join(t.feed(f) for f in frames) + t.close()
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0 and peak < 4 * MB, (elapsed, peak)
    assert len(out) < 64 * 1024, len(out)
    if index_key == "summary_index":
        assert b"first thought" in out and b"second thought" in out


def test_a_small_jump_keeps_one_separator_per_part():
    t = StreamTranslator(R, C)
    out = b"".join(t.feed(f) for f in _stream("summary_index", 2)) + t.close()
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("reasoning_content", "")
                   for line in out.decode().splitlines()
                   if line.startswith("data: {") and json.loads(line[6:]).get("choices"))
    assert text == "first thought\n\n\n\nsecond thought"


def test_gemini_path_facts_of_a_long_path():
    """A 100 KB client request path is read like a short one."""
    from proxai_core.codecs import _gemini_common as g

    facts = g.parse_endpoint(f"/v1beta/models/m1{'x' * 100_000}:generateContent?alt=sse")
    assert facts is not None and facts.model == "m1" + "x" * 100_000 and facts.sse is True
