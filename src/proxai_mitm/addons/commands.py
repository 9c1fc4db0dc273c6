"""Views and commands: the "LLM" contentview, ``proxai.report`` and ``proxai.export``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import mitmproxy.types
from mitmproxy import command, exceptions
from mitmproxy import flow as mflow

from ..reporting import contentview
from ..reporting.report import export_command, report_command

logger = logging.getLogger(__name__)

__all__ = ["Commands"]


class Commands:
    """Registers the contentview and the report / export commands."""

    def load(self, loader: Any) -> None:
        contentview.register()

    @command.command("proxai.report")
    def report(self, flows: Sequence[mflow.Flow]) -> Sequence[str]:
        """The LLM exchanges among the flows, one line each: time, client → upstream protocol, model,
        status, stop, tokens, TTFT, duration, cost; then totals per model (e.g. proxai.report @all).
        Returned as lines (the console shows them as rows) and written to the event log."""
        lines = report_command(flows).splitlines()
        for line in lines:  # one event-log entry per line: mitmweb shows each on its own row
            logger.info("proxai report: %s", line)
        return lines

    @command.command("proxai.export")
    def export(self, flows: Sequence[mflow.Flow], path: mitmproxy.types.Path) -> str:
        """Write the normalized LLM exchanges among the flows to a file, one JSON object per line
        (e.g. proxai.export @marked ~/refusals.jsonl)."""
        try:
            msg = export_command(flows, path)
        except OSError as e:
            raise exceptions.CommandError(f"proxai.export: {e}") from e
        logger.info("proxai: %s", msg)
        return msg
