"""Reasoning continuity envelopes.

When the client's protocol has no slot for the upstream's opaque reasoning payload, the payload is
packed, with a versioned prefix of ours, into the one field that client echoes back unchanged, and
unpacked on the next request:

* Anthropic clients: ``thinking.signature`` / ``redacted_thinking.data`` = ``proxai.v1.<b64>``
* Responses clients: reasoning item ``encrypted_content`` = ``proxai.v1.<b64>``
* Chat clients: ``reasoning_content`` text followed by ``<proxai-reasoning v1>…</proxai-reasoning>``

The payload is the neutral ``Reasoning.opaque`` dict (it names the issuing protocol) plus the exact
reasoning text, so the issuer gets back byte-identical thinking.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson

from .jsonutil import dumps

PREFIX = "proxai.v1."
_CHAT_OPEN = "<proxai-reasoning v1>"
_CHAT_CLOSE = "</proxai-reasoning>"
_CHAT_RE = re.compile(re.escape(_CHAT_OPEN) + r"([A-Za-z0-9_\-=]*)" + re.escape(_CHAT_CLOSE))


def pack(payload: dict[str, Any]) -> str:
    return PREFIX + base64.urlsafe_b64encode(dumps(payload)).decode("ascii")


def is_packed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def unpack(value: str) -> dict[str, Any] | None:
    """The payload of a packed value, or None if it is not ours or is damaged."""
    if not is_packed(value):
        return None
    try:
        obj = orjson.loads(base64.urlsafe_b64decode(value[len(PREFIX) :].encode("ascii")))
    except Exception:
        return None
    return obj if isinstance(obj, dict) else None


def chat_envelope(payload: dict[str, Any]) -> str:
    """The suffix appended to a Chat ``reasoning_content`` for one reasoning part."""
    return _CHAT_OPEN + pack(payload)[len(PREFIX) :] + _CHAT_CLOSE


def split_chat_reasoning(text: str) -> list[tuple[str, dict[str, Any] | None]]:
    """Split a Chat ``reasoning_content`` into (text, payload) pieces.

    Text followed by an envelope belongs to that envelope (payload carries the exact text);
    trailing text without an envelope comes back with payload None.
    """
    if _CHAT_OPEN not in text:
        return [(text, None)] if text else []
    out: list[tuple[str, dict[str, Any] | None]] = []
    pos = 0
    for m in _CHAT_RE.finditer(text):
        visible = text[pos : m.start()]
        payload = unpack(PREFIX + m.group(1))
        if payload is None:
            out.append((visible, None))
        else:
            out.append((payload.get("text", visible), payload))
        pos = m.end()
    rest = text[pos:]
    if rest.strip():
        out.append((rest, None))
    return out


def strip_chat_envelopes(text: str) -> str:
    return _CHAT_RE.sub("", text)
