"""Toward the client's own host (reverse mode with no route ``base_url``), a routed request goes to
the target protocol's real path: a client prefix that belongs to another protocol is replaced by
the target's, and the client's query never travels to another protocol."""

from __future__ import annotations

import pytest

from proxai_core import Protocol
from proxai_mitm.wire import routing

CHAT, RESP, ANTH, GEM = (Protocol.CHAT, Protocol.RESPONSES, Protocol.ANTHROPIC, Protocol.GEMINI)

GEMINI_CLI = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=AIzaCLIENT"
VERTEX = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
CLAUDE_CODE = "/v1/messages?beta=true"


def _path(client_path: str, target: Protocol, *, model: str = "m-up", stream: bool = True,
          method: str = "POST") -> str:
    ep = routing.recognize(method, client_path, {})
    assert ep is not None, client_path
    return routing.upstream_target(ep, target, None, scheme="https", host="h", port=443, model_id=model,
                                   stream=stream)[3]


@pytest.mark.parametrize("client_path", [GEMINI_CLI, VERTEX, CLAUDE_CODE, "/v1/chat/completions",
                                         "/v1/responses"])
@pytest.mark.parametrize("target, expect", [(CHAT, "/v1/chat/completions"), (RESP, "/v1/responses"),
                                            (ANTH, "/v1/messages")])
def test_another_protocol_gets_its_own_real_path(client_path, target, expect):
    got = _path(client_path, target)
    if client_path == CLAUDE_CODE and target is ANTH:
        expect += "?beta=true"  # the same protocol: the client's query is its own
    assert got == expect


@pytest.mark.parametrize("client_path", ["/v1/chat/completions", "/v1/responses", CLAUDE_CODE])
def test_an_openai_or_anthropic_client_on_a_gemini_host_gets_v1beta(client_path):
    assert _path(client_path, GEM) == "/v1beta/models/m-up:streamGenerateContent?alt=sse"
    assert _path(client_path, GEM, stream=False) == "/v1beta/models/m-up:generateContent"


def test_a_gemini_client_keeps_its_own_prefix_toward_gemini():
    assert _path(GEMINI_CLI, GEM, model="gemini-2.5-flash") == \
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    # another upstream model: the path is rebuilt, its framing parameter is not repeated
    assert _path(GEMINI_CLI, GEM, model="gemini-2.5-pro") == \
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert _path(VERTEX, GEM, model="gemini-2.5-pro") == VERTEX


def test_a_gateway_prefix_before_the_version_stays():
    assert _path("/openai/v1/responses", ANTH) == "/openai/v1/messages"
    assert _path("/openai/v1/responses", GEM, stream=False) == "/openai/v1beta/models/m-up:generateContent"


def test_claude_code_beta_query_never_reaches_another_protocol():
    for target in (CHAT, RESP, GEM):
        assert "beta=true" not in _path(CLAUDE_CODE, target)


def test_model_lists_use_the_target_prefix():
    assert _path("/v1beta/models", ANTH, method="GET") == "/v1/models"
    assert _path("/v1/models", GEM, method="GET") == "/v1beta/models"
    assert _path("/v1/models?limit=5", CHAT, method="GET") == "/v1/models?limit=5"
