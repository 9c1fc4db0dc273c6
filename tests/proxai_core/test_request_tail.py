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
def test_message_built_from_its_text_makes_its_part_on_first_use():
    from proxai_core.neutral import Message, Text

    m = Message("user", None, "ann", "hello")
    assert m.text == "hello"
    assert m == Message("user", [Text("hello")], "ann")  # equality reads parts: made here
    assert m.text is None  # parts exist now and may change: the text no longer speaks for them
    m.parts.append(Text("more"))
    assert m.parts == [Text("hello"), Text("more")]
    lazy = Message("assistant", None, None, "")
    lazy.parts += [Text("x")]
    assert lazy.parts == [Text(""), Text("x")] and lazy.text is None
    assert Message("user").parts == [] and Message("user").text is None
    with pytest.raises(AttributeError):
        _ = Message("user").nope  # type: ignore[attr-defined]


@pytest.mark.parametrize("target", list(Protocol))
@pytest.mark.parametrize("role", ["user", "assistant", "system", "developer"])
def test_text_form_and_part_form_encode_alike(role, target):
    """A decoder's plain-text message (``Message(role, None, name, text)``) encodes exactly as the
    same message with its one Text part, to every target."""
    from proxai_core.codecs import get
    from proxai_core.neutral import Message, Request, Text

    def encoded(msg: Message) -> tuple[dict, list[str]]:
        w: list[str] = []
        req = Request(model="m", messages=[Message("user", [Text("q")]), msg, Message("user", [Text("z")])])
        return get(target).encode_request(req, w), w

    for name in (None, "ann"):
        assert encoded(Message(role, None, name, "the text")) == encoded(Message(role, [Text("the text")], name))


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
    assert req.messages[0].text == "a" and req.messages[-1].text == "c"  # (read before parts are made)
    texts = [[p.text for p in m.parts if isinstance(p, Text)] for m in req.messages]
    assert texts == ([["a"], ["b"], ["c"]] if proto is C else [["a"], ["b", "b2"], ["c"]])
    if proto is C:
        assert req.messages[2].name == "ann"


def test_tool_result_built_from_its_text_makes_its_content_on_first_use():
    from proxai_core.neutral import Text, ToolResult

    r = ToolResult("c1", None, True, "custom", None, "out")
    assert r.text == "out" and r.is_error is True and r.kind == "custom"
    assert r == ToolResult("c1", [Text("out")], True, "custom")
    assert r.text is None
    assert ToolResult("c2").content == [] and ToolResult("c2").text is None


@pytest.mark.parametrize("target", list(Protocol))
@pytest.mark.parametrize("is_error", [None, True])
def test_tool_result_text_form_and_part_form_encode_alike(target, is_error):
    from proxai_core.codecs import get
    from proxai_core.neutral import Message, Request, Text, ToolCall, ToolResult

    def encoded(tr: ToolResult) -> tuple[dict, list[str]]:
        w: list[str] = []
        req = Request(model="m", messages=[Message("user", [Text("q")]),
                                           Message("assistant", [ToolCall("c1", "f", "{}")]),
                                           Message("user", [tr])])
        return get(target).encode_request(req, w), w

    for text in ("", "15 degrees"):
        assert encoded(ToolResult("c1", None, is_error, "function", None, text)) == \
            encoded(ToolResult("c1", [Text(text)], is_error))
