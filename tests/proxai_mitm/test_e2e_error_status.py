"""End to end (issue 18): through a real mitmdump, an upstream error reaches the SDK client with the
upstream's own status (a code refines only the body's type), and a 413 reaches an Anthropic client
as ``request_too_large``, which the anthropic SDK raises as RequestTooLargeError."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.conftest import fixture_dir, needs_fixtures
from tests.fake_upstream import Reply

from .e2e_util import (
    ANTH,
    CHAT,
    RESP,
    SHORT,
    UPSTREAM_PATH,
    call,
)

pytestmark = pytest.mark.e2e

#: a real OpenAI answer to an unknown model (recorded with 404; served here as the 400 some
#: OpenAI-compatible upstreams send)
NO_MODEL = "pydantic-ai__tests_cassettes_test_model_name_suggestions_test_model_name_suggestion_openai-chat__i0.json"
TOO_LARGE = {"error": {"message": "Request too large", "type": "invalid_request_error", "param": None,
                       "code": "request_too_large"}}


@pytest.mark.parametrize("upstream_proto", [CHAT, RESP])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_413_reaches_the_anthropic_sdk_as_request_too_large(proxy, up, clients, upstream_proto, stream):
    up.on(UPSTREAM_PATH[upstream_proto], Reply.error(413, json.dumps(TOO_LARGE).encode(), "application/json"))
    with pytest.raises(anthropic.RequestTooLargeError) as e:
        call(clients, ANTH, f"to-{SHORT[upstream_proto]}-x", "text", stream)
    assert e.value.status_code == 413
    assert e.value.response.json()["error"]["type"] == "request_too_large"


@needs_fixtures
@pytest.mark.parametrize("client,upstream_proto,exc,type_or_code", [
    (ANTH, CHAT, anthropic.BadRequestError, "not_found_error"),
    (ANTH, RESP, anthropic.BadRequestError, "not_found_error"),
    (RESP, CHAT, openai.BadRequestError, "model_not_found"),
    (CHAT, RESP, openai.BadRequestError, "model_not_found"),
])
def test_a_400_model_not_found_stays_400_for_every_client(proxy, up, clients, client, upstream_proto, exc,
                                                           type_or_code):
    body = (fixture_dir(CHAT) / NO_MODEL).read_bytes()
    up.on(UPSTREAM_PATH[upstream_proto], Reply.error(400, body, "application/json"))
    with pytest.raises(exc) as e:
        call(clients, client, f"to-{SHORT[upstream_proto]}-x", "text", False)
    r = e.value.response
    assert r.status_code == 400
    err = r.json()["error"]
    assert (err["type"] if client == ANTH else err["code"]) == type_or_code
