"""What the encoders of a client's response need to know about the client's request.

Built from the client's original body (never from the translated one), so it needs no state
between requests: tool-name shortening is a pure function and its reverse map is rebuilt here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from .protocol import Protocol

NAME_LIMIT = 64
_VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def short_tool_name(name: str, limit: int = NAME_LIMIT) -> str:
    """A name every target accepts; unchanged when already valid. Deterministic (reversible via
    :class:`ClientContext`, which recomputes it from the client's tool list)."""
    # (the usual name, an ASCII identifier, is known valid without the pattern)
    plain = name.isascii() and name.isidentifier() and len(name) <= NAME_LIMIT
    if (plain or _VALID.match(name)) and len(name) <= limit:
        return name
    clean = re.sub(r"[^a-zA-Z0-9_-]", "_", name) or "tool"
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return f"{clean[: limit - 9]}_{digest}"


@dataclass(slots=True)
class ClientContext:
    protocol: Protocol
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    #: Names of client tools that are Responses/Chat "custom" tools (free text input).
    custom_tools: set[str] = field(default_factory=set)
    #: shortened upstream name -> client's original name
    name_map: dict[str, str] = field(default_factory=dict)
    #: The client's requested stop sequences (to recover which one matched, where possible).
    stop: list[str] | None = None
    #: flat upstream name -> (namespace, name) of a tool inside a Responses ``namespace`` tool
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: a stream goes to the client as SSE (else in the protocol's other framing: a Gemini client
    #: that asked without ``alt=sse`` reads one JSON array)
    sse: bool = True
    #: a Chat client also gets a refusal's text in ``content`` (clients that ignore ``refusal``)
    refusal_in_content: bool = False

    def original_name(self, name: str) -> str:
        return self.name_map.get(name, name)
