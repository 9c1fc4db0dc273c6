"""The console UI (``mitmproxy``) shows each LLM flow's one-line summary under its row in the flow list.

mitmproxy 12.3's console flow list has no comment column in any layout (``console_flowlist_layout``
default / table / list): a flow's comment shows only in its Detail tab, and the list shows the marker.
So when the console runs, the function that renders a flow-list row (``common.format_flow``) is
wrapped: a flow carrying a ProxAI record and a comment gets one more line with the comment, in the
console's ``comment`` colour. Other flows, the detail view's head and mitmweb / mitmdump are untouched;
``done`` restores the console's own function.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from ..flow.record import METADATA_KEY

logger = logging.getLogger(__name__)

__all__ = ["ConsoleSummary", "install", "uninstall"]

_CONSOLE = "mitmproxy.tools.console.common"
#: marks our wrapper (installed once, whatever the number of addon instances)
_WRAPPED = "_proxai_summary"


class ConsoleSummary:
    def running(self) -> None:
        if "mitmproxy.tools.console.master" in sys.modules:  # the console UI is the running master
            install()

    def done(self) -> None:
        uninstall()


def install() -> bool:
    """Wrap the console's flow-row renderer; True when it was wrapped now."""
    try:
        import urwid
        from mitmproxy.tools.console import common
    except Exception:  # noqa: BLE001 - no console available: nothing to show it in
        return False
    original = common.format_flow
    if getattr(original, _WRAPPED, False):
        return False
    table, detail = common.RenderMode.TABLE, common.RenderMode.DETAILVIEW

    def format_flow(f: Any, *, render_mode: Any, **kw: Any) -> Any:
        row = original(f, render_mode=render_mode, **kw)
        comment = _summary(f)
        if comment is None or render_mode is detail:
            return row
        # the table layout's rows start after the focus marker; the list layout's after the method
        indent = 3 if render_mode is table else 4
        return urwid.Pile([row, urwid.Padding(urwid.Text(("comment", comment), wrap="ellipsis"), left=indent)])

    setattr(format_flow, _WRAPPED, True)
    format_flow.__wrapped__ = original  # type: ignore[attr-defined]
    common.format_flow = format_flow
    return True


def uninstall() -> None:
    common = sys.modules.get(_CONSOLE)
    fn: Callable[..., Any] | None = getattr(common, "format_flow", None) if common is not None else None
    if fn is not None and getattr(fn, _WRAPPED, False):
        common.format_flow = fn.__wrapped__  # type: ignore[union-attr,attr-defined]


def _summary(f: Any) -> str | None:
    md = getattr(f, "metadata", None)
    comment = getattr(f, "comment", "")
    if not comment or not isinstance(md, dict) or METADATA_KEY not in md:
        return None
    return comment
