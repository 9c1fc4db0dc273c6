"""Cooldown stores: the process store (bounded, expiring) and the Redis store against a real
redis-server (shared between two stores, namespaced keys that expire with the cooldown, the process
store answering while Redis is gone)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from proxai_mitm.limits.store import MAX_COOL, ProcessStore, RedisStore, key_name

from .redis_server import RedisServer


def run(coro):
    return asyncio.run(coro)


# ----------------------------------------------------------------------------- process store
def test_process_store_cools_and_forgets_when_the_cooldown_ends() -> None:
    s = ProcessStore()
    now = 1000.0
    s.put("a", now + 5, now)
    assert s.view("a", now + 1) == now + 5
    assert s.view("a", now + 5) is None  # ended: dropped
    assert len(s) == 0
    s.put("b", now - 1, now)  # already over: nothing kept
    assert len(s) == 0


def test_process_store_keeps_the_longer_cooldown() -> None:
    s = ProcessStore()
    s.put("a", 1030.0, 1000.0)
    s.put("a", 1010.0, 1000.0)
    assert s.view("a", 1000.0) == 1030.0
    s.put("a", 1040.0, 1000.0)
    assert s.view("a", 1000.0) == 1040.0


def test_process_store_caps_a_cooldown_at_a_day() -> None:
    s = ProcessStore()
    s.put("a", 1e12, 1000.0)
    assert s.view("a", 1000.0) == 1000.0 + MAX_COOL


def test_process_store_is_bounded() -> None:
    s = ProcessStore(max_entries=3)
    now = 1000.0
    s.put("old", now + 1, now)
    s.put("x", now + 50, now)
    s.put("y", now + 60, now)
    s.put("z", now + 70, now + 2)  # "old" has ended: it makes the room
    assert len(s) == 3 and s.view("old", now + 2) is None
    s.put("w", now + 80, now + 2)  # all alive: the one ending soonest ("x") goes
    assert len(s) == 3
    assert s.view("x", now + 2) is None and s.view("w", now + 2) == now + 80
    for i in range(10):
        s.next_turn(f"pool{i}")
    assert len(s._turns) == 3


def test_process_store_turns_count_per_name() -> None:
    s = ProcessStore()
    assert [s.next_turn("p") for _ in range(3)] == [0, 1, 2]
    assert s.next_turn("q") == 0


def test_process_store_async_interface() -> None:
    s = ProcessStore()

    async def go():
        until = time.time() + 30
        await s.cool("k", until)
        return await s.until("k"), await s.untils(["k", "none"]), await s.turn("p"), await s.turn("p")

    until, both, t0, t1 = run(go())
    assert until is not None and both == [until, None] and (t0, t1) == (0, 1)


def test_key_name_is_a_short_hash() -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    name = key_name(key)
    assert name.startswith("key:") and len(name) == 20
    assert key not in name and key[-8:] not in name and key_name(key) == name
    assert key_name(key + "x") != name


# ----------------------------------------------------------------------------- Redis store
@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        yield r


def test_two_redis_stores_share_cooldowns_and_turns(redis_server) -> None:
    async def go():
        a, b = RedisStore(redis_server.url), RedisStore(redis_server.url)
        try:
            until = time.time() + 30
            await a.cool("key:shared-1", until)
            seen = await b.until("key:shared-1")
            both = await b.untils(["key:shared-1", "key:unknown"])
            turns = [await a.turn("pool:shared"), await b.turn("pool:shared"), await a.turn("pool:shared")]
            return until, seen, both, turns, b.local.view("key:shared-1")
        finally:
            await a.close()
            await b.close()

    until, seen, both, turns, copied = run(go())
    assert seen == pytest.approx(until, abs=0.1)
    assert both[0] == pytest.approx(until, abs=0.1) and both[1] is None
    assert turns == [0, 1, 2]
    assert copied == pytest.approx(until, abs=0.1)  # b's process store keeps what Redis said


def test_redis_keys_are_namespaced_and_expire_with_the_cooldown(redis_server) -> None:
    key = "sk-ant-api03-secret-value-0123456789"

    async def go():
        s = RedisStore(redis_server.url)
        try:
            await s.cool(key_name(key), time.time() + 20)
            await s.cool(key_name(key), time.time() + 5)  # shorter: the longer one stays
        finally:
            await s.close()

    run(go())
    ttl = int(redis_server.command("PTTL", f"proxai:cool:{key_name(key)}")[1:].split(b"\r\n")[0])
    assert 15_000 < ttl <= 20_000
    keys = redis_server.command("KEYS", "*")
    assert key.encode() not in keys and b"proxai:cool:key:" in keys


def test_redis_going_away_falls_back_to_the_process_store(caplog) -> None:
    server = RedisServer().start()
    port = server.port
    caplog.set_level(logging.INFO, logger="proxai_mitm.limits.store")

    async def go():
        s = RedisStore(server.url)
        try:
            await s.cool("key:before", time.time() + 60)
            server.stop()  # Redis goes away mid-run
            t0 = time.monotonic()
            before = await s.until("key:before")  # what this process knew
            await s.cool("key:during", time.time() + 60)
            during = await s.until("key:during")
            turn = await s.turn("pool:p")
            took = time.monotonic() - t0
            # Redis comes back (empty): the store uses it again once its retry pause is over
            server.start(port)
            s._down_until = 0.0
            await s.cool("key:after", time.time() + 60)
            return before, during, turn, took
        finally:
            await s.close()

    try:
        before, during, turn, took = run(go())
        assert before is not None and during is not None and turn == 0
        assert took < 2.0  # timeouts are short, then Redis is not asked for a while
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "does not answer" in warnings[0].getMessage()
        assert any("answers again" in r.getMessage() for r in caplog.records)
        assert b"proxai:cool:key:after" in server.command("KEYS", "*")
    finally:
        server.cleanup()


def test_an_unreachable_redis_never_fails(caplog) -> None:
    from tests.mitm_harness import free_port

    async def go():
        s = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
        try:
            await s.cool("key:x", time.time() + 10)
            return await s.until("key:x"), await s.turn("pool:x")
        finally:
            await s.close()

    until, turn = run(go())
    assert until is not None and turn == 0


def test_many_concurrent_flows_share_a_bounded_pool(redis_server) -> None:
    from proxai_mitm.limits.store import MAX_CONNECTIONS

    async def go():
        s = RedisStore(redis_server.url)
        try:
            await s.cool("key:busy", time.time() + 30)
            got = await asyncio.gather(*(s.until("key:busy") for _ in range(MAX_CONNECTIONS * 8)))
            info = redis_server.command("INFO", "clients").decode()
            return got, s.down, int(info.split("connected_clients:")[1].split()[0]) - 1  # not INFO's own
        finally:
            await s.close()

    got, down, opened = run(go())
    assert all(u is not None for u in got) and not down
    assert opened <= MAX_CONNECTIONS
