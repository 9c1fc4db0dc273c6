"""otel.py: spans over OTLP/HTTP to a local receiver (protobuf decoded with opentelemetry-proto)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is part of the dev environment")
from mitmproxy import exceptions  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from proxai_mitm.otel import provider_name  # noqa: E402

from .conftest import needs_codecs  # noqa: E402
from .helpers import ANTH, CHAT, json_bytes, make_flow, respond, sse_bytes  # noqa: E402


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


@needs_codecs
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


@needs_codecs
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
