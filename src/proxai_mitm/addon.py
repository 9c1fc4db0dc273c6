"""The ProxAI addons, in the order mitmproxy must run them (docs/architecture.md draws them).

Each addon does one thing; they share the per-flow :class:`~.state.FlowState` and write one
:class:`~.record.FlowRecord` per flow. For every hook mitmproxy calls the addons in list order.
"""

from __future__ import annotations

from typing import Any

from .annotate import Annotator
from .bodies import BodyLimit
from .commands import Commands
from .har import HarExport
from .idle import HeaderTimeout
from .listenguard import ListenGuard
from .measure import Measure, Summary
from .options import RouteOptions
from .otel import OTelExport
from .probe import Probe
from .recordcap import RecordLimit
from .recorder import Recorder
from .redact_ahead import RedactAhead
from .replayer import Replayer
from .router import Router
from .translate import Translator
from .webcolumns import WebColumns

__all__ = ["make_addons"]


def make_addons() -> list[Any]:
    options = RouteOptions()
    replayer = Replayer()
    return [
        HarExport(),  # keeps the client's request before any rewrite; HAR export redacted and annotated
        options,  # routing options -> routes
        BodyLimit(),  # proxai_body_limit: decoded-size cap of request / complete response bodies
        RecordLimit(),  # proxai_record_limit: bytes of a stream kept per recording copy
        ListenGuard(options),  # key injected + listening beyond loopback without proxyauth: warn, refuse remote
        Recorder(),  # proxai_redact: stored flows are redacted
        Router(options, replayer.replay_only),  # recognize, route, rewrite the request, or answer natively
        replayer,  # proxai_replay: upstream requests go to the loopback replay server
        Probe(options, replayer.active),  # unreachable upstreams: native 502
        Translator(options),  # decide and run the response translation (streams, bodies, errors)
        HeaderTimeout(),  # proxai_header_timeout: no response headers in time -> native 504
        Measure(),  # timings and cost of the flow (TTFT, duration, tokens/s, USD), for the record
        Annotator(),  # record, comment, marker, log line (flows read from a file: from record or bodies)
        Summary(),  # the comment becomes 'model · stop · in→out tok · TTFT · cost'
        OTelExport(),  # proxai_otel_endpoint: one span per LLM flow (OTLP/HTTP), sent from worker threads
        RedactAhead(),  # big flows: the redacted copy prepared off the event loop, before Save writes it
        Commands(),  # contentview, proxai.report, proxai.export
        WebColumns(),  # mitmweb: the comment column (the flow summary) on unless the user chose columns
    ]
