"""End to end, a fleet: two real mitmdump instances sharing a real Redis (``proxai_redis``) in front
of the fake upstream. A key limited through one is skipped by the other; every key cooling through
one makes the other answer the native 429 itself; Redis going away mid-run costs nothing but one
warning (each instance keeps its own cooldowns), and once it is back the instances share again.
Redis never holds a key, only short hashes."""

from __future__ import annotations

import time

import httpx2
import pytest

from proxai_mitm.limits.store import RETRY_AFTER, key_name
from tests.fake_upstream import FakeUpstream, Reply
from tests.mitm_harness import Mitmdump

from .e2e_util import ANTH, CLIENT_KEY, UPSTREAM_PATH
from .limits.redis_server import RedisServer

pytestmark = pytest.mark.e2e

POOL = {"shared": ["RK_SHARED_0", "RK_SHARED_1"], "all": ["RK_ALL_0", "RK_ALL_1"],
        "outage": ["RK_OUT_0", "RK_OUT_1"], "again": ["RK_AGAIN_0", "RK_AGAIN_1"]}
ENV = {v: f"sk-ant-fleet-{v.lower().replace('_', '-')}-0123456789" for names in POOL.values() for v in names}
KEY_OF = {value: name for name, value in ENV.items()}
PATH = UPSTREAM_PATH[ANTH]
LIMITED = {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens exceeded"}}


def _routes(up: FakeUpstream) -> str:
    return "\n".join(
        f'[[routes]]\nname = "{name}"\nmatch = {{ model = "{name}" }}\n'
        f'target = {{ protocol = "{ANTH}", base_url = "{up.url}", api_key_env = [{", ".join(map(repr, names))}] }}\n'
        .replace("'", '"') for name, names in POOL.items())


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        print(f"redis-server answered {r.start_time * 1000:.0f} ms after its start")
        yield r


@pytest.fixture(scope="module")
def fleet(upstream, redis_server, tmp_path_factory):
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(_routes(upstream))
    opts = {"proxai_config": str(routes), "proxai_redis": redis_server.url}
    one = Mitmdump(mode=f"reverse:{upstream.url}", options=opts, env=ENV)
    two = Mitmdump(mode=f"reverse:{upstream.url}", options=opts, env=ENV)
    one.start()
    two.start()
    yield one, two
    one.cleanup()
    two.cleanup()


def send(proxy: Mitmdump, model: str) -> httpx2.Response:
    return httpx2.post(proxy.url + "/v1/messages", timeout=30,
                       headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"},
                       json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})


def keys_seen(up: FakeUpstream, start: int = 0) -> list[str]:
    return [KEY_OF[r.header("x-api-key")] for r in up.requests[start:]]


def limit_next(up: FakeUpstream, retry_after: str) -> None:
    up.on(PATH, Reply(status=429, body=LIMITED, times=1,
                      headers=[("content-type", "application/json"), ("retry-after", retry_after)]))


def test_a_key_limited_through_one_instance_is_skipped_by_the_other(fleet, up, redis_server):
    one, two = fleet
    limit_next(up, "30")
    r = send(one, "shared")
    assert r.status_code == 429 and r.headers["retry-after"] == "30"
    assert keys_seen(up) == ["RK_SHARED_0"]
    for _ in range(4):  # the other instance's own turns would give RK_SHARED_0 every second time
        assert send(two, "shared").status_code == 200
    assert keys_seen(up, 1) == ["RK_SHARED_1"] * 4
    # Redis holds the cooldown under the key's short hash, expiring with it
    name = f"proxai:cool:{key_name(ENV['RK_SHARED_0'])}"
    ttl = int(redis_server.command("PTTL", name)[1:].split(b"\r\n")[0])
    assert 25_000 < ttl <= 30_000
    stored = redis_server.command("KEYS", "*")
    assert all(v.encode() not in stored for v in ENV.values())


def test_every_key_cooling_through_one_makes_the_other_answer_429(fleet, up):
    one, two = fleet
    limit_next(up, "40")
    limit_next(up, "25")  # newest first
    assert send(one, "all").status_code == 429
    assert send(two, "all").status_code == 429  # its turn 0 is cooling (through one): RK_ALL_1, limited
    assert keys_seen(up) == ["RK_ALL_0", "RK_ALL_1"]
    for proxy in (one, two):
        r = send(proxy, "all")
        assert r.status_code == 429 and r.headers["retry-after"] == "25"  # the soonest of 25 and 40 s
        assert r.json()["error"]["type"] == "rate_limit_error"
    assert len(up.requests) == 2  # answered by the proxies


def test_redis_going_away_mid_run_and_coming_back(fleet, up, redis_server):
    one, two = fleet
    port = redis_server.port
    redis_server.stop()
    try:
        t0 = time.monotonic()
        for proxy in (one, two):
            assert send(proxy, "outage").status_code == 200
        assert time.monotonic() - t0 < 5  # short timeouts, then Redis is left alone for a while
        # each instance still keeps its own cooldowns
        limit_next(up, "30")
        n = len(up.requests)
        assert send(one, "outage").status_code == 429
        limited = keys_seen(up, n)[0]
        for _ in range(3):
            assert send(one, "outage").status_code == 200
        assert limited not in keys_seen(up, n + 1)
        for proxy in (one, two):
            proxy.wait_for_log(r"Redis at redis://127\.0\.0\.1:\d+/0 does not answer")
            assert proxy.log.count("does not answer") == 1  # one warning, not one per request
    finally:
        redis_server.start(port)
    # back: after the retry pause the instances share again
    time.sleep(RETRY_AFTER + 0.5)
    for proxy in (one, two):
        assert send(proxy, "again").status_code == 200
    limit_next(up, "30")
    n = len(up.requests)
    assert send(one, "again").status_code == 429
    limited = keys_seen(up, n)[0]
    for _ in range(3):
        assert send(two, "again").status_code == 200
    assert limited not in keys_seen(up, n + 1)
    one.wait_for_log("answers again; cooldowns are shared")


def test_no_key_in_the_recordings_or_the_logs(fleet):
    for proxy in fleet:
        recorded = proxy.flows_path.read_bytes()
        for value in ENV.values():
            assert value.encode() not in recorded and value not in proxy.log
