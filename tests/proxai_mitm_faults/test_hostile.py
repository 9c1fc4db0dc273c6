"""Hostile and heavy use through a real mitmdump with the addon (loopback only): credentials never
cross to another host nor stay in a recording, escape sequences never reach the terminal raw.

The bounded-memory rows (compression bombs, an endless stream, a 20 MB recorded request next to a
small one) are in test_bounded.py.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.proxai_mitm.wire.test_header_allowlist import CREDENTIAL_HEADERS

from .echo_upstream import Rig, client_path, http_request, request_body

pytestmark = pytest.mark.e2e

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
OTHER_KEY_ENV = "PROXAI_HOSTILE_OTHER_KEY"
OTHER_KEY = "gateway-key-of-no-known-shape-4417"
ROUTES = f"""
[[routes]]
name = "other-host"
match = {{ path = "/other/*" }}
target = {{ protocol = "{ANTH}", base_url = "http://localhost:{{PORT}}", api_key_env = "{OTHER_KEY_ENV}" }}
"""


@pytest.fixture(scope="module")
def rig():
    r = Rig(save=True, extra_routes=ROUTES, env={OTHER_KEY_ENV: OTHER_KEY}, n_deltas=4)
    r.start()
    yield r
    r.close()


def post(rig, path: str, body: dict | bytes, headers: dict | None = None, timeout: float = 20.0):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return asyncio.run(http_request("127.0.0.1", rig.port, path, raw, headers or {}, timeout=timeout))


@pytest.mark.parametrize("client", [CHAT, RESP, ANTH])
def test_credential_headers_never_reach_another_host(rig, client):
    secrets = {name: f"hostile-{i:02d}-{name}-value" for i, name in enumerate(CREDENTIAL_HEADERS)}
    headers = dict(secrets)
    headers["authorization"] = f"Bearer {secrets['authorization']}"
    headers["proxy-authorization"] = f"Basic {secrets['proxy-authorization']}"
    headers["user-agent"] = "hostile-test/1"
    tok = f"cred{client[:4]}"
    r = post(rig, "/other" + client_path(client, None), request_body(client, tok, False), headers)
    assert r.status == 200, r.body[:300]
    rec = next(q for q in rig.up.requests if tok.encode() in q.body)
    assert rec.header("host").startswith("localhost:")
    sent = json.dumps(rec.headers)
    for name, value in secrets.items():
        assert value not in sent, name
    assert rec.header("x-api-key") == OTHER_KEY
    assert rec.header("user-agent") == "hostile-test/1"
    # nor in the recording or the log
    time.sleep(0.3)
    stored = rig.m.flows_path.read_bytes()
    for name, value in secrets.items():
        assert value.encode() not in stored, name
        assert value not in rig.m.log, name


@pytest.mark.parametrize("client", [CHAT, ANTH])
def test_upstream_401_echoing_the_key_is_not_recorded(rig, client):
    """The upstream's error names the injected key (no known key shape): the client gets its native
    401, and neither the recording nor the log keeps the key."""
    from tests.fake_upstream import Reply

    rig.up.on("/v1/messages", Reply.json({"type": "error", "error": {
        "type": "authentication_error", "message": f"invalid x-api-key: {OTHER_KEY}"}}, status=401, times=1))
    tok = f"echo401{client[:4]}"
    r = post(rig, "/other" + client_path(client, None), request_body(client, tok, False), {"x-api-key": "c-key-123456"})
    assert r.status == 401, r.body[:300]
    time.sleep(0.3)
    stored = rig.m.flows_path.read_bytes()
    assert tok.encode() in stored  # the flow was recorded
    assert OTHER_KEY.encode() not in stored
    assert OTHER_KEY not in rig.m.log


ESCAPES = "\x1b[31mRED\x1b[0m\x1b]0;owned\x07\x9b2J"


def test_escape_sequences_never_reach_the_terminal(rig, tmp_path):
    """A model name and an upstream error text full of ANSI / OSC sequences: mitmdump's output
    (the proxai: log line), the flow comment, ``report`` and the CLI show them escaped."""
    import subprocess
    import sys

    from tests.fake_upstream import Reply

    body = request_body(CHAT, "escapes1", False, model=f"gpt{ESCAPES}")
    r = post(rig, client_path(CHAT, None), body, {"authorization": "Bearer sk-test-client-0001"})
    assert r.status == 200, r.body[:300]
    rig.up.on("/v1/chat/completions", Reply.json({"error": {"message": f"bad{ESCAPES}", "type": "invalid_request_error"}},
                                                 status=400, times=1))
    r = post(rig, client_path(CHAT, None), request_body(CHAT, "escapes2", False, model=f"m{ESCAPES}"),
             {"authorization": "Bearer sk-test-client-0001"})
    assert r.status == 400
    rig.m.wait_for_log(r"proxai: .*escapes|proxai: .*m\\x1b", timeout=10, count=1)
    time.sleep(0.5)
    lines = [ln for ln in rig.m.log.splitlines() if "proxai:" in ln and "x1b" in ln]
    assert lines, rig.m.log[-2000:]
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in rig.m.log
    flows = [f for f in rig.m.flows() if b"escapes" in (f.request.raw_content or b"")]
    assert flows and all("\x1b" not in (f.comment or "") for f in flows)
    out = subprocess.run([sys.executable, "-m", "proxai_mitm", "report", str(rig.m.flows_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "\\x1b" in out.stdout
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in out.stdout and ch not in out.stderr


def test_hardump_is_redacted_client_side_and_carries_the_stop(tmp_path):
    """``--set hardump=x.har``: no secret of the flows (client keys, the injected key, gateway
    headers, a key echoed by the upstream), each entry the client's request with the client's
    response, and the StopInfo in ``comment`` / ``_proxai``."""
    from tests.fake_upstream import Reply

    har_path = tmp_path / "x.har"
    client_key = "sk-proj-harclient0key0000000000000000001"
    with Rig(save=False, extra_routes=ROUTES, env={OTHER_KEY_ENV: OTHER_KEY}, n_deltas=4,
             options={"hardump": str(har_path)}) as r2:
        headers = {"authorization": f"Bearer {client_key}", "x-portkey-api-key": "portkey-hostile-0001",
                   "cookie": "session=cookie-hostile-0002"}
        for client, stream in ((CHAT, True), (ANTH, False), (RESP, True)):
            res = post(r2, "/other" + client_path(client, None), request_body(client, f"har{client.split('_')[-1]}", stream),
                       headers)
            assert res.status == 200, res.body[:300]
        r2.up.on("/v1/messages", Reply.json({"type": "error", "error": {
            "type": "authentication_error", "message": f"invalid x-api-key: {OTHER_KEY}"}}, status=401, times=1))
        res = post(r2, "/other" + client_path(CHAT, None), request_body(CHAT, "har401", False), headers)
        assert res.status == 401
        r2.m.stop()  # hardump is written at shutdown
        text = har_path.read_text()
    for secret in (client_key, OTHER_KEY, "portkey-hostile-0001", "cookie-hostile-0002"):
        assert secret not in text, secret
    entries = json.loads(text)["log"]["entries"]
    assert len(entries) == 4
    for e in entries:
        assert "/other/" in e["request"]["url"] and "127.0.0.1" in e["request"]["url"]  # what the client sent
        assert e["_proxai"]["stop"] is not None and e["comment"]
    chat = next(e for e in entries if "harcompletions" in e["request"]["postData"]["text"])
    assert '"messages"' in chat["request"]["postData"]["text"] and '"stream": true' in chat["request"]["postData"]["text"]
    assert chat["response"]["content"]["text"].startswith("data: ")  # the Chat stream the client got
    assert chat["_proxai"]["client_protocol"] == CHAT and chat["_proxai"]["upstream_protocol"] == ANTH


def test_listen_host_warning_at_start():
    """A key-injecting route while mitmdump listens on every interface without proxyauth: a clear
    warning at start (the docs' commands all pass --listen-host 127.0.0.1). The proxy is stopped
    as soon as the line is seen; only loopback is talked to."""
    from tests.mitm_harness import Mitmdump, free_port

    m = Mitmdump(mode=f"reverse:http://127.0.0.1:9@0.0.0.0:{free_port()}", save=False,
                 env={OTHER_KEY_ENV: OTHER_KEY},
                 options={"proxai_target": ANTH, "proxai_upstream": "http://localhost:9",
                          "proxai_key_env": OTHER_KEY_ENV})
    try:
        m.start(wait=False)
        lines = m.wait_for_log(r"inject an API key and mitmproxy listens on", timeout=30)
    finally:
        m.cleanup()
    assert "--listen-host 127.0.0.1" in lines[0] and "403" in lines[0]
    assert OTHER_KEY not in m.log
