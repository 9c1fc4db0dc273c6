"""Upstream faults and security through a real mitmdump with the addon (loopback only).

Faults: connection refused, reset / clean cut mid-stream, a slow upstream (events still reach the
client as they come), a dead stream (idle timeout), 5xx with HTML, slow response headers. In each
case the flow is saved (``-w``) and annotated, and nothing the upstream sent is lost from the
recording (``metadata.proxai.upstream_response``).

Security: the client's key never goes to a host other than the one it addressed (the upstream key
comes from the route's environment variable), is never logged and never stored (redaction on);
a request cannot make the addon read local files or reach hosts other than the route's upstream
(``file://`` / other-host URLs in image and document parts, base-URL fields in the body, forwarding
headers, absolute-form request targets, an upstream redirect).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from proxai_core import Protocol
from proxai_mitm.flow.record import FlowRecord
from tests.fake_upstream import RECORDED, Reply
from tests.mitm_harness import free_port
from tests.sdk import StreamError, accumulate_stream

from .echo_upstream import (
    UPSTREAM_KEY,
    Rig,
    client_path,
    echo_text,
    http_request,
    request_body,
)

pytestmark = pytest.mark.e2e

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
CLIENT_KEY = "sk-proj-CLIENTKEY-must-not-leak-7f3a9c"
OTHER_KEY_ENV = "PROXAI_FAULTS_OTHER_KEY"
OTHER_KEY = "sk-ant-OTHERHOST-env-key-41d2e8"
DEAD_PORT = free_port()
EXTRA_ROUTES = f"""
[[routes]]
name = "dead"
match = {{ path = "/dead/*" }}
target = {{ protocol = "{CHAT}", base_url = "http://127.0.0.1:{DEAD_PORT}", api_key_env = "PROXAI_ECHO_KEY" }}

[[routes]]
name = "other-host"
match = {{ path = "/other/*" }}
target = {{ protocol = "{ANTH}", base_url = "http://localhost:{{PORT}}", api_key_env = "{OTHER_KEY_ENV}" }}

[[routes]]
name = "other-host-nokey"
match = {{ path = "/nokey/*" }}
target = {{ protocol = "{ANTH}", base_url = "http://localhost:{{PORT}}" }}

[[routes]]
name = "same-host-client-key"
match = {{ model = "samehost-*" }}
target = {{ protocol = "{CHAT}" }}
"""
KEY_HEADERS = {"authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY, "api-key": CLIENT_KEY,
               "cookie": f"session={CLIENT_KEY}"}


@pytest.fixture(scope="module")
def rig():
    r = Rig(save=True, extra_routes=EXTRA_ROUTES, env={OTHER_KEY_ENV: OTHER_KEY},
            verbosity="debug", n_deltas=6)
    r.start()
    yield r
    r.close()


@pytest.fixture
def up(rig):
    u = rig.up
    u.reset()
    u.delay = u.first_delay = u.head_delay = 0.0
    u.stall_after = None
    return u


def post(rig, path: str, body: dict | bytes, headers: dict | None = None, timeout: float = 20.0):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return asyncio.run(http_request("127.0.0.1", rig.port, path, raw, headers or {}, timeout=timeout))


def flow_for(rig, token: str, timeout: float = 10.0):
    """The saved flow whose client request holds ``token`` (saved once the flow ended)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for f in rig.m.flows():
            rec = FlowRecord.of(f)
            if rec is not None and token.encode() in (rec.client_body(f) or b""):
                return f
        time.sleep(0.1)
    raise AssertionError(f"no saved flow for {token}")


def native_error(client: str, body: bytes) -> dict:
    obj = json.loads(body)
    if client == ANTH:
        assert obj["type"] == "error" and obj["error"]["message"], obj
    else:
        assert isinstance(obj["error"], dict) and obj["error"]["message"], obj
    return obj


# ----------------------------------------------------------------------------- faults
def test_connection_refused_native_502_and_annotated(rig, up):
    """Nothing listens on the route's upstream: a native 502 both times (the addon probes an upstream
    it has not heard from before sending the request)."""
    results = []
    for i in range(2):
        tok = f"refused{i}"
        r = post(rig, "/dead" + client_path(ANTH, None), request_body(ANTH, tok, True), {"x-api-key": CLIENT_KEY})
        assert r.error is None and r.status == 502, (r.status, r.error, r.body[:200])
        results.append(r)
        f = flow_for(rig, tok)
        m = f.metadata["proxai"]
        assert m["stop"]["reason"] == "interrupted", m["stop"]
        assert f.comment.startswith("interrupted")
    for r in results:
        native_error(ANTH, r.body)


def test_connection_refused_first_answer_is_native(rig, up):
    dead = free_port()
    routes = f"""
[[routes]]
name = "dead2"
match = {{ path = "/dead2/*" }}
target = {{ protocol = "{CHAT}", base_url = "http://127.0.0.1:{dead}", api_key_env = "PROXAI_ECHO_KEY" }}
"""
    with Rig(extra_routes=routes) as r2:
        r = asyncio.run(http_request("127.0.0.1", r2.port, "/dead2" + client_path(ANTH, None),
                                     json.dumps(request_body(ANTH, "refusedfirst", False)).encode(),
                                     {"x-api-key": CLIENT_KEY}))
        assert r.status == 502
        native_error(ANTH, r.body)


@pytest.mark.parametrize("cut", ["reset", "clean"])
def test_upstream_cut_mid_stream(rig, up, cut):
    """3 events, then the upstream resets the connection (or ends the HTTP message): the client gets
    no fabricated message_stop, the flow is interrupted, and the 3 events are in the recording."""
    events = RECORDED[CHAT]["text"]["sse"]
    up.on("/v1/chat/completions", Reply.sse(events, delay=0.05, cut_after=3, cut=cut))
    tok = f"cut{cut}"
    r = post(rig, client_path(ANTH, CHAT), request_body(ANTH, tok, True), {"x-api-key": CLIENT_KEY})
    assert b"message_stop" not in r.body
    if cut == "clean":  # the addon still writes the client's native error event
        with pytest.raises(StreamError):
            accumulate_stream(Protocol(ANTH), r.body)
    f = flow_for(rig, tok)
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "interrupted", m["stop"]
    from tests.fake_upstream import _enc_event

    sent = b"".join(_enc_event(e) for e in events[:3]).decode()
    assert m["upstream_response"] == sent, (m["upstream_response"][:300], sent[:300])
    assert f.marked


def test_slow_upstream_events_arrive_as_they_come(rig, up):
    up.delay = 0.3
    tok = "slowevents"
    r = post(rig, client_path(RESP, ANTH), request_body(RESP, tok, True), {"authorization": f"Bearer {CLIENT_KEY}"})
    assert r.status == 200 and r.error is None
    s = accumulate_stream(Protocol(RESP), r.body)
    assert s.text == echo_text(tok, 6)
    st = up.stamps[tok]
    # the first text reached the client long before the upstream finished, and reads are spread out
    first_text = next(t for t, _n in r.reads if True)
    assert st.done - first_text > 1.0, (st.done, first_text)
    gaps = [b[0] - a[0] for a, b in zip(r.reads, r.reads[1:])]
    assert sum(g > 0.2 for g in gaps) >= 4, gaps
    f = flow_for(rig, tok)
    assert f.metadata["proxai"]["stop"]["reason"] == "end_turn"
    assert len(f.metadata["proxai"]["upstream_chunks"]) >= 5


@pytest.fixture(scope="module")
def dead_stream():
    """A stream that stops sending after 3 events (connection held open), ProxAI's idle timeout off
    and mitmproxy's own inactivity timeout ``tcp_timeout=2``: (client result, seconds it took, saved
    metadata, what the upstream sent)."""
    with Rig(save=True, options={"tcp_timeout": 2, "proxai_idle_timeout": 0}, n_deltas=6, delay=0.05,
             stall_after=3, stall_for=15) as r2:
        t0 = time.monotonic()
        r = asyncio.run(http_request("127.0.0.1", r2.port, client_path(ANTH, CHAT),
                                     json.dumps(request_body(ANTH, "deadstream", True)).encode(),
                                     {"x-api-key": CLIENT_KEY}, timeout=20))
        took = time.monotonic() - t0
        meta = flow_for(r2, "deadstream").metadata["proxai"]
        yield r, took, meta, r2.up.sent.get("deadstream", b"")


def test_dead_stream_ends_with_tcp_timeout_recorded_interrupted(dead_stream):
    """Idle timeout off: mitmproxy's tcp_timeout closes the dead stream; the flow is recorded
    interrupted, with everything that arrived; nothing was fabricated for the client."""
    r, took, meta, sent = dead_stream
    assert took < 10
    assert b"message_stop" not in r.body and b"Echo deadstream" in r.body
    assert meta["stop"]["reason"] == "interrupted"
    assert meta["upstream_response"] == sent.decode() and sent


@pytest.fixture(scope="module")
def idle_rig():
    """Upstream streams stall after 3 events for 15 s; ``proxai_idle_timeout=2`` (tcp_timeout stays
    far away, so only ProxAI's watchdog can end them)."""
    with Rig(save=True, options={"tcp_timeout": 60, "proxai_idle_timeout": 2}, n_deltas=6, delay=0.05,
             stall_after=3, stall_for=15) as r2:
        yield r2


@pytest.mark.parametrize("client,upstream", [(ANTH, CHAT), (CHAT, RESP), (RESP, ANTH), (ANTH, ANTH), (CHAT, CHAT)])
def test_idle_timeout_ends_dead_stream_with_native_error(idle_rig, client, upstream):
    """After 2 s without an upstream byte the client gets its own protocol's error event and a
    properly ended body (no transport error, no fabricated terminal event); the flow is recorded
    interrupted with the reason, with every upstream byte that arrived."""
    tok = f"idle{client.split('_')[-1]}{upstream.split('_')[-1]}"
    headers = {"x-api-key": CLIENT_KEY, "authorization": f"Bearer {CLIENT_KEY}"}
    t0 = time.monotonic()
    r = asyncio.run(http_request("127.0.0.1", idle_rig.port, client_path(client, upstream),
                                 json.dumps(request_body(client, tok, True)).encode(), headers, timeout=20))
    took = time.monotonic() - t0
    assert r.error is None and r.status == 200, (r.error, r.status)
    assert 1.5 < took < 8, took
    if upstream == CHAT:  # (the first 3 events of the other upstreams carry no text yet)
        assert b"Echo " in r.body  # what arrived before the stall was delivered
    with pytest.raises(StreamError) as ei:  # the client's native error event, not a bare cut
        accumulate_stream(Protocol(client), r.body)
    assert "nothing for" in str(ei.value) or "idle" in str(ei.value), ei.value
    for terminal in (b"message_stop", b"[DONE]", b"response.completed", b"response.incomplete"):
        assert terminal not in r.body, terminal
    meta = flow_for(idle_rig, tok).metadata["proxai"]
    assert meta["stop"]["reason"] == "interrupted", meta["stop"]
    assert "proxai_idle_timeout" in (meta["stop"]["message"] or ""), meta["stop"]
    assert "disconnect" not in (meta["stop"]["message"] or "").lower()
    assert meta["upstream_response"] == idle_rig.up.sent[tok].decode()


def test_idle_timeout_keeps_the_client_connection_usable(idle_rig):
    """A keep-alive client (the official SDK) gets an APIError for the dead stream, and its next
    request on the same connection pool works (the stalled HTTP/1 upstream connection is not reused
    mid-body)."""
    import anthropic

    c = anthropic.Anthropic(api_key=CLIENT_KEY, base_url=f"http://127.0.0.1:{idle_rig.port}", max_retries=0)
    with pytest.raises(anthropic.APIError):
        with c.messages.stream(**{k: v for k, v in request_body(ANTH, "idlesdk1", True).items() if k != "stream"}) as s:
            for _ in s:
                pass
    idle_rig.up.stall_after = None
    try:
        m = c.messages.create(**{k: v for k, v in request_body(ANTH, "idlesdk2", False).items() if k != "stream"})
    finally:
        idle_rig.up.stall_after = 3
    assert "".join(b.text for b in m.content if b.type == "text") == echo_text("idlesdk2", 6)


def test_idle_timeout_over_http2_client(idle_rig):
    """An HTTP/2 client (TLS to mitmdump): the dead stream ends with END_STREAM after the native
    error event, and a second stream on the same HTTP/2 connection gets the same treatment."""
    import ssl

    import httpx2

    ctx = ssl.create_default_context(cafile=str(idle_rig.m.ca_path))
    ctx.check_hostname = False
    with httpx2.Client(http2=True, verify=ctx, timeout=20) as c:
        for i in range(2):
            resp = c.post(f"https://127.0.0.1:{idle_rig.port}" + client_path(ANTH, CHAT),
                          json=request_body(ANTH, f"idleh2{i}", True), headers={"x-api-key": CLIENT_KEY})
            assert resp.http_version == "HTTP/2" and resp.status_code == 200
            with pytest.raises(StreamError, match="proxai_idle_timeout"):
                accumulate_stream(Protocol(ANTH), resp.content)
            assert flow_for(idle_rig, f"idleh2{i}").metadata["proxai"]["stop"]["reason"] == "interrupted"


def test_idle_timeout_leaves_mitmproxy_healthy(idle_rig):
    """After the idle endings above (and the stalled upstreams resuming into closed connections),
    mitmdump logged each ending once and no traceback or crash."""
    time.sleep(0.5)
    log = idle_rig.m.log
    assert log.count("proxai_idle_timeout=2 s") >= 8, log[-3000:]
    for bad in ("Traceback", "has crashed", "AssertionError", "Unexpected event"):
        assert bad not in log, log[-3000:]
    assert idle_rig.m.proc.poll() is None


def test_idle_timeout_option_validated():
    """A negative value is refused with a clear error naming the option."""
    from mitmproxy import exceptions
    from mitmproxy.test import taddons

    from proxai_mitm.addons.translate import Translator
    from proxai_mitm.config.options import RouteOptions

    a = Translator(RouteOptions())
    with taddons.context(a) as tctx:
        with pytest.raises(exceptions.OptionsError, match="proxai_idle_timeout"):
            tctx.configure(a, proxai_idle_timeout=-1)
        tctx.configure(a, proxai_idle_timeout=7)
        assert a.idle.timeout == 7.0


@pytest.mark.parametrize("client", [CHAT, ANTH])
def test_5xx_html_is_native_and_recorded(rig, up, client):
    html = b"<html><head><title>503 Service Temporarily Unavailable</title></head><body>nginx</body></html>"
    up.on("/v1/responses", Reply.error(503, html, "text/html", headers=[("retry-after", "7")]))
    tok = f"html503{client[:4]}"
    r = post(rig, client_path(client, RESP), request_body(client, tok, True),
             {"authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY})
    assert r.status in (502, 503, 529), r.status
    err = native_error(client, r.body)
    assert "503" in json.dumps(err) or "Unavailable" in json.dumps(err)
    assert r.headers.get("retry-after") == "7"
    f = flow_for(rig, tok)
    m = f.metadata["proxai"]
    assert m["upstream_response"] == html.decode() and m["upstream_status"] == 503
    assert m["stop"]["reason"] not in ("end_turn", None)


@pytest.mark.parametrize("stream", [True, False])
def test_slow_headers(rig, up, stream):
    up.head_delay = 2.0
    tok = f"slowhead{int(stream)}"
    t0 = time.monotonic()
    r = post(rig, client_path(CHAT, ANTH), request_body(CHAT, tok, stream), {"authorization": f"Bearer {CLIENT_KEY}"})
    assert time.monotonic() - t0 >= 1.9
    assert r.status == 200 and r.error is None
    from tests.sdk import summarize_response

    s = accumulate_stream(Protocol(CHAT), r.body) if stream else summarize_response(Protocol(CHAT), json.loads(r.body))
    assert s.text == echo_text(tok, 6)
    assert flow_for(rig, tok).metadata["proxai"]["stop"]["reason"] == "end_turn"


# ----------------------------------------------------------------------------- security
@pytest.mark.parametrize("client", [CHAT, RESP, ANTH])
@pytest.mark.parametrize("stream", [True, False])
def test_client_key_never_sent_to_another_host(rig, up, client, stream):
    tok = f"otherhost{client[:4]}{int(stream)}"
    r = post(rig, "/other" + client_path(client, None), request_body(client, tok, stream), KEY_HEADERS)
    assert r.status == 200, r.body[:300]
    rec = next(q for q in up.requests if tok.encode() in q.body)
    assert rec.header("host") == f"localhost:{up.port}"
    assert CLIENT_KEY not in json.dumps(rec.headers)
    assert rec.header("x-api-key") == OTHER_KEY


def test_no_key_for_another_host_is_native_401_and_nothing_sent(rig, up):
    r = post(rig, "/nokey" + client_path(RESP, None), request_body(RESP, "nokey1", False), KEY_HEADERS)
    assert r.status == 401
    native_error(RESP, r.body)
    assert not any(b"nokey1" in q.body for q in up.requests)


def test_same_host_keeps_the_client_key(rig, up):
    """Control: when the upstream is the host the client addressed, its own key is moved there."""
    r = post(rig, client_path(ANTH, None), request_body(ANTH, "samehost1", False, model="samehost-echo"),
             {"x-api-key": CLIENT_KEY})
    assert r.status == 200, r.body[:300]
    rec = next(q for q in up.requests if b"samehost1" in q.body)
    assert CLIENT_KEY in (rec.header("authorization") or "")


def test_keys_never_logged_nor_stored(rig, up):
    """After every test above (and a few more requests with keys everywhere), neither the client's
    key nor the upstream keys appear in mitmdump's log (debug verbosity) or in the saved flows file."""
    for client in (CHAT, RESP, ANTH):
        post(rig, client_path(client, ANTH if client != ANTH else CHAT), request_body(client, f"keys{client[:4]}", True),
             KEY_HEADERS)
        post(rig, "/other" + client_path(client, None), request_body(client, f"keyso{client[:4]}", False), KEY_HEADERS)
    flow_for(rig, "keysoanth")
    time.sleep(0.3)
    log = rig.m.log
    stored = rig.m.flows_path.read_bytes()
    for secret in (CLIENT_KEY, UPSTREAM_KEY, OTHER_KEY):
        assert secret not in log, f"{secret[:12]}… in the log"
        assert secret.encode() not in stored, f"{secret[:12]}… in the saved flows"
    assert len(rig.m.flows()) >= 10


class Canary:
    """A TCP listener that counts connections (nobody should ever connect)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            c.close()

    def close(self) -> None:
        self._stop = True
        self._t.join(2)
        self.sock.close()


def test_no_local_file_read_and_no_other_host_reached(rig, up):
    canary = Canary()
    url = f"http://127.0.0.1:{canary.port}/secret.png"
    try:
        bodies = {
            CHAT: {"model": "m", "base_url": url, "api_base": url, "stream": False, "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "ECHO[fileurl1]"},
                    {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}},
                    {"type": "image_url", "image_url": {"url": url}}]}]},
            RESP: {"model": "m", "baseURL": url, "stream": False, "input": [
                {"role": "user", "content": [
                    {"type": "input_text", "text": "ECHO[fileurl2]"},
                    {"type": "input_image", "image_url": "file:///etc/passwd"},
                    {"type": "input_file", "file_url": url},
                    {"type": "input_image", "image_url": url}]}]},
            ANTH: {"model": "m", "max_tokens": 10, "base_url": url, "stream": False, "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "ECHO[fileurl3]"},
                    {"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}},
                    {"type": "document", "source": {"type": "url", "url": url}},
                    {"type": "image", "source": {"type": "url", "url": url}}]}]},
        }
        tricks = {"x-forwarded-host": f"127.0.0.1:{canary.port}", "forwarded": f"host=127.0.0.1:{canary.port}",
                  "x-original-url": url, "x-api-key": CLIENT_KEY, "authorization": f"Bearer {CLIENT_KEY}"}
        targets = {CHAT: ANTH, RESP: CHAT, ANTH: RESP}
        for client, body in bodies.items():
            r = post(rig, client_path(client, targets[client]), body, tricks)
            assert r.status in (200, 400), (client, r.status, r.body[:300])
            if r.status == 400:
                native_error(client, r.body)
        # absolute-form request target naming another host, in reverse mode
        raw = json.dumps(request_body(CHAT, "absform1", False)).encode()
        r = post(rig, f"http://127.0.0.1:{canary.port}/to-anthropic/v1/chat/completions", raw, tricks)
        # an upstream redirect to another host is not followed by the proxy
        up.on("/v1/messages", Reply(status=307, headers=[("location", url), ("content-length", "0")], body=b""))
        r = post(rig, client_path(CHAT, ANTH), request_body(CHAT, "redirect1", False), tricks)
        assert r.status != 200 or b"secret" not in r.body
        time.sleep(0.5)
        assert canary.hits == 0, f"something connected to the other host {canary.hits} time(s)"
        passwd = open("/etc/passwd").read().splitlines()[0]
        for q in up.requests:
            assert passwd.encode() not in q.body, "local file content sent upstream"
    finally:
        canary.close()
