"""Reading a small configuration file named by an option, without hanging or exhausting memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["SmallFileError", "nesting_depth", "read_small_file"]


class SmallFileError(ValueError):
    """The file cannot be used; the message names the option and the file."""


def read_small_file(p: Path, limit: int, option: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    Only regular files: opening a FIFO blocks until a writer comes (mitmproxy's start then hangs and
    ignores SIGTERM), and a device such as /dev/zero never ends. The type is checked before opening,
    the open never blocks (O_NONBLOCK), the type is checked again on what was opened (the path may
    have changed in between), and the read stops one byte past the limit."""
    name = repr(str(p))
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            raise SmallFileError(f"{option}: {name} is not a regular file")
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise SmallFileError(f"{option}: cannot read {name}: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SmallFileError(f"{option}: {name} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise SmallFileError(f"{option}: cannot read {name}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise SmallFileError(f"{option}: {name} is larger than {limit} bytes")
    return b"".join(chunks)


def nesting_depth(data: Any, limit: int) -> int:
    """How deep dicts and lists nest in ``data``, counted up to ``limit + 1`` (iterative: the data may
    be as deep as the parser allowed)."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(data, 1)]
    while todo:
        obj, level = todo.pop()
        deepest = max(deepest, level)
        if level > limit:
            break
        children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
        todo.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest
