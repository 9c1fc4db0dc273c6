"""End to end (issue 19): a route with ordered fallbacks, through a real mitmdump.

Two strict loopback fakes: ``prim`` (the route's own upstream, scripted to fail in each way) and
``back`` (the fallback). The client SDKs judge every answer; the saved flows show the attempts, the
fallback mark and no key of any upstream.
"""

from __future__ import annotations

import json
import socket
import time

import anthropic
import openai
import pytest

from proxai_mitm.flow.record import FlowRecord
from tests.fake_upstream import RECORDED, FakeUpstream, Reply
from tests.mitm_harness import Mitmdump, free_port

from .e2e_util import ANTH, CHAT, RESP, SHORT, UPSTREAM_MODEL, UPSTREAM_PATH, call, check, make_clients, serve

pytestmark = pytest.mark.e2e

GEM = "gemini_generate_content"

KEY_A, KEY_A_VALUE = "PROXAI_FO_KEY_A", "sk-primary-key-must-not-leak-0001"
KEY_B, KEY_B_VALUE = "PROXAI_FO_KEY_B", "sk-fallback-key-must-not-leak-0002"
KEY_C, KEY_C_VALUE = "PROXAI_FO_KEY_C", "sk-pool-second-key-no-leak-0003"
#: every failure class, for each path: through the attempt server ("s", an upstream not known to
#: answer) and direct ("d", attempt 1 on mitmproxy's own connection, the stream taken over)
STATUSES = (429, 408, 409, 500, 502, 503, 529, 402)
#: each gets routes of its own (cooldowns and "known to answer" are per upstream and key variable):
#: one test's cooldown does not skip the next test's primary
OWN = (*(f"{s}{p}{j}" for s in STATUSES for p in "sd" for j in "jt"), "cool", "all", "alld", "cuts", "cutd", "gem")
ENV = {KEY_A: KEY_A_VALUE, KEY_B: KEY_B_VALUE, KEY_C: KEY_C_VALUE, **{f"{KEY_A}_{n}": KEY_A_VALUE for n in OWN}}


def _target(proto: str, base: str, key: str = KEY_A) -> str:
    return f'{{ protocol = "{proto}", base_url = "{base}", api_key_env = "{key}", model = "{UPSTREAM_MODEL[proto]}" }}'


def _route(name: str, primary: str, fallback: str, *, extra: str = "") -> str:
    """A route taking models ``<name>*`` with its own upstream and one fallback table."""
    return (f'[[routes]]\nname = "{name}"\nmatch = {{ model = "{name}*" }}\n{extra}target = {primary}\n'
            f'[[routes.fallbacks]]\n{fallback}\n')


def _fallback(proto: str, base: str, key: str = KEY_B) -> str:
    return (f'protocol = "{proto}"\nbase_url = "{base}"\napi_key_env = "{key}"\n'
            f'model = "{UPSTREAM_MODEL[proto]}"')


@pytest.fixture(scope="module")
def prim():
    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def back():
    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def silent():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


@pytest.fixture(scope="module")
def untrusted(tmp_path_factory):
    """A TLS port whose certificate no trust store knows (self-signed, made here)."""
    import datetime
    import ssl
    import threading

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    sc = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sc.load_cert_chain(d / "cert.pem", d / "key.pem")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def serve_tls() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            try:
                sc.wrap_socket(conn, server_side=True).close()
            except (OSError, ssl.SSLError):
                conn.close()

    threading.Thread(target=serve_tls, daemon=True).start()
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture(scope="module")
def proxy(prim, back, silent, untrusted, tmp_path_factory):
    dead = free_port()
    routes = []
    for p in (CHAT, RESP, ANTH):
        for q in (CHAT, RESP, ANTH):
            routes.append(_route(f"fo-{SHORT[p]}-{SHORT[q]}", _target(p, prim.url), _fallback(q, back.url),
                                 extra='retry_on = [402]\nattempt_timeout = 2\n'))
    for n in OWN:
        for p in (CHAT, RESP, ANTH) if not n[0].isdigit() else (ANTH,):
            routes.append(_route(f"own{n}-{SHORT[p]}", _target(p, prim.url, f"{KEY_A}_{n}"),
                                 _fallback(p, back.url, f"{KEY_B}"), extra="retry_on = [402]\n"))
    routes.append(f'[[routes]]\nname = "gem"\nmatch = {{ model = "gem*" }}\n'
                  f'target = {{ protocol = "{GEM}", base_url = "{prim.url}", api_key_env = "{KEY_A}_gem", '
                  f'model = "gemini-2.5-flash" }}\n[[routes.fallbacks]]\n{_fallback(CHAT, back.url)}\n')
    routes.append(_route("refused", _target(ANTH, f"http://127.0.0.1:{dead}"), _fallback(RESP, back.url)))
    routes.append(_route("tlsbad", _target(CHAT, f"https://127.0.0.1:{untrusted}"), _fallback(ANTH, back.url)))
    routes.append(_route("silent", _target(ANTH, f"http://127.0.0.1:{silent}"), _fallback(CHAT, back.url),
                         extra="attempt_timeout = 1\n"))
    routes.append(_route("retry", _target(ANTH, prim.url), _fallback(ANTH, back.url),
                         extra="retries = 1\nbackoff = 0.05\n"))
    routes.append(f'[[routes]]\nname = "pool"\nmatch = {{ model = "pool*" }}\n'
                  f'target = {{ protocol = "{ANTH}", base_url = "{prim.url}", api_key_env = ["{KEY_A}", "{KEY_C}"] }}\n'
                  f'[[routes.fallbacks]]\n{_fallback(CHAT, back.url)}\n')
    path = tmp_path_factory.mktemp("routes") / "routes.toml"
    path.write_text("\n".join(routes))
    m = Mitmdump(mode=f"reverse:{prim.url}", options={"proxai_config": str(path)}, env=ENV)
    m.start()
    yield m
    m.cleanup()


@pytest.fixture
def ups(prim, back):
    prim.reset()
    back.reset()
    return prim, back


@pytest.fixture(scope="module")
def clients(proxy):
    return make_clients(proxy.url)


def records(m: Mitmdump, n: int, timeout: float = 10.0) -> list[FlowRecord]:
    end = time.monotonic() + timeout
    while True:
        recs = [FlowRecord.of(f) for f in m.flows()]
        recs = [r for r in recs if r is not None]
        if len(recs) >= n or time.monotonic() > end:
            return recs
        time.sleep(0.05)


def last_record(m: Mitmdump, before: int) -> FlowRecord:
    recs = records(m, before + 1)
    assert len(recs) > before, "the flow was not saved"
    return recs[-1]


def count(m: Mitmdump) -> int:
    return len(records(m, 0, timeout=0))


def fail_primary(prim: FakeUpstream, proto: str, status: int, headers: list[tuple[str, str]] | None = None) -> None:
    body = json.dumps({"error": {"message": f"primary says {status}", "type": "overloaded_error"}}).encode()
    prim.on(UPSTREAM_PATH[proto], Reply.error(status, body, headers=headers))


# ----------------------------------------------------------------------------- failure classes
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("path", ["s", "d"], ids=["attempt-server", "direct"])
@pytest.mark.parametrize("status", STATUSES)
def test_each_failover_status_falls_back(proxy, ups, clients, status, path, stream):
    prim, back = ups
    route = f"own{status}{path}{'t' if stream else 'j'}-anthropic"
    if path == "d":  # the route's own upstream answers once: known, so attempt 1 goes direct
        check(call(clients, ANTH, f"{route}-warm", "text", stream), ANTH, "text")
        prim.reset()
    fail_primary(prim, ANTH, status)
    n = count(proxy)
    s = call(clients, ANTH, f"{route}-x", "text", stream)
    check(s, ANTH, "text")
    assert [r.path for r in back.requests] == [UPSTREAM_PATH[ANTH]]
    assert back.requests[0].header("x-api-key") == KEY_B_VALUE
    assert len(prim.requests) == 1
    rec = last_record(proxy, n)
    assert [(a.upstream, a.status) for a in rec.attempts] == [(route, status), (f"{route}#1", 200)]
    # through the attempt server the failed body is read (its message kept); direct, the head decides
    # (its message is kept when the body had arrived with the head)
    assert rec.attempts[0].reason in (f"HTTP {status}: primary says {status}", f"HTTP {status}")
    if path == "s":
        assert rec.attempts[0].reason == f"HTTP {status}: primary says {status}"
    assert rec.stop is not None and rec.stop.detail.get("fallback") == f"{route}#1 (anthropic_messages)"


def test_a_non_failover_status_is_the_answer(proxy, ups, clients):
    prim, back = ups
    fail_primary(prim, ANTH, 400)
    with pytest.raises(anthropic.BadRequestError):
        call(clients, ANTH, "fo-anthropic-anthropic-x", "text", False)
    assert back.requests == []


def test_connection_refused_falls_back_across_protocols(proxy, ups, clients):
    prim, back = ups
    n = count(proxy)
    s = call(clients, ANTH, "refused-x", "text", True)
    check(s, ANTH, "text")
    assert [r.path for r in back.requests] == [UPSTREAM_PATH[RESP]]
    rec = last_record(proxy, n)
    assert rec.attempts[0].status is None and rec.attempts[0].reason.startswith("connect:")
    assert rec.upstream_protocol is not None and rec.upstream_protocol.value == RESP


def test_tls_error_falls_back(proxy, ups, clients):
    prim, back = ups
    n = count(proxy)
    s = call(clients, CHAT, "tlsbad-x", "text", False)
    check(s, CHAT, "text")
    assert [r.path for r in back.requests] == [UPSTREAM_PATH[ANTH]]
    rec = last_record(proxy, n)
    assert rec.attempts[0].reason.startswith("tls:"), rec.attempts[0]
    assert "CERTIFICATE_VERIFY_FAILED" in rec.attempts[0].reason


def test_header_timeout_falls_back(proxy, ups, clients):
    prim, back = ups
    n = count(proxy)
    started = time.monotonic()
    s = call(clients, ANTH, "silent-x", "text", True)
    check(s, ANTH, "text")
    assert time.monotonic() - started < 8
    rec = last_record(proxy, n)
    assert rec.attempts[0].reason.startswith("timeout:")
    assert [r.path for r in back.requests] == [UPSTREAM_PATH[CHAT]]


# ----------------------------------------------------------------------------- protocols
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("client,primary,fallback", [
    (ANTH, ANTH, RESP), (CHAT, CHAT, ANTH), (RESP, RESP, CHAT), (ANTH, CHAT, CHAT), (CHAT, RESP, RESP),
    (RESP, ANTH, ANTH),
])
def test_fallback_answers_in_the_clients_protocol(proxy, ups, clients, client, primary, fallback, stream):
    prim, back = ups
    fail_primary(prim, primary, 500)
    serve(back, fallback, "tool")
    n = count(proxy)
    s = call(clients, client, f"fo-{SHORT[primary]}-{SHORT[fallback]}-x", "tool", stream)
    check(s, client, "tool")
    assert back.last().path == UPSTREAM_PATH[fallback]
    assert back.last().json()["model"] == UPSTREAM_MODEL[fallback]
    rec = last_record(proxy, n)
    assert rec.upstream_protocol.value == fallback
    assert rec.upstream_model == UPSTREAM_MODEL[fallback]


def test_primary_ok_is_streamed_from_the_primary(proxy, ups, clients):
    prim, back = ups
    serve(prim, CHAT, "text", delay=0.05)
    n = count(proxy)
    s = call(clients, ANTH, "fo-chat-anthropic-x", "text", True)
    check(s, ANTH, "text")
    assert back.requests == []
    rec = last_record(proxy, n)
    assert [a.status for a in rec.attempts] == [200]
    assert "fallback" not in (rec.stop.detail if rec.stop else {})


@pytest.mark.parametrize("path", ["s", "d"], ids=["attempt-server", "direct"])
def test_no_retry_after_the_first_byte(proxy, ups, clients, path):
    """The primary breaks off mid-stream: the client's stream ends interrupted, nothing is retried."""
    prim, back = ups
    if path == "d":
        check(call(clients, ANTH, f"owncut{path}-anthropic-warm", "text", True), ANTH, "text")
    prim.on(UPSTREAM_PATH[ANTH], Reply.sse(RECORDED[ANTH]["text"]["sse"], cut_after=3, delay=0.02), stream=True)
    n = count(proxy)
    got = []
    with pytest.raises(Exception):  # noqa: B017 - a transport error: the client's stream is cut, as without failover
        with clients.anthropic.messages.stream(model=f"owncut{path}-anthropic-x", max_tokens=64,
                                               messages=[{"role": "user", "content": "hi"}]) as s:
            for ev in s:
                got.append(ev.type)
    assert "message_start" in got
    assert back.requests == []
    rec = last_record(proxy, n)
    assert rec.stop is not None and rec.stop.reason == "interrupted"
    assert [a.status for a in rec.attempts] == [200]
    assert len(prim.requests) == (2 if path == "d" else 1)


def test_a_clean_early_end_after_the_first_byte_is_interrupted_not_retried(proxy, ups, clients):
    prim, back = ups
    serve(prim, CHAT, "text", delay=0.01, cut_after=3, cut="clean")
    with pytest.raises(anthropic.APIStatusError) as e:
        call(clients, ANTH, "fo-chat-anthropic-x", "text", True)
    assert "interrupt" in str(e.value).lower() or "ended" in str(e.value).lower()
    assert back.requests == []


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_gemini_client_falls_back_to_chat(proxy, ups, stream):
    from google import genai
    from google.genai import types

    prim, back = ups
    time.sleep(0.3)  # the other parameter's cooldown (0.2 s) is over
    body = json.dumps({"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED",
                                 "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                              "retryDelay": "0.2s"}]}}).encode()
    method = "streamGenerateContent" if stream else "generateContent"
    prim.on(f"/v1beta/models/gemini-2.5-flash:{method}", Reply.error(429, body))
    g = genai.Client(api_key="client-key-x", http_options=types.HttpOptions(base_url=proxy.url, timeout=30_000))
    n = count(proxy)
    if stream:
        text = "".join(c.text or "" for c in g.models.generate_content_stream(model=f"gem-{'s' if stream else 'j'}",
                                                                              contents="hi"))
    else:
        text = g.models.generate_content(model="gem-j", contents="hi").text
    assert text == "Hello! The weather is sunny."
    assert back.last().path == UPSTREAM_PATH[CHAT]
    rec = last_record(proxy, n)
    assert [(a.status, a.retry_after) for a in rec.attempts] == [(429, 0.2), (200, None)]
    assert rec.upstream_protocol.value == CHAT and rec.client_protocol.value == GEM


# ----------------------------------------------------------------------------- retries and cooldowns
def test_retry_on_the_same_upstream_before_the_fallback(proxy, ups, clients):
    prim, back = ups
    prim.on(UPSTREAM_PATH[ANTH], Reply(status=500, body=b'{"error": {"message": "blip"}}',
                                             headers=[("content-type", "application/json")], times=1))
    n = count(proxy)
    s = call(clients, ANTH, "retry-x", "text", False)
    check(s, ANTH, "text")
    assert len(prim.requests) == 2 and back.requests == []
    rec = last_record(proxy, n)
    assert [a.status for a in rec.attempts] == [500, 200]


def test_a_limited_upstream_cools_down_for_its_reset_and_is_skipped(proxy, ups, clients):
    prim, back = ups
    fail_primary(prim, CHAT, 429, headers=[("retry-after", "2")])
    call(clients, CHAT, "owncool-chat-a", "text", False)
    assert len(prim.requests) == 1 and len(back.requests) == 1
    n = count(proxy)
    call(clients, CHAT, "owncool-chat-b", "text", False)
    assert len(prim.requests) == 1 and len(back.requests) == 2  # cooled: not asked
    rec = last_record(proxy, n)
    assert rec.attempts[0].status is None and rec.attempts[0].reason.startswith("cooling down")
    assert 0 < rec.attempts[0].retry_after <= 2
    time.sleep(2.2)
    prim.reset()
    s = call(clients, CHAT, "owncool-chat-c", "text", False)
    check(s, CHAT, "text")
    assert len(prim.requests) == 1  # the reset has passed: asked again


def test_every_upstream_limited_gives_the_native_429_with_the_soonest_retry_after(proxy, ups, clients):
    prim, back = ups
    fail_primary(prim, RESP, 429, headers=[("retry-after", "30")])
    back.on(UPSTREAM_PATH[RESP], Reply.error(429, b'{"error": {"message": "slow down"}}',
                                             headers=[("retry-after-ms", "7000")]))
    with pytest.raises(openai.RateLimitError) as e:
        call(clients, RESP, "ownall-responses-x", "text", False)
    assert e.value.status_code == 429
    assert e.value.response.headers["retry-after"] == "7"
    with pytest.raises(openai.RateLimitError) as e:  # both cooling: answered without asking either
        call(clients, RESP, "ownall-responses-y", "text", True)
    assert len(prim.requests) == 1 and len(back.requests) == 1
    assert 1 <= int(e.value.response.headers["retry-after"]) <= 7


def test_every_upstream_limited_on_the_direct_path_gives_the_native_429(proxy, ups, clients):
    prim, back = ups
    check(call(clients, ANTH, "ownalld-anthropic-warm", "text", False), ANTH, "text")  # known: direct
    fail_primary(prim, ANTH, 529, headers=[("retry-after", "20")])
    back.on(UPSTREAM_PATH[ANTH], Reply.error(429, b'{"error": {"message": "slow down"}}',
                                             headers=[("retry-after", "9")]))
    n = count(proxy)
    with pytest.raises(anthropic.RateLimitError) as e:
        call(clients, ANTH, "ownalld-anthropic-x", "text", True)
    assert e.value.response.headers["retry-after"] == "9"
    assert "every upstream of route 'ownalld-anthropic' is rate limited" in str(e.value)
    rec = last_record(proxy, n)
    assert [a.status for a in rec.attempts] == [529, 429]
    assert rec.stop is not None and rec.stop.reason != "end_turn"


def test_a_pool_skips_its_limited_key(proxy, ups, clients):
    prim, back = ups
    prim.on(UPSTREAM_PATH[ANTH], Reply(status=429, body=b'{"error": {"message": "key limited"}}', times=1,
                                       headers=[("content-type", "application/json"), ("retry-after", "60")]))
    keys = []
    for i in range(4):
        s = call(clients, ANTH, f"pool-{i}", "text", False)
        check(s, ANTH, "text")
        keys.append(prim.requests[-1].header("x-api-key") if prim.requests else None)
    limited = prim.requests[0].header("x-api-key")
    later = [r.header("x-api-key") for r in prim.requests[1:]]
    assert later and all(k != limited for k in later), (limited, later)
    assert len(back.requests) == 1  # the limited attempt went on to the fallback once


# ----------------------------------------------------------------------------- secrets
def test_no_key_of_any_upstream_is_saved(proxy, ups, clients):
    prim, back = ups
    fail_primary(prim, ANTH, 500)
    n = count(proxy)
    call(clients, ANTH, "fo-anthropic-chat-x", "text", True)
    records(proxy, n + 1)
    data = proxy.flows_path.read_bytes()
    for value in (KEY_A_VALUE, KEY_B_VALUE, KEY_C_VALUE):
        assert value.encode() not in data
