"""The OpenTelemetry SDK pieces behind ``otel.OTelExport``: a tracer provider whose exporter reads
the collector's answer within a small cap, and its shutdown off the event loop.

The collector is not trusted to be well-behaved:

* its answer is read only up to :data:`RESPONSE_CAP` bytes, undecoded: a collector that answers
  300 MB, an endless body or a compression bomb costs the proxy nothing (the exporter needs only
  the status and headers; a longer body closes the connection instead);
* a collector that hangs holds only the SDK's export thread (for its timeout, 10 s by default),
  never the event loop: an old provider is shut down in a daemon thread, and at exit the proxy waits
  at most :data:`EXIT_WAIT_S` for the last spans.
* while an export is stuck (:class:`Watched`), spans are sent without the conversation: at most
  :data:`MAX_QUEUE` small spans wait, not the prompts of every flow.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

logger = logging.getLogger(__name__)

__all__ = ["EXIT_WAIT_S", "RESPONSE_CAP", "STUCK_S", "BoundedSession", "Watched", "make_provider", "retire"]

#: bytes of a collector's answer read at most (an OTLP export answer is a few bytes)
RESPONSE_CAP = 64 * 1024

#: seconds ``done`` waits for the last spans to reach the collector before the proxy exits
EXIT_WAIT_S = 0.5

#: spans waiting for the collector at most (the oldest are dropped beyond): a hanging collector
#: holds this many spans, not every flow's
MAX_QUEUE = 512
MAX_BATCH = 128

#: an export running longer than this: the collector is backed up, spans are sent without the
#: conversation (``proxai_otel_content``) until it answers, so waiting spans stay small
STUCK_S = 1.0


class BoundedSession(requests.Session):
    """The exporter's HTTP session: the response body is never read whole. Only a body announced by
    ``content-length`` within :data:`RESPONSE_CAP` is read (raw: no decompression), so the connection
    can be reused; any other (longer, chunked, endless) closes the connection unread."""

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
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


class Watched:
    """The span exporter, timed: :meth:`stuck` tells that an export is taking long (the collector
    hangs, answers slowly, or is retried)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.busy_since: float | None = None  # time.monotonic() when the export in progress began

    def export(self, spans: Any) -> Any:
        self.busy_since = time.monotonic()
        try:
            return self.inner.export(spans)
        finally:
            self.busy_since = None

    def stuck(self) -> bool:
        t = self.busy_since
        return t is not None and time.monotonic() - t > STUCK_S

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def make_provider(endpoint: str, service: str) -> tuple[Any, Watched]:
    """A tracer provider sending to ``endpoint`` through a :class:`BoundedSession`, and its timed
    exporter (raises ImportError without the extra ``proxai-mitm[otel]``)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}), shutdown_on_exit=False)
    exporter = Watched(OTLPSpanExporter(endpoint=endpoint, session=BoundedSession()))
    provider.add_span_processor(BatchSpanProcessor(exporter,  # type: ignore[arg-type]  # a SpanExporter by its methods
                                                   schedule_delay_millis=1000, max_queue_size=MAX_QUEUE,
                                                   max_export_batch_size=MAX_BATCH))
    return provider, exporter


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
