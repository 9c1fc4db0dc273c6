"""The ProxAI addon chain under ``mitmproxy.test.taddons``: hooks called on every addon in order,
as mitmproxy does (an awaitable result is awaited before the next addon runs)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mitmproxy import eventsequence
from mitmproxy.test import taddons

from proxai_mitm.addon import make_addons

HOOKS = ("requestheaders", "request", "responseheaders", "response", "error")


class Chain:
    """``chain.request(flow)`` etc. run the hook on every addon; returns None, or a coroutine when an
    addon answered with one (run it with :meth:`run`)."""

    def __init__(self, tctx: Any, addons: list[Any]) -> None:
        self.tctx = tctx
        self.addons = addons
        for a in addons:  # chain.router, chain.translator, ... by class name
            setattr(self, type(a).__name__.lower(), a)

    def configure(self, **options: Any) -> None:
        self.tctx.configure(self.addons[0], **options)

    def run(self, res: Any) -> Any:
        if res is not None and inspect.isawaitable(res):
            return self.tctx.master.event_loop.run_until_complete(res)
        return res

    def hook(self, name: str, flow: Any) -> Any:
        for i, a in enumerate(self.addons):
            fn = getattr(a, name, None)
            if fn is None:
                continue
            res = fn(flow)
            if inspect.isawaitable(res):
                return self._rest(name, flow, res, i + 1)
        return None

    async def _rest(self, name: str, flow: Any, res: Any, start: int) -> None:
        await res
        for a in self.addons[start:]:
            fn = getattr(a, name, None)
            if fn is not None:
                r = fn(flow)
                if inspect.isawaitable(r):
                    await r

    def cycle(self, flow: Any) -> None:
        """The full event sequence of a flow through every addon (as ``mitmdump -nr`` does)."""
        async def go() -> None:
            for evt in eventsequence.iterate(flow):
                for a in self.addons:
                    await self.tctx.master.addons.invoke_addon(a, evt)
        self.tctx.master.event_loop.run_until_complete(go())

    def __getattr__(self, name: str) -> Any:
        if name in HOOKS:
            return lambda flow: self.hook(name, flow)
        raise AttributeError(name)


@contextmanager
def chain() -> Iterator[Chain]:
    addons = make_addons()
    with taddons.context(*addons) as tctx:
        yield Chain(tctx, addons)
