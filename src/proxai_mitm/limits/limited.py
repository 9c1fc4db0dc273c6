"""Which upstream answers say "limited", for how long what they limited cools, and the headers of
the client's 429 when everything it could use is cooling.

The same rules for a pooled key (the Limits addon) and for an upstream of a fallback route (the
attempt server), so both cool alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from proxai_core import Protocol
from proxai_core.codecs import get
from proxai_core.errors import parse_error
from proxai_core.neutral import ErrorKind

__all__ = ["DEFAULT_COOL", "LIMITED_STATUSES", "cooling_headers", "limited_for"]

#: how long a key or upstream cools after a 429 or an overloaded answer that gives no reset hint (seconds)
DEFAULT_COOL = 5.0
#: the statuses that can mean "limited": 429 always, 503 and 529 when the body says overloaded
LIMITED_STATUSES = frozenset({429, 503, 529})


def limited_for(status: int, headers: Mapping[str, str], body: dict[str, Any] | None,
                protocol: Protocol | None) -> float | None:
    """An upstream answer that says "limited" (429, or overloaded: 529, 503): how long to cool what
    it limited (the protocol's reset hint from headers or body, else :data:`DEFAULT_COOL`); None for
    any other answer."""
    if status not in LIMITED_STATUSES:
        return None
    if status != 429 and parse_error(status, body).kind is not ErrorKind.OVERLOADED:
        return None
    wait = get(protocol).wire.retry_after(headers, body) if protocol is not None else None
    return DEFAULT_COOL if wait is None else wait


def cooling_headers(wait: float) -> dict[str, str]:
    """The headers of the client's 429 when everything is cooling: the soonest reset in both forms
    the SDKs read, and that a retry will be worth it."""
    return {"retry-after": str(max(1, math.ceil(wait))), "retry-after-ms": str(max(0, round(wait * 1000))),
            "x-should-retry": "true"}
