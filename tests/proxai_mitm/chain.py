"""The ProxAI addons under ``mitmproxy.test.taddons``, registered as mitmproxy loads them (one
:class:`~proxai_mitm.addon.ProxAI` object) and driven through it: each hook runs on every addon in
order (an awaitable result is awaited before the next addon runs)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mitmproxy import eventsequence
from mitmproxy.test import taddons

from proxai_mitm.addon import ProxAI

HOOKS = ("requestheaders", "request", "responseheaders", "response", "error")


class Chain:
    """``chain.request(flow)`` etc. run the hook on every addon; returns None, or a coroutine when an
    addon answered with one (run it with :meth:`run`)."""

    def __init__(self, tctx: Any, proxai: ProxAI) -> None:
        self.tctx = tctx
        self.proxai = proxai
        self.addons = proxai.concerns
        for a in self.addons:  # chain.router, chain.translator, ... by class name
            setattr(self, type(a).__name__.lower(), a)

    def configure(self, **options: Any) -> None:
        self.tctx.configure(self.proxai, **options)

    def run(self, res: Any) -> Any:
        if res is not None and inspect.isawaitable(res):
            return self.tctx.master.event_loop.run_until_complete(res)
        return res

    def hook(self, name: str, flow: Any) -> Any:
        fn = getattr(self.proxai, name, None)
        if fn is None:
            return None
        res = fn(flow)
        return res if inspect.isawaitable(res) else None

    def cycle(self, flow: Any) -> None:
        """The full event sequence of a flow through every addon (as ``mitmdump -nr`` does)."""
        async def go() -> None:
            for evt in eventsequence.iterate(flow):
                await self.tctx.master.addons.invoke_addon(self.proxai, evt)
        self.tctx.master.event_loop.run_until_complete(go())

    def __getattr__(self, name: str) -> Any:
        if name in HOOKS:
            return lambda flow: self.hook(name, flow)
        raise AttributeError(name)


@contextmanager
def chain() -> Iterator[Chain]:
    proxai = ProxAI()
    with taddons.context(proxai) as tctx:
        yield Chain(tctx, proxai)
