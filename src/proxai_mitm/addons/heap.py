"""The start-up heap, frozen: once mitmproxy, ProxAI and every script are loaded, the objects they made
live as long as the process, so the cyclic garbage collector stops scanning them.

CPython's full collections walk every tracked object. Without this, each of them walks mitmproxy's and
ProxAI's modules, classes and functions again (about 100,000 objects), and traffic triggers one every
few hundred flows: through mitmdump that was 0.2–0.3 ms of CPU per flow, the largest single part of
what the addon cost beyond mitmdump itself (docs/performance.md, "The budget"). ``gc.freeze`` moves
the objects alive at ``running`` (before the first flow) to the permanent generation; objects made
later — flows, connections, the price database loaded on the first LLM flow — are collected as before.
"""

from __future__ import annotations

import gc

__all__ = ["StartupHeap"]


class StartupHeap:
    """Freezes the heap once, when the proxy is up (``running``: every addon loaded, no flow yet)."""

    def __init__(self) -> None:
        self.frozen = False

    def running(self) -> None:
        if self.frozen:
            return
        self.frozen = True
        gc.collect()  # start-up garbage goes first: a frozen cycle would never be collected
        gc.freeze()
