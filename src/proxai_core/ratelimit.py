"""Reset hints: how long until an upstream's rate limit lets a request through again.

Every protocol says it in its own way (headers, or the error body); each codec's wire face has a
``retry_after(headers, error body) -> seconds`` made here from the generic readers:

- ``retry-after-ms`` (milliseconds) and ``retry-after`` (seconds, or an HTTP date), which any
  upstream may send;
- per-limit reset headers, e.g. ``x-ratelimit-reset-tokens: 6m0s`` (a Go duration) or
  ``anthropic-ratelimit-tokens-reset: 2026-01-01T00:00:30Z`` (an RFC 3339 instant);
- ``google.rpc.RetryInfo`` in an error body's ``error.details`` (``"retryDelay": "30s"``).

A hint read from the network is bounded: never below 0, never above :data:`MAX_WAIT`.
Header names are looked up in lower case (a case-insensitive mapping, like mitmproxy's, works too).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "MAX_WAIT",
    "RetryAfter",
    "clamp",
    "go_duration",
    "header_wait",
    "http_retry_after",
    "instant",
    "proto_duration",
    "reader",
    "rpc_retry_info",
    "seconds_or_date",
]

#: the longest wait a hint may ask for (longer ones are read as this): one day
MAX_WAIT = 86400.0
#: a hint's text longer than this is not a hint
_MAX_TEXT = 64

#: (headers, parsed error body or None) -> seconds until the limit resets, or None (no hint)
RetryAfter = Callable[[Mapping[str, str], dict[str, Any] | None], float | None]


def clamp(seconds: float | None) -> float | None:
    """A wait read from the network, bounded to [0, MAX_WAIT]; None for no number (NaN included)."""
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_WAIT)


def _number(text: str) -> float | None:
    text = text.strip()
    if not text or len(text) > _MAX_TEXT:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def seconds_or_date(text: str, now: float | None = None) -> float | None:
    """``retry-after``: a number of seconds, or an HTTP date (seconds from ``now`` to it)."""
    value = _number(text)
    if value is not None:
        return clamp(value)
    if not text or len(text) > _MAX_TEXT:
        return None
    try:
        when = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        return None
    return clamp(when.timestamp() - (time.time() if now is None else now))


# a Go time.Duration as printed by Go: "1h2m3.5s", "6m0s", "20ms", "1.5µs"
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str, now: float | None = None) -> float | None:
    """A Go duration (``6m0s``, ``20ms``, ``1h0m0.5s``) in seconds; a bare number is seconds."""
    text = text.strip()
    if not text or len(text) > _MAX_TEXT:
        return None
    value = _number(text)
    if value is not None:
        return clamp(value)
    total, pos = 0.0, 0
    for m in _GO_PART.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _GO_UNIT[m.group(2)]
        pos = m.end()
    if pos != len(text):
        return None
    return clamp(total)


def instant(text: str, now: float | None = None) -> float | None:
    """An RFC 3339 instant (``2026-01-01T00:00:30Z``): seconds from ``now`` to it."""
    text = text.strip()
    if not text or len(text) > _MAX_TEXT:
        return None
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return clamp(when.timestamp() - (time.time() if now is None else now))


def proto_duration(text: Any) -> float | None:
    """A protobuf Duration in JSON (``"30s"``, ``"1.5s"``) in seconds."""
    if not isinstance(text, str) or not text.endswith("s"):
        return None
    return clamp(_number(text[:-1]))


def http_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The generic hints any upstream may send: ``retry-after-ms``, else ``retry-after``."""
    ms = headers.get("retry-after-ms")
    if ms is not None and (value := _number(ms)) is not None:
        return clamp(value / 1000)
    text = headers.get("retry-after")
    return seconds_or_date(text, now) if text is not None else None


def header_wait(headers: Mapping[str, str], template: str, limits: Sequence[str],
                form: Callable[[str, float | None], float | None], now: float | None = None) -> float | None:
    """Per-limit reset headers named by ``template`` (``{what}`` is ``reset`` or ``remaining``,
    ``{limit}`` one of ``limits``): the longest wait among the limits that are used up (remaining
    0), or among all of them when none says so (the request may be over any of them)."""
    used_up: list[float] = []
    every: list[float] = []
    for limit in limits:
        text = headers.get(template.format(what="reset", limit=limit))
        if text is None or (wait := form(text, now)) is None:
            continue
        every.append(wait)
        if (headers.get(template.format(what="remaining", limit=limit)) or "").strip() == "0":
            used_up.append(wait)
    waits = used_up or every
    return max(waits) if waits else None


_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def rpc_retry_info(body: dict[str, Any] | None) -> float | None:
    """``google.rpc.RetryInfo.retryDelay`` in an error body's ``error.details``."""
    err = body.get("error") if isinstance(body, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    if not isinstance(details, list):
        return None
    for item in details[:32]:
        if isinstance(item, dict) and item.get("@type") == _RETRY_INFO:
            return proto_duration(item.get("retryDelay"))
    return None


def reader(template: str | None = None, limits: Sequence[str] = (),
           form: Callable[[str, float | None], float | None] = go_duration,
           body: Callable[[dict[str, Any] | None], float | None] | None = None) -> RetryAfter:
    """A protocol's ``retry_after``: the generic ``retry-after-ms`` / ``retry-after`` first (the
    upstream's own answer to "when may I retry"), then the error body's hint, then the per-limit
    reset headers (``template`` / ``limits`` / ``form``, see :func:`header_wait`)."""
    limits = tuple(limits)

    def retry_after(headers: Mapping[str, str], error_body: dict[str, Any] | None = None) -> float | None:
        wait = http_retry_after(headers)
        if wait is None and body is not None:
            wait = body(error_body)
        if wait is None and template is not None:
            wait = header_wait(headers, template, limits, form)
        return wait

    return retry_after
