"""mitmweb shows the flow comment (ProxAI's one-line summary) in its flow list by default.

mitmweb keeps its flow-list columns in the ``web_columns`` option; the comment column is off by
default. When the user has not chosen columns (``--set web_columns=...``), ProxAI adds ``comment``.
Under mitmdump and the console the option does not exist and nothing happens.
"""

from __future__ import annotations

from typing import Any

from mitmproxy import ctx

__all__ = ["WebColumns"]


class WebColumns:
    def running(self) -> None:
        enable_comment_column(ctx.options)


def enable_comment_column(options: Any) -> bool:
    """Add ``comment`` to ``web_columns`` unless the user set the columns; True when it did."""
    if "web_columns" not in options or options.has_changed("web_columns"):
        return False
    cols = list(options.web_columns)
    if "comment" in cols:
        return False
    options.update(web_columns=[*cols, "comment"])
    return True
