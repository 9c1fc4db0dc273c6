"""Whose fault is an exception met while reading upstream traffic: the upstream's, or ours?

A decoder turns an upstream event it cannot use into a warning, or raises :class:`MalformedEvent`
saying what is wrong with it: the upstream's fault, and the warning names the upstream. Any other
exception is a ProxAI bug. In strict mode (the test suite; ``PROXAI_STRICT=1``) it propagates; in
production the event is skipped, the warning names it as ProxAI's own internal error, and it is
logged (with its traceback) once per place in the code.
"""

from __future__ import annotations

import logging
import os

__all__ = ["MalformedEvent", "internal_warning", "is_strict", "malformed_warning", "set_strict"]

_log = logging.getLogger("proxai")
_STRICT = os.environ.get("PROXAI_STRICT", "") not in ("", "0")
_logged: set[tuple[str, str, int]] = set()


class MalformedEvent(ValueError):
    """An upstream event (or body) of a shape its protocol does not allow."""


def set_strict(on: bool = True) -> None:
    """Internal errors raise (``True``) or become a warning and one log line (``False``)."""
    global _STRICT
    _STRICT = on


def is_strict() -> bool:
    return _STRICT


def malformed_warning(upstream: str, exc: BaseException) -> str:
    return f"malformed upstream {upstream} event ignored ({exc})"[:300]


def internal_warning(exc: BaseException, what: str) -> str:
    """The warning for an internal error met while ``what``; logs it once per place. Callers
    re-raise first when :func:`is_strict`."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = (type(exc).__name__, tb.tb_frame.f_code.co_filename if tb else "", tb.tb_lineno if tb else 0)
    if where not in _logged:
        _logged.add(where)
        _log.error("ProxAI internal error while %s (logged once per place)", what, exc_info=exc)
    return (f"ProxAI internal error while {what}, not an upstream fault: {type(exc).__name__}: {exc} "
            "(the event was skipped; see the proxai log)")[:300]
