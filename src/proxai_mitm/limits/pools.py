"""Key pools: an upstream with several keys (environment variables) takes them in turn and skips
a key that is cooling down after its upstream limited it.

The choice is synchronous, read from the process store (a shared store copies what it reads from
Redis there before the request is routed), so routing never waits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .store import ProcessStore, key_name

__all__ = ["Pick", "pick_key", "pool_keys"]


@dataclass(frozen=True, slots=True)
class Pick:
    """A pool's choice: a key and the variable it came from; or, when every key is cooling, no key
    and the seconds until the soonest cooldown ends (``wait``); or nothing at all (no variable set)."""

    key: str | None = None
    env: str | None = None
    wait: float | None = None


def pool_keys(envs: Sequence[str], environ: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """(variable, key) of every variable of the pool that is set, in order."""
    out = []
    for env in envs:
        value = (environ.get(env) or "").strip()
        if value:
            out.append((env, value))
    return out


def pick_key(pool: str, envs: Sequence[str], store: ProcessStore, *,
             environ: Mapping[str, str] = os.environ, now: float | None = None) -> Pick:
    """The next key of the pool named ``pool`` (round-robin), skipping cooling keys."""
    keys = pool_keys(envs, environ)
    if not keys:
        return Pick()
    now = time.time() if now is None else now
    start = store.next_turn("pool:" + pool) % len(keys) if len(keys) > 1 else 0
    soonest: float | None = None
    for i in range(len(keys)):
        env, key = keys[(start + i) % len(keys)]
        until = store.view(key_name(key), now)
        if until is None:
            return Pick(key, env)
        soonest = until if soonest is None else min(soonest, until)
    assert soonest is not None
    return Pick(wait=max(soonest - now, 0.0))
