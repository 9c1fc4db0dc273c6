"""Anthropic prompt-caching breakpoints for a translated request, placed the way Anthropic's own
clients place them.

Anthropic caches only up to a ``cache_control`` breakpoint, at most four per request, and only a
prefix of at least the model's minimum length. The prefix is tools, then system, then messages;
a later request reads the cache when its prefix up to one of its breakpoints (or up to 20 blocks
before one) was written before. So a breakpoint goes:

1. at the end of the stable head (the last system block; with no system, the last tool): read by
   every turn of the session;
2. at the end of the request (the last message's last block): written now, read by the next turn;
3. at the end of the previous user turn: read now when the last turn added more than the lookback.

The client's own breakpoints are kept and counted; ours take their TTL when they all share one
(longer TTLs must come first, so mixed ones get none of ours). A block that cannot carry
``cache_control`` (thinking, an empty text) is passed over for the one before it.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..caching import CacheHint, estimated_tokens

__all__ = ["add_cache_hints", "minimum_tokens"]

MAX_BREAKPOINTS = 4
#: the smallest cacheable prefix by model family (tokens); other models: the usual 1024
_MINIMUM = (("opus-4-5", 4096), ("haiku-4-5", 4096), ("haiku", 2048))
_DEFAULT_MINIMUM = 1024
#: blocks that cannot carry cache_control
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def minimum_tokens(model: str | None) -> int:
    m = (model or "").lower().replace(".", "-")
    return next((n for family, n in _MINIMUM if family in m), _DEFAULT_MINIMUM)


def _size(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return 0


def _markable(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
        return False
    return not (block.get("type") == "text" and not block.get("text"))


def _existing(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The client's breakpoints (their cache_control objects), anywhere they may be."""
    found: list[dict[str, Any]] = []

    def scan(items: Any) -> None:
        for b in items if isinstance(items, list) else ():
            if isinstance(b, dict) and isinstance(b.get("cache_control"), dict):
                found.append(b["cache_control"])

    scan(body.get("tools"))
    scan(body.get("system"))
    for m in body.get("messages") or ():
        if isinstance(m, dict):
            scan(m.get("content"))
    return found


def _as_blocks(holder: dict[str, Any], key: str) -> list[Any] | None:
    """``holder[key]`` as a list of blocks (a plain string becomes one text block)."""
    v = holder.get(key)
    if isinstance(v, str):
        if not v:
            return None
        v = holder[key] = [{"type": "text", "text": v}]
    return v if isinstance(v, list) else None


def _last_markable(holder: dict[str, Any], key: str) -> bool:
    """``holder[key]`` has a block that can carry a breakpoint (a plain string is one)."""
    v = holder.get(key)
    if isinstance(v, str):
        return bool(v)
    return isinstance(v, list) and any(_markable(b) for b in v)


def _mark(holder: dict[str, Any], key: str, mark: dict[str, Any]) -> bool:
    """A breakpoint on the last block of ``holder[key]`` that can carry one (False: it had one)."""
    blocks = _as_blocks(holder, key)
    block = next((b for b in reversed(blocks or ()) if _markable(b)), None)
    if block is None or "cache_control" in block:
        return False
    block["cache_control"] = dict(mark)
    return True


def add_cache_hints(body: dict[str, Any], hint: CacheHint) -> None:
    """Breakpoints in an Anthropic request body (in place), see the module docstring."""
    own = _existing(body)
    if len(own) >= MAX_BREAKPOINTS:
        return
    ttls = {cc.get("ttl", "5m") for cc in own}
    if len(ttls) > 1:
        return
    ttl = next(iter(ttls), "5m")
    mark = {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}
    minimum = minimum_tokens(hint.model or body.get("model"))
    free = MAX_BREAKPOINTS - len(own)

    messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
    head = _size(body.get("tools")) + _size(body.get("system"))
    # candidates: (holder, key, characters of the prefix up to its end), in priority order
    candidates: list[tuple[dict[str, Any], str, int]] = []
    if body.get("system"):
        candidates.append((body, "system", head))
    elif isinstance(body.get("tools"), list) and body["tools"]:
        # (a tool carries its breakpoint itself: the last one is the holder, as a one-item list)
        candidates.append(({"tools": [body["tools"][-1]]}, "tools", head))
    sizes = []
    total = head
    for m in messages:
        total += _size(m.get("content"))
        sizes.append(total)
    if messages:
        candidates.append((messages[-1], "content", sizes[-1]))
        # the end of the previous user turn (before the last assistant turn)
        prev = next((i for i in range(len(messages) - 2, -1, -1) if messages[i].get("role") == "user"
                     and any(messages[j].get("role") == "assistant" for j in range(i + 1, len(messages)))), None)
        if prev is not None:
            candidates.append((messages[prev], "content", sizes[prev]))
    for holder, key, chars in candidates:
        if free == 0:
            break
        if estimated_tokens(chars) < minimum or not _last_markable(holder, key):
            continue
        if _mark(holder, key, mark):
            free -= 1
