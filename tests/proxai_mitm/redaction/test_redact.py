"""Credentials never reach a saved flow file (grep the bytes), the rest is kept as it was."""

from __future__ import annotations

import asyncio
import io
import random
import string
import time

import orjson
import pytest
from mitmproxy import http
from mitmproxy import io as mio
from mitmproxy.test import tflow, tutils

from proxai_mitm.redaction.redact import (
    REDACTED,
    Redactor,
    flow_secrets,
    redact_ahead,
    redact_flow,
    redact_headers,
    redact_text,
    redact_url,
    redacted_state,
)

OPENAI_KEY = "sk-proj-Abc123def456GHI789jkl012MNO345pqr678"
ANTHROPIC_KEY = "sk-ant-api03-XyZ987wvu654TSR321qpo098NML765kji432-hgf"
GOOGLE_KEY = "AIzaSyD3adb33fC0ffee0123456789abcdefGHIJ"
COOKIE_SECRET = "s3ss10nV4lu3ABCDEF"


def test_headers_keep_scheme_and_names():
    h = http.Headers(
        [
            (b"Authorization", f"Bearer {OPENAI_KEY}".encode()),
            (b"x-api-key", ANTHROPIC_KEY.encode()),
            (b"api-key", b"azurekey0123456789"),
            (b"Proxy-Authorization", b"Basic dXNlcjpwYXNzMTIz"),
            (b"cookie", f"session={COOKIE_SECRET}; theme=dark".encode()),
            (b"x-goog-api-key", GOOGLE_KEY.encode()),
            (b"x-portkey-api-key", b"pk-123456789"),
            (b"openai-organization", b"org-keepme"),
            (b"anthropic-version", b"2023-06-01"),
            (b"content-type", b"application/json"),
        ]
    )
    redact_headers(h)
    assert h["authorization"] == f"Bearer {REDACTED}"
    assert h["x-api-key"] == REDACTED
    assert h["api-key"] == REDACTED
    assert h["proxy-authorization"] == f"Basic {REDACTED}"
    assert h["cookie"] == f"session={REDACTED}; theme={REDACTED}"
    assert h["x-goog-api-key"] == REDACTED
    assert h["x-portkey-api-key"] == REDACTED
    assert h["openai-organization"] == "org-keepme"
    assert h["anthropic-version"] == "2023-06-01"
    assert h["content-type"] == "application/json"
    before = h.fields
    redact_headers(h)  # idempotent
    assert h.fields == before


def test_set_cookie_multi_valued_keeps_attributes():
    h = http.Headers([(b"set-cookie", b"a=1secret; Path=/; HttpOnly"), (b"Set-Cookie", b"b=2secret; Secure")])
    redact_headers(h)
    assert h.get_all("set-cookie") == [f"a={REDACTED}; Path=/; HttpOnly", f"b={REDACTED}; Secure"]


def test_dict_headers():
    d = {"Authorization": f"Bearer {OPENAI_KEY}", "Accept": "text/event-stream"}
    redact_headers(d)
    assert d == {"Authorization": f"Bearer {REDACTED}", "Accept": "text/event-stream"}


def test_url_query_and_userinfo():
    u = redact_url(f"https://user:hunter2@generativelanguage.googleapis.com/v1beta/models/x:generate"
                   f"?alt=sse&key={GOOGLE_KEY}&api-version=2024-10-21")
    assert GOOGLE_KEY not in u and "hunter2" not in u
    assert "alt=sse" in u and "api-version=2024-10-21" in u and "key=%3Credacted%3E" in u
    assert "user:%3Credacted%3E@" in u
    p = redact_url("/v1/chat/completions?api_key=abc&token=t0k3n&sig=zzz&access_token=q&x=1")
    assert p == ("/v1/chat/completions?api_key=%3Credacted%3E&token=%3Credacted%3E&sig=%3Credacted%3E"
                 "&access_token=%3Credacted%3E&x=1")
    assert redact_url(p) == p
    assert redact_url("/v1/messages") == "/v1/messages"


def test_text_key_shapes():
    t = redact_text(f"keys: {OPENAI_KEY}, {ANTHROPIC_KEY}, {GOOGLE_KEY}; header Bearer abc123def456ghi789")
    for k in (OPENAI_KEY, ANTHROPIC_KEY, GOOGLE_KEY, "abc123def456ghi789"):
        assert k not in t
    assert "sk-ant-<redacted>" in t and "AIza<redacted>" in t and "Bearer <redacted>" in t
    # ordinary prose and logprob tokens are left alone
    plain = 'Bearer tokens are great; use sk-learn; {"token": "Hello", "logprob": -0.1}'
    assert redact_text(plain) == plain
    assert redact_text('{"api_key": "abc", "other": 1}') == '{"api_key": "<redacted>", "other": 1}'


def _secret_flow():
    req = tutils.treq(
        method=b"POST", scheme=b"https", host="api.example.com", port=443,
        path=f"/v1/messages?key={GOOGLE_KEY}".encode(),
        headers=http.Headers([(b"x-api-key", ANTHROPIC_KEY.encode()),
                              (b"authorization", f"Bearer {OPENAI_KEY}".encode()),
                              (b"content-type", b"application/json")]),
        content=b'{"model":"claude-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}',
    )
    resp = tutils.tresp(headers=http.Headers([(b"content-type", b"application/json"),
                                              (b"set-cookie", f"sid={COOKIE_SECRET}; Path=/".encode())]),
                        content=b'{"type":"message","content":[]}')
    f = tflow.tflow(req=req, resp=resp)
    f.metadata["proxai"] = {
        "client_request": '{"model":"gpt-5","messages":[]}',
        "client_headers": {"Authorization": f"Bearer {OPENAI_KEY}"},
        "note": f"upstream said: invalid key {ANTHROPIC_KEY}",
        "upstream_url": f"https://x.example/v1?api_key={GOOGLE_KEY}",
        "raw": f"Bearer {OPENAI_KEY}".encode(),
        "upstream_headers": [["x-api-key", "plainsecretvalue123"], ["content-type", "application/json"]],
    }
    f.comment = f"debug {OPENAI_KEY}"
    return f


def _saved_bytes(flow) -> bytes:
    buf = io.BytesIO()
    mio.FlowWriter(buf).add(flow)
    return buf.getvalue()


def test_saved_flow_contains_no_credential():
    f = _secret_flow()
    raw_before = _saved_bytes(f)
    assert ANTHROPIC_KEY.encode() in raw_before  # the test would prove nothing otherwise
    f.backup()  # a UI edit keeps the pre-edit state, which is saved too
    f.request.headers["x-edited"] = "1"
    body_before = f.request.raw_content
    redact_flow(f)
    data = _saved_bytes(f)
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, GOOGLE_KEY, COOKIE_SECRET, "plainsecretvalue123"):
        assert secret.encode() not in data, secret
    # what is not a credential is unchanged
    assert f.request.raw_content == body_before
    assert f.request.path.startswith("/v1/messages?key=")
    assert f.request.headers["x-api-key"] == REDACTED
    assert f.response.headers["set-cookie"] == f"sid={REDACTED}; Path=/"
    assert f.metadata["proxai"]["client_request"] == '{"model":"gpt-5","messages":[]}'
    assert f.metadata["proxai"]["client_headers"] == {"Authorization": f"Bearer {REDACTED}"}
    assert f.metadata["proxai"]["upstream_headers"] == [["x-api-key", REDACTED], ["content-type", "application/json"]]
    # round trip through the file format
    back = next(iter(mio.FlowReader(io.BytesIO(data)).stream()))
    assert back.request.headers["authorization"] == f"Bearer {REDACTED}"


def test_redaction_is_opt_in_per_call_and_idempotent():
    f = _secret_flow()
    # nothing happens to the live flow unless redact_flow is called (the addon calls it in
    # response/error, after the request went out)
    assert f.request.headers["x-api-key"] == ANTHROPIC_KEY
    redact_flow(f)
    once = _saved_bytes(f)
    redact_flow(f)
    assert _saved_bytes(f) == once


def test_key_inside_a_body_is_masked():
    f = _secret_flow()
    f.request.content = f'{{"model":"x","messages":[{{"role":"user","content":"my key is {OPENAI_KEY}"}}]}}'.encode()
    redact_flow(f)
    assert OPENAI_KEY.encode() not in f.request.content
    assert b"sk-<redacted>" in f.request.content
    redact_flow(tflow.tflow(err=True))  # flows without a response are fine


# ----------------------------------------------------------------------------- the flow's own secrets
CUSTOM_KEY = "plain-gateway-secret-without-any-known-shape"  # no key shape: only exact matching finds it


def test_upstream_401_echoing_the_injected_key_is_redacted():
    """The key the route injected comes back inside the upstream's error body: the recording keeps
    the error, not the key (exact-secret matching; the key has no known shape)."""
    f = _secret_flow()
    f.request.headers["x-api-key"] = CUSTOM_KEY
    f.response.status_code = 401
    f.response.content = ('{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key '
                          + CUSTOM_KEY + '"}}').encode()
    state = redacted_state(f)
    data = orjson.dumps(state, default=str)
    assert CUSTOM_KEY.encode() not in data
    assert b"invalid x-api-key <redacted>" in state["response"]["content"]
    assert f.request.headers["x-api-key"] == CUSTOM_KEY  # the live flow is left alone


def test_secrets_removed_from_the_request_still_count():
    """A route removed the client's credential from the request: the caller passes it, and every
    copy (metadata, comment, bodies) loses it."""
    client_key = "client-key-the-route-removed-123"
    f = tflow.tflow(resp=True)
    f.request.content = f'{{"echo":"{client_key}"}}'.encode()
    f.metadata["proxai"] = {"client_request": f"key={client_key}"}
    f.comment = client_key
    redact_flow(f, secrets=[client_key])
    blob = _saved_bytes(f)
    assert client_key.encode() not in blob
    assert flow_secrets(f, ["short"]) == ()  # values under 8 characters are not treated as secrets


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd", "deflate"])
def test_compressed_body_is_redacted_and_stays_compressed(coding):
    f = tflow.tflow(resp=True)
    f.request.headers["authorization"] = f"Bearer {CUSTOM_KEY}"
    f.response.headers["content-encoding"] = coding
    f.response.content = f'{{"error":"bad key {CUSTOM_KEY}"}}'.encode() * 50  # encodes with ``coding``
    assert CUSTOM_KEY.encode() not in f.response.raw_content
    redact_flow(f)
    assert f.response.headers["content-encoding"] == coding
    assert f.response.get_content() == b'{"error":"bad key <redacted>"}' * 50


def test_cookies_query_and_set_cookie_values_are_exact_secrets():
    f = tflow.tflow(resp=True)
    f.request.path = "/v1/x?token=querysecret-0001&x=1"
    f.request.headers["cookie"] = "sid=cookiesecret-0002; theme=dark"
    f.response.headers["set-cookie"] = "sid=setcookie-secret-0003; Path=/"
    f.response.content = b"querysecret-0001 cookiesecret-0002 setcookie-secret-0003 dark"
    redact_flow(f)
    assert f.response.content == b"<redacted> <redacted> <redacted> dark"


def test_overlapping_matches_and_prefix_kept():
    r = Redactor([OPENAI_KEY, OPENAI_KEY[4:24]])
    out = r.text(f"a {OPENAI_KEY} b {OPENAI_KEY[4:24]} c")
    assert out == "a sk-<redacted> b <redacted> c"
    assert r.text("nothing here") == "nothing here"
    raw = b"no secret"
    assert r.data(raw) is raw  # unchanged input comes back as the same object


def test_json_values_of_secret_keys_any_case():
    t = Redactor().text('{"API_KEY": "abc", "x-api-key": "def", "Client_Secret": "ghi", "tokens": 5}')
    assert t == '{"API_KEY": "<redacted>", "x-api-key": "<redacted>", "Client_Secret": "<redacted>", "tokens": 5}'


def test_twenty_megabytes_scan_in_linear_time():
    """One pass with a small constant: 20 MB of prose with a few secrets well under a second (it
    was ~10 s with a regex per key shape), and twice the input takes about twice the time."""
    rnd = random.Random(7)
    words = [bytes(rnd.choice(string.ascii_letters.encode()) for _ in range(rnd.randint(2, 9))) for _ in range(500)]
    prose = b" ".join(rnd.choice(words) for _ in range(200_000))
    body = prose * (20_000_000 // len(prose)) + f" {OPENAI_KEY} {CUSTOM_KEY} ".encode()
    r = Redactor([CUSTOM_KEY])
    t0 = time.perf_counter()
    out = r.data(body)
    took = time.perf_counter() - t0
    assert out.endswith(b" sk-<redacted> <redacted> ")
    assert took < 1.5, took
    half = body[: len(body) // 2]
    t0 = time.perf_counter()
    r.data(half)
    assert time.perf_counter() - t0 < took * 0.8 + 0.05


def test_redact_ahead_is_used_while_the_flow_is_unchanged():
    f = _secret_flow()
    f.response.content = f"echo {CUSTOM_KEY}".encode()
    f.request.headers["x-api-key"] = CUSTOM_KEY
    asyncio.run(redact_ahead(f))
    prepared = f.__dict__["_proxai_redacted"][1]
    assert redacted_state(f) is prepared
    assert CUSTOM_KEY.encode() not in prepared["response"]["content"]
    f.response.content = f"changed {CUSTOM_KEY}".encode()  # changed after: computed again
    again = redacted_state(f)
    assert again is not prepared and again["response"]["content"] == b"changed <redacted>"


def test_compressed_bomb_is_scanned_without_inflating():
    import tracemalloc
    import zlib

    c = zlib.compressobj(9, wbits=31)
    bomb = b"".join(c.compress(b"\0" * (1 << 20)) for _ in range(256)) + c.flush()
    f = tflow.tflow(resp=True)
    f.response.headers["content-encoding"] = "gzip"
    f.response.raw_content = bomb
    tracemalloc.start()
    try:
        redact_flow(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f.response.raw_content == bomb
    assert peak < 8 * 1024 * 1024, peak


def test_secret_across_a_scan_window_edge_is_found():
    f = tflow.tflow(resp=True)
    f.request.headers["x-api-key"] = CUSTOM_KEY
    f.response.headers["content-encoding"] = "gzip"
    edge = 1024 * 1024 - len(CUSTOM_KEY) // 2
    f.response.content = b"a" * edge + CUSTOM_KEY.encode() + b"b" * 1000
    redact_flow(f)
    assert f.response.get_content() == b"a" * edge + b"<redacted>" + b"b" * 1000
