"""The Chat stream decoder's behaviour on the shapes real and odd upstreams send (one path: its feed).

Replaces the comparison tests that kept a second, faster path equal to it: the cases they covered
are now stated as what must come out."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai_core import neutral as n
from proxai_core.codecs import chat


def _chunk(delta=None, finish=None, **top):
    ch = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": finish}
    return orjson.dumps({"id": "chatcmpl-x", "model": "m", "choices": [ch], **top}).decode()


def _tc(**kw):
    return {"tool_calls": [kw]}


def _decode(datas):
    w: list[str] = []
    dec = chat.StreamDecoder(w)
    out = []
    for d in datas:
        out += dec.feed(None, d)
    out += dec.finish()
    return out, w


def _tools(events):
    """Tool calls as they end: (neutral index, id, name, arguments)."""
    return [(e.index, e.part.id, e.part.name, e.part.arguments) for e in events
            if isinstance(e, n.BlockEnd) and isinstance(e.part, n.ToolCall)]


def test_a_parallel_call_reusing_an_index_is_a_new_call_and_fragments_find_theirs():
    out, _ = _decode([
        _chunk({"role": "assistant"}),
        _chunk(_tc(index=0, id="call_1", type="function", function={"name": "f", "arguments": "{"})),
        _chunk(_tc(index=0, id="call_2", type="function", function={"name": "g", "arguments": "{"})),
        _chunk(_tc(id="call_1", function={"arguments": "}"})),  # by id: the first call
        _chunk(_tc(index=0, function={"arguments": "}"})),  # by index: now the second call
        _chunk(finish="tool_calls"), "[DONE]"])
    assert _tools(out) == [(0, "call_1", "f", "{}"), (1, "call_2", "g", "{}")]
    stop = next(e for e in out if isinstance(e, n.Stop))
    assert stop.stop.reason.value == "tool_use" and isinstance(out[-1], n.End)


def test_content_after_the_finish_chunk_is_ignored_with_one_warning():
    out, w = _decode([
        _chunk(_tc(index=0, id="call_1", type="function", function={"name": "f", "arguments": "{"})),
        _chunk(finish="tool_calls"),
        _chunk(_tc(index=0, function={"arguments": "}"})), _chunk({"content": "late"}), "[DONE]"])
    assert _tools(out) == [(0, "call_1", "f", "{")]
    assert not [e for e in out if isinstance(e, n.Delta) and e.value in ("}", "late")]
    assert w.count("content after finish_reason ignored") == 1


def test_arguments_before_the_name_wait_and_blocks_follow_each_other():
    out, w = _decode([
        _chunk(_tc(index=0, id="call_1", function={"arguments": "{"})),  # no name yet: held
        _chunk(_tc(index=0, function={"name": "f"})),
        _chunk(_tc(index=0, function={"arguments": "}"})),
        _chunk({"content": "a"}), _chunk({"refusal": "b"}), _chunk({"content": "c"}),
        _chunk(_tc(index=1, id="call_2", type="function", function={"name": "g", "arguments": ""})),
        _chunk(_tc(index=1, function={"arguments": "{}"})), "[DONE]"])
    kinds = [(type(e).__name__, getattr(e, "index", None)) for e in out
             if isinstance(e, (n.BlockStart, n.BlockEnd))]
    # text / refusal blocks end when the next kind starts; tool calls end at the finish
    assert kinds == [("BlockStart", 0), ("BlockStart", 1), ("BlockEnd", 1), ("BlockStart", 2), ("BlockEnd", 2),
                     ("BlockStart", 3), ("BlockEnd", 3), ("BlockStart", 4), ("BlockEnd", 0), ("BlockEnd", 4)]
    assert _tools(out) == [(0, "call_1", "f", "{}"), (4, "call_2", "g", "{}")]
    deltas = [(e.index, e.kind, e.value) for e in out if isinstance(e, n.Delta)]
    assert deltas == [(0, "arguments", "{"), (0, "arguments", "}"), (1, "text", "a"), (2, "refusal", "b"),
                      (3, "text", "c"), (4, "arguments", "{}")]


def test_a_choices_field_that_is_not_a_list_is_the_upstreams_fault_not_an_exception():
    out, w = _decode([orjson.dumps({"id": "chatcmpl-x", "model": "m", "choices": 5}).decode(),
                      _chunk({"content": "hi"}), _chunk(finish="stop"), "[DONE]"])
    assert any("choices is not a list" in x for x in w)
    assert [e.value for e in out if isinstance(e, n.Delta)] == ["hi"]
    assert isinstance(out[0], n.Start) and isinstance(out[-1], n.End)


# ----------------------------------------------------------------------------- generated chunks
_text = st.sampled_from(["", "a", " b", "{\"x\"", ": 1}", "é😀"])
_index = st.sampled_from([0, 0, 1, "0", None, False, 1.0, [], {}])
_id = st.sampled_from(["call_1", "call_2", "", None, 3])
_fn = st.fixed_dictionaries({}, optional={"name": st.sampled_from(["f", "g", "", None]), "arguments": _text | st.none()})
_tool = st.one_of(
    st.builds(lambda i, c, nm, a: {"index": i, "id": c, "type": "function", "function": {"name": nm, "arguments": a}},
              st.sampled_from([0, 1]), st.sampled_from(["call_1", "call_2"]), st.sampled_from(["f", "g"]), _text),
    st.builds(lambda i, a: {"index": i, "function": {"arguments": a}}, st.sampled_from([0, 1]), _text),
    st.builds(lambda a: {"function": {"arguments": a}}, _text),
    st.fixed_dictionaries({}, optional={
        "index": _index, "id": _id, "type": st.sampled_from(["function", "custom", None]),
        "function": _fn | st.none() | st.just("x"),
        "custom": st.fixed_dictionaries({}, optional={"name": st.just("c"), "input": _text | st.just({"a": 1})}),
    }),
)
_delta = st.one_of(
    st.builds(lambda t: {"content": t}, _text),
    st.builds(lambda t: {"refusal": t}, _text),
    st.builds(lambda t: {"reasoning_content": t}, _text),
    st.builds(lambda tcs: {"tool_calls": tcs}, st.lists(_tool, min_size=1, max_size=2)),
    st.fixed_dictionaries({}, optional={
        "role": st.just("assistant"), "content": _text | st.none() | st.just(3), "refusal": _text | st.none(),
        "tool_calls": st.lists(_tool, max_size=2) | st.none() | st.just("x"),
    }),
    st.sampled_from([None, "x", [], {}]),
)
_choice = st.fixed_dictionaries({"delta": _delta}, optional={
    "index": _index, "finish_reason": st.sampled_from([None, "stop", "tool_calls", "length", "", 7])})
_event = st.one_of(
    st.builds(lambda cs, u: orjson.dumps({"id": "chatcmpl-x", "model": "m", "choices": cs, "usage": u}).decode(),
              st.lists(_choice, max_size=2) | st.sampled_from([None, 5, "x", {}]),
              st.none() | st.just({"prompt_tokens": 3, "completion_tokens": 2})),
    st.sampled_from(["[DONE]", "{", "[1]", "", '{"error": {"message": "boom"}}']),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event, max_size=14))
def test_any_chunk_sequence_gives_a_well_formed_event_sequence(datas):
    """Runs in strict mode (an exception of ours would raise): blocks open before their deltas and
    close once, nothing follows the terminal, and the stream ends with End or ErrorEvent."""
    out, _ = _decode(datas)
    open_: set[int] = set()
    closed: set[int] = set()
    ended = False
    for e in out:
        assert not ended, out
        if isinstance(e, n.BlockStart):
            assert e.index not in open_ and e.index not in closed
            open_.add(e.index)
        elif isinstance(e, n.Delta):
            assert e.index in open_ and e.value
        elif isinstance(e, n.BlockEnd):
            assert e.index in open_
            open_.remove(e.index)
            closed.add(e.index)
        elif isinstance(e, (n.End, n.ErrorEvent)):
            ended = True
    assert ended and isinstance(out[-1], (n.End, n.ErrorEvent))
    if isinstance(out[-1], n.End):
        assert not open_
