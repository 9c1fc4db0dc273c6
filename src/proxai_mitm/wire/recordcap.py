"""Capped recording copies of a stream: the head up to a limit, then only a count.

mitmproxy keeps nothing of a streamed body, so the stream handler keeps its own copies for the
recording (the upstream's bytes, what the client got, chunk timings for replay pacing). On an endless
stream those copies must not grow with the traffic: :class:`CappedBuffer` keeps the first ``limit``
bytes and counts the rest; :meth:`CappedBuffer.value` ends a truncated copy with a visible note,
written as an SSE comment line so the recorded stream stays parseable.

Option ``proxai_record_limit`` (declared by :class:`RecordLimit`): bytes kept per copy.
"""

from __future__ import annotations

from typing import Any

from mitmproxy import ctx, exceptions

__all__ = ["DEFAULT_RECORD_LIMIT", "CappedBuffer", "RecordLimit", "record_limit", "truncation_note"]

DEFAULT_RECORD_LIMIT = 4 * 1024 * 1024


def truncation_note(kept: int, total: int) -> bytes:
    return f"\n: proxai: recording truncated after {kept} bytes ({total} total)\n\n".encode()


class CappedBuffer:
    """Append-only bytes with a ceiling: ``kept`` bytes are held, ``total`` were seen. Timings
    (``times``) are kept for the held chunks only."""

    __slots__ = ("_parts", "kept", "limit", "times", "total")

    def __init__(self, limit: int = DEFAULT_RECORD_LIMIT) -> None:
        self.limit = max(0, int(limit))
        self._parts: list[bytes] = []
        self.kept = 0
        self.total = 0
        #: [offset ms, byte count] per held chunk (replay pacing); bounded with the bytes
        self.times: list[list[float | int]] = []

    def add(self, data: bytes, at_ms: float | None = None) -> None:
        if not data:
            return
        self.total += len(data)
        room = self.limit - self.kept
        if room <= 0:
            return
        piece = data if len(data) <= room else data[:room]
        self._parts.append(piece)
        self.kept += len(piece)
        if at_ms is not None:
            self.times.append([at_ms, len(piece)])

    def extend(self, chunks: Any) -> None:
        for c in chunks:
            self.add(c)

    @property
    def truncated(self) -> bool:
        return self.total > self.kept

    def head(self) -> bytes:
        """The held bytes, without a note."""
        if len(self._parts) > 1:
            self._parts = [b"".join(self._parts)]
        return self._parts[0] if self._parts else b""

    def value(self) -> bytes:
        """The held bytes, plus the truncation note when bytes were dropped (one copy, not two)."""
        if not self.truncated:
            return self.head()
        return b"".join([*self._parts, truncation_note(self.kept, self.total)])

    def __len__(self) -> int:
        return self.kept


def record_limit() -> int:
    """``proxai_record_limit`` (the default outside mitmproxy or when the option is not declared)."""
    try:
        return int(ctx.options.proxai_record_limit)
    except Exception:  # noqa: BLE001 - no master (unit tests, offline tools)
        return DEFAULT_RECORD_LIMIT


class RecordLimit:
    """Declares and validates ``proxai_record_limit``."""

    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_record_limit", int, DEFAULT_RECORD_LIMIT,
            "Bytes of a streamed body ProxAI keeps for the recording, per copy (the upstream's "
            "stream, what the client got). Beyond it the recording keeps the head and a note "
            "'recording truncated after N bytes (M total)'; StopInfo and usage are still read from "
            "the whole stream.",
        )

    def configure(self, updated: set[str]) -> None:
        if "proxai_record_limit" in updated and ctx.options.proxai_record_limit < 0:
            raise exceptions.OptionsError("proxai_record_limit must be 0 or a positive number of bytes")
