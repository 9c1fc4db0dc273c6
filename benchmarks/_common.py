"""Pieces the benchmark scripts share (imported as ``benchmarks._common``: the scripts keep their own
folder off ``sys.path`` so that no script here can shadow a library a peer imports)."""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path


class Hang(Exception):
    """A case gave no result within its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """SIGALRM-based limit (main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _alarm(signum, frame):
        raise Hang(f"no result after {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def write_section(doc: Path, name: str, text: str, title: str) -> None:
    """Replace the block between ``<!-- name:start -->`` and ``<!-- name:end -->`` of ``doc`` (appended
    if absent; a new file starts with ``# title``); the other sections stay."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    body = doc.read_text() if doc.exists() else f"# {title}\n"
    block = f"{start}\n{text}\n{end}"
    if start in body:
        pre, rest = body.split(start, 1)
        post = rest.split(end, 1)[1] if end in rest else ""
        body = pre + block + post
    else:
        body = body.rstrip() + "\n\n" + block + "\n"
    doc.write_text(body)
