"""The top-level tail the Chat and Responses request decoders share (codecs/_request_common.read_tail)."""

from __future__ import annotations

import pytest

from proxai_core import Protocol, TranslationError, decode_request

C, R = Protocol.CHAT, Protocol.RESPONSES
MESSAGES = {C: {"messages": [{"role": "user", "content": "hi"}]}, R: {"input": "hi"}}
UNKNOWN = {C: "request field {!r} is not translated", R: "unknown request field {!r} ignored"}


@pytest.mark.parametrize("proto", [C, R])
def test_non_object_metadata_names_the_type(proto):
    with pytest.raises(TranslationError, match=r"^metadata: expected an object, got array$") as exc:
        decode_request({"model": "m", **MESSAGES[proto], "metadata": ["x"]}, proto)
    assert exc.value.field == "metadata"


@pytest.mark.parametrize("proto", [C, R])
def test_extras_kept_in_order_and_unknown_fields_warned_in_body_order(proto):
    w: list[str] = []
    body = {"zeta": 1, "model": "m", **MESSAGES[proto], "prompt_cache_key": "k", "service_tier": "flex",
            "store": None, "alpha": 2, "metadata": {"a": "b"}}
    req = decode_request(body, proto, w)
    assert list(req.extra) == (["service_tier", "prompt_cache_key"] if proto is C else
                               ["prompt_cache_key", "service_tier"])  # each decoder's own key order
    assert req.metadata == {"a": "b"}
    assert w == [UNKNOWN[proto].format("zeta"), UNKNOWN[proto].format("alpha")]


@pytest.mark.parametrize("proto", [C, R])
def test_usual_body_has_no_extras_or_warnings(proto):
    w: list[str] = []
    req = decode_request({"model": "m", **MESSAGES[proto], "stream": True}, proto, w)
    assert req.extra == {} and w == []


# ----------------------------------------------------------------------------- plain-text messages
@pytest.mark.parametrize(("proto", "body"), [
    (C, {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                      {"role": "user", "content": "c", "name": "ann"}]}),
    (R, {"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]},
                   {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
                   {"type": "message", "role": "assistant", "content": "b2"},
                   {"role": "developer", "content": "c"}]}),
])
def test_plain_text_messages_decode_to_their_text(proto, body):
    from proxai_core.neutral import Text

    req = decode_request(body, proto)
    texts = [[p.text for p in m.parts if isinstance(p, Text)] for m in req.messages]
    assert texts == ([["a"], ["b"], ["c"]] if proto is C else [["a"], ["b", "b2"], ["c"]])
    if proto is C:
        assert req.messages[2].name == "ann"
