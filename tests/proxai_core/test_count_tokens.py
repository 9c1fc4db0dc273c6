"""Token counts through an Exchange: a client's counting request becomes the target's counting
request (judged by the target's SDK types), the target's answer comes back in the client's shape."""

from __future__ import annotations

import json

import orjson
import pydantic
import pytest

from proxai_core import Exchange, Plan, Protocol
from proxai_core.codecs import get

from .. import sdk_gemini
from ..sdk import _force, fixture_files, responses_input_placeholders

A, R, G, C = Protocol.ANTHROPIC, Protocol.RESPONSES, Protocol.GEMINI, Protocol.CHAT
COUNTING = [p for p in (A, R, G) if get(p).wire.counter is not None]
SYSTEM, PROMPT = "Be terse.", "How warm is Paris?"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
COUNT_BODY = {
    A: {"model": "claude-sonnet-4-5", "system": SYSTEM, "messages": [{"role": "user", "content": PROMPT}],
        "tools": [{"name": "get_weather", "input_schema": SCHEMA}]},
    R: {"model": "gpt-5", "instructions": SYSTEM, "input": PROMPT,
        "tools": [{"type": "function", "name": "get_weather", "parameters": SCHEMA, "strict": False}]},
    G: {"generateContentRequest": {"model": "models/gemini-2.5-flash",
                                   "systemInstruction": {"parts": [{"text": SYSTEM}]},
                                   "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
                                   "tools": [{"functionDeclarations": [{"name": "get_weather",
                                                                        "parameters": SCHEMA}]}]}},
}
PATH = {A: "/v1/messages/count_tokens", R: "/v1/responses/input_tokens",
        G: "/v1beta/models/gemini-2.5-flash:countTokens"}
ANSWER = {A: {"input_tokens": 77}, R: {"object": "response.input_tokens", "input_tokens": 77},
          G: {"totalTokens": 77, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 77}]}}

_ADAPTERS: dict = {}


def validate_count_request(target: Protocol, body: dict) -> None:
    """The target's SDK types for its counting request (unknown keys are errors)."""
    if target is G:
        assert set(body) == {"generateContentRequest"}
        inner = dict(body["generateContentRequest"])
        assert str(inner.pop("model", "")).startswith("models/")
        sdk_gemini.validate_request(inner)
        return
    if target is A:
        from anthropic.types.message_count_tokens_params import MessageCountTokensParams as T
    else:
        from openai.types.responses.input_token_count_params import InputTokenCountParams as T

        body = responses_input_placeholders(body)
    assert not set(body) - set(T.__annotations__), set(body) - set(T.__annotations__)
    adapter = _ADAPTERS.setdefault(T, pydantic.TypeAdapter(T))
    _force(adapter.validate_python(body))


@pytest.mark.parametrize("target", COUNTING)
@pytest.mark.parametrize("client", COUNTING)
def test_a_count_translates_both_ways(client, target):
    ex = Exchange(client, COUNT_BODY[client], path=PATH[client], kind="count_tokens")
    up = ex.request_for(target, "upstream-model")
    if client is target:
        assert up is COUNT_BODY[client]
    else:
        validate_count_request(target, up)
        text = json.dumps(up)
        assert SYSTEM in text and PROMPT in text and "get_weather" in text
        assert "upstream-model" in text
        assert not {"max_tokens", "stream", "max_output_tokens"} & set(up)
    plan = ex.respond(target, 200, "application/json")
    assert plan is (Plan.OBSERVE if client is target else Plan.COUNT)
    out = ex.complete(orjson.dumps(ANSWER[target]))
    assert ex.tokens == 77
    if client is not target:
        assert out.status == 200 and json.loads(out.body) == get(client).wire.counter.answer(77)


@pytest.mark.parametrize("client", COUNTING)
def test_a_chat_target_has_no_counter(client):
    ex = Exchange(client, COUNT_BODY[client], path=PATH[client], kind="count_tokens")
    with pytest.raises(Exception, match="no token counting endpoint"):
        ex.request_for(C)


@pytest.mark.parametrize("client", COUNTING)
def test_an_unreadable_count_answer_is_the_clients_error(client):
    target = A if client is not A else R
    ex = Exchange(client, COUNT_BODY[client], path=PATH[client], kind="count_tokens")
    ex.request_for(target)
    ex.respond(target, 200, "application/json")
    out = ex.complete(b'{"tokens": "many"}')
    assert out.status == 502 and ex.plan is Plan.ERROR and ex.tokens is None
    assert get(client).is_error_body(json.loads(out.body))


@pytest.mark.parametrize("client", COUNTING)
def test_an_upstream_error_of_a_count_is_the_clients_native_error(client):
    target = A if client is not A else G
    ex = Exchange(client, COUNT_BODY[client], path=PATH[client], kind="count_tokens")
    ex.request_for(target)
    assert ex.respond(target, 429, "application/json") is Plan.ERROR
    err = get(target).errors.body
    from proxai_core.neutral import Error, ErrorKind

    out = ex.complete(orjson.dumps(err(Error(kind=ErrorKind.RATE_LIMIT, message="slow down", status=429))))
    assert out.status == 429 and get(client).is_error_body(json.loads(out.body))


def _recorded_requests(p: Protocol) -> list:
    out = []
    for f in fixture_files(p, ".request.json"):
        body = json.loads(f.read_text())
        if isinstance(body, dict):
            out.append((f, body))
    return out


@pytest.mark.parametrize("target", COUNTING)
@pytest.mark.parametrize("client", COUNTING)
def test_every_recorded_request_counts_in_every_counting_target(client, target):
    """Each recorded generation request of the client's protocol, read as what a count of it carries,
    becomes a counting request the target's SDK types accept (or a named refusal)."""
    files = _recorded_requests(client)
    if not files:
        pytest.skip(f"no recorded {client.value} requests in ../shared/fixtures")
    if client is target:
        return
    done = refused = 0
    for f, body in files:
        counting = _as_count(client, body)
        ex = Exchange(client, counting, path=PATH[client], kind="count_tokens")
        try:
            up = ex.request_for(target, "m")
        except Exception as exc:  # a request the target cannot carry is refused by name, never a crash
            assert type(exc).__name__ == "TranslationError", (f.name, exc)
            refused += 1
            continue
        validate_count_request(target, up)
        done += 1
    assert done > refused, (done, refused)


def _as_count(p: Protocol, body: dict) -> dict:
    """A recorded generation request as the counting request a client would send for it."""
    if p is G:
        return {"generateContentRequest": {"model": "models/gemini-2.5-flash", **body}}
    if p is A:
        return {k: v for k, v in body.items() if k not in ("max_tokens", "stream", "temperature", "metadata")}
    return {k: v for k, v in body.items() if k not in ("stream", "store", "max_output_tokens")}
