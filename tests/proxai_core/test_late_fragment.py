"""A late fragment: tool-call arguments for a call whose block already ended early (its arguments were
one whole JSON object and another block was waiting). One policy for both one-open-block encoders,
chosen by ``Capabilities.parses_streamed_arguments``: a client whose SDK parses the arguments as they
stream (Anthropic) gets its native error event; another (Responses) keeps the complete call it
received and the fragment is dropped with a warning. Whitespace is never a late fragment."""

from __future__ import annotations

import pytest

from proxai_core import Protocol
from proxai_core.codecs import get
from proxai_core.codecs._blocks import LATE_FRAGMENT_DROPPED
from proxai_core.context import ClientContext
from proxai_core.neutral import BlockEnd, BlockStart, Delta, End, Event, Start, Stop, ToolCall
from proxai_core.stop import classify_stop
from tests.sdk import StreamError, accumulate_stream

A, R = Protocol.ANTHROPIC, Protocol.RESPONSES


def _events(late: str) -> list[Event]:
    return [
        Start("id_1", "m"),
        BlockStart(0, ToolCall("call_a", "first", "")), Delta(0, "arguments", '{"x": 1}'),
        BlockStart(1, ToolCall("call_b", "second", "")),  # call_a is whole: it ends here
        Delta(1, "arguments", '{"y": '), Delta(0, "arguments", late), Delta(1, "arguments", "2}"),
        BlockEnd(0), BlockEnd(1), Stop(classify_stop("tool_calls", has_tool_calls=True)), End()]


def _encode(target: Protocol, events: list[Event]) -> tuple[bytes, list[str]]:
    warnings: list[str] = []
    enc = get(target).StreamEncoder(ClientContext(protocol=target, model="m"), warnings)
    return b"".join(enc.encode(e) for e in events), warnings


def test_the_policy_is_a_capability():
    assert get(A).capabilities.parses_streamed_arguments
    assert not get(R).capabilities.parses_streamed_arguments


@pytest.mark.parametrize("target", [A, R])
def test_whitespace_after_a_complete_call_is_nothing(target):
    out, warnings = _encode(target, _events(" \n"))
    s = accumulate_stream(target, out)
    assert s.tool_calls == [("first", {"x": 1}), ("second", {"y": 2})]
    assert not warnings


def test_late_fragment_ends_an_anthropic_turn_with_its_error_event():
    out, warnings = _encode(A, _events(', "z": 3}'))
    with pytest.raises(StreamError, match="not valid JSON"):
        accumulate_stream(A, out)
    assert out.count(b"event: error\n") == 1 and out.endswith(b"\n\n")
    assert b"message_stop" not in out  # the error event is the stream's last
    assert b'"partial_json":"2}"' not in out  # nothing of the upstream after the error
    assert any("call_a (first)" in w and "stopped being a valid JSON object" in w for w in warnings)


def test_late_fragment_is_dropped_for_a_responses_client():
    out, warnings = _encode(R, _events(', "z": 3}'))
    s = accumulate_stream(R, out)
    assert s.tool_calls == [("first", {"x": 1}), ("second", {"y": 2})]
    assert s.stop == "completed"
    assert b'"z"' not in out
    assert warnings == [LATE_FRAGMENT_DROPPED]
