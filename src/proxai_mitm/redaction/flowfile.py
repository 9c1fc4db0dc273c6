"""Reading mitmproxy flow files (``-w``) that may be damaged: every intact flow before the damage,
and where the damage is.

mitmproxy's ``FlowReader`` stops at the first bad record with one error for the whole file (a report
then shows nothing), and it trusts the length prefix of each record: ``99999999999:`` makes it try to
allocate that much (``MemoryError``). Here each top-level record (a tnetstring: ``<length>:<payload>
<type tag>``) is checked against the bytes actually left in the file before it is read, parsed with
mitmproxy's own tnetstring parser and migrated with its own ``compat.migrate_flow``. Reading stops at
the first record that is truncated, lies about its length or does not parse, and the result says so:
``Damage(path, offset, reason, intact)``. A HAR file is handed to mitmproxy's reader.

Every flow read is redacted again (``redact=True``, the default) before any reader (report, export,
HTML report, replay) decodes or shows it: a file written without redaction, or by an older version,
may hold a key, raw or encoded (JSON, percent, HTML, base64); its JSON or percent decoding would
show the key plainly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["Damage", "FileRead", "flow_files", "iter_flows", "read_file", "read_path", "iter_records"]

_MAX_DIGITS = 12


@dataclass(frozen=True, slots=True)
class Damage:
    path: str
    offset: int
    reason: str
    intact: int  # flows read before the damage

    @property
    def whole_file(self) -> bool:
        """Nothing of the file could be read: it is not a flow file (or broken from its first byte)."""
        return self.offset == 0 and self.intact == 0

    def __str__(self) -> str:
        if self.whole_file:
            return f"{self.path} is not a readable mitmproxy flow file ({self.reason})"
        return (f"{self.path}: damaged at byte {self.offset}: {self.reason}; "
                f"{self.intact} intact flow(s) before it were read")


@dataclass(slots=True)
class FileRead:
    flows: list[Any] = field(default_factory=list)
    damage: Damage | None = None


class _Bad(Exception):
    pass


def iter_records(fh: BinaryIO, size: int) -> Iterator[tuple[int, Any]]:
    """(offset, parsed state) of each top-level record; raises ``_Bad`` at the first damaged one."""
    from mitmproxy.io import tnetstring

    pos = fh.tell()
    while True:
        start = pos
        prefix = b""
        c = fh.read(1)
        if not c:
            return
        while c.isdigit() and len(prefix) <= _MAX_DIGITS:
            prefix += c
            c = fh.read(1)
        if not prefix or c != b":":
            raise _Bad(start, "not a flow record (no length prefix)" if c else "truncated length prefix")
        length = int(prefix)
        left = size - (start + len(prefix) + 1)
        if length + 1 > left:
            raise _Bad(start, f"record declares {length} bytes but only {max(left - 1, 0)} remain "
                              "(truncated file or a wrong length)")
        payload = fh.read(length)
        tag = fh.read(1)
        if len(payload) != length or len(tag) != 1:
            raise _Bad(start, "truncated record")
        try:
            value = tnetstring.parse(tag[0], memoryview(payload))
        except (ValueError, TypeError, IndexError, RecursionError, UnicodeDecodeError) as e:
            raise _Bad(start, f"record does not parse: {e}") from None
        pos = start + len(prefix) + 1 + length + 1
        yield start, value


def read_file(path: str | Path, *, http_only: bool = True, redact: bool = True) -> FileRead:
    """Every intact flow of one file (redacted, see the module docstring), and the damage if any
    (never raises for bad content)."""
    res = FileRead()
    damages: list[Damage] = []
    res.flows.extend(iter_flows(path, damages, http_only=http_only, redact=redact))
    res.damage = damages[0] if damages else None
    return res


def iter_flows(path: str | Path, damages: list[Damage], *, http_only: bool = True,
               redact: bool = True) -> Iterator[Any]:
    """The intact flows of one file (redacted, see the module docstring), one at a time (a big file is
    never held whole); at the first damaged record the iteration ends and the damage is appended to
    ``damages``."""
    if not redact:
        yield from _iter_flows(path, damages, http_only)
        return
    from .redact import redact_flow

    for f in _iter_flows(path, damages, http_only):
        redact_flow(f)
        yield f


def _iter_flows(path: str | Path, damages: list[Damage], http_only: bool) -> Iterator[Any]:
    from mitmproxy import flow as mflow
    from mitmproxy import http
    from mitmproxy.io import compat

    p = Path(path)
    with open(p, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(4)
        fh.seek(0)
        if head.startswith(b"{") or head.startswith(b"\xef\xbb\xbf{"):
            har = _read_har(p, fh, http_only)
            yield from har.flows
            if har.damage is not None:
                damages.append(har.damage)
            return
        offset, intact = 0, 0
        try:
            for offset, state in iter_records(fh, size):
                if not isinstance(state, dict):
                    raise _Bad(offset, "record is not a flow")
                try:
                    f = mflow.Flow.from_state(compat.migrate_flow(state))
                except Exception as e:  # noqa: BLE001 - any malformed state is damage, not a crash
                    raise _Bad(offset, f"not a readable flow: {type(e).__name__}: {e}") from None
                if not http_only or isinstance(f, http.HTTPFlow):
                    intact += 1
                    yield f
        except _Bad as bad:
            at, reason = bad.args
            damages.append(Damage(str(p), at, reason, intact))


def _read_har(p: Path, fh: BinaryIO, http_only: bool) -> FileRead:
    from mitmproxy import http, io
    from mitmproxy.exceptions import FlowReadException

    res = FileRead()
    try:
        for f in io.FlowReader(fh).stream():
            if not http_only or isinstance(f, http.HTTPFlow):
                res.flows.append(f)
    except FlowReadException as e:
        res.damage = Damage(str(p), 0, f"not a readable HAR file: {e}", len(res.flows))
    return res


def flow_files(folder: str | Path) -> list[Path]:
    """The flow files of a folder: every ``*.mitm`` file under it, sorted by path (file-name order)."""
    return sorted(p for p in Path(folder).expanduser().rglob("*.mitm") if p.is_file())


def read_path(path: str | Path, *, http_only: bool = True, redact: bool = True) -> tuple[list[Any], list[Damage]]:
    """Flows of a file, or of every ``*.mitm`` file under a folder (sorted), and the damages found."""
    p = Path(path).expanduser()
    files = flow_files(p) if p.is_dir() else [p]
    flows: list[Any] = []
    damages: list[Damage] = []
    for fp in files:
        r = read_file(fp, http_only=http_only, redact=redact)
        flows.extend(r.flows)
        if r.damage is not None:
            damages.append(r.damage)
    return flows, damages
