"""Cooldowns: until when a name (an upstream, a key of a pool) is skipped, and the turn of a pool.

:class:`ProcessStore` keeps them in the process (the default); :class:`RedisStore` shares them
through Redis (``proxai_redis``) with every mitmdump instance using the same server, and falls
back to its own process store while Redis does not answer. Both have the same async interface
(:class:`CooldownStore`); the process store also answers synchronously (:meth:`ProcessStore.view`),
which is what a hook that must not wait reads.

Times are wall-clock seconds (``time.time()``). A name never contains a key: :func:`key_name`
makes a key's name from a short hash of it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

__all__ = ["CooldownStore", "MAX_ENTRIES", "ProcessStore", "RedisStore", "key_name"]

#: the process store keeps at most this many cooldowns and turn counters (expired ones go first)
MAX_ENTRIES = 10_000
#: a cooldown longer than this is stored as this long (hints are bounded before, this is the last guard)
MAX_COOL = 86400.0


def key_name(key: str) -> str:
    """The store's name of an API key: a short hash, never the key."""
    return "key:" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:16]


class CooldownStore(Protocol):
    """What the cooldown stores share (async: a shared store talks to a server)."""

    async def until(self, name: str) -> float | None:
        """When ``name``'s cooldown ends, or None when it is not cooling."""
        ...

    async def untils(self, names: Sequence[str]) -> list[float | None]:
        """:meth:`until` of several names at once (one round trip)."""
        ...

    async def cool(self, name: str, until: float) -> None:
        """``name`` cools until ``until``; a longer cooldown already there stays."""
        ...

    async def turn(self, name: str) -> int:
        """The next number of a counter (0, 1, 2, ...): whose turn it is in a pool."""
        ...

    async def close(self) -> None:
        """Let go of connections."""
        ...


class ProcessStore:
    """Cooldowns and turn counters in this process: bounded (:data:`MAX_ENTRIES` each), expired
    cooldowns dropped when read or when room is needed."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._until: dict[str, float] = {}
        self._turns: dict[str, int] = {}

    # --- synchronous (the process store never waits)
    def view(self, name: str, now: float | None = None) -> float | None:
        until = self._until.get(name)
        if until is None:
            return None
        if until <= (time.time() if now is None else now):
            del self._until[name]
            return None
        return until

    def put(self, name: str, until: float, now: float | None = None) -> None:
        now = time.time() if now is None else now
        until = min(until, now + MAX_COOL)
        if until <= now:
            return
        if until <= self._until.get(name, 0.0):
            return
        if name not in self._until and len(self._until) >= self.max_entries:
            self._make_room(now)
        self._until[name] = until

    def next_turn(self, name: str) -> int:
        n = self._turns.get(name)
        if n is None:
            if len(self._turns) >= self.max_entries:
                self._turns.pop(next(iter(self._turns)))  # the oldest counter
            n = 0
        self._turns[name] = n + 1
        return n

    def _make_room(self, now: float) -> None:
        expired = [n for n, u in self._until.items() if u <= now]
        for n in expired:
            del self._until[n]
        if len(self._until) >= self.max_entries:  # all alive: the one ending soonest goes
            del self._until[min(self._until, key=self._until.__getitem__)]

    def __len__(self) -> int:
        return len(self._until)

    # --- the async interface
    async def until(self, name: str) -> float | None:
        return self.view(name)

    async def untils(self, names: Sequence[str]) -> list[float | None]:
        now = time.time()
        return [self.view(n, now) for n in names]

    async def cool(self, name: str, until: float) -> None:
        self.put(name, until)

    async def turn(self, name: str) -> int:
        return self.next_turn(name)

    async def close(self) -> None:
        return None


#: Redis keys are ``proxai:<kind>:<name>``
PREFIX = "proxai:"
#: a Redis command that does not answer in this time counts as Redis being down
TIMEOUT = 0.25
#: after a failure, Redis is tried again after this long (meanwhile the process store answers)
RETRY_AFTER = 5.0
#: connections to Redis at most, per process
MAX_CONNECTIONS = 32
#: turn counters expire after a day without use
TURN_TTL_MS = 86_400_000

# sets the cooldown unless a longer one is there (PTTL -2: no key, -1: no expiry)
_COOL = """
local t = redis.call('PTTL', KEYS[1])
if t < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], '1', 'PX', ARGV[1]) end
return 1
"""


class RedisStore:
    """Cooldowns shared through Redis: ``proxai:cool:<name>`` expires with its cooldown (PX), so
    Redis forgets it when it ends; turns are ``proxai:turn:<name>`` counters. Every write also goes
    to the process store, which answers alone while Redis is down (one warning when it goes, one
    line when it is back). Commands time out after :data:`TIMEOUT`."""

    def __init__(self, url: str, local: ProcessStore | None = None, *, timeout: float = TIMEOUT) -> None:
        import redis.asyncio as aioredis  # only with proxai_redis set

        self.url = url
        self.local = local if local is not None else ProcessStore()
        # a bounded pool: a flow beyond MAX_CONNECTIONS concurrent ones waits for a free connection
        # (within the timeout) instead of opening another
        self._pool: Any = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=MAX_CONNECTIONS, timeout=timeout, socket_timeout=timeout,
            socket_connect_timeout=timeout, retry_on_timeout=False, health_check_interval=0)
        self._client: Any = aioredis.Redis(connection_pool=self._pool)
        self._down_until = 0.0
        self._warned = False
        self._timeout = timeout

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def _failed(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + RETRY_AFTER
        if not self._warned:
            self._warned = True
            logger.warning("proxai: Redis at %s does not answer (%s); cooldowns are kept in this process "
                           "until it does", _safe_url(self.url), type(exc).__name__)

    def _answered(self) -> None:
        if self._warned:
            self._warned = False
            logger.info("proxai: Redis at %s answers again; cooldowns are shared", _safe_url(self.url))

    async def _run(self, fn: Any) -> Any:
        """``await fn()`` unless Redis is down; None (and Redis marked down) on any failure."""
        if self.down:
            return None
        try:
            result = await asyncio.wait_for(fn(), self._timeout * 2)
        except Exception as exc:  # noqa: BLE001 - any Redis failure means: the process store answers
            self._failed(exc)
            return None
        self._answered()
        return result

    async def untils(self, names: Sequence[str]) -> list[float | None]:
        names = list(names)
        if not names:
            return []

        async def ttls() -> list[int]:
            pipe = self._client.pipeline(transaction=False)
            for n in names:
                pipe.pttl(PREFIX + "cool:" + n)
            return await pipe.execute()

        got = await self._run(ttls)
        now = time.time()
        if got is None:
            return [self.local.view(n, now) for n in names]
        out: list[float | None] = []
        for n, ms in zip(names, got):
            if isinstance(ms, int) and ms > 0:
                until = now + min(ms / 1000, MAX_COOL)
                self.local.put(n, until, now)  # remembered for when Redis goes away
                out.append(max(until, self.local.view(n, now) or 0.0))
            else:
                out.append(self.local.view(n, now))
        return out

    async def until(self, name: str) -> float | None:
        return (await self.untils([name]))[0]

    async def cool(self, name: str, until: float) -> None:
        now = time.time()
        self.local.put(name, until, now)
        ms = int(min(until - now, MAX_COOL) * 1000)
        if ms <= 0:
            return
        await self._run(lambda: self._client.eval(_COOL, 1, PREFIX + "cool:" + name, ms))

    async def turn(self, name: str) -> int:
        async def incr() -> int:
            pipe = self._client.pipeline(transaction=False)
            pipe.incr(PREFIX + "turn:" + name)
            pipe.pexpire(PREFIX + "turn:" + name, TURN_TTL_MS)
            n, _ = await pipe.execute()
            return int(n) - 1

        n = await self._run(incr)
        return self.local.next_turn(name) if n is None else n

    async def close(self) -> None:
        try:
            await self._client.aclose()
            await self._pool.disconnect()
        except Exception:  # noqa: BLE001 - closing a connection that is gone
            pass


def _safe_url(url: str) -> str:
    """The URL without its password (a Redis URL may carry one)."""
    try:
        u = urlsplit(url)
        port = f":{u.port}" if u.port else ""
    except ValueError:
        return "redis"
    host = u.hostname or ""
    return f"{u.scheme}://{host}{port}{u.path}"
