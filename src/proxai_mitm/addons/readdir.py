"""``-r FOLDER``: read every flow file of a folder (``mitmdump -nr flows``, ``proxai run --web -r flows``).

mitmproxy's ReadFile addon opens ``rfile`` as one file, so a folder ends in an ``IsADirectoryError``
traceback. ReadFile reads in a task started by its ``running`` hook, and that task is what mitmdump's
KeepServing watches (the ``readfile.reading`` command) to exit after ``-n -r``. So this addon does not
start a reader of its own: it gives ReadFile's path reader (``load_flows_from_path``) a folder case, and
the folder is read inside ReadFile's task, with ReadFile's filter (``readfile_filter``).

The files are the folder's ``*.mitm`` files (sub-folders included), in path order, as ``proxai report``
reads a folder, each through flowfile.py: a damaged file gives its intact flows and is named in the log
(mitmproxy's reader would stop there, or try to allocate a lying length prefix), then the next file is
read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from ..redaction.flowfile import Damage, flow_files, iter_flows

logger = logging.getLogger(__name__)

__all__ = ["ReadDir"]

PathReader = Callable[[str], Awaitable[int]]


class ReadDir:
    """Teaches mitmproxy's ReadFile addon to read a folder (see the module docstring)."""

    def __init__(self) -> None:
        self._taught: Any = None  # the ReadFile addon whose reader is wrapped (once)

    def configure(self, updated: set[str]) -> None:
        if "rfile" not in updated:
            return
        from mitmproxy import ctx

        master = getattr(ctx, "master", None)
        rfile = getattr(getattr(ctx, "options", None), "rfile", None)
        if master is None or not rfile or not os.path.isdir(os.path.expanduser(rfile)):
            return
        # mitmdump and mitmweb register ReadFileStdin, the console ReadFile
        reader = master.addons.get("readfilestdin") or master.addons.get("readfile")
        if reader is None or reader is self._taught:
            return
        reader.load_flows_from_path = _folder_aware(reader, reader.load_flows_from_path)
        self._taught = reader


def _folder_aware(reader: Any, read_one: PathReader) -> PathReader:
    async def load_flows_from_path(path: str) -> int:
        folder = os.path.expanduser(path)
        if path == "-" or not os.path.isdir(folder):
            return await read_one(path)
        return await read_folder(folder, getattr(reader, "filter", None))

    return load_flows_from_path


async def read_folder(folder: str, keep: Callable[[Any], bool] | None = None) -> int:
    """Load every flow of the folder's flow files into mitmproxy, in path order (``keep``: the
    ``readfile_filter``); returns the number of flows loaded."""
    from mitmproxy import ctx

    files = flow_files(folder)
    if not files:
        logger.error("proxai: %s: no *.mitm flow file in this folder", folder)
        return 0
    count = 0
    for fp in files:
        damages: list[Damage] = []
        for flow in iter_flows(fp, damages, http_only=False, redact=False):  # as mitmproxy reads a file
            if keep is None or keep(flow):
                await ctx.master.load_flow(flow)
                count += 1
        for d in damages:
            logger.warning("proxai: %s; reading the next file", d)
    logger.info("proxai: read %d flow(s) from %d file(s) in %s", count, len(files), folder)
    return count
