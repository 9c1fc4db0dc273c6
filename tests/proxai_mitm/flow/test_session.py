"""session.py: session ids (the client's header, else the stable prefix), prefix fingerprints, what
changed between turns, and grouping report rows per session with the cache-read drops."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxai_core import Exchange, Protocol
from proxai_core.caching import conversation_key
from proxai_mitm.flow.session import (
    DROP_POINTS,
    MAX_MESSAGES,
    SESSION_HEADERS,
    changes,
    group_sessions,
    header_session,
    prefix_of,
    session_of_body,
    session_of_request,
)

from ..helpers import ANTH, CHAT, RESP

SYSTEM = "You are a coding agent."
TOOLS = [{"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}]


def anth(messages: list[dict], *, system: Any = SYSTEM, tools: list[dict] | None = None) -> dict:
    return {"model": "claude-x", "max_tokens": 64, "system": system, "tools": TOOLS if tools is None else tools,
            "messages": messages}


def req(body: dict, proto: str = ANTH) -> Any:
    return Exchange(Protocol(proto), body).request


def prefix(body: dict, proto: str = ANTH) -> dict:
    return prefix_of(req(body, proto))


TURN1 = [{"role": "user", "content": "List the files."}]
TURN2 = [*TURN1, {"role": "assistant", "content": "a.py"}, {"role": "user", "content": "Read a.py."}]


# ----------------------------------------------------------------------------- ids
def test_the_client_header_wins_and_is_kept_as_a_digest():
    value = b"5f0c9a8e-2d4b-4e1a-9c3f-7b6d1e2a4c80"
    name, sid = header_session([(b"Content-Type", b"application/json"), (b"X-Claude-Code-Session-Id", value)])
    assert name == "x-claude-code-session-id" and len(sid) == 12 and int(sid, 16) >= 0
    assert value.decode() not in sid  # a header named *session* is redacted as a credential: never kept
    # the value alone counts: Codex sends the same id as session_id and conversation_id
    assert header_session([(b"conversation_id", value)])[1] == sid
    assert header_session([(b"conversation_id", b"other"), (b"session_id", value)]) == ("session_id", sid)
    assert header_session([(b"session_id", b"  "), (b"x-api-key", b"k")]) is None
    assert header_session([]) is None
    assert {n.lower() for n in SESSION_HEADERS} == set(SESSION_HEADERS)


def test_a_header_value_is_bounded_whatever_it_holds():
    huge, ctl = b"a" * 100_000, b"\x1b]0;pwned\x07"
    for v in (huge, ctl, "é".encode()):
        name, sid = header_session([(b"session-id", v)])
        assert name == "session-id" and len(sid) == 12 and sid.isalnum()
    assert header_session([(b"session-id", huge)]) != header_session([(b"session-id", b"b" * 100_000)])


def test_the_derived_id_is_the_same_for_every_turn_of_a_conversation():
    one, two = prefix(anth(TURN1)), prefix(anth(TURN2))
    assert one["id"] == two["id"] and len(one["id"]) == 12
    assert one["messages"] == two["messages"][:1] and two["message_count"] == 3
    # another first message, system prompt or tool set: another conversation
    assert prefix(anth([{"role": "user", "content": "Other."}]))["id"] != one["id"]
    assert prefix(anth(TURN1, system="Another agent."))["id"] != one["id"]
    assert prefix(anth(TURN1, tools=[]))["id"] != one["id"]
    # the id is the start of the key the caching hints send upstream, whatever the client's protocol
    chat = {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, *TURN1]}
    assert prefix(chat, CHAT)["id"] == prefix(anth(TURN1, tools=[]))["id"]
    assert conversation_key(req(anth(TURN1))) == f"proxai-{one['id']}" + conversation_key(req(anth(TURN1)))[19:]


def test_a_tool_description_changes_the_fingerprint_not_the_id():
    edited = [dict(TOOLS[0], description="Read a file, all of it")]
    a, b = prefix(anth(TURN1)), prefix(anth(TURN1, tools=edited))
    assert a["id"] == b["id"] and a["tools"] != b["tools"] and a["system"] == b["system"]


def test_moving_a_cache_breakpoint_changes_nothing():
    """Clients move ``cache_control`` to the newest turn each time: the prefix is the same."""
    marked = [{"role": "user", "content": [{"type": "text", "text": "List the files.",
                                            "cache_control": {"type": "ephemeral"}}]}]
    plain = [{"role": "user", "content": [{"type": "text", "text": "List the files."}]}]
    sys_marked = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    a, b = prefix(anth(marked, system=sys_marked)), prefix(anth(plain))
    assert a == b


def test_fingerprints_hold_no_content_and_are_bounded():
    secret = "the-content-itself-0123456789"
    long = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{secret} {i}"}
            for i in range(MAX_MESSAGES + 11)]
    p = prefix(anth(long, system=secret))
    assert secret not in json.dumps(p)
    assert len(p["messages"]) == MAX_MESSAGES and p["message_count"] == MAX_MESSAGES + 11
    assert all(len(x) == 8 for x in p["messages"])


def test_session_of_request_and_of_a_recorded_body():
    r = req(anth(TURN1))
    derived = session_of_request(r, None)
    assert derived["source"] == "prefix" and derived["prefix"]["system"]
    by_header = session_of_request(r, ("session_id", "abc"))
    assert by_header == {"id": "abc", "source": "header:session_id", "prefix": derived["prefix"]}
    assert session_of_request(None, None) is None
    assert session_of_request(None, ("session_id", "abc"))["prefix"] is None
    # a recording: the body decoded here; a body no decoder reads has no derived session
    assert session_of_body(Protocol(ANTH), anth(TURN1), "/v1/messages") == derived
    assert session_of_body(Protocol(RESP), {"input": 5}, "/v1/responses") is None
    assert session_of_body(None, None, None) is None


# ----------------------------------------------------------------------------- what changed
def test_changes_between_turns():
    a = prefix(anth(TURN1))
    assert changes(a, prefix(anth(TURN2)), "m", "m", 1.0) == ["prefix unchanged"]
    assert changes(a, prefix(anth(TURN2)), "m", "m", 600.0) == [
        "prefix unchanged, 10 min after the previous turn (the cache may have expired)"]
    assert changes(a, prefix(anth(TURN2, system="New.")), "m", "n", None) == [
        "model changed (m → n)", "system prompt changed"]
    assert changes(a, prefix(anth(TURN2, tools=[])), None, "m", None) == ["tools changed"]
    edited = [{"role": "user", "content": "List all the files."}, *TURN2[1:]]
    assert changes(prefix(anth(TURN2)), prefix(anth(edited)), "m", "m", None) == [
        "earlier messages edited (from message 1)"]
    assert changes(prefix(anth(TURN2)), a, "m", "m", None) == ["earlier messages removed"]
    assert changes(None, a, "m", "m", None) == ["prefix unknown"]


# ----------------------------------------------------------------------------- grouping
def row(i: int, session: str | None, inp: int | None, read: int | None, *, body: dict | None = None,
        model: str = "claude-x", reason: str = "end_turn", cost: float | None = 0.01, t0: float = 1000.0) -> dict:
    return {"id": f"f{i}", "time": f"2026-12-05 00:00:{i:02d}", "timestamp": t0 + i, "session": session,
            "session_source": "prefix" if session else None, "session_prefix": prefix(body) if body else None,
            "sent_model": model, "model": model, "response_model": None, "input_tokens": inp,
            "output_tokens": 5 if inp is not None else None, "cache_read_tokens": read, "cache_write_tokens": 0,
            "cost_usd": cost, "reason": reason}


def conversation(n: int, system_at: int | None = None) -> list[dict]:
    bodies = []
    msgs = list(TURN1)
    for i in range(n):
        bodies.append(anth(list(msgs), system="Changed." if system_at is not None and i >= system_at else SYSTEM))
        msgs += [{"role": "assistant", "content": f"answer {i}"}, {"role": "user", "content": f"next {i}"}]
    return bodies


def test_group_totals_per_session():
    rows = [row(0, "s1", 100, 0, reason="tool_use"), row(1, "s2", 50, 0, cost=None), row(2, "s1", 100, 90),
            row(3, None, None, None, cost=None)]
    s1, s2, none = group_sessions(rows)
    assert (s1["session"], s1["turns"], s1["input_tokens"], s1["output_tokens"]) == ("s1", 2, 200, 10)
    assert s1["cache_read_share"] == 0.45 and s1["cost_usd"] == 0.02 and s1["stops"] == {"tool_use": 1, "end_turn": 1}
    assert s1["exchanges"] == ["f0", "f2"] and s1["start"].endswith(":00") and s1["end"].endswith(":02")
    assert s2["unpriced"] == 1 and s2["cost_usd"] == 0.0
    assert none["session"] is None and none["untokened"] == 1 and none["cache_read_share"] is None


def test_a_drop_is_marked_on_its_turn_with_what_changed():
    bodies = conversation(5, system_at=4)
    shares = [(1000, 0), (1000, 950), (1000, 960), (1000, 955), (1000, 40)]
    rows = [row(i, "s", inp, read, body=b) for i, (b, (inp, read)) in enumerate(zip(bodies, shares, strict=True))]
    (s,) = group_sessions(rows)
    (d,) = s["drops"]
    assert (d["id"], d["turn"], d["cache_read_share"]) == ("f4", 5, 0.04)
    assert d["running_share"] == pytest.approx(0.955) and d["changed"] == ["system prompt changed"]


def test_no_drop_before_the_third_turn_nor_below_the_threshold():
    bodies = conversation(4)
    # a cold start (turn 1) and a warm-up (turn 2) are never drops; a dip under 20 points is not one
    dip = 0.95 - DROP_POINTS + 0.01
    shares = [(1000, 0), (1000, 950), (1000, int(1000 * dip)), (1000, 0)]
    rows = [row(i, "s", inp, read, body=b) for i, (b, (inp, read)) in enumerate(zip(bodies, shares, strict=True))]
    (s,) = group_sessions(rows[:3])
    assert s["drops"] == []
    (s,) = group_sessions(rows)
    assert [d["turn"] for d in s["drops"]] == [4] and s["drops"][0]["changed"] == ["prefix unchanged"]


def test_side_requests_of_one_session_are_not_drops():
    """A session id kept across side requests (a title, a sub-agent: another first message) compares
    each conversation with itself."""
    main = conversation(4)
    side = anth([{"role": "user", "content": "Write a title for this chat."}], tools=[])
    rows, i = [], 0
    for b in main:
        rows.append(row(i, "s", 1000, 0 if i == 0 else 950, body=b))
        rows.append(row(i + 1, "s", 200, 0, body=side))  # never cached
        i += 2
    (s,) = group_sessions(rows)
    assert s["turns"] == 8 and s["drops"] == []


def test_unknown_usage_is_neither_a_drop_nor_counted():
    bodies = conversation(4)
    rows = [row(0, "s", 1000, 0, body=bodies[0]), row(1, "s", 1000, 950, body=bodies[1]),
            row(2, "s", None, None, body=bodies[2]), row(3, "s", 1000, 960, body=bodies[3])]
    (s,) = group_sessions(rows)
    assert s["drops"] == [] and s["untokened"] == 1 and s["input_tokens"] == 3000
