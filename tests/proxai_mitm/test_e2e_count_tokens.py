"""End to end: token counts in every direction through a real mitmdump.

A client's counting request (Anthropic ``/v1/messages/count_tokens``, Responses
``/v1/responses/input_tokens``, Gemini ``:countTokens``) is read as the generation request it describes,
translated like one and sent to the target's own counter; the counter's answer comes back in the
client's shape. A Chat target has no counter: the count is estimated locally and flagged as an
estimate (the ``x-proxai-estimate`` header, the flow record's ``count.estimate``).

Three counting clients (their official SDKs) × four targets = twelve directions. The fake upstream
answers only the real counting paths; every counting request it received is validated here with the
target's own SDK types, and must carry what the client asked to count (system prompt, tools, text).
"""

from __future__ import annotations

import time

import anthropic
import openai
import pydantic
import pytest
from google import genai
from google.genai import types as gt

from proxai_mitm.flow.record import FlowRecord
from tests import sdk_gemini
from tests.fake_upstream import FakeUpstream, Reply
from tests.mitm_harness import Mitmdump

from .e2e_util import ANTH, CHAT, CLIENT_KEY, ENV_KEY, ENV_KEY_VALUE, RESP

pytestmark = pytest.mark.e2e

GEMINI = "gemini_generate_content"
TOKENS = 1234
SYSTEM = "You are a terse weather bot."
PROMPT = "What's the weather in Paris?"
TOOL = "get_weather"
#: each target's model and counting path (the fake answers these and nothing else)
MODEL = {ANTH: "claude-sonnet-4-5", RESP: "gpt-5", GEMINI: "gemini-2.5-flash", CHAT: "gpt-4o"}
COUNT_PATH = {ANTH: "/v1/messages/count_tokens", RESP: "/v1/responses/input_tokens",
              GEMINI: "/v1beta/models/gemini-2.5-flash:countTokens"}
ANSWER = {ANTH: {"input_tokens": TOKENS}, RESP: {"object": "response.input_tokens", "input_tokens": TOKENS},
          GEMINI: {"totalTokens": TOKENS}}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module", params=[ANTH, RESP, GEMINI, CHAT])
def proxy(request, upstream, tmp_path_factory):
    target = request.param
    m = Mitmdump(mode=f"reverse:{upstream.url}",
                 options={"proxai_target": target, "proxai_key_env": ENV_KEY, "proxai_model": f"*={MODEL[target]}"},
                 env={ENV_KEY: ENV_KEY_VALUE}, save=True)
    m.start()
    m.target = target
    yield m
    m.cleanup()


#: the Gemini SDK counts on the API's ``/v1``; a translated count goes to the target's ``/v1beta``
GEMINI_SDK_PATH = "/v1/models/gemini-2.5-flash:countTokens"


def _answer(up: FakeUpstream, target: str) -> None:
    up.reset()
    if target in COUNT_PATH:
        up.on(COUNT_PATH[target], Reply.json(ANSWER[target]))
    if target == GEMINI:
        up.on(GEMINI_SDK_PATH, Reply.json(ANSWER[target]))


def _anthropic_count(url: str) -> tuple[int, dict[str, str]]:
    client = anthropic.Anthropic(base_url=url, api_key=CLIENT_KEY, max_retries=0)
    raw = client.messages.with_raw_response.count_tokens(
        model="claude-sonnet-4-5", system=SYSTEM, messages=[{"role": "user", "content": PROMPT}],
        tools=[{"name": TOOL, "description": "Weather", "input_schema": SCHEMA}])
    return raw.parse().input_tokens, dict(raw.headers)


def _responses_count(url: str) -> tuple[int, dict[str, str]]:
    client = openai.OpenAI(base_url=url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    raw = client.responses.input_tokens.with_raw_response.count(
        model="gpt-5", instructions=SYSTEM, input=PROMPT,
        tools=[{"type": "function", "name": TOOL, "description": "Weather", "parameters": SCHEMA, "strict": False}])
    return raw.parse().input_tokens, dict(raw.headers)


def _gemini_count(url: str) -> tuple[int, dict[str, str]]:
    client = genai.Client(api_key=CLIENT_KEY, http_options=gt.HttpOptions(base_url=url))
    # (the Gemini API's SDK counts contents only: a system instruction or tools are refused client-side)
    r = client.models.count_tokens(model="gemini-2.5-flash", contents=PROMPT)
    headers = dict(r.sdk_http_response.headers or {}) if r.sdk_http_response else {}
    return r.total_tokens, {k.lower(): v for k, v in headers.items()}


CLIENTS = {ANTH: _anthropic_count, RESP: _responses_count, GEMINI: _gemini_count}


def _validate_counting_request(target: str, body: dict) -> None:
    """The request the target's counter got, checked with the target's SDK types."""
    if target == ANTH:
        from anthropic.types.message_count_tokens_params import MessageCountTokensParams

        sdk_validate(MessageCountTokensParams, body)
    elif target == RESP:
        from openai.types.responses.input_token_count_params import InputTokenCountParams

        sdk_validate(InputTokenCountParams, body)
    elif "generateContentRequest" in body:  # the form that carries a system instruction and tools
        inner = dict(body["generateContentRequest"])
        assert set(body) == {"generateContentRequest"}
        assert inner.pop("model") == f"models/{MODEL[GEMINI]}"
        sdk_gemini.validate_request(inner)
    else:  # the Gemini SDK's own form, passed through
        sdk_gemini.validate_request(body)


#: one adapter per type, kept alive while its lazy validators are consumed
_ADAPTERS: dict[type, pydantic.TypeAdapter] = {}


def sdk_validate(typed_dict: type, body: dict) -> None:
    from tests.sdk import _force

    # strict: a key the SDK's params do not name is an error here, as the API would reject it
    extra = set(body) - set(typed_dict.__annotations__)
    assert not extra, extra
    adapter = _ADAPTERS.setdefault(typed_dict, pydantic.TypeAdapter(typed_dict))
    _force(adapter.validate_python(body))


@pytest.mark.parametrize("client", [ANTH, RESP, GEMINI])
def test_a_count_reaches_the_targets_counter_or_is_flagged_as_an_estimate(proxy, upstream, client):
    target = proxy.target
    _answer(upstream, target)
    tokens, headers = CLIENTS[client](proxy.url)
    if target == CHAT:  # no counter: estimated here, and said so
        assert 1 <= tokens < 200 and headers.get("x-proxai-estimate") == "chars/4"
        assert upstream.requests == []
        return
    assert tokens == TOKENS and "x-proxai-estimate" not in headers
    sent = upstream.wait_for_requests(1)
    assert [r.path for r in sent] == [GEMINI_SDK_PATH if client == target == GEMINI else COUNT_PATH[target]]
    body = sent[0].json()
    _validate_counting_request(target, body)
    text = str(body)
    assert PROMPT in text
    if client != GEMINI:  # (the Gemini SDK sends contents only)
        assert SYSTEM in text and TOOL in text
    if target != GEMINI:
        assert body["model"] == MODEL[target]
    assert CLIENT_KEY not in str(sent[0].headers)


def test_the_flow_record_says_whether_a_count_was_estimated(proxy, upstream):
    _answer(upstream, proxy.target)
    tokens, _ = _anthropic_count(proxy.url)
    rec = None
    for _ in range(50):  # mitmdump writes the flow once it is done
        flows = proxy.flows()
        rec = FlowRecord.of(flows[-1]) if flows else None
        if rec is not None and rec.count is not None and rec.count.total == tokens:
            break
        time.sleep(0.1)
    assert rec is not None and rec.kind == "count_tokens" and rec.count is not None
    assert rec.count.total == tokens
    assert rec.count.estimate is (proxy.target == CHAT)
