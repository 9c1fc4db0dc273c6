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


def machine() -> str:
    """The machine a run was on, for the figures' heading: CPU count and model, OS, Python build."""
    import os
    import platform
    import sys

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = " " + line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    opt = __import__("sysconfig").get_config_var("CONFIG_ARGS") or ""
    build = "optimized build" if "--enable-optimizations" in opt else "build without PGO/LTO"
    return (f"{os.cpu_count()} CPUs{model} ({platform.system()} {platform.release()}), Python "
            f"{sys.version.split()[0]} ({build}), shared with other work")
