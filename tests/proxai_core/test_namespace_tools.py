"""Responses ``namespace`` tools (Codex groups tools under a namespace) toward targets that only have
functions: flattened to one reversible name (within the 64-character limit), and the tool call reaches
the Responses client in its namespace form again — complete, stream, and in the tool loop's history."""

from __future__ import annotations

import copy
import json

import pytest

from proxai_core import (
    Protocol,
    StreamTranslator,
    response_from_stream,
    short_tool_name,
    stream_from_response,
    translate_request,
    translate_response,
)
from tests.proxai_core.bodies import anthropic_msg, chat_completion
from tests.proxai_core.test_tool_args_stream import chat_stream
from tests.sdk import accumulate_stream, validate_request, validate_response

A, C, R = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES
LONG_NS = "mcp__" + "a_very_long_server_name" * 2
LONG_TOOL = "fetch_the_issue_and_all_of_its_comments"

PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def codex_request(**extra) -> dict:
    return {
        "model": "gpt-5-codex", "stream": True, "tools": [
            {"type": "function", "name": "shell", "description": "Run", "parameters": PARAMS, "strict": False},
            {"type": "namespace", "name": "crm", "description": "Customer records.", "tools": [
                {"type": "function", "name": "lookup", "description": "Find a customer", "parameters": PARAMS,
                 "strict": False},
                {"type": "custom", "name": "note", "description": "Free-text note"}]},
            {"type": "namespace", "name": LONG_NS, "description": "Issues.", "tools": [
                {"type": "function", "name": LONG_TOOL, "parameters": PARAMS}]},
        ],
        "input": [{"role": "user", "content": "Who is ACME?"}],
        **extra,
    }


def _flat(target: Protocol, body: dict) -> list[str]:
    if target is C:
        return [t["function"]["name"] for t in body["tools"]]
    return [t["name"] for t in body["tools"]]


# ----------------------------------------------------------------------------- requests
@pytest.mark.parametrize("target", [C, A])
def test_namespace_tools_flattened_for_function_only_targets(target):
    w: list[str] = []
    body = translate_request(codex_request(), R, target, warnings=w)
    validate_request(target, body)
    names = _flat(target, body)
    long_flat = short_tool_name(f"{LONG_NS}__{LONG_TOOL}")
    assert names == ["shell", "crm__lookup", "crm__note", long_flat]
    assert all(len(n) <= 64 for n in names) and len(f"{LONG_NS}__{LONG_TOOL}") > 64
    desc = body["tools"][1]["function"]["description"] if target is C else body["tools"][1]["description"]
    assert desc == "Customer records.\n\nFind a customer"
    assert not [x for x in w if "namespace" in x or "server tool" in x], w


@pytest.mark.parametrize("target", [C, A])
def test_namespaced_call_in_the_history_keeps_its_flat_name(target):
    """The tool loop: Codex sends the call back with its namespace; the upstream sees the name it used."""
    req = codex_request(input=[
        {"role": "user", "content": "Who is ACME?"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "namespace": "crm",
         "arguments": '{"q":"ACME"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "ACME Corp"},
        {"type": "function_call", "call_id": "call_2", "name": LONG_TOOL, "namespace": LONG_NS,
         "arguments": '{"q":"1"}'},
        {"type": "function_call_output", "call_id": "call_2", "output": "ok"},
    ])
    body = translate_request(req, R, target)
    validate_request(target, body)
    if target is C:
        calls = [tc["function"]["name"] for m in body["messages"] for tc in m.get("tool_calls") or []]
    else:
        calls = [b["name"] for m in body["messages"] if isinstance(m["content"], list)
                 for b in m["content"] if b["type"] == "tool_use"]
    assert calls == ["crm__lookup", short_tool_name(f"{LONG_NS}__{LONG_TOOL}")]
    assert set(calls) <= set(_flat(target, body))


def test_namespace_without_tools_list_is_a_clear_error():
    from proxai_core import TranslationError

    req = codex_request(tools=[{"type": "namespace", "name": "crm", "description": "x"}])
    with pytest.raises(TranslationError, match=r"tools\[0\]\.tools"):
        translate_request(req, R, C)


# ----------------------------------------------------------------------------- responses
def _chat_call(name: str, args: str = '{"q":"ACME"}') -> dict:
    return chat_completion({"tool_calls": [{"id": "call_9", "type": "function",
                                            "function": {"name": name, "arguments": args}}]}, "tool_calls")


def _assert_namespaced(item: dict, ns: str, name: str) -> None:
    assert item["type"] in ("function_call", "custom_tool_call")
    assert (item.get("namespace"), item["name"]) == (ns, name)


@pytest.mark.parametrize(("flat", "ns", "name"), [
    ("crm__lookup", "crm", "lookup"),
    (short_tool_name(f"{LONG_NS}__{LONG_TOOL}"), LONG_NS, LONG_TOOL),
])
def test_complete_response_call_gets_its_namespace_back(flat, ns, name):
    req = codex_request(stream=False)
    body = translate_response(_chat_call(flat), C, R, request=req)
    validate_response(R, body)
    _assert_namespaced(body["output"][0], ns, name)
    anth = anthropic_msg([{"type": "tool_use", "id": "toolu_1", "name": flat, "input": {"q": "x"}}], "tool_use")
    body = translate_response(anth, A, R, request=req)
    validate_response(R, body)
    _assert_namespaced(body["output"][0], ns, name)


def test_plain_tools_get_no_namespace():
    body = translate_response(_chat_call("shell"), C, R, request=codex_request(stream=False))
    assert "namespace" not in body["output"][0] and body["output"][0]["name"] == "shell"


def test_custom_tool_in_a_namespace_comes_back_custom_with_its_namespace():
    req = codex_request(stream=False)
    body = translate_response(_chat_call("crm__note", json.dumps({"input": "call back"})), C, R, request=req)
    validate_response(R, body)
    item = body["output"][0]
    _assert_namespaced(item, "crm", "note")
    assert item["type"] == "custom_tool_call" and item["input"] == "call back"


@pytest.mark.parametrize("chunk", [0, 9])
def test_stream_call_gets_its_namespace_back(chunk):
    raw = chat_stream([("crm__lookup", ['{"q":', '"ACME"}']), ("shell", ['{"q":"ls"}'])])
    t = StreamTranslator(C, R, codex_request())
    out = (b"".join(t.feed(raw[i:i + chunk]) for i in range(0, len(raw), chunk)) if chunk else t.feed(raw)) \
        + t.close()
    s = accumulate_stream(R, out)
    assert s.tool_calls == [("lookup", {"q": "ACME"}), ("shell", {"q": "ls"})]
    added = [json.loads(line[6:]) for line in out.decode().splitlines()
             if line.startswith("data: ") and '"response.output_item.added"' in line]
    _assert_namespaced(added[0]["item"], "crm", "lookup")
    final = [json.loads(line[6:]) for line in out.decode().splitlines()
             if line.startswith("data: ") and '"response.completed"' in line][0]["response"]
    _assert_namespaced(final["output"][0], "crm", "lookup")
    assert "namespace" not in final["output"][1]


def test_stream_and_complete_conversions_restore_the_namespace():
    req = codex_request()
    out, _stop, _w = stream_from_response(_chat_call("crm__lookup"), C, R, request=req)
    assert b'"namespace":"crm"' in out and b'"name":"lookup"' in out
    res = response_from_stream(chat_stream([("crm__lookup", ['{"q":"ACME"}'])]), C, R, request=req)
    _assert_namespaced(res.body["output"][0], "crm", "lookup")


def test_round_trip_tool_loop():
    """Codex's next request replays the restored call: the upstream gets the same flat name again."""
    req = codex_request(stream=False)
    body = translate_response(_chat_call("crm__lookup"), C, R, request=req)
    call = copy.deepcopy(body["output"][0])
    call.pop("status", None)
    nxt = codex_request(input=[{"role": "user", "content": "Who is ACME?"}, call,
                               {"type": "function_call_output", "call_id": call["call_id"], "output": "ACME Corp"}])
    up = translate_request(nxt, R, C)
    assert up["messages"][1]["tool_calls"][0]["function"]["name"] == "crm__lookup"


def test_flat_name_rule():
    from proxai_core.codecs._request_common import namespaced_tool_name

    assert namespaced_tool_name("crm", "lookup") == "crm__lookup"
    assert namespaced_tool_name("mcp__github__", "create_issue") == "mcp__github__create_issue"
