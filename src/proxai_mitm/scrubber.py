"""The text scanner of redaction: the flow's exact secrets and the known key shapes, one linear pass.

``Redactor(secrets).data(bytes)`` / ``.text(str)`` return the input with every exact secret (8+
characters) replaced by ``<redacted>`` and every known key shape (``sk-…``, ``sk-ant-…``, ``AIza…``,
``gsk_…``, ``xai-…``, ``hf_…``, GitHub tokens, AWS key ids, JWTs, ``Bearer``/``Basic`` credentials,
JSON values of keys such as ``"api_key"``) masked after its recognizable prefix. The same object is
returned when nothing was found, so callers can skip re-encoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

__all__ = ["REDACTED", "Redactor"]

REDACTED = "<redacted>"

# Key shapes in free text, found in one linear pass: each shape has literal triggers that
# ``bytes.find`` locates (memchr speed); the shape's pattern is then matched only at those places.
# Group 1 is the recognizable prefix that is kept; the rest becomes <redacted>.
_W = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
# trigger (searched in the lower-cased text) -> anchored patterns tried where it is found;
# few triggers: each is one memchr-speed scan of the text
_SHAPES: dict[bytes, tuple[re.Pattern[bytes], ...]] = {
    b"sk-": (re.compile(rb"(sk-ant-)[A-Za-z0-9_\-]{8,}"),
             re.compile(rb"(sk-)(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{16,}")),
    b"aiza": (re.compile(rb"(AIza)[0-9A-Za-z_\-]{30,}"),),
    b"gsk_": (re.compile(rb"(gsk_)[A-Za-z0-9]{20,}"),),
    b"xai-": (re.compile(rb"(xai-)[A-Za-z0-9]{20,}"),),
    b"hf_": (re.compile(rb"(hf_)[A-Za-z0-9]{30,}"),),
    b"gh": (re.compile(rb"(gh[pousr]_)[A-Za-z0-9]{30,}"), re.compile(rb"(github_pat_)[A-Za-z0-9_]{30,}")),
    b"akia": (re.compile(rb"(AKIA)[0-9A-Z]{16}(?![A-Za-z0-9_])"),),
    b"asia": (re.compile(rb"(ASIA)[0-9A-Z]{16}(?![A-Za-z0-9_])"),),
    b"eyj": (re.compile(rb"(eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),),
    b"bearer": (re.compile(rb"(Bearer\s+)(?!<redacted>)(?=[A-Za-z\-._~+/]*\d)[A-Za-z0-9\-._~+/]{8,}=*",
                           re.IGNORECASE),),
    b"basic": (re.compile(rb"(Basic\s+)(?!<redacted>)(?=[A-Za-z+/]*\d)[A-Za-z0-9+/]{8,}=*"),),
}
# JSON (or JSON-ish) string values of secret keys: "api_key": "xyz" -> "api_key": "<redacted>".
# Triggered on a word of the key; matched from the quote that opens the key.
_JSON_TRIGGERS = (b"api", b"token", b"secret", b"passw", b"authorization")
_JSON_VALUE = re.compile(
    rb"""["'](?:api[_-]?key|apiKey|x-api-key|access_token|refresh_token|id_token|client_secret|"""
    rb"""secret|password|passwd|authorization)["']\s*:\s*["'](?!<redacted>)([^"'\\\n]+)["']""",
    re.IGNORECASE)
_JSON_BACK = 16  # the trigger is at most this far after the opening quote ("x-api-key", "client_secret")
_REDACTED_B = REDACTED.encode()


def _finds(data: bytes, needle: bytes) -> Iterator[int]:
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + 1)


class Redactor:
    """Removes the flow's own secrets (exact values) and the known key shapes from text, in one
    linear pass per text: literal searches, then anchored matches only where a trigger was found."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        uniq = {s.strip() for s in secrets if isinstance(s, str)}
        # longest first, so a secret containing another is replaced whole; short values are not secrets
        self.secrets = sorted((s.encode() for s in uniq if len(s) >= 8 and s != REDACTED), key=len, reverse=True)

    def spans(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """(start, end, replacement) of everything to redact, sorted, not overlapping."""
        found: list[tuple[int, int, bytes]] = []
        for sec in self.secrets:
            for i in _finds(data, sec):
                found.append((i, i + len(sec), _REDACTED_B))
        lower = data.lower()
        for trig, pats in _SHAPES.items():
            for i in _finds(lower, trig):
                if i > 0 and data[i - 1] in _W:
                    continue  # not at a word start
                for pat in pats:
                    m = pat.match(data, i)
                    if m:
                        found.append((i, m.end(), m.group(1) + _REDACTED_B))
                        break
        for trig in _JSON_TRIGGERS:
            for i in _finds(lower, trig):
                q = max(data.rfind(b'"', max(0, i - _JSON_BACK), i), data.rfind(b"'", max(0, i - _JSON_BACK), i))
                if q >= 0:
                    m = _JSON_VALUE.match(data, q)
                    if m:
                        found.append((m.start(1), m.end(1), _REDACTED_B))
        if not found:
            return found
        found.sort(key=lambda t: (t[0], -t[1], t[2] == _REDACTED_B))  # a kept prefix wins a tie
        out = [found[0]]
        for sp in found[1:]:
            last = out[-1]
            if sp[0] < last[1]:  # overlap: one redaction covering both
                if sp[1] > last[1]:
                    out[-1] = (last[0], sp[1], last[2] if last[2] == _REDACTED_B else _REDACTED_B)
                continue
            out.append(sp)
        return out

    def data(self, data: bytes) -> bytes:
        spans = self.spans(data)
        if not spans:
            return data
        parts, pos = [], 0
        for a, b, rep in spans:
            parts.append(data[pos:a])
            parts.append(rep)
            pos = b
        parts.append(data[pos:])
        return b"".join(parts)

    def text(self, text: str) -> str:
        if not text or not isinstance(text, str):
            return text
        raw = text.encode("utf-8", "surrogatepass")
        new = self.data(raw)
        return text if new is raw else new.decode("utf-8", "surrogatepass")
