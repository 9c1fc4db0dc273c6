"""ProxAI's parts timed where they run: each addon's flow hook and the stream callable (and, asked for,
the exchange's share of the callable). ``benchmarks/proxy_parts.py`` uses it in its own process and
inside a mitmdump (its timed script imports this module), so both columns time the same things.

Wall time of the calling thread (``perf_counter``, about 0.1 µs a reading): in this process nothing
else runs; in mitmdump the hooks run on the event loop's thread.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from proxai_mitm import addon as proxai_addon
from proxai_mitm.wire import streaming

__all__ = ["EXCHANGE", "time_parts"]

#: the name of the exchange's share of the stream callable (indented: a part of the row above it)
EXCHANGE = "  of which the exchange (decode, translate, observe)"


def time_parts(spent: collections.Counter[str], *, exchange: bool = False) -> Callable[[], None]:
    """Time every ProxAI hook and the stream callable into ``spent`` (seconds by part) from now on:
    ``ProxAI._rebuild`` wraps each addon's hook as it collects it (so an addon that switches a hook on
    or off in ``configure`` is timed as it runs). Returns the function that undoes it."""
    clock = time.perf_counter

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any) -> Any:
            t = clock()
            try:
                return fn(*a)
            finally:
                spent[name] += clock() - t
        return run

    def rebuild(self: proxai_addon.ProxAI) -> None:  # ProxAI's own, each hook timed
        for name in proxai_addon.FLOW_HOOKS:
            fns = tuple(timed(f"{type(a).__name__}.{name}", fn)
                        for a in self.concerns if (fn := getattr(a, name, None)) is not None)
            setattr(self, name, None if not fns else fns[0] if len(fns) == 1 else proxai_addon._in_order(fns))

    handler, proxai = streaming.StreamHandler, proxai_addon.ProxAI
    originals = handler.__call__, handler._feed, proxai._rebuild
    handler.__call__ = timed("stream callable", handler.__call__)  # type: ignore[method-assign]
    if exchange:
        handler._feed = timed(EXCHANGE, handler._feed)  # type: ignore[method-assign]
    proxai._rebuild = rebuild  # type: ignore[method-assign]

    def undo() -> None:
        handler.__call__, handler._feed, proxai._rebuild = originals  # type: ignore[method-assign]
    return undo
