r"""The text scanner of redaction: the flow's exact secrets and the known key shapes, one linear pass.

``Redactor(secrets).data(bytes)`` / ``.text(str)`` return the input with every exact secret (8+
characters) replaced by ``<redacted>`` and every known key shape (``sk-…``, ``sk-ant-…``, ``AIza…``,
``gsk_…``, ``xai-…``, ``hf_…``, GitHub tokens, AWS key ids, JWTs, ``Bearer``/``Basic`` credentials,
JSON values of keys such as ``"api_key"``) masked after its recognizable prefix. The same object is
returned when nothing was found, so callers can skip re-encoding.

Encoded forms (an upstream may echo the key escaped): the text is also read decoded, once and twice
(an escaped escape such as ``%2541``), each character written its own way (mixed): JSON ``\uXXXX``
(any hex case) and ``\/``, percent ``%XX`` (any hex case; ``+`` for a space), HTML ``&#NN;`` /
``&#xHH;`` / ``&amp;`` …. The secrets and the key shapes are searched in the decoded text and the
match is cut out of the original. Base64: each secret's three alignments (standard and URL-safe
alphabets) are searched as plain strings (a key inside a ``Basic`` credential or a data URL); only
the characters that depend on the secret alone are replaced. Not decoded: a third layer, the other
JSON short escapes (``\"``, ``\\``, ``\n``: header values, hence secrets, hold no such characters).
"""

from __future__ import annotations

import base64
import bisect
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from itertools import accumulate

__all__ = ["REDACTED", "Redactor", "exact_redactor", "scrub_secrets"]

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


# One escaped character: JSON \u00XX (the escapes a key's characters can take) or \/, percent %XX,
# HTML numeric or named. An escaped backslash is a token of its own (kept as it is), so ``\\u0041``
# is not read as an escape. re.split finds them in C; each costs one dict lookup in Python.
_ESCAPE = re.compile(
    rb"(\\\\|\\u00[0-9a-fA-F]{2}|\\/|%[0-9a-fA-F]{2}|&(?:#[xX][0-9a-fA-F]{1,6}|#[0-9]{1,7}|amp|quot|lt|gt|apos);)")
_ESCAPE_LEADS = (b"\\", b"%", b"&")


#: characters of keys and key shapes, and those that start an escape (for the second layer): an
#: escape of any other character (``\u00e9``, ``&lt;``) cannot be part of a match and is left as it is,
#: so the decoded text is searched again only where such a character was escaped
_KEY_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./+=~%&\\")


def _token_table(keep: frozenset[int] | None) -> dict[bytes, bytes]:
    """Each escape -> what it decodes to (itself when it decodes to a character not in ``keep``)."""
    pairs = {b"\\\\": b"\\\\", b"\\/": b"/", b"&amp;": b"&", b"&quot;": b'"', b"&lt;": b"<", b"&gt;": b">",
             b"&apos;": b"'"}
    for code in range(256):
        for hx in {f"{code:02x}", f"{code:02X}", f"{code:02x}"[0] + f"{code:02X}"[1],
                   f"{code:02X}"[0] + f"{code:02x}"[1]}:
            pairs[b"%" + hx.encode()] = bytes((code,))
            pairs[b"\\u00" + hx.encode()] = chr(code).encode()
    return {t: d if keep is None or (len(d) == 1 and d[0] in keep) else t for t, d in pairs.items()}


_LEADS = frozenset((b"%", b"&", b"\\"))
_KEY_BYTES = frozenset(bytes((c,)) for c in _KEY_CHARS) - _LEADS
_TOKENS_KEY = _token_table(_KEY_CHARS)
_TOKENS_ALL = _token_table(None)  # when a secret has other characters
_DEC_WINDOW = 64 * 1024
_DEC_OVERLAP = 4096  # a 400-character key written all as 10-character HTML references


def _unescape(tok: bytes, keep: frozenset[int] | None) -> bytes:
    """An HTML numeric reference (the other escapes are in the tables)."""
    num = tok[2:-1]
    code = int(num[1:], 16) if num[:1] in (b"x", b"X") else int(num)
    if code > 0x10FFFF or (keep is not None and code not in keep):
        return tok
    return chr(code).encode("utf-8", "surrogatepass")


class _Decoded:
    """``data`` with its escapes decoded, and the way back: the text is cut into literal pieces and
    escapes (alternating); ``orig`` / ``dec`` are where each piece starts in the original / decoded
    text. Plain lists of ints: no per-escape objects for the garbage collector to walk."""

    __slots__ = ("text", "keyed", "leads", "_orig", "_dec")

    def __init__(self, data: bytes, table: dict[bytes, bytes], keep: frozenset[int] | None) -> None:
        pieces = _ESCAPE.split(data)
        self.text = data
        self.keyed = self.leads = False  # a key character / an escape's first character was decoded
        if len(pieces) == 1:
            return
        self._orig = [0, *accumulate(map(len, pieces))]
        pieces[1::2] = out = [table.get(t) or _unescape(t, keep) for t in pieces[1::2]]
        self._dec = [0, *accumulate(map(len, pieces))]
        if self._dec[-1] == self._orig[-1]:  # nothing decoded (each decoded escape is shorter)
            return
        self.text = text = b"".join(pieces)
        outs = set(out)
        self.keyed = keep is None or not outs.isdisjoint(_KEY_BYTES)
        if not outs.isdisjoint(_LEADS):  # an escape decoded to "%", "&" or "\": does one start there?
            dec = self._dec
            self.leads = any(_ESCAPE.match(text, dec[2 * k + 1]) for k, d in enumerate(out) if d in _LEADS)

    def start(self, x: int) -> int:
        """Original offset of decoded offset ``x`` (inside an escape's output: the escape's start)."""
        i = bisect.bisect_right(self._dec, x) - 1
        return self._orig[i] + (x - self._dec[i] if i % 2 == 0 else 0)

    def end(self, x: int) -> int:
        """Original offset of decoded end ``x`` (exclusive; inside an escape's output: its end)."""
        i = bisect.bisect_left(self._dec, x) - 1
        if i < 0:
            return x
        return self._orig[i] + (x - self._dec[i]) if i % 2 == 0 else self._orig[i + 1]


def _base64_cores(secret: bytes) -> list[bytes]:
    """The base64 characters that depend on ``secret`` alone, in each of its three alignments, in
    both alphabets (the characters at the edges mix in the neighbouring bytes)."""
    out = []
    n = len(secret)
    for k in range(3):
        enc = base64.b64encode(bytes(k) + secret)
        first = -(-8 * k // 6)  # ceil: the first character with no pad bits
        last = 8 * (k + n) // 6  # exclusive: the characters before it hold no following bits
        core = enc[first:last]
        if len(core) >= 8:
            out += [core, core.translate(_URLSAFE)]
    return out


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _finds(data: bytes, needle: bytes) -> Iterator[int]:
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + 1)


class Redactor:
    """Removes the flow's own secrets (exact values) and the known key shapes from text, in one
    linear pass per text: literal searches, then anchored matches only where a trigger was found."""

    def __init__(self, secrets: Iterable[str] = (), *, shapes: bool = True) -> None:
        self.shapes = shapes  # False: the exact secrets only (their encoded forms included)
        uniq = {s.strip() for s in secrets if isinstance(s, str)}
        # longest first, so a secret containing another is replaced whole; short values are not secrets
        self.secrets = sorted((s.encode() for s in uniq if len(s) >= 8 and s != REDACTED), key=len, reverse=True)
        # what is searched as it is: each secret, with "+" for its spaces, and its base64 forms
        found = {v for sec in self.secrets for v in (sec, sec.replace(b" ", b"+"), *_base64_cores(sec))}
        self._literals = sorted(found, key=len, reverse=True)
        # escapes worth decoding: of the characters keys are made of (all, for a secret of others)
        plain = all(b in _KEY_CHARS for sec in self.secrets for b in sec)
        self._keep: frozenset[int] | None = _KEY_CHARS if plain else None
        self._table = _TOKENS_KEY if plain else _TOKENS_ALL

    def spans(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """(start, end, replacement) of everything to redact, sorted, not overlapping."""
        found = self._spans(data)
        if b"\\" in data or b"%" in data or b"&" in data:  # an escape may hide a secret (_ESCAPE_LEADS)
            found += self._decoded_spans(data)
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

    def _decoded_spans(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """What :meth:`_spans` finds in the decoded text, placed in ``data``. Decoded a window at a
        time (bounded memory even when every character is an escape); windows overlap by more than
        the longest encoded key, so each one is whole in some window."""
        found: list[tuple[int, int, bytes]] = []
        for base in range(0, len(data), _DEC_WINDOW):
            lo = max(0, base - _DEC_OVERLAP)
            chunk = data[lo:base + _DEC_WINDOW]
            if not any(lead in chunk for lead in _ESCAPE_LEADS):
                continue
            dec = _Decoded(chunk, self._table, self._keep)
            if dec.keyed:
                found += [(lo + dec.start(a), lo + dec.end(b), rep) for a, b, rep in self._spans(dec.text)]
            if not dec.leads:
                continue
            twice = _Decoded(dec.text, self._table, self._keep)  # an escaped escape: %2541, &amp;#x41;
            if twice.keyed:
                found += [(lo + dec.start(twice.start(a)), lo + dec.end(twice.end(b)), rep)
                          for a, b, rep in self._spans(twice.text)]
        return found

    def _spans(self, data: bytes) -> list[tuple[int, int, bytes]]:
        found: list[tuple[int, int, bytes]] = []
        for sec in self._literals:
            i = data.find(sec)
            while i >= 0:
                found.append((i, i + len(sec), _REDACTED_B))
                i = data.find(sec, i + 1)
        if not self.shapes:
            return found
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
        return found

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


@lru_cache(maxsize=256)
def exact_redactor(secrets: tuple[str, ...]) -> Redactor:
    """A (shared) redactor of these secrets only."""
    return Redactor(secrets, shapes=False)


def scrub_secrets(text: str | None, secrets: tuple[str, ...]) -> str | None:
    """``text`` without the given secrets, in any of their encoded forms (key shapes are left:
    this is for the live record and the log line, which keep the client's text otherwise)."""
    if not text or not secrets:
        return text
    return exact_redactor(tuple(secrets)).text(text)
