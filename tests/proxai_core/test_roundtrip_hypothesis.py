"""Request A -> B -> A keeps the conversation (roles, texts, tool calls, tool results)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai_core import Protocol, decode_request, translate_request
from proxai_core import neutral as n
from proxai_core.codecs import get

PROTOS = [Protocol.CHAT, Protocol.RESPONSES, Protocol.ANTHROPIC]

words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1,
                max_size=40).filter(lambda s: s.strip() != "")
names = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
args = st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True),
                       st.one_of(st.integers(-1000, 1000), words, st.booleans()), max_size=3)


@st.composite
def conversations(draw):
    msgs: list[n.Message] = []
    tools: dict[str, None] = {}
    turns = draw(st.integers(1, 4))
    counter = 0
    for _ in range(turns):
        msgs.append(n.Message("user", [n.Text(draw(words))]))
        calls = []
        parts: list = []
        if draw(st.booleans()):
            parts.append(n.Text(draw(words)))
        for _ in range(draw(st.integers(0, 2))):
            counter += 1
            name = draw(names)
            tools[name] = None
            calls.append(n.ToolCall(f"call_{counter}", name, json.dumps(draw(args))))
        parts += calls
        if not parts:
            parts.append(n.Text(draw(words)))
        msgs.append(n.Message("assistant", parts))
        if calls:
            results = [n.ToolResult(c.id, [n.Text(draw(words))]) for c in calls]
            msgs.append(n.Message("user", results))
    msgs.append(n.Message("user", [n.Text(draw(words))]))
    system = [n.Text(draw(words))] if draw(st.booleans()) else []
    req = n.Request(model="m", system=system, messages=msgs, max_output_tokens=256,
                    tools=[n.Tool(t, "d", {"type": "object", "properties": {}}) for t in tools])
    return req


def shape(req: n.Request):
    out = [("system", " ".join(t.text for t in req.system))] if req.system else []
    merged: list[list] = []
    for m in req.messages:
        items = []
        for p in m.parts:
            if isinstance(p, n.Text):
                items.append(("text", p.text))
            elif isinstance(p, n.ToolCall):
                items.append(("call", p.id, p.name, json.loads(p.arguments or "{}")))
            elif isinstance(p, n.ToolResult):
                items.append(("result", p.call_id, "".join(x.text for x in p.content if isinstance(x, n.Text))))
        if merged and merged[-1][0] == m.role:
            merged[-1][1].extend(items)
        else:
            merged.append([m.role, items])
    for role, items in merged:
        # texts inside one turn may be joined by a target that has a single content string
        texts = "".join(x[1] for x in items if x[0] == "text")
        others = [x for x in items if x[0] != "text"]
        out.append((role, texts, tuple(tuple(map(str, o)) for o in others)))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv=conversations(), a=st.sampled_from(PROTOS), b=st.sampled_from(PROTOS))
def test_request_round_trip_keeps_the_conversation(conv, a, b):
    body_a = get(a).encode_request(conv, [])
    ref = decode_request(body_a, a)
    body_b = translate_request(body_a, a, b)
    body_a2 = translate_request(body_b, b, a)
    back = decode_request(body_a2, a)
    assert shape(back) == shape(ref)
