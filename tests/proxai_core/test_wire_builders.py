"""The stream encoders build some frames by concatenation (the hot path); each such builder is the
only builder of its frame shape and must give exactly frame() of the same dict."""

from __future__ import annotations

import orjson
import pytest

from proxai_core.codecs import anthropic as an
from proxai_core.codecs import responses as rs
from proxai_core.sse import frame

VALUES = ["", "plain", 'quote " and \\ backslash', "ctrl \x00\x1f\n\t", "émoji 😀 \u2028", "{\"a\": [1, 2]}"]
INDICES = [0, 1, 15, 16, 17, 250]


@pytest.mark.parametrize("a", INDICES)
@pytest.mark.parametrize(("dtype", "field"), [
    ("text_delta", "text"), ("input_json_delta", "partial_json"), ("thinking_delta", "thinking")])
def test_anthropic_content_block_delta(a, dtype, field):
    for v in VALUES:
        expected = frame("content_block_delta", {"type": "content_block_delta", "index": a,
                                                 "delta": {"type": dtype, field: v}})
        assert an._delta_head(a, dtype, field) + orjson.dumps(v) + an._DELTA_TAIL == expected
        assert an._block_delta_frame(a, dtype, field, v) == expected


@pytest.mark.parametrize("v", VALUES)
def test_responses_delta_frames(v):
    enc = rs.StreamEncoder.__new__(rs.StreamEncoder)
    enc._seq = 7
    b = rs._Blk("text", 2, "msg_x_2")
    b.content_index = 1
    out: list[bytes] = []
    enc._text_delta(b, v, out)
    assert out[-1] == frame("response.output_text.delta", {
        "type": "response.output_text.delta", "sequence_number": 7, "item_id": "msg_x_2", "output_index": 2,
        "content_index": 1, "delta": v, "logprobs": []})
    for kind, t in (("tool", "response.function_call_arguments.delta"),
                    ("custom", "response.custom_tool_call_input.delta")):
        b = rs._Blk(kind, 3, "fc_1")
        enc._args_delta(b, v, out)
        assert out[-1] == frame(t, {"type": t, "sequence_number": enc._seq - 1, "item_id": "fc_1",
                                    "output_index": 3, "delta": v})
    b = rs._Blk("reasoning", 0, "rs_1")
    b.summary_open = True
    enc._summary_delta(b, v, out)
    assert out[-1] == frame("response.reasoning_summary_text.delta", {
        "type": "response.reasoning_summary_text.delta", "sequence_number": enc._seq - 1, "item_id": "rs_1",
        "output_index": 0, "summary_index": 0, "delta": v})


@pytest.mark.parametrize("finish", [None, "stop", "tool_calls", "length"])
def test_chat_chunk(finish):
    from proxai_core.codecs import chat as ch
    from proxai_core.context import ClientContext
    from proxai_core.neutral import Start
    from proxai_core.protocol import Protocol

    enc = ch.StreamEncoder(ClientContext(Protocol.CHAT, model='m "é"'), [])
    enc._begin(Start("chatcmpl-1", None, None, 1700000000))
    for delta in ({"content": "x"}, {"content": VALUES[3]}, {}, {"tool_calls": [{"index": 0, "function": {
            "arguments": VALUES[4]}}]}):
        assert enc._chunk(delta, finish) == frame(None, {
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": 'm "é"',
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
