"""End to end, Claude on Vertex AI and on Amazon Bedrock InvokeModel through a real mitmdump:

- unrouted traffic to the hosts (every recording replayed by a strict loopback fake of the hosts)
  passes through byte for byte and is annotated: StopInfo, usage, cost;
- the anthropic SDK's ``AnthropicBedrock`` (dummy AWS credentials: its SigV4 signature must not
  reach the upstream) and ``AnthropicVertex`` (an access token) clients, streamed and not, routed to
  a Chat Completions and a Responses upstream.

Routing itself (base URLs and paths of these targets) is checked without a proxy at the end."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest
from anthropic import AnthropicBedrock, AnthropicVertex

from proxai_core import Protocol
from proxai_mitm.config.routes import parse_base_url
from proxai_mitm.flow.record import FlowRecord
from proxai_mitm.wire.routing import recognize, upstream_target
from tests.conftest import fixture_dir, needs_fixtures
from tests.fake_claude_hosts import Answer, FakeCloud
from tests.fake_upstream import FakeUpstream
from tests.mitm_harness import Mitmdump

from .e2e_util import (
    CHAT,
    ENV_KEY,
    ENV_KEY_VALUE,
    RESP,
    SHORT,
    UPSTREAM_MODEL,
    UPSTREAM_PATH,
    serve,
    wait_flows,
)

V, B = "vertex_anthropic", "bedrock_invoke"
TEXT = "Hello! The weather is sunny."
PROMPT = "What's the weather in Paris?"
AWS_SECRET = "dummy-aws-secret-key-must-not-leak"
GOOGLE_TOKEN = "ya29.dummy-google-token-must-not-leak"


# ============================================================================= unrouted recordings
def _recordings(folder: str) -> list[Path]:
    d = fixture_dir(folder)
    if not d.is_dir():
        return []
    out = []
    for f in sorted(d.iterdir()):
        if f.suffix not in (".json", ".sse", ".eventstream") or f.name.endswith((".request.json", ".status.json")):
            continue
        if "count-tokens" in _sibling(f, ".url.txt").read_text():
            continue
        out.append(f)
    return out


def _json_object(f: Path) -> bool:
    try:
        return isinstance(json.loads(f.read_bytes()), dict)
    except ValueError:
        return False


def _sibling(f: Path, suffix: str) -> Path:
    return f.with_name(f.name.split(".")[0] + suffix)


_CONTENT_TYPE = {".json": "application/json", ".sse": "text/event-stream",
                 ".eventstream": "application/vnd.amazon.eventstream"}


@pytest.mark.e2e
@needs_fixtures
def test_unrouted_recordings_pass_through_annotated():
    files = _recordings(V) + _recordings(B)
    assert len(files) == 31  # 10 Vertex, 21 Bedrock answers
    with FakeCloud() as cloud:
        with Mitmdump(mode=f"reverse:{cloud.url}", startup_timeout=90) as m:
            for f in files:  # (one at a time: recordings share paths)
                path = _sibling(f, ".url.txt").read_text().strip()
                cloud.on(path, Answer(200, f.read_bytes(), {"content-type": _CONTENT_TYPE[f.suffix]}))
                r = httpx2.post(m.url + path, content=_sibling(f, ".request.json").read_bytes(), timeout=30,
                                headers={"content-type": "application/json", "authorization": f"Bearer {GOOGLE_TOKEN}"})
                assert r.status_code == 200 and r.content == f.read_bytes(), f.name
            flows = wait_flows(m, len(files), timeout=20)
            recorded = m.flows_path.read_bytes()
    assert GOOGLE_TOKEN.encode() not in recorded
    for fl in flows:
        rec = FlowRecord.of(fl)
        assert rec is not None and rec.client_protocol is not None, fl.request.path
        want = V if "publishers/anthropic" in fl.request.path else B
        assert rec.client_protocol.value == want and rec.upstream_protocol.value == want
        assert rec.stop is not None and rec.stop.reason in ("end_turn", "tool_use"), fl.request.path
        assert rec.usage is not None and rec.usage.output, fl.request.path
        assert rec.upstream_model and rec.upstream_model.startswith("claude-")
        assert rec.metrics is not None and rec.metrics.cost_usd, (fl.request.path, rec.metrics)


@pytest.mark.e2e
@needs_fixtures
def test_unrouted_converse_recordings_pass_through_annotated():
    """Bedrock Converse traffic passing through unrouted: every recorded answer (of a Claude model,
    priced by genai-prices; other vendors' models on Bedrock are annotated without a price check) gets
    its StopInfo, usage and cost."""
    folder = "bedrock_converse"

    def sibling(f: Path, suffix: str) -> Path:  # (these names have dots of their own)
        return f.with_name(f.name.removesuffix(f.suffix) + suffix)

    files = [f for f in fixture_dir(folder).iterdir() if f.suffix in (".json", ".eventstream")
             and not f.name.endswith((".request.json", ".status.json", ".url.txt"))
             and sibling(f, ".url.txt").exists() and not sibling(f, ".status.json").exists()
             and "count-tokens" not in sibling(f, ".url.txt").read_text()
             and _json_object(sibling(f, ".request.json"))]  # (one recorded request was stored cut)
    assert len(files) >= 150
    with FakeCloud() as cloud:
        with Mitmdump(mode=f"reverse:{cloud.url}", startup_timeout=90) as m:
            for f in files:
                path = sibling(f, ".url.txt").read_text().strip()
                cloud.on(path, Answer(200, f.read_bytes(), {"content-type": _CONTENT_TYPE[f.suffix]}))
                r = httpx2.post(m.url + path, content=sibling(f, ".request.json").read_bytes(), timeout=30,
                                headers={"content-type": "application/json"})
                assert r.status_code == 200 and r.content == f.read_bytes(), (f.name, r.content[:300])
            flows = wait_flows(m, len(files), timeout=60)
    priced, claude = 0, []
    for fl in flows:
        rec = FlowRecord.of(fl)
        assert rec is not None and rec.client_protocol is not None, fl.request.path
        assert rec.client_protocol.value == folder and rec.upstream_protocol.value == folder
        assert rec.stop is not None and rec.stop.reason in ("end_turn", "tool_use", "max_output"), fl.request.path
        assert rec.usage is not None and rec.usage.output is not None, fl.request.path
        if "anthropic.claude" in fl.request.path:
            claude.append((fl.request.path, rec.metrics.cost_note if rec.metrics else None))
            priced += bool(rec.metrics is not None and rec.metrics.cost_usd)
    assert claude and priced == len(claude), claude  # every Claude answer has a cost


# ============================================================================= SDK clients, routed
def _routes(up: FakeUpstream) -> str:
    out = []
    for p in (CHAT, RESP):
        out.append(f'[[routes]]\nname = "to-{SHORT[p]}"\nmatch = {{ model = "to-{SHORT[p]}*" }}\n'
                   f'target = {{ protocol = "{p}", base_url = "{up.url}", api_key_env = "{ENV_KEY}", '
                   f'model = "{UPSTREAM_MODEL[p]}" }}\n')
    return "\n".join(out)


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(_routes(upstream))
    m = Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)},
                 env={ENV_KEY: ENV_KEY_VALUE}, startup_timeout=90)
    m.start()
    yield m
    m.cleanup()


def _client(kind: str, proxy: Mitmdump):
    if kind == B:
        return AnthropicBedrock(aws_access_key="AKIADUMMYDUMMYDUMMY0", aws_secret_key=AWS_SECRET,
                                aws_region="us-east-1", base_url=proxy.url, max_retries=0, timeout=30)
    return AnthropicVertex(region="us-east5", project_id="demo-project", access_token=GOOGLE_TOKEN,
                           base_url=proxy.url + "/v1", max_retries=0, timeout=30)


@pytest.mark.e2e
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("upstream_protocol", [CHAT, RESP], ids=["chat", "responses"])
@pytest.mark.parametrize("kind", [B, V], ids=["bedrock", "vertex"])
def test_claude_host_clients_on_an_openai_upstream(proxy, upstream, kind, upstream_protocol, stream):
    serve(upstream, upstream_protocol, "text", delay=0.002)
    client = _client(kind, proxy)
    model = f"to-{SHORT[upstream_protocol]}-claude"
    kw = dict(model=model, max_tokens=100, messages=[{"role": "user", "content": PROMPT}])
    if stream:
        with client.messages.stream(**kw) as s:
            text = "".join(s.text_stream)
            msg = s.get_final_message()
        assert text == TEXT
    else:
        msg = client.messages.create(**kw)
    assert "".join(b.text for b in msg.content if b.type == "text") == TEXT
    assert msg.stop_reason == "end_turn" and msg.usage.output_tokens > 0
    rec = upstream.last(UPSTREAM_PATH[upstream_protocol])
    body = rec.json()
    assert body["model"] == UPSTREAM_MODEL[upstream_protocol] and bool(body.get("stream")) is stream
    # the client's credentials (SigV4 signature, session headers, Google token) stay behind
    assert rec.header("authorization") == f"Bearer {ENV_KEY_VALUE}"
    for h in ("x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "anthropic-version"):
        assert rec.header(h) is None, h
    assert AWS_SECRET not in proxy.log and GOOGLE_TOKEN not in proxy.log
    flows = wait_flows(proxy, 1)
    fr = FlowRecord.of(flows[-1])
    assert fr is not None and fr.client_protocol.value == kind and fr.upstream_protocol.value == upstream_protocol
    assert fr.stop is not None and fr.stop.reason == "end_turn" and fr.client_model == model
    raw = proxy.flows_path.read_bytes()
    assert GOOGLE_TOKEN.encode() not in raw and b"AWS4-HMAC-SHA256 Credential" not in raw


@pytest.mark.e2e
def test_a_bedrock_stream_client_gets_event_stream_frames(proxy, upstream):
    serve(upstream, CHAT, "text", delay=0.002)
    path = "/model/to-chat-claude/invoke-with-response-stream"
    r = httpx2.post(proxy.url + path, json={"anthropic_version": "bedrock-2023-05-31", "max_tokens": 50,
                                            "messages": [{"role": "user", "content": PROMPT}]}, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.amazon.eventstream"
    from tests.sdk import chunk_events

    events = chunk_events(r.content)
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"


@pytest.fixture(scope="module")
def upstream():
    with FakeUpstream() as up:
        yield up


# ============================================================================= routing (no proxy)
def test_routing_to_the_hosts_builds_their_paths():
    ep = recognize("POST", "/v1/chat/completions")
    base = parse_base_url("https://bedrock-runtime.us-east-1.amazonaws.com")
    got = upstream_target(ep, Protocol.BEDROCK_INVOKE, base, scheme="http", host="x", port=1,
                          model_id="us.anthropic.claude-sonnet-4-5-20250929-v1:0", stream=True)
    assert got == ("https", "bedrock-runtime.us-east-1.amazonaws.com", 443,
                   "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream")
    base = parse_base_url("https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5")
    got = upstream_target(ep, Protocol.VERTEX_ANTHROPIC, base, scheme="http", host="x", port=1,
                          model_id="claude-sonnet-4-5@20250929", stream=False)
    assert got == ("https", "us-east5-aiplatform.googleapis.com", 443,
                   "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict")
    # the client's own host, its own protocol and model: the path as it wrote it
    path = "/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke"
    ep = recognize("POST", path)
    assert ep is not None and ep.protocol is Protocol.BEDROCK_INVOKE and ep.model_id.endswith("v1:0")
    assert upstream_target(ep, Protocol.BEDROCK_INVOKE, None, scheme="https", host="h", port=443)[3] == path
