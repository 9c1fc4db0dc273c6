"""StartupHeap: the heap alive when the proxy is up is frozen once; later objects are collected."""

from __future__ import annotations

import gc

from proxai_mitm.addon import make_addons
from proxai_mitm.addons.heap import StartupHeap


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_running_freezes_the_start_up_heap_once_and_later_cycles_are_still_collected() -> None:
    gc.unfreeze()
    try:
        heap = StartupHeap()
        heap.running()
        frozen = gc.get_freeze_count()
        assert frozen > 1000 and heap.frozen
        heap.running()  # mitmproxy calls running once; a second call changes nothing
        assert gc.get_freeze_count() == frozen
        garbage = _Cycle()  # made after start-up: an ordinary cycle, collected as before
        del garbage
        assert gc.collect() >= 1
        assert gc.get_freeze_count() == frozen  # a collection does not touch the frozen objects
    finally:
        gc.unfreeze()


def test_startup_heap_runs_last() -> None:
    """Every other addon's ``running`` has made its objects before the freeze."""
    assert isinstance(make_addons()[-1], StartupHeap)
