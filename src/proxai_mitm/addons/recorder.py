"""Recording: what mitmproxy stores of a flow (``-w``, ``save.file``, mitmweb downloads) is redacted.

mitmproxy's ``Save`` serializes ``flow.get_state()`` inside the same ``response`` hook chain,
*before* a non-streamed response is sent to the client. Redacting the live flow there would strip
``set-cookie`` from what the client receives, so the live flow is left alone and gets a ``get_state``
that returns a redacted copy: what is stored is redacted, what goes over the wire is not.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from mitmproxy import ctx, http

from ..config.options import check_deferred
from ..flow.state import flow_state
from ..redaction.redact import redacted_state

logger = logging.getLogger(__name__)

__all__ = ["Recorder"]


class Recorder:
    """Option ``proxai_redact``; installs the redacting ``get_state`` on every flow."""

    def __init__(self) -> None:
        self.redact = True

    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_redact", bool, True,
            "Keep credentials out of stored flows (headers, URLs, key shapes in bodies): what -w and "
            "save.file write is redacted, the live traffic is not. Keys never appear in proxai "
            "metadata, comments or logs either way.",
        )
        check_deferred(bools=("proxai_redact",))

    def configure(self, updated: set[str]) -> None:
        if "proxai_redact" in updated:
            self.redact = bool(ctx.options.proxai_redact)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # every HTTP flow passes here, flows read from a file too (mitmproxy replays their hooks)
        if "get_state" not in vars(flow):
            flow.get_state = functools.partial(_redacted_state, flow, self)  # type: ignore[method-assign]


def _redacted_state(flow: Any, recorder: Recorder) -> Any:
    cls = type(flow)
    state = cls.get_state(flow)
    if not recorder.redact:
        return state
    try:
        st = flow_state(flow)
        return redacted_state(flow, st.secrets if st is not None else ())
    except Exception:  # never store an unredacted flow by accident
        logger.exception("proxai: redaction failed; the flow is stored without headers and bodies")
        for part in ("request", "response"):
            if isinstance(state.get(part), dict):
                state[part]["headers"] = ()
                state[part]["content"] = None
        state["metadata"] = {}
        return state
