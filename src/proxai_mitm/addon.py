"""The ProxAI addons, in the order mitmproxy must run them (docs/architecture.md draws them).

Each addon does one thing; they share the per-flow :class:`~.state.FlowState` and write one
:class:`~.record.FlowRecord` per flow. :class:`ProxAI` is the one object mitmproxy sees: for every
hook it calls the addons in list order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from mitmproxy import exceptions

from .addons.annotate import Annotator
from .addons.commands import Commands
from .addons.consolesummary import ConsoleSummary
from .addons.cutanswer import CutAnswer
from .addons.failover import Failover, FallbackMark
from .addons.heap import StartupHeap
from .addons.idle import HeaderTimeout
from .addons.limits import Limits
from .addons.listenguard import ListenGuard
from .addons.probe import Probe
from .addons.readdir import ReadDir
from .addons.recorder import Recorder
from .addons.redact_ahead import RedactAhead
from .addons.router import Router
from .addons.signer import Signer
from .addons.translate import Translator
from .addons.webcolumns import WebColumns
from .config.options import RouteOptions, preflight, refuse_start, starting
from .flow.measure import Measure, Summary
from .replay.addon import Replayer
from .reporting.har import HarExport
from .reporting.otel import OTelExport
from .wire.bodies import BodyLimit
from .wire.recordcap import RecordLimit

__all__ = ["FLOW_HOOKS", "ProxAI", "make_addons"]

#: the flow hooks the addons implement; lifecycle hooks (load, configure, running, done) reach every addon
FLOW_HOOKS = ("requestheaders", "request", "responseheaders", "response", "error")
Hook = Callable[[Any], Any]


def make_addons() -> list[Any]:
    options = RouteOptions()
    replayer = Replayer()
    limits = Limits(options)
    failover = Failover(options, replayer.active, limits)
    return [
        HarExport(),  # keeps the client's request before any rewrite; HAR export redacted and annotated
        options,  # routing options -> routes
        BodyLimit(),  # proxai_body_limit: decoded-size cap of request / complete response bodies
        RecordLimit(),  # proxai_record_limit: bytes of a stream kept per recording copy
        ListenGuard(options),  # key injected + listening beyond loopback without proxyauth: warn, refuse remote
        Recorder(),  # proxai_redact: stored flows are redacted
        limits,  # key pools and cooldowns: shared cooldowns read before routing; limited keys cooled
        Router(options, replayer.replay_only, limits),  # recognize, route, rewrite, or answer natively
        replayer,  # proxai_replay: upstream requests go to the loopback replay server
        failover,  # routes with fallbacks: the loopback attempt server tries their upstreams in order
        Probe(options, replayer.active),  # unreachable upstreams: native 502
        Signer(options),  # routes with auth: SigV4 / bearer on the final request (after every rewrite)
        Translator(options),  # decide and run the response translation (streams, bodies, errors)
        HeaderTimeout(),  # proxai_header_timeout: no response headers in time -> native 504
        CutAnswer(),  # upstream broke off before the client got a byte: native 502, not mitmproxy's page
        Measure(),  # timings and cost of the flow (TTFT, duration, tokens/s, USD), for the record
        FallbackMark(),  # an answer from a fallback: said in its StopInfo
        Annotator(),  # record, comment, marker, log line (flows read from a file: from record or bodies)
        Summary(),  # the comment becomes 'stop · in→out tok · TTFT · cost · model'
        OTelExport(),  # proxai_otel_endpoint: one span per LLM flow (OTLP/HTTP), sent from worker threads
        RedactAhead(),  # big flows: the redacted copy prepared off the event loop, before Save writes it
        Commands(),  # contentview, proxai.report, proxai.export
        WebColumns(),  # mitmweb: the comment column (the flow summary) on unless the user chose columns
        ReadDir(),  # -r FOLDER: mitmproxy's file reader reads every *.mitm file in it
        ConsoleSummary(),  # console UI: the flow summary as a line under each LLM flow's row
        StartupHeap(),  # last: at `running`, the start-up heap is frozen (the GC stops rescanning it)
    ]


class ProxAI:
    """The addons of :func:`make_addons` behind one object.

    mitmproxy looks up every hook of every event (``update`` after each flow hook, connection events
    too) on every addon, children in an ``addons`` attribute included: 18 addons cost 18 lookups per
    event whether they implement the hook or not. Here mitmproxy finds one object; each flow hook is
    the list of the addons whose hook is on in the current configuration (an addon switches a hook
    off by setting it to None), rebuilt after ``load``, ``configure`` and ``running``; with one such
    addon it is that addon's own method. A hook returning an awaitable is awaited before the next
    addon runs, as mitmproxy does.
    """

    requestheaders: Hook | None
    request: Hook | None
    responseheaders: Hook | None
    response: Hook | None
    error: Hook | None

    def __init__(self, addons: Sequence[Any] | None = None) -> None:
        self.concerns: list[Any] = list(make_addons() if addons is None else addons)
        self._rebuild()

    def load(self, loader: Any) -> None:
        try:
            for a in self.concerns:
                if (fn := getattr(a, "load", None)) is not None:
                    fn(loader)
                loader.master.commands.collect_commands(a)  # what mitmproxy does for each addon it registers
            preflight()  # bad --set proxai_* values: refused now, not a silently unloaded script
        finally:
            self._rebuild()

    def configure(self, updated: set[str]) -> None:
        self._lifecycle("configure", updated)

    def running(self) -> None:
        self._lifecycle("running")

    def done(self) -> None:
        self._lifecycle("done")

    def _lifecycle(self, name: str, *args: Any) -> None:
        try:
            for a in self.concerns:
                if (fn := getattr(a, name, None)) is not None:
                    fn(*args)
        except exceptions.OptionsError as e:
            if name == "configure" and starting():
                refuse_start(e)  # one line and exit, not a traceback and a proxy that listens first
            raise
        finally:  # an OptionsError is re-raised; mitmproxy then configures again with the old values
            self._rebuild()

    def _rebuild(self) -> None:
        for name in FLOW_HOOKS:
            fns = tuple(fn for a in self.concerns if (fn := getattr(a, name, None)) is not None)
            setattr(self, name, None if not fns else fns[0] if len(fns) == 1 else _in_order(fns))


def _in_order(fns: tuple[Hook, ...]) -> Hook:
    def hook(flow: Any) -> Any:
        for i, fn in enumerate(fns):
            res = fn(flow)
            if res is not None and inspect.isawaitable(res):
                return _rest(res, fns[i + 1:], flow)
        return None
    return hook


async def _rest(res: Any, fns: tuple[Hook, ...], flow: Any) -> None:
    await res
    for fn in fns:
        r = fn(flow)
        if r is not None and inspect.isawaitable(r):
            await r
