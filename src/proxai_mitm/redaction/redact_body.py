"""Secrets inside a message body, compressed or not, for the stored copy of a flow (redact.py)."""

from __future__ import annotations

from typing import Any

from ..wire.bodies import DEFAULT_LIMIT, BodyError, Decoder, body_limit, codings, decode
from .scrubber import Redactor

__all__ = ["redact_body"]


def redact_body(msg: Any, r: Redactor) -> None:
    """Mask secrets inside a body, only where one is found (bodies are stored byte-exact otherwise,
    so replay keys and content-lengths stay what they were). A compressed body is first scanned as
    it decodes, one window at a time (a bomb costs no memory); only a body with a find is decoded
    whole (within the body cap) and re-encoded. One that cannot be decoded is scanned as it is."""
    raw = getattr(msg, "raw_content", None) if msg is not None else None
    if not raw:
        return
    ce = msg.headers.get("content-encoding")
    if codings(ce):
        limit = _limit()
        try:
            if not _has_secret(raw, ce, limit, r):
                return
            content = decode(raw, ce, limit)
        except BodyError:
            new = r.data(raw)
            if new is not raw:
                msg.raw_content = new
            return
        new = r.data(content)
        if new is not content:
            msg.content = new  # mitmproxy re-encodes with the same content-encoding
        return
    new = r.data(raw)
    if new is not raw:
        msg.raw_content = new


_WINDOW = 1024 * 1024
_OVERLAP = 4096  # a secret or key shape cut by a window edge is whole in the next window


def _has_secret(raw: bytes, ce: str, limit: int, r: Redactor) -> bool:
    window: list[bytes] = []
    size = 0
    tail = b""
    d = Decoder(ce, limit)
    for piece in d.pieces(raw, last=True):
        window.append(piece)
        size += len(piece)
        if size >= _WINDOW:
            buf = tail + b"".join(window)
            if r.spans(buf):
                return True
            tail, window, size = buf[-_OVERLAP:], [], 0
    return bool(r.spans(tail + b"".join(window)))


def _limit() -> int:
    try:
        return body_limit()
    except Exception:  # noqa: BLE001 - no mitmproxy context (offline tools)
        return DEFAULT_LIMIT
