"""limits.py: a pool's keys in turn through the router, a limited key cooled from the upstream
protocol's reset hint, every key cooling answered natively (a fallback route goes on to its
fallbacks), hooks only where a pool or fallbacks exist, the proxai_redis option checked."""

from __future__ import annotations

import json
import time

import pytest
from mitmproxy import exceptions

from proxai_mitm.addons.limits import DEFAULT_COOL, POOL_KEY
from proxai_mitm.addons.router import FAILOVER
from proxai_mitm.failover.server import cool_name
from proxai_mitm.flow.state import flow_state
from proxai_mitm.limits.store import key_name

from ..helpers import ANTH, CHAT, make_flow, respond

KEYS = {"PROXAI_POOL_A": "sk-ant-pool-key-a-0123456789", "PROXAI_POOL_B": "sk-ant-pool-key-b-0123456789"}


@pytest.fixture
def pooled(addon, monkeypatch):
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                    proxai_key_env="PROXAI_POOL_A,PROXAI_POOL_B")
    return addon


def routed(addon, host: str = "api.anthropic.com"):
    f = make_flow(CHAT, host=host)
    addon.request(f)
    return f


def test_keys_in_turn_and_every_key_a_flow_secret(pooled):
    flows = [routed(pooled) for _ in range(3)]
    assert [f.request.headers["x-api-key"] for f in flows] == [KEYS["PROXAI_POOL_A"], KEYS["PROXAI_POOL_B"],
                                                               KEYS["PROXAI_POOL_A"]]
    st = flow_state(flows[0])
    assert set(KEYS.values()) <= set(st.secrets)
    assert st.extra[POOL_KEY] == key_name(KEYS["PROXAI_POOL_A"])


def test_a_429_cools_its_key_for_the_reset_hint(pooled):
    f = routed(pooled)
    respond(f, 429, json.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": "x"}}).encode(),
            "application/json", [("anthropic-ratelimit-requests-remaining", "0"),
                                 ("anthropic-ratelimit-requests-reset", "2099-01-01T00:00:00Z")])
    pooled.responseheaders(f)
    pooled.response(f)
    until = pooled.limits.local.view(key_name(KEYS["PROXAI_POOL_A"]))
    assert until is not None and until > 1e9  # bounded: a day at most
    assert [routed(pooled).request.headers["x-api-key"] for _ in range(3)] == [KEYS["PROXAI_POOL_B"]] * 3


@pytest.mark.parametrize(("status", "body", "cools"), [
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, True),
    (503, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, True),
    (503, {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}, True),
    (502, {"type": "error", "error": {"type": "api_error", "message": "bad gateway"}}, False),
    (500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}, False),
])
def test_overloaded_cools_other_errors_do_not(pooled, status, body, cools):
    f = routed(pooled)
    respond(f, status, json.dumps(body).encode(), "application/json")
    pooled.responseheaders(f)
    t0 = time.time()
    pooled.response(f)
    until = pooled.limits.local.view(key_name(KEYS["PROXAI_POOL_A"]))
    if cools:
        assert until is not None and until - t0 == pytest.approx(DEFAULT_COOL, abs=0.5)  # no hint: the default
    else:
        assert until is None


def test_every_key_cooling_is_a_native_429_without_an_upstream_request(pooled):
    now = time.time()
    pooled.limits.local.put(key_name(KEYS["PROXAI_POOL_A"]), now + 30)
    pooled.limits.local.put(key_name(KEYS["PROXAI_POOL_B"]), now + 12.2)
    f = routed(pooled)
    assert f.response is not None and f.response.status_code == 429
    assert f.response.headers["retry-after"] == "13" and f.response.headers["x-should-retry"] == "true"
    assert 12_000 <= int(f.response.headers["retry-after-ms"]) <= 12_200
    body = json.loads(f.response.content)  # the Chat client's own error shape
    assert (body["error"]["type"], body["error"]["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert "every key of route 'default' is rate limited" in body["error"]["message"]
    assert "x-api-key" not in f.request.headers  # no key sent anywhere: the proxy answered


def test_hooks_only_with_a_pool(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_POOL_A", KEYS["PROXAI_POOL_A"])
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com", proxai_key_env="PROXAI_POOL_A")
    assert addon.limits.response is None and addon.limits.request is None
    addon.configure(proxai_key_env="PROXAI_POOL_A,PROXAI_POOL_B")
    assert addon.limits.response is not None and addon.limits.request is None  # no Redis: nothing to read
    addon.configure(proxai_redis="redis://127.0.0.1:1/0")
    assert addon.limits.request is not None
    addon.configure(proxai_redis="")
    assert addon.limits.request is None and addon.limits.store is addon.limits.local


def test_a_bad_redis_url_is_refused_naming_the_option(addon):
    with pytest.raises(exceptions.OptionsError, match="proxai_redis: expected a redis://"):
        addon.configure(proxai_redis="http://127.0.0.1:6379")


FALLBACK_KEYS = {"PROXAI_POOL_C": "sk-pool-key-c-0123456789", "PROXAI_POOL_D": "sk-pool-key-d-0123456789"}
FALLBACK_ROUTE = """
[[routes]]
name = "fo"
[routes.target]
protocol = "anthropic_messages"
base_url = "https://api.anthropic.com"
api_key_env = ["PROXAI_POOL_A", "PROXAI_POOL_B"]
[[routes.fallbacks]]
protocol = "openai_chat_completions"
base_url = "https://api.openai.com/v1"
api_key_env = ["PROXAI_POOL_C", "PROXAI_POOL_D"]
"""


def test_a_fallback_route_whose_keys_all_cool_goes_on_to_its_fallbacks(addon, monkeypatch, tmp_path):
    """The route's own pool cooling is not the router's 429 but a skipped first attempt; the
    fallback's pool takes its keys in turn from the same Limits store; the attempts (not the Limits
    response hook) cool the keys they carried."""
    for k, v in {**KEYS, **FALLBACK_KEYS}.items():
        monkeypatch.setenv(k, v)
    routes = tmp_path / "routes.toml"
    routes.write_text(FALLBACK_ROUTE)
    addon.configure(proxai_config=str(routes))
    now = time.time()
    addon.limits.local.put(key_name(KEYS["PROXAI_POOL_A"]), now + 30)
    addon.limits.local.put(key_name(KEYS["PROXAI_POOL_B"]), now + 20)
    f = make_flow(CHAT, host="api.anthropic.com")
    addon.router.request(f)
    assert f.response is None  # not answered by the router: the fallback may answer
    st = flow_state(f)
    plan = st.extra[FAILOVER]
    assert plan.first.skip is not None and "every key of 'fo'" in plan.first.skip
    assert 19 < plan.first.wait <= 20
    assert POOL_KEY not in st.extra
    preps = [plan.prepare(plan.upstreams[1]) for _ in range(3)]
    assert [p.request.headers["authorization"] for p in preps] == [
        f"Bearer {FALLBACK_KEYS[k]}" for k in ("PROXAI_POOL_C", "PROXAI_POOL_D", "PROXAI_POOL_C")]
    assert preps[0].cool == (key_name(FALLBACK_KEYS["PROXAI_POOL_C"]),)
    addon.limits.local.put(key_name(FALLBACK_KEYS["PROXAI_POOL_C"]), now + 9)
    addon.limits.local.put(key_name(FALLBACK_KEYS["PROXAI_POOL_D"]), now + 7)
    skipped = plan.prepare(plan.upstreams[1])
    assert skipped.skip is not None and 6 < skipped.wait <= 7


def test_with_redis_a_fallback_route_reads_its_first_upstreams_cooldown(addon, monkeypatch, tmp_path):
    for k, v in {**KEYS, **FALLBACK_KEYS}.items():
        monkeypatch.setenv(k, v)
    routes = tmp_path / "routes.toml"
    routes.write_text(FALLBACK_ROUTE)
    addon.configure(proxai_config=str(routes), proxai_redis="redis://127.0.0.1:1/0")
    route = addon.limits.options.routes.find_name("fo")
    names = addon.limits._shared_names()
    assert cool_name(route.upstreams[0]) in names
    assert {key_name(v) for v in (*KEYS.values(), *FALLBACK_KEYS.values())} <= set(names)
    assert addon.limits.request is not None
    addon.configure(proxai_redis="")
