"""End to end: boto3's own Bedrock Converse client (``converse`` and ``converse_stream``) through a real
mitmdump, routed to an Anthropic, a Chat Completions and a Gemini upstream (strict loopback fakes):
the request is translated from Converse, the answer comes back as Converse — botocore parses the
complete body and the event stream with its own parsers — and the client's own SigV4 signature
never reaches the upstream."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config

from tests.fake_upstream import TEXT, FakeUpstream
from tests.mitm_harness import Mitmdump

from .e2e_util import ENV_KEY, ENV_KEY_VALUE

pytestmark = pytest.mark.e2e

ANSWER = "".join(TEXT)
CLIENT_ACCESS, CLIENT_SECRET = "AKIACLIENTNOTFORWARD", "client-secret-must-not-travel-0123456789"
#: the model a Converse client names (in the URL) picks the route
TARGETS = {"to-anthropic": ("anthropic_messages", "/v1/messages"),
           "to-chat": ("openai_chat_completions", "/v1/chat/completions"),
           "to-gemini": ("gemini_generate_content", None)}


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    routes = tmp_path_factory.mktemp("converse") / "routes.toml"
    routes.write_text("\n".join(
        f'[[routes]]\nname = "{name}"\nmatch = {{ model = "{name}*" }}\n'
        f'target = {{ protocol = "{proto}", base_url = "{upstream.url}", api_key_env = "{ENV_KEY}", '
        f'model = "{"gemini-2.5-flash" if proto.startswith("gemini") else "upstream-model"}" }}\n'
        for name, (proto, _) in TARGETS.items()))
    m = Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)},
                 env={ENV_KEY: ENV_KEY_VALUE})
    m.start()
    yield m
    m.cleanup()


def _client(url: str):
    return boto3.Session(aws_access_key_id=CLIENT_ACCESS, aws_secret_access_key=CLIENT_SECRET,
                         region_name="us-east-1").client("bedrock-runtime", endpoint_url=url,
                                                         config=Config(retries={"max_attempts": 1}))


MESSAGES = [{"role": "user", "content": [{"text": "What's the weather in Paris?"}]}]
SYSTEM = [{"text": "You are terse."}]


def _check_upstream(up: FakeUpstream, route: str, stream: bool) -> None:
    proto, path = TARGETS[route]
    rec = up.requests[-1]
    if path is None:  # Gemini: the model and the method in the URL
        want = "/v1beta/models/gemini-2.5-flash:" + ("streamGenerateContent" if stream else "generateContent")
        assert rec.path.partition("?")[0] == want, rec.path
        assert rec.json()["systemInstruction"]["parts"][0]["text"] == "You are terse."
    else:
        assert rec.path == path
        assert rec.json()["model"] == "upstream-model"
    headers = json.dumps(rec.headers)
    assert CLIENT_ACCESS not in headers and "X-Amz-Date" not in headers and "x-amz-date" not in headers


@pytest.mark.parametrize("route", list(TARGETS))
def test_boto3_converse_on_another_protocol(proxy, upstream, route):
    upstream.reset()
    out = _client(proxy.url).converse(modelId=f"{route}-model", messages=MESSAGES, system=SYSTEM,
                                      inferenceConfig={"maxTokens": 64})
    assert out["output"]["message"]["content"][0]["text"] == ANSWER
    assert out["stopReason"] == "end_turn"
    assert out["usage"]["outputTokens"] > 0 and out["usage"]["inputTokens"] > 0
    _check_upstream(upstream, route, stream=False)


@pytest.mark.parametrize("route", list(TARGETS))
def test_boto3_converse_stream_on_another_protocol(proxy, upstream, route):
    upstream.reset()
    out = _client(proxy.url).converse_stream(modelId=f"{route}-model", messages=MESSAGES, system=SYSTEM,
                                             inferenceConfig={"maxTokens": 64})
    events = list(out["stream"])
    text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
    assert text == ANSWER
    assert "messageStart" in events[0]
    stops = [e["messageStop"]["stopReason"] for e in events if "messageStop" in e]
    assert stops == ["end_turn"]
    assert "metadata" in events[-1] and events[-1]["metadata"]["usage"]["outputTokens"] > 0
    _check_upstream(upstream, route, stream=True)


@pytest.mark.parametrize("status,body,exception", [
    (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, "ThrottlingException"),
    (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}, "ValidationException"),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, "ServiceUnavailableException"),
])
def test_an_upstream_error_is_the_exception_boto3_knows(proxy, upstream, status, body, exception):
    """An AWS client reads an error's type from ``x-amzn-errortype``: botocore raises that exception."""
    from tests.fake_upstream import Reply

    upstream.reset()
    upstream.on("/v1/messages", Reply.error(status, body))
    client = _client(proxy.url)
    with pytest.raises(getattr(client.exceptions, exception)) as ei:
        client.converse(modelId="to-anthropic-model", messages=MESSAGES)
    assert body["error"]["message"] in str(ei.value)
