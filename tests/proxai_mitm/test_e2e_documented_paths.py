"""End to end: the user guide's reverse-mode commands with no route ``base_url`` (``--set
proxai_target=… --set proxai_key_env=… --set proxai_model='*=…'``) send every client to the
target's real path. The fake upstream answers only the exact paths the real providers serve
(anything else is a 404, an unknown query parameter a 400), so a Gemini client's ``/v1beta`` prefix,
a Vertex AI client's project path or Claude Code's ``?beta=true`` reaching another protocol fails
here as it would against the provider."""

from __future__ import annotations

import anthropic
import openai
import pytest
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials

from tests.fake_upstream import FakeUpstream
from tests.mitm_harness import Mitmdump

from .e2e_util import ANTH, CHAT, CLIENT_KEY, ENV_KEY, ENV_KEY_VALUE, RESP, UPSTREAM_MODEL, UPSTREAM_PATH

pytestmark = pytest.mark.e2e

GEMINI = "gemini_generate_content"
TEXT = "Hello! The weather is sunny."
PROMPT = "What's the weather in Paris?"


def _documented(upstream: FakeUpstream, target: str, model: str) -> Mitmdump:
    # the user guide's command, pointed at the loopback fake instead of the provider's host
    return Mitmdump(mode=f"reverse:{upstream.url}",
                    options={"proxai_target": target, "proxai_key_env": ENV_KEY, "proxai_model": f"*={model}"},
                    env={ENV_KEY: ENV_KEY_VALUE})


@pytest.fixture(scope="module", params=[ANTH, CHAT, RESP])
def proxy(request, upstream):
    m = _documented(upstream, request.param, UPSTREAM_MODEL[request.param])
    m.start()
    m.target = request.param
    yield m
    m.cleanup()


def _sent(up: FakeUpstream) -> list[str]:
    return [r.path for r in up.requests]


def _check_upstream(up: FakeUpstream, target: str, n: int) -> None:
    paths = _sent(up)
    assert paths == [UPSTREAM_PATH[target]] * n, paths  # the real path, no query carried over
    for r in up.requests:
        assert r.json()["model"] == UPSTREAM_MODEL[target]
        assert CLIENT_KEY not in str(r.headers)


def _gemini_clients(url: str) -> dict[str, genai.Client]:
    opts = types.HttpOptions(base_url=url)
    return {
        "gemini-api": genai.Client(api_key=CLIENT_KEY, http_options=opts),
        # Vertex AI with a project (a bearer token) and in express mode (an API key, no project)
        "vertex": genai.Client(vertexai=True, project="demo-project", location="us-central1",
                               credentials=Credentials(token=CLIENT_KEY), http_options=opts),
        "vertex-express": genai.Client(vertexai=True, api_key=CLIENT_KEY, http_options=opts),
    }


@pytest.mark.parametrize("client_kind", ["gemini-api", "vertex", "vertex-express"])
def test_gemini_and_vertex_clients_reach_the_targets_real_path(proxy, upstream, client_kind):
    upstream.reset()
    client = _gemini_clients(proxy.url)[client_kind]
    r = client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT)
    assert r.text == TEXT
    chunks = client.models.generate_content_stream(model="gemini-2.5-flash", contents=PROMPT)
    assert "".join(c.text or "" for c in chunks) == TEXT
    _check_upstream(upstream, proxy.target, 2)


def test_claude_codes_beta_query_stays_with_anthropic(proxy, upstream):
    upstream.reset()
    client = anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)
    # POST /v1/messages?beta=true, as Claude Code sends it
    msg = client.beta.messages.create(model="claude-sonnet-4-5", max_tokens=64, extra_query={"beta": "true"},
                                      messages=[{"role": "user", "content": PROMPT}])
    assert "".join(b.text for b in msg.content if b.type == "text") == TEXT
    want = UPSTREAM_PATH[proxy.target] + ("?beta=true" if proxy.target == ANTH else "")
    assert _sent(upstream) == [want]


@pytest.fixture(scope="module")
def gemini_proxy(upstream):
    m = _documented(upstream, GEMINI, "gemini-2.5-flash")
    m.start()
    yield m
    m.cleanup()


def test_openai_and_anthropic_clients_on_a_gemini_host_get_v1beta(gemini_proxy, upstream):
    upstream.reset()
    chat = openai.OpenAI(base_url=gemini_proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    out = chat.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PROMPT}])
    assert out.choices[0].message.content == TEXT
    stream = chat.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PROMPT}],
                                          stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == TEXT
    claude = anthropic.Anthropic(base_url=gemini_proxy.url, api_key=CLIENT_KEY, max_retries=0)
    msg = claude.beta.messages.create(model="claude-sonnet-4-5", max_tokens=64, extra_query={"beta": "true"},
                                      messages=[{"role": "user", "content": PROMPT}])
    assert "".join(b.text for b in msg.content if b.type == "text") == TEXT
    assert _sent(upstream) == ["/v1beta/models/gemini-2.5-flash:generateContent",
                               "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                               "/v1beta/models/gemini-2.5-flash:generateContent"]
