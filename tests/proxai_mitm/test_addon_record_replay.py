"""Unit tests (taddons / tflow) of the record / replay / inspect wiring of the addon: what a saved
flow holds, redaction of what is stored (and only that), the replay options and redirection, native
misses, the commands and the contentview registration."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
from mitmproxy import contentviews, exceptions, http
from mitmproxy import flow as mflow
from mitmproxy import io as mio
from mitmproxy.test import taddons, tflow, tutils

from proxai_mitm.addon import make_addons
from proxai_mitm.record import FlowRecord
from proxai_mitm.replay import MISS_HEADER, miss_body
from proxai_mitm.router import REPLAY_PLACEHOLDER_KEY
from proxai_mitm.state import get_state

from .chain import Chain, chain
from .conftest import needs_codecs
from .test_addon import ANTH, BODIES, CHAT, RESP, feed, json_bytes, make_flow, respond, sse_bytes

SECRET = "sk-client-secret-123"  # the Authorization of make_flow


@pytest.fixture
def addon():
    with chain() as c:
        yield c
        c.replayer.done()


def run(tctx: Any, res: Any) -> Any:
    if res is not None and hasattr(res, "__await__"):
        return tctx.master.event_loop.run_until_complete(res)
    return res


def start_replay(addon: Chain) -> None:
    """The `running` hook (sync; it spawns the server start on mitmproxy's loop), then wait for it."""
    import asyncio

    async def go() -> None:
        addon.replayer.running()
        for _ in range(100):
            if addon.replayer.server is not None and addon.replayer.server.running:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("replay server not started")

    run(addon.tctx, go())


def stored(f: http.HTTPFlow) -> bytes:
    """The bytes `-w` writes for this flow."""
    buf = io.BytesIO()
    mio.FlowWriter(buf).add(f)
    return buf.getvalue()


def reread(f: http.HTTPFlow) -> http.HTTPFlow:
    return next(iter(mio.FlowReader(io.BytesIO(stored(f))).stream()))


# ----------------------------------------------------------------------------- what a saved flow holds
@needs_codecs
def test_translated_stream_saves_client_body_upstream_bytes_and_pacing(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.requestheaders(f)
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("content-length", "999"), ("x-request-id", "req_1")])
    addon.responseheaders(f)
    client = feed(f, sse_bytes(CHAT, "tool"), step=50)
    addon.response(f)
    g = reread(f)
    m = g.metadata["proxai"]
    assert g.response.content == client  # what the client got (mitmproxy itself keeps nothing)
    assert b"event: message_start" in client and b"tool_use" in client
    assert json.loads(m["client_request"]) == {**BODIES[ANTH], "stream": True}
    assert json.loads(g.request.content)["messages"]  # the translated (Chat) request sent upstream
    assert g.request.path == "/v1/chat/completions"
    assert m["upstream_response"] == sse_bytes(CHAT, "tool").decode()
    assert m["upstream_status"] == 200
    assert ["content-length", "999"] in m["upstream_headers"] and ["x-request-id", "req_1"] in m["upstream_headers"]
    assert "content-length" not in g.response.headers  # the client's headers
    chunks = m["upstream_chunks"]
    assert len(chunks) > 1 and sum(nb for _, nb in chunks) == len(m["upstream_response"].encode())
    assert all(b[0] >= a[0] for a, b in zip(chunks, chunks[1:]))
    assert m["stop"]["reason"] == "tool_use" and m["upstream_cut"] is None


@needs_codecs
def test_translated_json_keeps_upstream_status_and_headers(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(RESP)
    addon.request(f)
    respond(f, 529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "application/json", [("retry-after", "3")])
    addon.responseheaders(f)
    addon.response(f)
    m = reread(f).metadata["proxai"]
    assert f.response.status_code == 503 and m["upstream_status"] == 529
    assert ["retry-after", "3"] in m["upstream_headers"]


@needs_codecs
@pytest.mark.parametrize("msg, cut", [
    ("HTTP/1 protocol error: peer closed connection without sending complete message body", True),
    ("Client disconnected.", False),
])
def test_disconnect_keeps_partial_client_body_and_cut_flag(addon, msg, cut):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    data = sse_bytes(CHAT)
    out = f.response.stream(data[:400])
    f.error = mflow.Error(msg)
    addon.error(f)
    m = reread(f).metadata["proxai"]
    assert m["upstream_cut"] is cut
    assert f.response.raw_content == b"".join(out) and b"message_start" in f.response.raw_content
    assert m["stop"]["reason"] == "interrupted"


@needs_codecs
def test_passthrough_stream_keeps_wire_bytes(addon):
    import gzip

    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("content-encoding", "gzip")])
    addon.responseheaders(f)
    wire = gzip.compress(sse_bytes(ANTH, "refusal"))
    feed(f, wire, step=17)
    addon.response(f)
    assert f.response.raw_content == wire and f.response.headers["content-encoding"] == "gzip"
    assert f.response.get_content() == sse_bytes(ANTH, "refusal")
    # the client got the upstream's bytes: the record keeps no copy and reads them from the flow
    assert f.metadata["proxai"]["upstream_response"] is None
    assert FlowRecord.of(f).upstream_body(f) == sse_bytes(ANTH, "refusal")


# ----------------------------------------------------------------------------- redaction
def test_stored_flow_is_redacted_live_flow_is_not(addon):
    f = make_flow(CHAT, headers=[("cookie", "session=abc123secret")])
    addon.requestheaders(f)
    addon.request(f)
    respond(f, 200, json_bytes(CHAT), "application/json", [("set-cookie", "__cf_bm=cfsecret42; path=/")])
    addon.responseheaders(f)
    addon.response(f)
    # the live flow (what mitmproxy sends on: the response is not on the wire yet) is untouched
    assert f.request.headers["authorization"] == f"Bearer {SECRET}"
    assert f.response.headers["set-cookie"] == "__cf_bm=cfsecret42; path=/"
    data = stored(f)
    for s in (SECRET, "abc123secret", "cfsecret42"):
        assert s.encode() not in data
    g = reread(f)
    assert g.request.headers["authorization"] == "Bearer <redacted>"
    assert g.request.headers["cookie"] == "session=<redacted>"
    assert g.response.headers["set-cookie"] == "__cf_bm=<redacted>; path=/"
    assert g.metadata["proxai"]["stop"]["reason"] == "end_turn"  # the rest is stored as it was
    assert g.response.content == f.response.content
    # a copy (mitmproxy's "duplicate", client replay) has the live request: a replay still authenticates
    assert f.copy().request.headers["authorization"] == f"Bearer {SECRET}"


def test_redaction_covers_non_llm_flows_urls_and_errors(addon):
    req = tutils.treq(method=b"GET", path=b"/v1beta/models?key=AIzaSyD-0123456789abcdefghijklmnopqrstu",
                      headers=http.Headers([(b"x-api-key", b"my-gateway-key-000")]))
    f = tflow.tflow(req=req)
    addon.requestheaders(f)
    f.error = mflow.Error("Client disconnected.")
    addon.error(f)
    data = stored(f)
    assert b"AIzaSyD-0123456789" not in data and b"my-gateway-key-000" not in data
    assert f.request.path.endswith("abcdefghijklmnopqrstu")  # live


def test_redaction_off_stores_everything(addon):
    addon.configure(proxai_redact=False)
    f = make_flow(CHAT)
    addon.requestheaders(f)
    assert SECRET.encode() in stored(f)


# ----------------------------------------------------------------------------- replay options
def test_replay_bad_path_is_a_loud_error(addon, tmp_path, caplog):
    caplog.set_level(logging.ERROR)
    with pytest.raises(exceptions.OptionsError):
        addon.configure(proxai_replay=str(tmp_path / "nope.mitm"))
    assert "proxai: invalid option proxai_replay:" in caplog.text and "does not exist" in caplog.text
    bad = tmp_path / "bad.mitm"
    bad.write_bytes(b"this is not a flow file")
    with pytest.raises(exceptions.OptionsError):
        addon.configure(proxai_replay=str(bad))
    assert addon.replayer.index is None


def test_replay_miss_value_is_validated(addon, caplog):
    caplog.set_level(logging.ERROR)
    with pytest.raises(exceptions.OptionsError):
        addon.configure(proxai_replay_miss="ignore")
    assert "proxai: invalid option proxai_replay_miss: must be one of error, forward" in caplog.text


def _recording(tmp_path, proto: str = ANTH, scenario: str = "text") -> str:
    """A .mitm file with one recorded upstream exchange of ``proto`` (request = BODIES[proto])."""
    f = make_flow(proto, stream=True)
    respond(f, 200, sse_bytes(proto, scenario), "text/event-stream")
    path = tmp_path / "rec.mitm"
    with open(path, "wb") as fh:
        mio.FlowWriter(fh).add(f)
    return str(path)


def test_replay_sets_lazy_connections(addon, tmp_path, caplog):
    from mitmproxy import ctx

    ctx.options.add_option("connection_strategy", str, "eager", "normally declared by proxyserver")
    caplog.set_level(logging.INFO)
    addon.configure(proxai_replay=_recording(tmp_path))
    assert ctx.options.connection_strategy == "lazy"
    assert "connection_strategy set to lazy (replay answers from a loopback server)" in caplog.text
    assert "proxai: replay 1 recording(s)" in caplog.text


# ----------------------------------------------------------------------------- replay redirection
@needs_codecs
def test_upstream_request_goes_to_the_replay_server(addon, tmp_path):
    addon.configure(proxai_target=ANTH, proxai_replay=_recording(tmp_path))
    start_replay(addon)
    server = addon.replayer.server
    assert server is not None and server.running
    f = make_flow(CHAT, host="api.example.com", headers=[("host", "api.example.com")])
    assert run(addon.tctx, addon.request(f)) is None
    assert (f.request.scheme, f.request.host, f.request.port) == ("http", "127.0.0.1", server.port)
    assert f.request.path == "/v1/messages" and f.request.host_header == "api.example.com"
    assert get_state(f).replay["upstream_url"] == "https://api.example.com/v1/messages"
    addon.replayer.done()
    assert addon.replayer.server is None and not server.running


def test_lifecycle_hooks_are_sync_and_replay_can_be_switched_off(addon, tmp_path):
    """A script reload calls `running` / `done` synchronously (async handlers would raise there)."""

    addon.configure(proxai_replay=_recording(tmp_path))
    start_replay(addon)
    server = addon.replayer.server
    addon.replayer.running()
    addon.configure(proxai_replay="")
    assert addon.replayer.index is None and addon.replayer.server is None and not server.running
    addon.replayer.done()


@needs_codecs
def test_replay_server_started_on_demand(addon, tmp_path):
    addon.configure(proxai_replay=_recording(tmp_path))
    f = make_flow(ANTH)
    run(addon.tctx, addon.request(f))  # no `running` yet: the request hook starts the server
    assert addon.replayer.server is not None and f.request.port == addon.replayer.server.port


@needs_codecs
@pytest.mark.parametrize("client", [CHAT, RESP, ANTH])
def test_replay_miss_is_the_clients_native_404(addon, tmp_path, client):
    addon.configure(proxai_target=ANTH, proxai_replay=_recording(tmp_path))
    start_replay(addon)
    f = make_flow(client, stream=True)
    run(addon.tctx, addon.request(f))
    body = json.dumps(miss_body("POST", "/v1/messages", "POST /v1/messages abc")).encode()
    respond(f, 404, body, "application/json", [(MISS_HEADER, "miss")])
    addon.responseheaders(f)
    addon.response(f)
    assert f.response.status_code == 404
    out = json.loads(f.response.content)
    err = out["error"]
    assert "proxai replay: no recording matches POST /v1/messages" in err["message"]
    if client == ANTH:
        assert out["type"] == "error"
    m = f.metadata["proxai"]
    assert m["replay"]["result"] == "miss" and m["replay"]["key"] == "POST /v1/messages abc"
    assert m["stop"]["reason"] == "interrupted"


@needs_codecs
def test_replay_miss_forward_leaves_the_request_alone(addon, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    addon.configure(proxai_replay=_recording(tmp_path), proxai_replay_miss="forward")
    start_replay(addon)
    f = make_flow(ANTH, body={**BODIES[ANTH], "max_tokens": 65})  # not recorded
    run(addon.tctx, addon.request(f))
    assert f.request.host == "api.example.com"
    assert get_state(f).replay["result"] == "forwarded"
    assert "forwarded upstream" in caplog.text
    respond(f, 200, json_bytes(ANTH), "application/json")  # the real upstream's answer
    addon.responseheaders(f)
    addon.response(f)
    assert f.metadata["proxai"]["replay"]["result"] == "forwarded"
    assert f.metadata["proxai"]["stop"]["reason"] == "end_turn"
    g = make_flow(ANTH, stream=False)  # recorded (`stream` does not count)
    run(addon.tctx, addon.request(g))
    assert g.request.host == "127.0.0.1"


def test_replay_needs_no_upstream_key(addon, tmp_path, monkeypatch):
    monkeypatch.delenv("PROXAI_UNSET_KEY", raising=False)
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                         proxai_key_env="PROXAI_UNSET_KEY", proxai_replay=_recording(tmp_path))
    start_replay(addon)
    f = make_flow(CHAT, host="api.openai.com")
    run(addon.tctx, addon.request(f))
    assert f.response is None  # no 401: nothing leaves the machine
    assert f.request.headers["x-api-key"] == REPLAY_PLACEHOLDER_KEY
    assert SECRET not in str(f.request.headers)


# ----------------------------------------------------------------------------- inspect
def test_contentview_registered_on_load(addon):
    assert contentviews.registry["llm"].name == "LLM"


def test_commands(tmp_path):
    """The commands as the console / mitmweb run them: flow specs resolved by mitmproxy's view."""
    from mitmproxy.addons import view

    addons, v = make_addons(), view.View()
    with taddons.context(*addons, v) as tctx:
        _commands(Chain(tctx, addons), v, tctx, tmp_path)


def _commands(addon: Chain, v: Any, tctx: Any, tmp_path: Any) -> None:
    assert {"proxai.report", "proxai.export"} <= set(tctx.master.commands.commands)
    f1 = make_flow(ANTH)
    respond(f1, 200, json_bytes(ANTH, "refusal"), "application/json")
    f2 = make_flow(CHAT)
    respond(f2, 200, json_bytes(CHAT, "max"), "application/json")
    other = tflow.tflow(resp=True)
    v.add([f1, f2, other])
    table = tctx.command(addon.commands.report, "@all")
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["time", "client", "→"]
    assert "refusal" in lines[2] and "cyber" in lines[2] and "max_output" in lines[3]
    assert lines[-1] == "2 exchange(s): max_output 1, refusal 1"
    out = tmp_path / "x.jsonl"
    assert tctx.command(addon.commands.export, "@all", str(out)) == f"exported 2 LLM exchange(s) to {out}"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["stop"]["reason"] for r in rows] == ["refusal", "max_output"]
    assert tctx.command(addon.commands.export, "~u chat/completions", str(out)) == f"exported 1 LLM exchange(s) to {out}"
    assert tctx.master.commands.execute("proxai.report \"~u /v1/messages\"").splitlines()[-1] == \
        "1 exchange(s): refusal 1"
    with pytest.raises(exceptions.CommandError):
        tctx.command(addon.commands.export, "@all", str(tmp_path / "no" / "such" / "dir.jsonl"))


@pytest.mark.parametrize("name", ["tool-loop", "refusal-chat", "refusal-responses", "refusal-anthropic",
                                  "max-output", "cut-stream", "upstream-error"])
def test_llm_view_renders_the_shipped_flows(name):
    """Every request and response body of flows/ through the view, as mitmproxy calls it."""
    from pathlib import Path

    from proxai_mitm.contentview import LLMContentview

    view = LLMContentview()
    path = Path(__file__).resolve().parents[2] / "flows" / f"{name}.mitm"
    flows = list(mio.FlowReader(open(path, "rb")).stream())  # noqa: SIM115
    assert flows
    for f in flows:
        for msg in (f.request, f.response):
            data = msg.get_content(strict=False)
            md = contentviews.Metadata(flow=f, http_message=msg, content_type=msg.headers.get("content-type"))
            assert view.render_priority(data, md) > 1  # auto-selected
            out = view.prettify(data, md)
            assert "[LLM view: could not" not in out, (name, out)
            if msg is f.response and f.error is None:
                stop = f.metadata["proxai"]["stop"]["reason"]
                assert "stop: " in out or "error" in out.lower(), out
                assert stop in out or f.response.status_code >= 400, (stop, out)

