"""Prompt-caching hints across translation: Anthropic breakpoints placed like Anthropic's own
clients place them, OpenAI's prompt_cache_key from the conversation, and a stable prefix for every
target (what Gemini's implicit caching and OpenAI's prefix caching need)."""

from __future__ import annotations

import copy
import json

import pytest

from proxai_core import Exchange, Protocol
from proxai_core.caching import CacheHint
from proxai_core.codecs import get
from proxai_core.codecs._anthropic_cache import MAX_BREAKPOINTS, add_cache_hints, minimum_tokens

from ..sdk import validate_request

A, R, G, C = Protocol.ANTHROPIC, Protocol.RESPONSES, Protocol.GEMINI, Protocol.CHAT
LONG = "You are a careful coding agent. " * 400  # ~3,200 tokens: above every minimum but Haiku 4.5's
TOOLS = [{"name": f"tool_{i}", "description": "does a thing", "input_schema": {"type": "object"}} for i in range(3)]


def _marks(body: dict) -> list[tuple[str, object]]:
    """Where the breakpoints are: ("tools", i) / ("system", i) / (message index, block index)."""
    out = []
    for i, t in enumerate(body.get("tools") or ()):
        if "cache_control" in t:
            out.append(("tools", i))
    if isinstance(body.get("system"), list):
        out += [("system", i) for i, b in enumerate(body["system"]) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        if isinstance(m["content"], list):
            out += [(i, j) for j, b in enumerate(m["content"]) if "cache_control" in b]
    return out


def _tool_loop(turns: int) -> list[dict]:
    msgs = [{"role": "user", "content": "Fix the failing test."}]
    for k in range(turns):
        msgs.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "look first", "signature": "sig"},
            {"type": "tool_use", "id": f"t{k}", "name": "tool_0", "input": {}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}",
                                                  "content": "output " * 50}]})
    return msgs


def test_breakpoints_go_at_the_stable_head_the_end_and_the_previous_turn():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": LONG, "tools": copy.deepcopy(TOOLS),
            "messages": _tool_loop(3)}
    add_cache_hints(body, CacheHint("k"))
    assert _marks(body) == [("system", 0), (4, 0), (6, 0)]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    validate_request(A, body)


def test_no_system_marks_the_last_tool_and_thinking_is_passed_over():
    tools = copy.deepcopy(TOOLS)
    tools[-1]["description"] = LONG
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                              {"type": "thinking", "thinking": "t", "signature": "s"}]}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "tools": tools, "messages": msgs}
    add_cache_hints(body, CacheHint("k"))
    assert _marks(body) == [("tools", 2), (0, 0), (1, 0)]  # (1, 0): the text before the thinking block
    validate_request(A, body)


def test_a_prefix_below_the_models_minimum_gets_no_breakpoint():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "system": "short",
            "messages": [{"role": "user", "content": "hi"}]}
    before = copy.deepcopy(body)
    add_cache_hints(body, CacheHint("k"))
    assert _marks(body) == [] and body["messages"] == before["messages"]
    assert minimum_tokens("claude-haiku-4-5") == 4096 and minimum_tokens("claude-3-5-haiku") == 2048
    assert minimum_tokens("claude-sonnet-4-5") == 1024 and minimum_tokens(None) == 1024
    body = {"model": "claude-haiku-4-5", "max_tokens": 10, "system": LONG,
            "messages": [{"role": "user", "content": "hi"}]}
    add_cache_hints(body, CacheHint("k"))
    assert _marks(body) == []  # ~3,200 tokens < Haiku 4.5's 4,096


def test_the_clients_breakpoints_are_kept_counted_and_their_ttl_followed():
    msgs = _tool_loop(3)
    msgs[0] = {"role": "user", "content": [{"type": "text", "text": "Fix it.",
                                            "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": LONG, "messages": msgs}
    add_cache_hints(body, CacheHint("k"))
    marks = _marks(body)
    assert len(marks) == MAX_BREAKPOINTS and (0, 0) in marks
    assert all(b.get("cache_control", {}).get("ttl") == "1h"
               for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
               if "cache_control" in b)
    validate_request(A, body)
    # mixed TTLs: the order rule is the client's; none of ours
    msgs = _tool_loop(2)
    msgs[0] = {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral",
                                                                                           "ttl": "1h"}}]}
    msgs[2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": LONG, "messages": msgs}
    add_cache_hints(body, CacheHint("k"))
    assert len(_marks(body)) == 2


def test_four_client_breakpoints_leave_no_room():
    msgs = [{"role": "user" if i % 2 == 0 else "assistant",
             "content": [{"type": "text", "text": f"m{i}", "cache_control": {"type": "ephemeral"}}]}
            for i in range(4)] + [{"role": "user", "content": "last"}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": LONG, "messages": msgs}
    add_cache_hints(body, CacheHint("k"))
    assert len(_marks(body)) == 4 and body["system"] == LONG


CHAT_BODY = {"model": "gpt-5", "messages": [{"role": "system", "content": LONG},
                                            {"role": "user", "content": "Fix the failing test."}]}


def _exchange(body: dict = CHAT_BODY, client: Protocol = C) -> Exchange:
    return Exchange(client, copy.deepcopy(body), path="/v1/chat/completions")


def test_a_translated_request_to_anthropic_gets_breakpoints_and_stays_valid():
    ex = _exchange()
    up = ex.request_for(A)
    ex.add_cache_hints(A, up, model="claude-sonnet-4-5")
    assert ("system", 0) in _marks(up)
    validate_request(A, up)


def test_openai_targets_get_a_stable_prompt_cache_key():
    ex = _exchange(client=A, body={"model": "claude-sonnet-4-5", "max_tokens": 10, "system": LONG,
                                   "messages": [{"role": "user", "content": "Fix the failing test."}]})
    up = ex.request_for(R)
    ex.add_cache_hints(R, up, host="api.openai.com")
    key = up["prompt_cache_key"]
    assert key.startswith("proxai-") and len(key) <= 64  # the API's limit
    validate_request(R, up)
    # the next turn of the same conversation: the same key
    later = {"model": "claude-sonnet-4-5", "max_tokens": 10, "system": LONG,
             "messages": [{"role": "user", "content": "Fix the failing test."},
                          {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks"}]}
    ex2 = Exchange(A, later, path="/v1/messages")
    up2 = ex2.request_for(R)
    ex2.add_cache_hints(R, up2)
    assert up2["prompt_cache_key"] == key
    other = Exchange(A, dict(later, system="another agent"), path="/v1/messages")
    up3 = other.request_for(R)
    other.add_cache_hints(R, up3)
    assert up3["prompt_cache_key"] != key
    # a session's own id replaces the derived key
    ex2.cache_key = "session-123"
    up4 = ex2.request_for(R)
    ex2.add_cache_hints(R, up4)
    assert up4["prompt_cache_key"] == "session-123"


def test_a_chat_target_gets_the_key_only_on_openais_hosts_or_when_asked():
    ex = _exchange(client=R, body={"model": "gpt-5", "instructions": LONG, "input": "hi"})
    up = ex.request_for(C)
    ex.add_cache_hints(C, up, host="api.deepseek.com")
    assert "prompt_cache_key" not in up
    ex.add_cache_hints(C, up, host="api.deepseek.com", explicit=True)
    assert up["prompt_cache_key"].startswith("proxai-")
    up = ex.request_for(C)
    ex.add_cache_hints(C, up, host="api.openai.com")
    assert "prompt_cache_key" in up
    validate_request(C, up)


def test_the_clients_own_protocol_and_gemini_are_left_alone():
    ex = _exchange()
    up = ex.request_for(C)
    snapshot = json.dumps(up, sort_keys=True)
    ex.add_cache_hints(C, up, host="api.openai.com")
    ex.add_cache_hints(G, up)
    assert json.dumps(up, sort_keys=True) == snapshot
    assert get(G).cache_hints is None


def _turns(client: Protocol, n: int) -> list[dict]:
    """The same agent conversation after 1..n tool-loop turns, in the client's protocol."""
    base_msgs = _tool_loop(n)
    bodies = []
    for k in range(1, n + 1):
        anth = {"model": "m", "max_tokens": 100, "system": LONG, "tools": TOOLS, "messages": base_msgs[: 1 + 2 * k]}
        anth = json.loads(json.dumps(anth))
        if client is A:
            bodies.append(anth)
        else:
            bodies.append(Exchange(A, anth, path="/v1/messages").request_for(client))
    return bodies


def _prefix_items(target: Protocol, body: dict) -> list:
    key = {A: "messages", C: "messages", R: "input", G: "contents"}[target]
    head = {k: v for k, v in body.items() if k not in (key, "stream", "prompt_cache_key", "max_tokens",
                                                       "max_output_tokens", "max_completion_tokens")}
    return [json.dumps(head, sort_keys=True)] + [json.dumps(x, sort_keys=True) for x in body[key]]


@pytest.mark.parametrize("target", [A, R, G, C])
@pytest.mark.parametrize("client", [A, R, G, C])
def test_every_turn_extends_the_previous_turns_upstream_prefix(client, target):
    """Prefix caching (OpenAI's automatic caching, Gemini's implicit caching, an Anthropic breakpoint
    read back) needs turn N+1's upstream body to begin with turn N's: the translation of the same
    messages must not change when the conversation grows."""
    if client is target:
        return
    prev = None
    for body in _turns(client, 4):
        path = {A: "/v1/messages", C: "/v1/chat/completions", R: "/v1/responses",
                G: "/v1beta/models/m:generateContent"}[client]
        up = Exchange(client, body, path=path).request_for(target)
        items = _prefix_items(target, up)
        if prev is not None:
            assert items[: len(prev) - 1] == prev[:-1], (client, target)
        prev = items
