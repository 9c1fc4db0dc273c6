"""Prompt-caching hints across translation: what a translated request needs so that the target
caches its stable prefix the way the target's own clients make it.

A client of one protocol sends the caching hints of its provider (Anthropic ``cache_control``
breakpoints, OpenAI's ``prompt_cache_key``) or none (Gemini's caching is implicit). Translated, those
hints mean nothing to the target, so each codec that needs one says how to add its own
(:attr:`proxai_core.codecs.base.Codec.cache_hints`); this module holds what they share: the key
of a conversation and the size of a prefix.

Hints never change an answer: they only decide which prefix the provider keeps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from . import neutral as n

__all__ = ["CacheHint", "conversation_key", "estimated_tokens"]


@dataclass(frozen=True, slots=True)
class CacheHint:
    """What a codec needs to add its caching hints to an upstream body."""

    #: a stable key of the conversation (the same for every turn of one session)
    key: str
    #: the upstream model (the cacheable minimum length depends on it)
    model: str | None = None
    #: the upstream host (a hint field only some servers of a protocol take)
    host: str | None = None
    #: the user asked for hints on this route (else only where they are known to be taken)
    explicit: bool = False


def conversation_key(req: n.Request) -> str:
    """A short stable key of a conversation: its instructions, tool names and first user message — what
    stays the same on every turn of one agent session (no content can be read back from it)."""
    h = hashlib.sha256()
    for text in req.system:
        h.update(text.text.encode("utf-8", "surrogatepass"))
    h.update(b"\x00tools\x00")
    for tool in req.tools:
        h.update(tool.name.encode("utf-8", "surrogatepass") + b"\x00")
    first = next((m for m in req.messages if m.role == "user"), None)
    if first is not None:
        for p in first.parts:
            if isinstance(p, n.Text):
                h.update(p.text.encode("utf-8", "surrogatepass"))
    return "proxai-" + h.hexdigest()[:32]


def estimated_tokens(chars: int) -> int:
    """Tokens of a JSON prefix of ``chars`` characters (about four characters per token)."""
    return chars // 4
