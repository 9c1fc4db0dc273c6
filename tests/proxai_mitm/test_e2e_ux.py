"""End to end through a real mitmdump: what a user sees of a refused request (``rejected``, the key's
origin named, ``retry-after``), and ``refusal_in_content`` for Chat clients that ignore ``refusal``."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from tests.fake_upstream import Reply
from tests.mitm_harness import Mitmdump, free_port

from .e2e_util import (
    ANTH,
    CHAT,
    ENV_KEY,
    ENV_KEY_VALUE,
    UPSTREAM_PATH,
    call,
    routes_toml,
    serve,
    wait_flows,
)

pytestmark = pytest.mark.e2e

UNAUTHORIZED = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
NOTE = f"(the key came from ${ENV_KEY}, route 'to-anthropic')"


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(routes_toml(upstream, free_port()) + (
        f'\n[[routes]]\nname = "qwen"\nrefusal_in_content = true\nmatch = {{ model = "qwen-*" }}\n'
        f'target = {{ protocol = "{ANTH}", base_url = "{upstream.url}", api_key_env = "{ENV_KEY}", '
        f'model = "claude-sonnet-4-5" }}\n'))
    m = Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)},
                 env={ENV_KEY: ENV_KEY_VALUE})
    m.start()
    yield m
    m.cleanup()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_upstream_401_is_rejected_and_names_the_key_variable(proxy, up, clients, stream):
    n0 = len(proxy.flows())
    up.on(UPSTREAM_PATH[ANTH], Reply.error(401, json.dumps(UNAUTHORIZED).encode(), "application/json"))
    with pytest.raises(openai.AuthenticationError) as e:
        call(clients, CHAT, "to-anthropic-x", "text", stream)
    body = e.value.response.json()
    assert body["error"]["message"] == f"invalid x-api-key {NOTE}"
    assert ENV_KEY_VALUE not in e.value.response.text
    f = wait_flows(proxy, n0 + 1)[-1]
    stop = f.metadata["proxai"]["stop"]
    assert (stop["reason"], stop["category"], stop["detail"]["status"]) == ("rejected", "authentication", 401)
    assert f.comment.startswith("rejected (authentication) · ") and f.comment.endswith(NOTE)
    assert f.marked == ":x:" and ENV_KEY_VALUE not in f.comment
    proxy.wait_for_log(r"rejected \(authentication\): invalid x-api-key \(the key came from \$PROXAI_E2E_KEY, "
                       r"route 'to-anthropic'\)")


def test_overloaded_529_keeps_retry_after_for_the_client_the_record_and_the_comment(proxy, up, clients):
    n0 = len(proxy.flows())
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    up.on(UPSTREAM_PATH[ANTH], Reply.error(529, json.dumps(overloaded).encode(), "application/json",
                                           headers=[("retry-after", "30")]))
    with pytest.raises(openai.InternalServerError) as e:
        call(clients, CHAT, "to-anthropic-x", "text", False)
    assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "30"
    f = wait_flows(proxy, n0 + 1)[-1]
    stop = f.metadata["proxai"]["stop"]
    assert stop["reason"] == "interrupted" and stop["detail"]["retry_after"] == "30"
    assert f.comment.startswith("interrupted (overloaded) · ") and " · retry after 30 s · " in f.comment
    assert f.marked == ":electric_plug:"


def test_a_bad_request_is_rejected(proxy, up, clients):
    n0 = len(proxy.flows())
    bad = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}}
    up.on(UPSTREAM_PATH[ANTH], Reply.error(400, json.dumps(bad).encode(), "application/json"))
    with pytest.raises(openai.BadRequestError) as e:
        call(clients, CHAT, "to-anthropic-x", "text", True)
    assert "key came from" not in e.value.response.text  # only a refused key is about the key
    f = wait_flows(proxy, n0 + 1)[-1]
    assert f.comment.startswith("rejected (invalid_request) · ") and f.comment.endswith("max_tokens: too large")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_refusal_in_content_route_for_chat_clients(proxy, up, clients, stream):
    serve(up, ANTH, "refusal", delay=0.002)
    s = call(clients, CHAT, "qwen-coder", "refusal", stream)
    assert s.refusal and s.text  # the SDK parsed both: a client reading only content sees the refusal
    serve(up, ANTH, "refusal", delay=0.002)
    plain = call(clients, CHAT, "to-anthropic-x", "refusal", stream)
    assert plain.refusal and plain.text == ""  # other routes keep the field rule


def test_refusal_in_content_raw_stream(proxy, up):
    serve(up, ANTH, "refusal", delay=0.002)
    with httpx2.Client(base_url=proxy.url, timeout=30) as h:
        r = h.post("/v1/chat/completions", json={"model": "qwen-coder", "stream": True,
                                                 "messages": [{"role": "user", "content": "hi"}]})
    deltas = [json.loads(x[6:])["choices"][0]["delta"] for x in r.text.splitlines()
              if x.startswith("data: {") and json.loads(x[6:])["choices"]]
    refusal = [d for d in deltas if d.get("refusal")]
    assert refusal and all(d["content"] == d["refusal"] for d in refusal)
    assert "".join(d["content"] for d in refusal) == "".join(d["refusal"] for d in refusal)
