"""otel.py: spans over OTLP/HTTP to a local receiver (protobuf decoded with opentelemetry-proto)."""

from __future__ import annotations

import gc
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is part of the dev environment")
from mitmproxy import exceptions  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from proxai_mitm.reporting.otel import provider_name  # noqa: E402

from ..helpers import ANTH, CHAT, json_bytes, make_flow, respond, sse_bytes  # noqa: E402


class Receiver:
    """A minimal OTLP/HTTP traces receiver on 127.0.0.1."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                outer.requests.append(req)
                outer.paths.append(self.path)
                outer.content_types.append(self.headers.get("content-type", ""))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def spans(self) -> list:
        return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def resources(self) -> list[dict]:
        return [_attrs(rs.resource.attributes) for r in self.requests for rs in r.resource_spans]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind)


def _attrs(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _otel(addon):
    return next(a for a in addon.addons if type(a).__name__ == "OTelExport")


def test_one_span_per_llm_flow_with_genai_attributes(addon, receiver):
    addon.configure(proxai_target=ANTH, proxai_otel_endpoint=receiver.url, proxai_otel_service="proxy-a")
    # a translated stream
    f = make_flow(CHAT, stream=True)
    f.request.timestamp_start = time.time()
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    f.response.timestamp_start = time.time()
    addon.responseheaders(f)
    for i in range(0, len(data := sse_bytes(ANTH, "text")), 40):
        f.response.stream(data[i:i + 40])
    f.response.stream(b"")
    f.response.timestamp_end = time.time()
    addon.response(f)
    # an upstream error
    g = make_flow(CHAT)
    g.request.timestamp_start = time.time()
    addon.request(g)
    respond(g, 529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "application/json")
    addon.responseheaders(g)
    addon.response(g)
    _otel(addon).flush()
    spans = receiver.spans()
    assert len(spans) == 2 and receiver.paths == ["/v1/traces"] * len(receiver.paths)
    assert all(ct == "application/x-protobuf" for ct in receiver.content_types)
    assert receiver.resources()[0]["service.name"] == "proxy-a"
    assert [x.name for x in spans] == ["chat gpt-4o", "chat gpt-4o"]
    s, err = sorted(spans, key=lambda x: "error.type" in _attrs(x.attributes))
    a = _attrs(s.attributes)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.request.model"] == "gpt-4o"
    assert a["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert a["gen_ai.usage.input_tokens"] == 21 and a["gen_ai.usage.output_tokens"] == 9
    assert a["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert a["server.address"] == "api.example.com" and a["server.port"] == 443
    assert "error.type" not in a and a["proxai.ttft_ms"] > 0 and a["proxai.cost_usd"] > 0
    assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a  # content is opt-in
    assert s.kind == 3  # SPAN_KIND_CLIENT
    assert s.start_time_unix_nano == int(f.request.timestamp_start * 1e9)
    assert s.end_time_unix_nano > s.start_time_unix_nano
    e = _attrs(err.attributes)
    assert e["error.type"] == "529" and err.status.code == 2  # STATUS_CODE_ERROR
    assert e["gen_ai.response.finish_reasons"]


def test_content_only_when_opted_in(addon, receiver):
    addon.configure(proxai_otel_endpoint=receiver.url, proxai_otel_content=True)
    f = make_flow(ANTH)
    f.request.timestamp_start = time.time()
    addon.request(f)
    respond(f, 200, json_bytes(ANTH, "tool"), "application/json")
    addon.responseheaders(f)
    addon.response(f)
    _otel(addon).flush()
    (s,) = receiver.spans()
    a = _attrs(s.attributes)
    msgs = json.loads(a["gen_ai.input.messages"])
    assert msgs[0]["role"] == "user" and msgs[0]["parts"][0] == {"type": "text", "content": "hi"}
    out = json.loads(a["gen_ai.output.messages"])
    assert out[0]["role"] == "assistant" and any(p["type"] == "tool_call" for p in out[0]["parts"])
    assert out[0]["finish_reason"] == "tool_use"


def test_off_by_default_and_bad_endpoint(addon):
    otel = _otel(addon)
    assert otel._pool is None and otel.response is None and otel.error is None  # no per-flow dispatch when off
    f = make_flow(CHAT)
    addon.request(f)
    respond(f, 200, json_bytes(CHAT), "application/json")
    addon.response(f)  # nothing to send, nothing fails
    with pytest.raises(exceptions.OptionsError, match="proxai_otel_endpoint"):
        addon.configure(proxai_otel_endpoint="127.0.0.1:4318")


def test_provider_names():
    assert provider_name("api.anthropic.com", "anthropic_messages") == "anthropic"
    assert provider_name("api.openai.com", "openai_chat_completions") == "openai"
    assert provider_name("x.openai.azure.com", "openai_chat_completions") == "azure.ai.openai"
    assert provider_name("127.0.0.1", "anthropic_messages") == "anthropic"
    assert provider_name("127.0.0.1", "openai_responses", "openai") == "openai"


# ----------------------------------------------------------------------------- row 4: redaction
CLIENT_BEARER = "client-bearer-7781-qwertyuiop"  # no known key shape: only the flow's own secret rule finds it
GEMINI_KEY = "client-gemini-key-0123456789"
VERTEX_TOKEN = "ya29.vertex-access-token-5566"
CONFIGURED_KEY = "configured-upstream-key-0042xyz"
SHAPED = ("sk-proj-AbCdEf0123456789abcdef0123", "AKIAIOSFODNN7EXAMPLE", "sk-ant-api03-Zz9Yy8Xx7Ww6Vv5Uu4Tt3")


def _anth_echo(text: str) -> bytes:
    return json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                       "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                       "usage": {"input_tokens": 5, "output_tokens": 3}}).encode()


def _through(addon, f, echoed: str) -> None:
    f.request.timestamp_start = time.time()
    addon.request(f)
    respond(f, 200, _anth_echo(f"you said {echoed}; my key is {CONFIGURED_KEY}"), "application/json")
    addon.responseheaders(f)
    addon.response(f)


def test_content_redacted_like_recordings(addon, receiver, monkeypatch):
    """Prompts and answers carrying the client's own key (Bearer, Gemini ?key=, Vertex bearer), the
    configured (injected) key and known key shapes reach the collector redacted."""
    monkeypatch.setenv("PROXAI_OTEL_TEST_KEY", CONFIGURED_KEY)
    addon.configure(proxai_target=ANTH, proxai_key_env="PROXAI_OTEL_TEST_KEY", proxai_otel_endpoint=receiver.url,
                    proxai_otel_content=True)
    shaped = " ".join(SHAPED)
    chat = make_flow(CHAT,
                     body={"model": "gpt-4o", "messages": [{"role": "system", "content": f"key {CLIENT_BEARER}"},
                                                           {"role": "user", "content": f"use {shaped}"}]})

    def gem(own: str) -> dict:
        return {"contents": [{"role": "user", "parts": [{"text": f"my key {own} and {shaped}"}]}]}

    gemini = make_flow(CHAT, body=gem(GEMINI_KEY),
                       path=f"/v1beta/models/gemini-2.5-flash:generateContent?key={GEMINI_KEY}")
    gemini.request.headers.pop("authorization")
    vertex = make_flow(CHAT, body=gem(VERTEX_TOKEN),
                       path="/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-flash:generateContent")
    chat.request.headers["authorization"] = f"Bearer {CLIENT_BEARER}"
    vertex.request.headers["authorization"] = f"Bearer {VERTEX_TOKEN}"
    owns = {id(chat): CLIENT_BEARER, id(gemini): GEMINI_KEY, id(vertex): VERTEX_TOKEN}
    for f in (chat, gemini, vertex):
        _through(addon, f, f"{owns[id(f)]} {shaped}")
    _otel(addon).flush()
    spans = receiver.spans()
    assert len(spans) == 3
    texts = [json.dumps(_attrs(s.attributes)) for s in spans]
    for text in texts:
        a = json.loads(text)
        assert "gen_ai.input.messages" in a and "gen_ai.output.messages" in a, a.keys()
        assert "<redacted>" in a["gen_ai.input.messages"] and "<redacted>" in a["gen_ai.output.messages"]
        assert "you said" in a["gen_ai.output.messages"]  # the conversation itself is still there
        leaked = [s for s in (*owns.values(), CONFIGURED_KEY, *SHAPED) if s in text or s[8:] in text]
        assert not leaked, (leaked, text)


def test_content_not_redacted_when_recordings_are_not(addon, receiver):
    """proxai_redact=false (recordings keep credentials) keeps the spans' content as it was."""
    addon.configure(proxai_otel_endpoint=receiver.url, proxai_otel_content=True, proxai_redact=False)
    f = make_flow(ANTH, body={"model": "claude-x", "max_tokens": 8,
                              "messages": [{"role": "user", "content": f"use {SHAPED[0]}"}]})
    _through(addon, f, SHAPED[0])
    _otel(addon).flush()
    (s,) = receiver.spans()
    assert SHAPED[0] in _attrs(s.attributes)["gen_ai.input.messages"]


def test_content_omitted_while_the_collector_is_backed_up(addon, receiver):
    """The conversations held by spans not yet sent are capped (test_otel_hostile runs a real
    hanging collector): beyond the budget a span goes without its conversation, marked; a sent span
    gives its share back."""
    addon.configure(proxai_otel_endpoint=receiver.url, proxai_otel_content=True)
    otel = _otel(addon)
    budget = otel._budget
    budget.held = budget.limit  # spans not yet taken by the collector fill the budget
    _through(addon, make_flow(ANTH), "x")
    otel.flush()
    budget.held = 0  # they were taken
    _through(addon, make_flow(ANTH), "y")
    otel._pool.submit(lambda: None).result(10)
    assert budget.held > 0  # the second span holds its conversation until it is sent
    otel.flush()
    gc.collect()
    assert budget.held == 0
    first, second = (_attrs(s.attributes) for s in receiver.spans())
    assert first["proxai.content_omitted"] == "backlog" and "gen_ai.input.messages" not in first
    assert "gen_ai.input.messages" in second and "proxai.content_omitted" not in second


def test_spans_carry_the_session_as_conversation_id(addon, receiver):
    """gen_ai.conversation.id: the client's session header (as its digest, a value the redaction of
    spans leaves alone) or the derived id; the same for every turn of a session."""
    addon.configure(proxai_target=ANTH, proxai_otel_endpoint=receiver.url)
    sid = "5f0c9a8e-2d4b-4e1a-9c3f-7b6d1e2a4c80"
    flows = [make_flow(CHAT, headers=[("session_id", sid)]), make_flow(CHAT, headers=[("session_id", sid)]),
             make_flow(CHAT)]
    for f in flows:
        addon.requestheaders(f)
        addon.request(f)
        respond(f, 200, json_bytes(ANTH), "application/json")
        addon.responseheaders(f)
        addon.response(f)
    _otel(addon).flush()
    ids = [_attrs(s.attributes)["gen_ai.conversation.id"] for s in receiver.spans()]
    recs = [f.metadata["proxai"]["session"] for f in flows]
    assert ids == [r["id"] for r in recs] and ids[0] == ids[1] != ids[2]
    assert [r["source"] for r in recs] == ["header:session_id", "header:session_id", "prefix"]
    assert sid not in json.dumps(ids)
