"""``refusal_in_content``: a Chat client that ignores ``refusal`` still reads a translated refusal in
``content`` (complete and streamed); off by default (the field rule: never the same text twice)."""

from __future__ import annotations

import json

import pytest

from proxai_core import (
    StreamTranslator,
    response_from_stream,
    stream_from_response,
    translate_response_result,
)
from tests.fake_upstream import REFUSAL
from tests.proxai_mitm.helpers import ANTH, BODIES, CHAT, RESP, json_bytes, sse_bytes

REQUEST = BODIES[CHAT]


def _chunks(sse: bytes) -> list[dict]:
    out = []
    for line in sse.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def _accumulate(sse: bytes) -> tuple[str | None, str | None]:
    """content and refusal as an SDK accumulator joins them from the deltas."""
    content = refusal = None
    for c in _chunks(sse):
        for ch in c.get("choices") or []:
            d = ch.get("delta") or {}
            if d.get("content"):  # (the first chunk carries the role and an empty content)
                content = (content or "") + d["content"]
            if d.get("refusal"):
                refusal = (refusal or "") + d["refusal"]
    return content, refusal


@pytest.mark.parametrize("upstream", [ANTH, RESP])
def test_complete_body(upstream):
    body = json.loads(json_bytes(upstream, "refusal"))
    off = translate_response_result(body, upstream, CHAT, REQUEST).body["choices"][0]["message"]
    assert off["content"] is None and off["refusal"]
    on = translate_response_result(body, upstream, CHAT, REQUEST, refusal_in_content=True)
    msg = on.body["choices"][0]["message"]
    assert msg["content"] == msg["refusal"] == off["refusal"]
    assert on.stop.reason.value == "refusal"


@pytest.mark.parametrize("upstream", [ANTH, RESP])
def test_stream_translated(upstream):
    def run(flag: bool) -> bytes:
        t = StreamTranslator(upstream, CHAT, {**REQUEST, "stream": True}, refusal_in_content=flag)
        return t.feed(sse_bytes(upstream, "refusal")) + t.close()

    content, refusal = _accumulate(run(False))
    assert content is None and refusal
    content2, refusal2 = _accumulate(run(True))
    assert content2 == refusal2 == refusal
    for c in _chunks(run(True)):  # every refusal delta carries the same text as content
        for ch in c["choices"]:
            d = ch["delta"]
            if d.get("refusal"):
                assert d["content"] == d["refusal"], d


def test_stream_without_a_request_body():
    """No client body (a context built only for the flag): the shared empty context stays untouched."""
    t = StreamTranslator(ANTH, CHAT, None, refusal_in_content=True)
    on = _accumulate(t.feed(sse_bytes(ANTH, "refusal")) + t.close())
    t = StreamTranslator(ANTH, CHAT, None)
    off = _accumulate(t.feed(sse_bytes(ANTH, "refusal")) + t.close())
    assert on[0] == on[1] and off[0] is None


def test_json_to_stream_and_stream_to_json():
    body = json.loads(json_bytes(ANTH, "refusal"))
    sse, stop, _ = stream_from_response(body, ANTH, CHAT, REQUEST, refusal_in_content=True)
    content, refusal = _accumulate(sse)
    assert content == refusal and refusal and stop.reason.value == "refusal"
    res = response_from_stream(sse_bytes(RESP, "refusal"), RESP, CHAT, REQUEST, refusal_in_content=True)
    msg = res.body["choices"][0]["message"]
    assert msg["content"] == msg["refusal"] == REFUSAL


def test_text_and_refusal_together_keep_both_in_content():
    body = {"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5",
            "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "Partly: ", "annotations": []},
                                    {"type": "refusal", "refusal": "no more."}]}]}
    msg = translate_response_result(body, RESP, CHAT, REQUEST, refusal_in_content=True).body["choices"][0]["message"]
    assert msg["content"] == "Partly: no more." and msg["refusal"] == "no more."


def test_other_clients_are_unaffected():
    body = json.loads(json_bytes(CHAT, "refusal"))
    a = translate_response_result(body, CHAT, ANTH, BODIES[ANTH], refusal_in_content=True).body
    b = translate_response_result(body, CHAT, ANTH, BODIES[ANTH]).body
    assert a == b
