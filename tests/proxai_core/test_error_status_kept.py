"""Issue 18: the client gets the upstream's own HTTP status (a code refines the body's type, never
the status), and an oversized request reaches Anthropic clients as 413 ``request_too_large``.

The status changes only where the client's protocol has another number for the same condition:
529 <-> 503 for overloaded, Anthropic's 402 for OpenAI's 429 insufficient_quota. The SDK checks run
a real SDK client against a loopback server that answers with the translated error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import openai
import pytest

from proxai_core import Protocol, translate_error
from tests.conftest import PROTOCOLS, fixture_dir, needs_fixtures
from tests.sdk import ANTHROPIC_BODIES, EVENTSTREAM, HOSTED, validate_anthropic_error

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
B = Protocol.BEDROCK_CONVERSE

#: real upstream bodies of an unknown model (OpenAI and Groq, Chat Completions)
NO_MODEL_RECORDINGS = [
    "pydantic-ai__tests_cassettes_test_model_name_suggestions_test_model_name_suggestion_openai-chat__i0.json",
    "pydantic-ai__tests_cassettes_test_model_name_suggestions_test_model_name_suggestion_groq__i0.json",
    "mirascope__python_tests_e2e_input_cassettes_test_model_not_found_openai_gpt_4o_completions__i0.json",
]
NO_MODEL = {"error": {"message": "The model `gpt-x` does not exist or you do not have access to it.",
                      "type": "invalid_request_error", "param": None, "code": "model_not_found"}}


def _recording(name: str) -> bytes:
    f = fixture_dir(C) / name
    if not f.is_file():
        pytest.fail(f"recording {name} missing from ../shared/fixtures")
    return f.read_bytes()


def _check_model_not_found(target: Protocol, st: int, out: dict, status: int) -> None:
    assert st == status, (target, st)
    if target in EVENTSTREAM:  # Bedrock: {"message"}, the type in a header
        assert set(out) == {"message"}
    elif target in ANTHROPIC_BODIES:
        validate_anthropic_error(st, out)
        assert out["error"]["type"] == "not_found_error"  # the code refines the type
    elif target is G:
        assert out["error"]["code"] == status and out["error"]["status"] == "NOT_FOUND"
    elif target in (B, Protocol.BEDROCK_INVOKE):  # (the kind names the x-amzn-errortype: ResourceNotFoundException)
        assert set(out) == {"message"} and "does not exist" in out["message"]
    else:
        assert out["error"]["code"] == "model_not_found"


# ----------------------------------------------------------------------------- the status is kept
@needs_fixtures
@pytest.mark.parametrize("name", NO_MODEL_RECORDINGS, ids=lambda n: n[:60])
@pytest.mark.parametrize("source", [C, R])  # Responses shares the OpenAI error body
@pytest.mark.parametrize("status", [400, 404])
def test_recorded_model_not_found_keeps_the_upstream_status_for_every_client(name, source, status):
    body = _recording(name)
    for target in PROTOCOLS:
        st, out = translate_error(status, body, source, target)
        _check_model_not_found(target, st, out, status)


def test_responses_400_model_not_found_reaches_a_responses_client_as_400():
    st, out = translate_error(400, json.dumps(NO_MODEL).encode(), R, R)
    assert (st, out["error"]["code"]) == (400, "model_not_found")


@pytest.mark.parametrize("status", [400, 422, 500, 502])
def test_a_generic_status_is_kept_whatever_the_code_says(status):
    body = {"error": {"message": "slow down", "type": "server_error", "param": None,
                      "code": "rate_limit_exceeded"}}
    for target in PROTOCOLS:
        st, out = translate_error(status, json.dumps(body).encode(), C, target)
        assert st == status, target
        if target is A:
            assert out["error"]["type"] == "rate_limit_error"


V, BI = Protocol.VERTEX_ANTHROPIC, Protocol.BEDROCK_INVOKE


@pytest.mark.parametrize("source,status,body,want", [
    (A, 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
     {A: 529, C: 503, R: 503, G: 503, B: 503, V: 529, BI: 503}),
    # (a Vertex AI client knows Google's 503 UNAVAILABLE as well as Anthropic's 529: kept)
    (C, 503, {"error": {"message": "busy", "type": "server_error", "param": None, "code": None}},
     {A: 529, C: 503, R: 503, G: 503, B: 503, V: 503, BI: 503}),
    (G, 503, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}},
     {A: 529, C: 503, R: 503, G: 503, B: 503, V: 503, BI: 503}),
    (C, 429, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                        "param": None, "code": "insufficient_quota"}},
     {A: 402, C: 429, R: 429, G: 429, B: 429, V: 402, BI: 429}),
], ids=["anthropic-529", "openai-503", "gemini-503", "openai-429-insufficient_quota"])
def test_only_another_status_for_the_same_condition_changes_it(source, status, body, want):
    # Claude on Vertex AI: Anthropic's statuses, and Google's 503 as well; Bedrock: 503 for overloaded
    want = {**want, **{p: (503 if status == 503 else want[A]) for p in HOSTED - EVENTSTREAM},
            **{p: (503 if want[A] == 529 else status) for p in EVENTSTREAM}}
    for target in PROTOCOLS:
        st, _ = translate_error(status, json.dumps(body).encode(), source, target)
        assert st == want[target], target


# ----------------------------------------------------------------------------- 413 request_too_large
TOO_LARGE = [
    (C, {"error": {"message": "Request too large", "type": "invalid_request_error", "param": None,
                   "code": "request_too_large"}}),
    (R, {"error": {"message": "Request too large", "type": "invalid_request_error", "param": None,
                   "code": None}}),
    (G, {"error": {"code": 413, "message": "Request payload size exceeds the limit",
                   "status": "INVALID_ARGUMENT"}}),
    (G, "<html><title>413 Request Entity Too Large</title></html>"),
    (A, {"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"}}),
]


@pytest.mark.parametrize("source,body", TOO_LARGE, ids=["chat", "responses", "gemini", "gemini-html", "anthropic"])
def test_a_413_reaches_anthropic_clients_as_request_too_large(source, body):
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    st, out = translate_error(413, raw, source, A)
    assert (st, out["type"], out["error"]["type"]) == (413, "error", "request_too_large")
    validate_anthropic_error(st, out)
    for target in (C, R, G):
        st, out = translate_error(413, raw, source, target)
        assert st == 413, target


def test_request_too_large_only_goes_with_413():
    """A request_too_large code under another status (400) is no request_too_large type: the
    Anthropic SDK would raise by the status, so the type follows it."""
    body = {"error": {"message": "too large", "type": "invalid_request_error", "param": None,
                      "code": "request_too_large"}}
    st, out = translate_error(400, json.dumps(body).encode(), C, A)
    assert (st, out["error"]["type"]) == (400, "invalid_request_error")
    validate_anthropic_error(st, out)


# ----------------------------------------------------------------------------- the SDKs judge
class _Answer(BaseHTTPRequestHandler):
    status = 500
    body = b"{}"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback() -> Iterator[tuple[str, type[_Answer]]]:
    handler = type("Answer", (_Answer,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _anthropic_call(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="k-test", max_retries=0, timeout=10)
    client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])


def _serve(handler: type[_Answer], status: int, body: dict) -> None:
    handler.status, handler.body = status, json.dumps(body).encode()


@pytest.mark.parametrize("source,body", TOO_LARGE[:3], ids=["chat", "responses", "gemini"])
def test_anthropic_sdk_raises_request_too_large_error(loopback, source, body):
    url, handler = loopback
    _serve(handler, *translate_error(413, json.dumps(body).encode(), source, A))
    with pytest.raises(anthropic.RequestTooLargeError) as exc:
        _anthropic_call(url)
    assert exc.value.status_code == 413 and exc.value.body["error"]["type"] == "request_too_large"


def test_sdks_see_a_kept_400_model_not_found_as_a_bad_request(loopback):
    url, handler = loopback
    _serve(handler, *translate_error(400, json.dumps(NO_MODEL).encode(), R, A))
    with pytest.raises(anthropic.BadRequestError) as aexc:
        _anthropic_call(url)
    assert aexc.value.body["error"]["type"] == "not_found_error"
    _serve(handler, *translate_error(400, json.dumps(NO_MODEL).encode(), C, R))
    client = openai.OpenAI(base_url=url, api_key="k-test", max_retries=0, timeout=10)
    with pytest.raises(openai.BadRequestError) as oexc:
        client.responses.create(model="m", input="hi")
    assert oexc.value.code == "model_not_found"
