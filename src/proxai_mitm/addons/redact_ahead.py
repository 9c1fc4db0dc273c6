"""Redaction of big flows off the event loop, before mitmproxy's ``Save`` writes them.

``Save`` (``-w``) calls ``flow.get_state()`` synchronously in its ``response`` / ``error`` hook, and
the recorder's ``get_state`` redacts there, on the event loop: a 20 MB body would hold up every other
flow while it is scanned. This addon runs last among the ProxAI addons (before ``Save``, which sits
after scripts): for a flow above ``THRESHOLD`` bytes it prepares the redacted state in a worker thread
(``redact.redact_ahead``); ``redact.redacted_state`` then returns it unless the flow changed since.
Only the big flow itself waits for its own scan.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from mitmproxy import ctx, http

from ..flow.state import flow_state
from ..redaction.redact import redact_ahead
from ..wire.bodies import codings

__all__ = ["RedactAhead", "THRESHOLD"]

#: below this many body bytes the scan takes well under a millisecond: done inline
THRESHOLD = 256 * 1024


def _size(flow: http.HTTPFlow) -> int:
    n = 0
    for msg in (flow.request, flow.response):
        raw = msg.raw_content if msg is not None else None
        if raw and msg is not None and codings(msg.headers.get("content-encoding")):
            return THRESHOLD  # scanned as it decodes: a few compressed bytes can inflate to the body cap
        n += len(raw or b"")
    return n


class RedactAhead:
    """Plain (not ``async``) hooks that hand mitmproxy a coroutine only for a big flow: every other
    flow costs no coroutine."""

    def response(self, flow: http.HTTPFlow) -> Coroutine[Any, Any, None] | None:
        return self._prepare(flow)

    def error(self, flow: http.HTTPFlow) -> Coroutine[Any, Any, None] | None:
        return self._prepare(flow)

    def _prepare(self, flow: Any) -> Coroutine[Any, Any, None] | None:
        opts = ctx.options
        if not getattr(opts, "proxai_redact", True) or not getattr(opts, "save_stream_file", None):
            return None
        if _size(flow) < THRESHOLD:
            return None
        state = flow_state(flow)
        return redact_ahead(flow, state.secrets if state is not None else ())
