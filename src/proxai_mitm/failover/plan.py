"""What one failover flow needs: its route's upstreams in order, how to prepare the request for
each, and what each attempt did (filled in by the attempt server, read by the addon)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config.routes import Route, Upstream

__all__ = ["Attempt", "FailoverPlan", "Prepared"]

#: hop-by-hop headers: never copied from one HTTP connection to the next
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te",
                        b"trailer", b"upgrade", b"proxy-authorization", b"proxy-authenticate",
                        b"content-length", b"expect"})


@dataclass(slots=True)
class Prepared:
    """One upstream request, ready to send."""

    method: str
    scheme: str
    host: str
    port: int
    #: path and query
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    #: the model the upstream is asked for
    model: str | None = None
    #: the mitmproxy request it was made from (fallbacks: shown in the flow when that upstream answers)
    request: Any = None
    #: cooldown names of the pooled key it carries: a 429 cools that key, not the whole upstream
    cool: tuple[str, ...] = ()
    #: not sent, and why (every key of the upstream's pool is cooling: ``wait`` seconds left)
    skip: str | None = None
    wait: float | None = None


@dataclass(slots=True)
class Attempt:
    """One try of one upstream: ``status`` None when no response head came (``reason`` says why)."""

    upstream: str
    protocol: str
    host: str
    status: int | None
    reason: str
    duration_ms: float
    #: seconds the upstream asked to wait (its reset hint), if any
    retry_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"upstream": self.upstream, "protocol": self.protocol, "host": self.host, "status": self.status,
                "reason": self.reason, "duration_ms": round(self.duration_ms, 1),
                "retry_after": self.retry_after}


@dataclass(eq=False, slots=True)
class FailoverPlan:
    """A routed generation whose route has fallbacks.

    ``first``: the request for the route's own upstream (already rewritten by the router; the attempt
    server takes its body and headers from what mitmproxy sends it). ``prepare(upstream)``: the
    request for a fallback, or a text saying why it cannot be sent (a translation it does not
    support, a missing key). ``answered``: the index of the upstream whose answer the client gets
    (None: the attempt server answered itself, ``native`` holding that answer's status and body in
    the client's protocol).
    """

    route: Route
    first: Prepared
    prepare: Callable[[Upstream], Prepared | str]
    client_protocol: Any = None
    attempts: list[Attempt] = field(default_factory=list)
    answered: int | None = None
    prepared: Prepared | None = None
    native: tuple[int, dict[str, Any]] | None = None

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        return self.route.upstreams

    @property
    def fell_back(self) -> bool:
        return bool(self.answered)
