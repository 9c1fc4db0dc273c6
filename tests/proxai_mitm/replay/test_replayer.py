"""replayer.py: replay options, redirection to the replay server, native misses."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from mitmproxy import exceptions
from mitmproxy import io as mio

from proxai_mitm.addons.router import REPLAY_PLACEHOLDER_KEY
from proxai_mitm.flow.state import flow_state
from proxai_mitm.replay.index import MISS_HEADER, miss_body

from ..chain import Chain
from ..helpers import ANTH, BODIES, CHAT, RESP, json_bytes, make_flow, respond, sse_bytes

SECRET = "sk-client-secret-123"  # the Authorization of make_flow


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


def _recording(tmp_path, proto: str = ANTH, scenario: str = "text") -> str:
    """A .mitm file with one recorded upstream exchange of ``proto`` (request = BODIES[proto])."""
    f = make_flow(proto, stream=True)
    respond(f, 200, sse_bytes(proto, scenario), "text/event-stream")
    path = tmp_path / "rec.mitm"
    with open(path, "wb") as fh:
        mio.FlowWriter(fh).add(f)
    return str(path)


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


def test_replay_sets_lazy_connections(addon, tmp_path, caplog):
    from mitmproxy import ctx

    ctx.options.add_option("connection_strategy", str, "eager", "normally declared by proxyserver")
    caplog.set_level(logging.INFO)
    addon.configure(proxai_replay=_recording(tmp_path))
    assert ctx.options.connection_strategy == "lazy"
    assert "connection_strategy set to lazy (replay answers from a loopback server)" in caplog.text
    assert "proxai: replay 1 recording(s)" in caplog.text


def test_upstream_request_goes_to_the_replay_server(addon, tmp_path):
    addon.configure(proxai_target=ANTH, proxai_replay=_recording(tmp_path))
    start_replay(addon)
    server = addon.replayer.server
    assert server is not None and server.running
    f = make_flow(CHAT, host="api.example.com", headers=[("host", "api.example.com")])
    assert run(addon.tctx, addon.request(f)) is None
    assert (f.request.scheme, f.request.host, f.request.port) == ("http", "127.0.0.1", server.port)
    assert f.request.path == "/v1/messages" and f.request.host_header == "api.example.com"
    assert flow_state(f).replay["upstream_url"] == "https://api.example.com/v1/messages"
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


def test_replay_server_started_on_demand(addon, tmp_path):
    addon.configure(proxai_replay=_recording(tmp_path))
    f = make_flow(ANTH)
    run(addon.tctx, addon.request(f))  # no `running` yet: the request hook starts the server
    assert addon.replayer.server is not None and f.request.port == addon.replayer.server.port


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
    assert m["stop"]["reason"] == "rejected"  # nothing was generated; retrying unchanged misses again


def test_replay_miss_forward_leaves_the_request_alone(addon, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    addon.configure(proxai_replay=_recording(tmp_path), proxai_replay_miss="forward")
    start_replay(addon)
    f = make_flow(ANTH, body={**BODIES[ANTH], "max_tokens": 65})  # not recorded
    run(addon.tctx, addon.request(f))
    assert f.request.host == "api.example.com"
    assert flow_state(f).replay["result"] == "forwarded"
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


def test_damaged_recording_replays_its_intact_flows_and_says_where(addon, tmp_path, caplog):
    from pathlib import Path

    path = Path(_recording(tmp_path))
    data = path.read_bytes()
    path.write_bytes(data + data[: len(data) // 2])  # a second flow cut in the middle
    caplog.set_level(logging.INFO)
    addon.configure(proxai_replay=str(path))
    assert len(addon.replayer.index) == 1
    assert f"damaged at byte {len(data)}" in caplog.text and "Traceback" not in caplog.text


def test_flow_hooks_only_while_replaying(addon, tmp_path):
    """mitmproxy skips a hook that is None: without replay, flows pay no dispatch for it."""
    assert addon.replayer.request is None and addon.replayer.response is None
    addon.configure(proxai_replay=_recording(tmp_path))
    assert callable(addon.replayer.request) and callable(addon.replayer.responseheaders)
    addon.configure(proxai_replay="")
    assert addon.replayer.request is None
