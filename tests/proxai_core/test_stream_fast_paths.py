"""The stream fast paths give exactly what the general paths give: SSEReader.feed_one, the Chat stream
decoder's fast path (kept in sync with its state by _sync_fast), and lone deltas that travel unboxed
from the Chat decoder (feed_fast) to the Anthropic encoder (encode_delta)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai_core import Protocol, StreamTranslator
from proxai_core.codecs import chat
from proxai_core.sse import SSEReader

from ..sdk import FIXTURES, fixture_files, sse_events

C, A = Protocol.CHAT, Protocol.ANTHROPIC
CHAT_STREAMS = fixture_files(C, ".sse") if FIXTURES.is_dir() else []


class _GeneralChat(chat.StreamDecoder):
    """The Chat decoder with its fast path off: every chunk takes the general path."""

    __slots__ = ()

    def _sync_fast(self) -> None:
        self._fkey = None


def _decode(dec: chat.StreamDecoder, events: list[tuple[str | None, str]]) -> list[str]:
    out = []
    for name, data in events:
        try:
            out.append(repr(dec.feed(name, data)))
        except Exception as exc:  # noqa: BLE001 - both paths must fail alike
            out.append(f"raised {type(exc).__name__}")
    out.append(repr(dec.finish()))
    return out


def _same_as_general(events: list[tuple[str | None, str]]) -> None:
    wf: list[str] = []
    wg: list[str] = []
    assert _decode(chat.StreamDecoder(wf), events) == _decode(_GeneralChat(wg), events)
    assert wf == wg


# ----------------------------------------------------------------------------- recorded streams
@pytest.mark.parametrize("path", CHAT_STREAMS, ids=lambda p: p.name[:90])
def test_chat_fast_path_matches_general_path_on_recordings(path):
    _same_as_general(sse_events(path.read_bytes()))


@pytest.mark.parametrize("path", CHAT_STREAMS, ids=lambda p: p.name[:90])
@pytest.mark.parametrize("step", [0, 7])
def test_unboxed_deltas_match_boxed(path, step):
    raw = path.read_bytes()
    if step:
        chunks = [raw[i:i + step] for i in range(0, len(raw), step)]
    else:
        chunks = [p + b"\n\n" for p in raw.replace(b"\r\n", b"\n").split(b"\n\n") if p.strip()]
    results = []
    for boxed in (False, True):
        t = StreamTranslator(C, A)
        if boxed:  # what StreamTranslator does for pairs without feed_fast / encode_delta
            t._feed, t._enc_delta = t._dec.feed, None
        out = b"".join(t.feed(c) for c in chunks) + t.close()
        results.append((out, t.stop, t.usage, t.model, t.warnings, t.error))
    assert results[0] == results[1]


# ----------------------------------------------------------------------------- generated streams
_text = st.sampled_from(["", "a", " b", "{\"x\"", ": 1}", "é😀"])
_index = st.sampled_from([0, 0, 1, "0", None, False, 1.0])
_id = st.sampled_from(["call_1", "call_2", "", None])
_fn = st.fixed_dictionaries({}, optional={"name": st.sampled_from(["f", "g", ""]), "arguments": _text})
_odd_tool = st.fixed_dictionaries({}, optional={
    "index": _index, "id": _id, "type": st.sampled_from(["function", "custom"]), "function": _fn | st.none(),
    "custom": st.fixed_dictionaries({}, optional={"name": st.just("c"), "input": _text}),
})
# the usual fragments, from small pools so that indexes and ids meet again
_tool = st.one_of(
    st.builds(lambda i, c, n, a: {"index": i, "id": c, "type": "function", "function": {"name": n, "arguments": a}},
              st.sampled_from([0, 1]), st.sampled_from(["call_1", "call_2"]), st.sampled_from(["f", "g"]), _text),
    st.builds(lambda i, a: {"index": i, "function": {"arguments": a}}, st.sampled_from([0, 1]), _text),
    st.builds(lambda c, a: {"id": c, "function": {"arguments": a}}, st.sampled_from(["call_1", "call_2"]), _text),
    st.builds(lambda a: {"function": {"arguments": a}}, _text),
    _odd_tool,
)
_delta = st.one_of(
    st.builds(lambda t: {"content": t}, _text),
    st.builds(lambda t: {"refusal": t}, _text),
    st.builds(lambda t: {"reasoning_content": t}, _text),
    st.builds(lambda tcs: {"tool_calls": tcs}, st.lists(_tool, min_size=1, max_size=2)),
    st.just({}),
    st.fixed_dictionaries({}, optional={
        "role": st.just("assistant"), "content": _text | st.none(), "refusal": _text | st.none(),
        "reasoning_content": _text | st.none(), "tool_calls": st.lists(_tool, max_size=2) | st.none(),
    }),
    st.sampled_from([None, "x", []]),
)
_finish = st.sampled_from([None, None, None, None, "stop", "tool_calls", "length", ""])
_choice = st.one_of(
    st.builds(lambda d, f: {"index": 0, "delta": d, "finish_reason": f}, _delta, _finish),
    st.fixed_dictionaries({"delta": _delta}, optional={"index": _index, "finish_reason": _finish}),
)
_usage = st.just({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
_chunk = st.one_of(
    st.builds(lambda c: {"id": "chatcmpl-x", "model": "m", "choices": [c], "usage": None}, _choice),
    st.builds(lambda c: {"id": "chatcmpl-x", "model": "m", "choices": [c]}, _choice),
    st.just({"id": "chatcmpl-x", "model": "m", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
    st.fixed_dictionaries({"id": st.just("chatcmpl-x"), "model": st.just("m")}, optional={
        "choices": st.lists(_choice, max_size=2), "usage": st.none() | _usage, "error": st.just({"message": "boom"}),
    }),
)
_event = st.one_of(
    _chunk.map(lambda c: (None, orjson.dumps(c).decode())),
    st.sampled_from([(None, "[DONE]"), (None, "{"), (None, "[1]"), ("error", "{}"), (None, "")]),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event, max_size=14))
def test_chat_fast_path_matches_general_path_on_generated_chunks(events):
    _same_as_general(events)


def _chunks(*deltas, finish=None):
    out = [(None, orjson.dumps({"id": "chatcmpl-x", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}).decode())]
    for d in deltas:
        out.append((None, orjson.dumps({"id": "chatcmpl-x", "choices": [{"index": 0, "delta": d,
                                                                           "finish_reason": None}]}).decode()))
    return out


def _tc(**kw):
    return {"tool_calls": [kw]}


@pytest.mark.parametrize("events", [
    # a parallel call reusing index 0, then the first call again by id, then index 0 (the second call)
    _chunks(_tc(index=0, id="call_1", type="function", function={"name": "f", "arguments": "{"}),
            _tc(index=0, id="call_2", type="function", function={"name": "g", "arguments": "{"}),
            _tc(id="call_1", function={"arguments": "}"}), _tc(index=0, function={"arguments": "}"})),
    # tool-call fragments and text after the finish chunk
    _chunks(_tc(index=0, id="call_1", type="function", function={"name": "f", "arguments": "{"}))
    + [(None, '{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}')]
    + _chunks(_tc(index=0, function={"arguments": "}"}), {"content": "late"})[1:] + [(None, "[DONE]")],
    # a call without a name yet, its arguments pending; text, refusal and a tool call interleaved
    _chunks(_tc(index=0, id="call_1", function={"arguments": "{"}), _tc(index=0, function={"name": "f"}),
            _tc(index=0, function={"arguments": "}"}), {"content": "a"}, {"refusal": "b"}, {"content": "c"},
            _tc(index=1, id="call_2", type="function", function={"name": "g", "arguments": ""}),
            _tc(index=1, function={"arguments": "{}"})) + [(None, "[DONE]")],
])
def test_chat_fast_path_matches_general_path_on_tricky_sequences(events):
    _same_as_general(events)


# ----------------------------------------------------------------------------- SSE
_bytes = st.lists(st.sampled_from([b"data: ", b"data:", b"event: x\n", b": c\n", b"{}", b"x", b"\n", b"\r",
                                   b"\n\n", b"\xc3", b"\xa9"]), max_size=8).map(b"".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(_bytes, max_size=4), _bytes)
def test_sse_feed_one_is_feed(before, chunk):
    r1, r2 = SSEReader(), SSEReader()
    for b in before:
        assert r1.feed(b) == r2.feed(b)
    one = r1.feed_one(chunk)
    assert ([(None, one)] if type(one) is str else one) == r2.feed(chunk)
    if type(one) is str:  # only for what is exactly one bare data: event
        assert chunk.startswith(b"data: ") and chunk.count(b"\n") == 2 and chunk.endswith(b"\n\n")
    assert r1.close() == r2.close()
