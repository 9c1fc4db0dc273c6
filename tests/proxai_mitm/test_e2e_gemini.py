"""End to end, Gemini through a real mitmdump (reverse mode) in front of the fake upstream: the
google-genai SDK against each other protocol (streaming and not, a tool loop), the openai and
anthropic SDKs against a Gemini upstream (both stream framings on the wire), the ``key=`` query
credential moved and never forwarded or recorded, the JSON-array stream framing, and the Vertex AI
path form."""

from __future__ import annotations

import json

import httpx2
import pytest
from google import genai
from google.genai import types

from proxai_mitm.flow.record import FlowRecord
from tests.fake_upstream import GEMINI_MODEL, RECORDED, FakeUpstream, Reply
from tests.mitm_harness import Mitmdump

from .e2e_util import (
    ANTH,
    CHAT,
    CLIENT_KEY,
    ENV_KEY,
    ENV_KEY_VALUE,
    PROTOCOLS,
    RESP,
    SHORT,
    UPSTREAM_MODEL,
    UPSTREAM_PATH,
    call,
    check,
    serve,
    wait_flows,
)

pytestmark = pytest.mark.e2e

GEMINI = "gemini_generate_content"
TEXT = "Hello! The weather is sunny."
PROMPT = "What's the weather in Paris?"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                  "required": ["city"]}
GEMINI_GENERATE = f"/v1beta/models/{GEMINI_MODEL}:generateContent"
GEMINI_STREAM = f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent"


def _routes(up: FakeUpstream) -> str:
    out = []
    for p, model in [*((p, UPSTREAM_MODEL[p]) for p in PROTOCOLS), (GEMINI, GEMINI_MODEL)]:
        short = "gemini" if p == GEMINI else SHORT[p]
        out.append(f'[[routes]]\nname = "to-{short}"\nmatch = {{ model = "to-{short}*" }}\n'
                   f'target = {{ protocol = "{p}", base_url = "{up.url}", api_key_env = "{ENV_KEY}", '
                   f'model = "{model}" }}\n')
    return "\n".join(out)


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(_routes(upstream))
    m = Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)},
                 env={ENV_KEY: ENV_KEY_VALUE})
    m.start()
    yield m
    m.cleanup()


@pytest.fixture(scope="module")
def gclient(proxy):
    return genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=proxy.url, timeout=30_000))


def _config(tools: bool) -> types.GenerateContentConfig:
    if not tools:
        return types.GenerateContentConfig(max_output_tokens=256)
    return types.GenerateContentConfig(
        max_output_tokens=256,
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
            name="get_weather", description="Weather", parameters_json_schema=WEATHER_SCHEMA)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


def _generate(gclient, model: str, contents, stream: bool, tools: bool = False):
    """(text, function calls, finish reason) as the SDK parsed them."""
    cfg = _config(tools)
    if not stream:
        r = gclient.models.generate_content(model=model, contents=contents, config=cfg)
        return (r.text or "", [(c.name, c.args, c.id) for c in r.function_calls or []],
                r.candidates[0].finish_reason)
    text, calls, finish = "", [], None
    for chunk in gclient.models.generate_content_stream(model=model, contents=contents, config=cfg):
        text += "".join(p.text for c in chunk.candidates or [] for p in (c.content.parts if c.content else None) or []
                        if p.text and not p.thought)
        calls += [(c.name, c.args, c.id) for c in chunk.function_calls or []]
        if chunk.candidates and chunk.candidates[0].finish_reason:
            finish = chunk.candidates[0].finish_reason
    return text, calls, finish


def _serve_loop(up: FakeUpstream, upstream: str) -> None:
    """The upstream answers a tool call first, then text (the second turn of the loop)."""
    path = UPSTREAM_PATH[upstream]
    for stream, kind in ((False, "json"), (True, "sse")):
        text, tool = RECORDED[upstream]["text"][kind], RECORDED[upstream]["tool"][kind]
        make = Reply.json if kind == "json" else Reply.sse
        up.on(path, make(text), stream=stream)
        up.on(path, make(tool, times=1), stream=stream)


def get_path(flow) -> str:
    return flow.request.path.partition("?")[0]


def _no_client_key(rec) -> None:
    assert CLIENT_KEY not in json.dumps(rec.headers) and CLIENT_KEY not in rec.path
    assert CLIENT_KEY not in rec.body.decode("utf-8", "replace")


# ----------------------------------------------------------------------------- google-genai → others
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("upstream_proto", PROTOCOLS)
def test_genai_text(proxy, up, gclient, upstream_proto, stream):
    serve(up, upstream_proto, "text")
    text, calls, finish = _generate(gclient, f"to-{SHORT[upstream_proto]}-x", PROMPT, stream)
    assert (text, calls, finish) == (TEXT, [], types.FinishReason.STOP)
    rec = up.last(UPSTREAM_PATH[upstream_proto])
    _no_client_key(rec)
    body = rec.json()
    assert body["model"] == UPSTREAM_MODEL[upstream_proto] and bool(body.get("stream")) is stream


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("upstream_proto", PROTOCOLS)
def test_genai_tool_loop(proxy, up, gclient, upstream_proto, stream):
    _serve_loop(up, upstream_proto)
    model = f"to-{SHORT[upstream_proto]}-x"
    user = types.Content(role="user", parts=[types.Part(text=PROMPT)])
    text, calls, finish = _generate(gclient, model, [user], stream, tools=True)
    assert [(n, a) for n, a, _ in calls] == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    assert text == "" and finish == types.FinishReason.STOP
    name, args, call_id = calls[0]
    call_part = types.Part(function_call=types.FunctionCall(name=name, args=args, id=call_id))
    result = types.Part(function_response=types.FunctionResponse(name=name, id=call_id,
                                                                 response={"temperature": 21}))
    turn2 = [user, types.Content(role="model", parts=[call_part]), types.Content(role="user", parts=[result])]
    text, calls, finish = _generate(gclient, model, turn2, stream, tools=True)
    assert (text, calls, finish) == (TEXT, [], types.FinishReason.STOP)
    second = up.last(UPSTREAM_PATH[upstream_proto])
    _no_client_key(second)
    sent = second.body.decode()
    # the tool result reached the upstream in its own protocol, paired with the upstream's call id
    upstream_id = {CHAT: "call_Wx3kq8", RESP: "call_Wx3kq8", ANTH: "toolu_01A09q90qw90lq917835lq9"}[upstream_proto]
    assert upstream_id in sent and "21" in sent


# ----------------------------------------------------------------------------- openai / anthropic → Gemini
@pytest.mark.parametrize("scenario", ["text", "tool"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("client", PROTOCOLS)
def test_sdks_on_a_gemini_upstream(proxy, up, clients, client, stream, scenario):
    rec = RECORDED[GEMINI][scenario]
    up.on(GEMINI_GENERATE, Reply.json(rec["json"]))
    up.on(GEMINI_STREAM, Reply.gemini_stream(rec["sse"], delay=0.005))
    s = call(clients, client, "to-gemini-x", scenario, stream)
    check(s, client, scenario)
    got = up.last(GEMINI_STREAM if stream else GEMINI_GENERATE)
    assert got.header("x-goog-api-key") == ENV_KEY_VALUE
    _no_client_key(got)
    body = got.json()
    assert "model" not in body and "stream" not in body and body["contents"]
    if stream:
        assert "alt=sse" in got.path  # the upstream is asked for SSE


def test_gemini_upstream_streaming_a_json_array_is_translated(proxy, up, clients):
    """A Gemini upstream that answers a stream as one JSON array (no alt=sse honoured)."""
    rec = RECORDED[GEMINI]["text"]
    chunks = [json.dumps(c) for c in rec["sse"]]
    parts = [("[" if i == 0 else ",\r\n").encode() + c.encode() for i, c in enumerate(chunks)] + [b"]"]
    up.on(GEMINI_STREAM, Reply(events=parts, headers=[("content-type", "application/json")], delay=0.005))
    s = call(clients, ANTH, "to-gemini-x", "text", True)
    check(s, ANTH, "text")


# ----------------------------------------------------------------------------- credentials, framing, Vertex
def test_key_query_parameter_moved_stripped_and_never_recorded(proxy, up):
    serve(up, ANTH, "text")
    r = httpx2.post(f"{proxy.url}/v1beta/models/to-anthropic-x:generateContent?key={CLIENT_KEY}",
                    json={"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["candidates"][0]["content"]["parts"][0]["text"] == TEXT
    rec = up.last(UPSTREAM_PATH[ANTH])
    _no_client_key(rec)
    assert rec.path == UPSTREAM_PATH[ANTH] and rec.header("x-api-key") == ENV_KEY_VALUE
    flows = wait_flows(proxy, 1)
    # recorded and annotated from the URL: the client's model and stream flag, the stop
    rec = FlowRecord.of(next(f for f in reversed(flows) if "to-anthropic-x:generateContent" in f.request.path
                             or get_path(f) == UPSTREAM_PATH[ANTH]))
    assert rec is not None and rec.client_protocol.value == GEMINI and rec.upstream_protocol.value == ANTH
    assert rec.client_model == "to-anthropic-x" and rec.stream is False
    assert rec.stop is not None and rec.stop.reason == "end_turn"
    assert CLIENT_KEY.encode() not in proxy.flows_path.read_bytes()  # the recording: redacted
    assert CLIENT_KEY not in proxy.log


def test_json_array_stream_for_a_client_without_alt_sse(proxy, up):
    serve(up, CHAT, "text", delay=0.005)
    with httpx2.stream("POST", f"{proxy.url}/v1beta/models/to-chat-x:streamGenerateContent",
                       headers={"x-goog-api-key": CLIENT_KEY},
                       json={"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}, timeout=30) as r:
        assert r.status_code == 200
        assert "json" in r.headers["content-type"]
        raw = b"".join(r.iter_bytes())
    arr = json.loads(raw)
    assert isinstance(arr, list) and len(arr) > 1
    text = "".join(p.get("text", "") for c in arr for cand in c.get("candidates", [])
                   for p in cand.get("content", {}).get("parts", []))
    assert text == TEXT and arr[-1]["candidates"][0]["finishReason"] == "STOP"
    assert up.last(UPSTREAM_PATH[CHAT]).json()["stream"] is True


def test_vertex_path_form(proxy, up):
    serve(up, RESP, "text", delay=0.005)
    path = "/v1/projects/demo-project/locations/us-central1/publishers/google/models/to-responses-x"
    r = httpx2.post(f"{proxy.url}{path}:streamGenerateContent?alt=sse", headers={"authorization": f"Bearer {CLIENT_KEY}"},
                    json={"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}, timeout=30)
    assert r.status_code == 200 and "event-stream" in r.headers["content-type"]
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    text = "".join(p.get("text", "") for e in events for cand in e.get("candidates", [])
                   for p in cand.get("content", {}).get("parts", []))
    assert text == TEXT
    rec = up.last(UPSTREAM_PATH[RESP])
    _no_client_key(rec)
    assert rec.json()["model"] == UPSTREAM_MODEL[RESP]
