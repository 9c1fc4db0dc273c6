"""The OpenTelemetry SDK pieces behind ``otel.OTelExport``: a tracer provider whose exporter reads
the collector's answer within a small cap, and its shutdown off the event loop. Imported only when
``proxai_otel_endpoint`` is set: it needs the extra ``proxai-mitm[otel]``.

The collector is not trusted to be well-behaved:

* its answer is read only up to :data:`RESPONSE_CAP` bytes, undecoded: a collector that answers
  300 MB, an endless body or a compression bomb costs the proxy nothing (the exporter needs only
  the status and headers; a longer body closes the connection instead);
* a collector that hangs holds only the SDK's export thread (for its timeout, 10 s by default),
  never the event loop: an old provider is shut down in a daemon thread, and at exit the proxy waits
  at most :data:`EXIT_WAIT_S` for the last spans;
* the conversations the waiting spans hold are capped (:class:`ContentBudget`), and so are the
  flows waiting for their conversation to be decoded (:data:`FLOW_BACKLOG`): a collector that does
  not take spans, or more traffic than the span builder keeps up with, makes the next spans go
  without the conversation, not pile up prompts.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

logger = logging.getLogger(__name__)

__all__ = ["CONTENT_BUDGET", "EXIT_WAIT_S", "FLOW_BACKLOG", "RESPONSE_CAP", "BoundedSession", "Budget",
           "ContentBudget", "make_provider", "retire"]

#: bytes of a collector's answer read at most (an OTLP export answer is a few bytes)
RESPONSE_CAP = 64 * 1024

#: seconds ``done`` waits for the last spans to reach the collector before the proxy exits
EXIT_WAIT_S = 0.5

#: spans waiting for the collector at most (the oldest are dropped beyond): a hanging collector
#: holds this many spans, not every flow's
MAX_QUEUE = 512
MAX_BATCH = 128

#: bytes of conversation the spans waiting for the collector may hold together (ContentBudget)
CONTENT_BUDGET = 8 * 1024 * 1024

#: body bytes of the flows waiting for the span builder to decode their conversation (beyond: their
#: spans go without it, the flows are not kept alive for it)
FLOW_BACKLOG = 8 * 1024 * 1024


class BoundedSession(requests.Session):
    """The exporter's HTTP session: the response body is never read whole. Only a body announced by
    ``content-length`` within :data:`RESPONSE_CAP` is read (raw: no decompression), so the connection
    can be reused; any other (longer, chunked, endless) closes the connection unread."""

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True  # requests would otherwise read the whole body into memory
        resp = super().request(*args, **kwargs)
        _read_small(resp)
        return resp


def _read_small(resp: requests.Response) -> None:
    try:
        size = int(resp.headers.get("content-length", ""))
    except ValueError:
        size = -1
    body = b""
    complete = False
    if 0 <= size <= RESPONSE_CAP:
        try:
            body = resp.raw.read(size, decode_content=False) if size else b""
            complete = len(body) == size
        except Exception:  # noqa: BLE001 - a broken answer: its status still counts
            body = b""
    resp._content = body  # what resp.content returns from now on (never a read from the socket)
    if complete:
        resp.raw.release_conn()  # read to the end: the connection is clean, reuse it
    else:
        resp.close()  # unread bytes remain: the connection is dropped


#: the span attributes that carry the conversation (otel.content_attributes)
CONTENT_KEYS = ("gen_ai.system_instructions", "gen_ai.input.messages", "gen_ai.output.messages")


def _size(attrs: Mapping[str, Any]) -> int:
    return sum(sys.getsizeof(attrs[k]) for k in CONTENT_KEYS if k in attrs)


class Budget:
    """Bytes shared by threads: :meth:`take` what fits (the first always fits), :meth:`give` it back."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.held and self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.held -= n


class ContentBudget(Budget, SpanProcessor):
    """Bytes of conversation (``proxai_otel_content``) held by spans not yet sent: the batch queue
    keeps a span until the collector took it, so a slow or hanging collector would otherwise hold
    every flow's prompts. Beyond :data:`CONTENT_BUDGET`, spans go without the conversation.

    The span builder :meth:`reserve` s a conversation before setting it on a span; as a span
    processor this gives it back when the ended span (the object the batch queue holds) is freed:
    sent, or dropped from a full queue."""

    def __init__(self, limit: int = CONTENT_BUDGET) -> None:
        Budget.__init__(self, limit)

    def reserve(self, attrs: Mapping[str, Any]) -> bool:
        """Count the conversation ``attrs``; False (nothing counted) when it does not fit."""
        return self.take(_size(attrs))

    def on_end(self, span: ReadableSpan) -> None:
        n = _size(span.attributes or {})
        if n:
            weakref.finalize(span, self.give, n)


def make_provider(endpoint: str, service: str) -> tuple[Any, ContentBudget]:
    """A tracer provider sending to ``endpoint`` through a :class:`BoundedSession`, and the budget of
    the conversations its spans hold."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}), shutdown_on_exit=False)
    budget = ContentBudget()
    provider.add_span_processor(budget)
    exporter = OTLPSpanExporter(endpoint=endpoint, session=BoundedSession())
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000, max_queue_size=MAX_QUEUE,
                                                   max_export_batch_size=MAX_BATCH))
    return provider, budget


def retire(pool: ThreadPoolExecutor | None, provider: Any) -> threading.Thread:
    """Shut ``pool`` (the span builder) then ``provider`` down in a daemon thread: the provider's
    shutdown waits for an export in progress, as long as the collector takes to answer or time out.
    The caller may join the returned thread for a bounded time."""
    def run() -> None:
        try:
            if pool is not None:
                pool.shutdown(wait=True)  # spans of finished flows are handed to the provider first
            if provider is not None:
                provider.shutdown()
        except Exception:  # noqa: BLE001 - telemetry never fails the proxy
            logger.debug("proxai: OpenTelemetry shutdown failed", exc_info=True)

    t = threading.Thread(target=run, name="proxai-otel-shutdown", daemon=True)
    t.start()
    return t
