"""JSON writing for translated bodies: orjson, and the stdlib only where orjson's depth limit stops it.

orjson.loads reads nesting up to 1024 levels but orjson.dumps writes only 254, so a body the proxy
parsed (e.g. a tool schema nested 300 deep) could not be written back after translation.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from .errors import TranslationError

__all__ = ["dumps"]


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """``obj`` as compact UTF-8 JSON (orjson's output). Raises :class:`TranslationError` (field
    ``body``) when it is nested too deeply even for the stdlib; other orjson errors (a lone
    surrogate, a non-str key, an int beyond 64 bits) propagate as ``orjson.JSONEncodeError``
    (a ``TypeError``)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) if sort_keys else orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:
        if "Recursion limit" not in str(exc):
            raise
    try:
        # equal JSON (float spelling may differ: 1e+16 for orjson's 1e16); NaN refused, never JSON
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, allow_nan=False)
        return text.encode()
    except RecursionError as exc:
        raise TranslationError("body: nested too deeply to be written as JSON", field="body") from exc
    except ValueError as exc:  # NaN / infinity, or a lone surrogate (UnicodeEncodeError)
        raise TranslationError(f"body: cannot be written as JSON ({exc})", field="body") from exc
