"""The ProxAI object mitmproxy loads: the addons of make_addons() behind one object, each flow hook
running only the addons whose hook is on, in list order, awaiting an async hook before the next."""

from __future__ import annotations

import asyncio
from typing import Any

from mitmproxy import command, hooks
from mitmproxy.proxy.layers.http import HttpRequestHook, HttpResponseHook
from mitmproxy.test import taddons, tflow

from proxai_mitm.addon import FLOW_HOOKS, ProxAI, make_addons


class Rec:
    """A tiny addon that records its calls; ``asynchronous``: its request hook returns a coroutine."""

    def __init__(self, name: str, log: list[str], *, asynchronous: bool = False) -> None:
        self.name, self.log, self.asynchronous = name, log, asynchronous

    def load(self, loader: Any) -> None:
        self.log.append(f"{self.name}.load")
        loader.add_option(f"rec_{self.name}", bool, True, "on")

    def configure(self, updated: set[str]) -> None:
        on = getattr(_opts(), f"rec_{self.name}", True)
        if on:
            self.__dict__.pop("response", None)
        else:
            self.response = None  # switched off, as the ProxAI addons do

    def running(self) -> None:
        self.log.append(f"{self.name}.running")

    def done(self) -> None:
        self.log.append(f"{self.name}.done")

    def request(self, flow: Any) -> Any:
        if self.asynchronous:
            async def later() -> None:
                await asyncio.sleep(0)
                self.log.append(f"{self.name}.request(async)")
            return later()
        self.log.append(f"{self.name}.request")
        return None

    def response(self, flow: Any) -> None:
        self.log.append(f"{self.name}.response")

    @command.command("rec.ping")
    def ping(self) -> str:
        return "pong"


def _opts() -> Any:
    from mitmproxy import ctx

    return ctx.options


def test_mitmproxy_sees_one_addon_and_hooks_run_in_order():
    log: list[str] = []
    a, b, c = Rec("a", log), Rec("b", log, asynchronous=True), Rec("c", log)
    p = ProxAI([a, b, c])
    with taddons.context(p) as tctx:
        am = tctx.master.addons
        assert am.get("proxai") is p and am.get("rec") is None  # the concerns are not walked per event
        assert log[:3] == ["a.load", "b.load", "c.load"]
        assert tctx.master.commands.execute("rec.ping") == "pong"  # commands of the concerns registered
        f = tflow.tflow(resp=True)
        log.clear()
        tctx.master.event_loop.run_until_complete(am.handle_lifecycle(HttpRequestHook(f)))
        assert log == ["a.request", "b.request(async)", "c.request"]  # b awaited before c ran
        log.clear()
        tctx.master.event_loop.run_until_complete(am.handle_lifecycle(HttpResponseHook(f)))
        assert log == ["a.response", "b.response", "c.response"]
        tctx.configure(p, rec_b=False)  # b switches its response hook off
        log.clear()
        tctx.master.event_loop.run_until_complete(am.handle_lifecycle(HttpResponseHook(f)))
        assert log == ["a.response", "c.response"]
        tctx.configure(p, rec_a=False, rec_b=False)
        assert p.response == c.response  # one addon left: its own method, no wrapper
        tctx.configure(p, rec_c=False)
        assert p.response is None  # mitmproxy skips the hook entirely
        assert p.error is None and p.requestheaders is None  # no concern has them


def test_lifecycle_reaches_every_addon():
    log: list[str] = []
    a, b = Rec("a", log), Rec("b", log)
    p = ProxAI([a, b])
    with taddons.context(p) as tctx:
        tctx.master.addons.trigger(hooks.RunningHook())
        tctx.master.addons.trigger(hooks.DoneHook())
    assert log == ["a.load", "b.load", "a.running", "b.running", "a.done", "b.done"]


def test_the_proxai_addons_behind_one_object():
    p = ProxAI()
    assert [type(a) for a in p.concerns] == [type(a) for a in make_addons()]  # the documented order
    with taddons.context(p) as tctx:
        tctx.configure(p)
        for name in FLOW_HOOKS:  # every hook that is on belongs to one of the addons
            fn = getattr(p, name)
            assert fn is None or callable(fn)
        assert p.request is not None and p.response is not None
        assert tctx.master.commands.commands.get("proxai.report") is not None
