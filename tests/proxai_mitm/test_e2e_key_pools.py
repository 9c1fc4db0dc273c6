"""End to end, key pools through a real mitmdump (reverse mode) in front of the fake upstream: the
upstream sees the pool's keys in turn; a key its upstream limited is skipped exactly as long as the
reset hint says, in every form the providers send it (the cooldown measured from the outside);
every key cooling gives each client protocol its native 429 with the soonest retry-after, parsed by
the official SDKs, and nothing goes upstream; no key of any pool appears in the recording or the
log."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from email.utils import formatdate
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.fake_upstream import FakeUpstream, Reply
from tests.mitm_harness import Mitmdump

from .e2e_util import ANTH, CHAT, CLIENT_KEY, RESP, SHORT, UPSTREAM_PATH

pytestmark = pytest.mark.e2e

GEMINI = "gemini_generate_content"
SHORTS = {**SHORT, GEMINI: "gemini"}
PROTOS = (CHAT, RESP, ANTH, GEMINI)
#: the reset hint forms: (name, upstream protocol, status) -> the answer (headers, body) and the
#: instant the cooldown must end, made at the time of the answer
FORMS = ["retry-after", "retry-after-ms", "retry-after-date", "openai-reset-requests",
         "openai-reset-tokens", "anthropic-reset", "anthropic-529", "gemini-retry-info"]
FORM_PROTO = {"retry-after": RESP, "retry-after-ms": CHAT, "retry-after-date": ANTH,
              "openai-reset-requests": CHAT, "openai-reset-tokens": RESP, "anthropic-reset": ANTH,
              "anthropic-529": ANTH, "gemini-retry-info": GEMINI}
POOLS: dict[str, tuple[str, list[str]]] = {}  # route name -> (protocol, variable names)
for _p in PROTOS:
    POOLS[f"rot-{SHORTS[_p]}"] = (_p, [f"PK_ROT_{SHORTS[_p].upper()}_{i}" for i in range(3)])
    POOLS[f"all-{SHORTS[_p]}"] = (_p, [f"PK_ALL_{SHORTS[_p].upper()}_{i}" for i in range(2)])
for _f in FORMS:
    POOLS[f"form-{_f}"] = (FORM_PROTO[_f], [f"PK_FORM_{_f.upper().replace('-', '_')}_{i}" for i in range(2)])
ENV = {v: f"sk-pool-{v.lower().replace('_', '-')}-0123456789" for _, names in POOLS.values() for v in names}
KEY_OF = {value: name for name, value in ENV.items()}


def _routes(up: FakeUpstream) -> str:
    out = []
    for name, (p, names) in POOLS.items():
        envs = ", ".join(f'"{n}"' for n in names)
        out.append(f'[[routes]]\nname = "{name}"\nmatch = {{ model = "{name}" }}\n'
                   f'target = {{ protocol = "{p}", base_url = "{up.url}", api_key_env = [{envs}] }}\n')
    return "\n".join(out)


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(_routes(upstream))
    m = Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)}, env=ENV)
    m.start()
    yield m
    m.cleanup()


@pytest.fixture(scope="module")
def http(proxy):
    with httpx2.Client(base_url=proxy.url, timeout=30) as h:
        yield h


def upstream_path(p: str, model: str) -> str:
    return f"/v1beta/models/{model}:generateContent" if p == GEMINI else UPSTREAM_PATH[p]


def send(http: httpx2.Client, p: str, model: str) -> httpx2.Response:
    """One non-streaming request of protocol ``p`` for ``model`` (a same-protocol pool route)."""
    if p == GEMINI:
        return http.post(f"/v1beta/models/{model}:generateContent", headers={"x-goog-api-key": CLIENT_KEY},
                         json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    if p == ANTH:
        return http.post("/v1/messages", headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"},
                         json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
    body: dict[str, Any] = ({"model": model, "messages": [{"role": "user", "content": "hi"}]} if p == CHAT
                            else {"model": model, "input": "hi"})
    return http.post(UPSTREAM_PATH[p], headers={"authorization": f"Bearer {CLIENT_KEY}"}, json=body)


def seen_key(rec: Any, p: str) -> str:
    """The variable whose key the upstream got."""
    if p == GEMINI:
        value = rec.header("x-goog-api-key")
    elif p == ANTH:
        value = rec.header("x-api-key")
    else:
        value = (rec.header("authorization") or "").removeprefix("Bearer ")
    assert value != CLIENT_KEY
    return KEY_OF[value]


def limited(status: int, headers: list[tuple[str, str]], body: Any) -> Reply:
    return Reply(status=status, body=json.dumps(body).encode(), times=1,
                 headers=[("content-type", "application/json"), *headers])


# ----------------------------------------------------------------------------- rotation
@pytest.mark.parametrize("p", PROTOS, ids=lambda p: SHORTS[p])
def test_keys_are_taken_in_turn(proxy, up, http, p):
    model = f"rot-{SHORTS[p]}"
    for _ in range(6):
        assert send(http, p, model).status_code == 200
    seen = [seen_key(r, p) for r in up.wait_for_requests(6)]
    names = POOLS[model][1]
    assert seen == names + names  # round-robin: every key in turn, then again


# ----------------------------------------------------------------------------- cooldowns, measured
def _answer(form: str) -> tuple[int, list[tuple[str, str]], Any, float]:
    """(status, headers, body, the instant the cooldown must end) of a limited answer now."""
    now = time.time()
    rate = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    anth = {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests exceeded"}}
    if form == "retry-after":
        return 429, [("retry-after", "2")], rate, now + 2
    if form == "retry-after-ms":
        return 429, [("retry-after-ms", "1500")], rate, now + 1.5
    if form == "retry-after-date":  # whole seconds: the instant itself is the end
        end = math.floor(now) + 3
        return 429, [("retry-after", formatdate(end, usegmt=True))], anth, end
    if form == "openai-reset-requests":
        return 429, [("x-ratelimit-limit-requests", "60"), ("x-ratelimit-remaining-requests", "0"),
                     ("x-ratelimit-reset-requests", "1.5s"), ("x-ratelimit-remaining-tokens", "38000"),
                     ("x-ratelimit-reset-tokens", "6m0s")], rate, now + 1.5
    if form == "openai-reset-tokens":
        return 429, [("x-ratelimit-remaining-requests", "59"), ("x-ratelimit-reset-requests", "1s"),
                     ("x-ratelimit-remaining-tokens", "0"), ("x-ratelimit-reset-tokens", "1.8s")], rate, now + 1.8
    if form == "anthropic-reset":
        end = now + 2
        stamp = datetime.fromtimestamp(end, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return 429, [("anthropic-ratelimit-requests-remaining", "12"),
                     ("anthropic-ratelimit-requests-reset", stamp),
                     ("anthropic-ratelimit-input-tokens-remaining", "0"),
                     ("anthropic-ratelimit-input-tokens-reset", stamp)], anth, end
    if form == "anthropic-529":
        return 529, [("retry-after", "1")], {"type": "error", "error": {"type": "overloaded_error",
                                                                         "message": "Overloaded"}}, now + 1
    assert form == "gemini-retry-info"
    return 429, [], {"error": {"code": 429, "message": "You exceeded your current quota.",
                               "status": "RESOURCE_EXHAUSTED",
                               "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                            "retryDelay": "1.5s"}]}}, now + 1.5


@pytest.mark.parametrize("form", FORMS)
def test_a_limited_key_is_skipped_until_its_reset(proxy, up, http, form):
    model = f"form-{form}"
    p, (first, second) = POOLS[model]
    path = upstream_path(p, model)
    status, headers, body, end = _answer(form)
    up.on(path, limited(status, headers, body))
    r = send(http, p, model)  # the first key's turn: limited
    t_limited = time.time()
    assert r.status_code == status  # the upstream's answer, passed through
    assert seen_key(up.wait_for_requests(1)[0], p) == first
    # meanwhile every request goes to the other key; the first comes back at its reset
    back_at = None
    deadline = t_limited + 10
    while time.time() < deadline:
        n = len(up.requests)
        assert send(http, p, model).status_code == 200
        if seen_key(up.wait_for_requests(n + 1)[n], p) == first:
            back_at = time.time()
            break
        time.sleep(0.05)
    assert back_at is not None, "the limited key never came back"
    print(f"cooldown {form}: expected {end - t_limited:.2f} s, measured {back_at - t_limited:.2f} s")
    assert end - 0.1 <= back_at <= end + 1.0, (form, end - t_limited, back_at - t_limited)
    assert all(seen_key(rec, p) == second for rec in up.requests[1:-1])
    proxy.wait_for_log(rf"a key of route '{model}' is limited \(HTTP {status}\); skipped for [\d.]+ s")


# ----------------------------------------------------------------------------- every key cooling
def _cool_whole_pool(http: httpx2.Client, up: FakeUpstream, p: str, model: str) -> None:
    path = upstream_path(p, model)
    body = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}} if p == GEMINI else \
        {"type": "error", "error": {"type": "rate_limit_error", "message": "limited"}} if p == ANTH else \
        {"error": {"message": "limited", "type": "requests", "code": "rate_limit_exceeded"}}
    up.on(path, limited(429, [("retry-after", "20")], body))
    up.on(path, limited(429, [("retry-after", "30")], body))  # newest first: served first
    assert send(http, p, model).status_code == 429
    assert send(http, p, model).status_code == 429
    assert [seen_key(r, p) for r in up.wait_for_requests(2)] == POOLS[model][1]


def _sdk_call(proxy: Mitmdump, p: str, model: str) -> tuple[int, Any, Any]:
    """(status, headers, error) of one SDK request that the proxy answers 429."""
    if p == GEMINI:
        g = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=proxy.url, timeout=30_000))
        with pytest.raises(genai_errors.ClientError) as ge:
            g.models.generate_content(model=model, contents="hi")
        return ge.value.code, ge.value.response.headers, ge.value.details
    if p == ANTH:
        a = anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as ae:
            a.messages.create(model=model, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        return ae.value.status_code, ae.value.response.headers, ae.value.body
    o = openai.OpenAI(base_url=proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError) as oe:
        if p == CHAT:
            o.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
        else:
            o.responses.create(model=model, input="hi")
    return oe.value.status_code, oe.value.response.headers, oe.value.body


@pytest.mark.parametrize("p", PROTOS, ids=lambda p: SHORTS[p])
def test_every_key_cooling_is_the_clients_native_429_with_the_soonest_retry_after(proxy, up, http, p):
    model = f"all-{SHORTS[p]}"
    _cool_whole_pool(http, up, p, model)
    status, headers, err = _sdk_call(proxy, p, model)
    assert status == 429
    assert headers["retry-after"] == "20"  # the soonest of 30 and 20 s
    assert 18_000 <= int(headers["retry-after-ms"]) <= 20_000
    assert len(up.requests) == 2  # the proxy answered: nothing went upstream
    text = json.dumps(err)
    assert "every key of route" in text and "rate limited" in text
    if p == ANTH:
        assert err["type"] == "error" and err["error"]["type"] == "rate_limit_error"
    elif p == GEMINI:
        assert err["error"]["status"] == "RESOURCE_EXHAUSTED"
    f = proxy.flows()[-1]
    stop = f.metadata["proxai"]["stop"]
    assert stop["detail"]["status"] == 429


def test_an_openai_sdk_that_retries_waits_for_the_reset(proxy, up, http):
    """The 429 says when: an SDK with retries on waits that long (here ~1.5 s), then gets through."""
    model = "form-retry-after-ms"
    p, names = POOLS[model]
    path = upstream_path(p, model)
    for wait in ("1500", "1200"):
        up.on(path, limited(429, [("retry-after-ms", wait)], {"error": {"message": "limited", "type": "requests"}}))
    t0 = time.monotonic()
    assert send(http, p, model).status_code == 429
    assert send(http, p, model).status_code == 429
    o = openai.OpenAI(base_url=proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=2)
    r = o.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content
    took = time.monotonic() - t0
    assert 1.1 <= took <= 6, took  # it waited for the soonest reset, not more than a few seconds


# ----------------------------------------------------------------------------- nothing leaks
def test_no_pool_key_in_the_recording_or_the_log(proxy, up, http):
    # at least one flow per pool route (the tests above may have been deselected)
    for name, (p, _) in POOLS.items():
        send(http, p, name)
    recorded = proxy.flows_path.read_bytes()
    log = proxy.log
    for value in ENV.values():
        assert value.encode() not in recorded, value
        assert value not in log, value
