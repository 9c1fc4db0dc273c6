"""Incremental check that streamed text is a valid prefix of one JSON object, and when it is whole.

Tool-call arguments reach an Anthropic client as ``input_json_delta`` fragments; the anthropic SDK
re-parses the accumulated buffer after every fragment (``jiter.from_json(buf, partial_mode=True)``)
and raises on the first one that makes it invalid. :class:`JsonObjectScanner` is fed the same
fragments and says, in O(len(fragment)), whether the text so far can still become a JSON object.

It is standard JSON (RFC 8259), a little stricter than jiter's partial mode where the two differ, so
whatever it accepts jiter accepts too:

* whitespace is space, tab, LF, CR only; nothing but whitespace may follow the closing ``}``;
* no NaN / Infinity, no leading zeros, no trailing commas;
* ``\\u`` escapes must pair surrogates (a lone one is an error for jiter and orjson);
* no raw control characters (U+0000-U+001F) or raw surrogate code points inside strings;
* at most :data:`MAX_DEPTH` nested containers and :data:`MAX_INT_DIGITS` integer digits in a
  number (jiter's limits: deeper or longer fails with "recursion limit exceeded" / "number out of
  range", even as a prefix).

Text that is only whitespace is a valid prefix here but not for jiter (nothing to parse yet): a
caller forwarding fragments holds it back until :attr:`JsonObjectScanner.opened`.
"""

from __future__ import annotations

import re

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "JsonObjectScanner", "is_json_object", "is_json_object_prefix"]

MAX_DEPTH = 200
MAX_INT_DIGITS = 4300

# inside a string, besides the quote and the backslash: raw control characters and surrogates are
# errors (looked for only when str.isprintable says the text has something unusual: it is faster)
_BAD_CHAR = re.compile("[\x00-\x1f\ud800-\udfff]")
_HEXVAL = {c: int(c, 16) for c in "0123456789abcdefABCDEF"}
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}

# states (the position between two characters); 1-8 are driven by _TABLE
_STR = 0  # inside a string (self._key: it is a key)
_AFTER = 1  # after a value: ',' or the container's closer
_VALUE = 2  # a value must start (after ':' or an array's ',')
_COLON = 3  # after a key
_KEY = 4  # after an object's ',': a key must start
_OBJ = 5  # after '{': a key or '}'
_ARR = 6  # after '[': a value or ']'
_START = 7  # before the top-level '{'
_DONE = 8  # after the top-level '}'
_ESC = 9  # after a backslash in a string
_HEX = 10  # in the hex digits of \uXXXX
_SURR = 11  # after a high surrogate escape: a backslash must follow
_SURR_U = 12  # ... then 'u'
_LIT = 13  # inside true / false / null
_MINUS = 14  # number: after '-'
_ZERO = 15  # number: after a leading 0
_INT = 16  # number: integer digits
_DOT = 17  # number: after '.'
_FRAC = 18  # number: fraction digits
_EXP = 19  # number: after 'e'
_EXP_SIGN = 20  # number: after the exponent's sign
_EXP_DIG = 21  # number: exponent digits
_DEAD = 22  # not a valid prefix any more

# actions of _TABLE besides "go to state N"
_A_VSTR, _A_KSTR, _A_COMMA, _A_CLOSE_OBJ, _A_CLOSE_ARR, _A_OPEN_OBJ, _A_OPEN_ARR, _A_INT, _A_LIT = range(32, 41)


def _table() -> list[dict[str, int]]:
    ws = dict.fromkeys(" \t\n\r")
    value = {'"': _A_VSTR, "{": _A_OPEN_OBJ, "[": _A_OPEN_ARR, "-": _MINUS, "0": _ZERO,
             **dict.fromkeys("123456789", _A_INT), **dict.fromkeys("tfn", _A_LIT)}

    def st(own: int, moves: dict[str, int]) -> dict[str, int]:
        return {**{c: own for c in ws}, **moves}

    t: list[dict[str, int]] = [{}] * 9
    t[_AFTER] = st(_AFTER, {",": _A_COMMA, "}": _A_CLOSE_OBJ, "]": _A_CLOSE_ARR})
    t[_VALUE] = st(_VALUE, value)
    t[_COLON] = st(_COLON, {":": _VALUE})
    t[_KEY] = st(_KEY, {'"': _A_KSTR})
    t[_OBJ] = st(_OBJ, {'"': _A_KSTR, "}": _A_CLOSE_OBJ})
    t[_ARR] = st(_ARR, {**value, "]": _A_CLOSE_ARR})
    t[_START] = st(_START, {"{": _A_OPEN_OBJ})
    t[_DONE] = st(_DONE, {})
    return t


_TABLE = _table()


class JsonObjectScanner:
    """Feed fragments in order; :meth:`feed` is False from the first fragment that makes the text
    no longer a valid prefix of a JSON object (and stays False); :meth:`complete` is True once the
    text is exactly one whole object (plus whitespace)."""

    __slots__ = ("_hex", "_hi", "_key", "_lit", "_ndig", "_stack", "_st")

    def __init__(self) -> None:
        self._st = _START
        self._stack: list[bool] = []  # open containers: True = object, False = array
        self._key = False  # the current string is an object key
        self._hi = False  # a high surrogate escape waits for its low half
        self._hex = 0  # the current \u escape: value << 3 | hex digits read
        self._lit = ""  # the rest of the literal being read
        self._ndig = 0  # integer digits of the current number

    @property
    def opened(self) -> bool:
        """More than whitespace was fed (the top-level '{', unless :attr:`valid` is False)."""
        return self._st != _START

    @property
    def valid(self) -> bool:
        return self._st != _DEAD

    def complete(self) -> bool:
        return self._st == _DONE

    def feed(self, s: str) -> bool:
        """Add the next fragment; False once the text so far is no valid prefix of an object."""
        st = self._st
        bs = "\\" in s
        clean = s.isprintable()  # no control characters or surrogates anywhere
        if st == _STR:
            # the common case: a fragment inside a string, with no quote or escape
            if not bs and '"' not in s and (clean or not _BAD_CHAR.search(s)):
                return True
        elif st == _DEAD:
            return False
        i = 0
        n = len(s)
        stack = self._stack
        table = _TABLE
        while i < n:
            if st == _STR:
                j = s.find('"', i)
                if j < 0:
                    j = n
                if bs:
                    b = s.find("\\", i, j)
                    if b >= 0:
                        j = b
                if not clean and _BAD_CHAR.search(s, i, j):
                    st = _DEAD
                    break
                if j == n:
                    break
                i = j + 1
                if s[j] == '"':
                    if self._key:
                        st = _COLON
                    else:
                        st = _AFTER if stack else _DONE
                else:
                    st = _ESC
                continue
            c = s[i]
            i += 1
            if st <= _DONE:
                a = table[st].get(c, _DEAD)
                if a < _DEAD:
                    st = a
                elif a == _A_VSTR:
                    st = _STR
                    self._key = False
                elif a == _A_KSTR:
                    st = _STR
                    self._key = True
                elif a == _A_COMMA:
                    st = _KEY if stack[-1] else _VALUE
                elif a == _A_CLOSE_OBJ or a == _A_CLOSE_ARR:
                    if stack.pop() is not (a == _A_CLOSE_OBJ):
                        st = _DEAD
                        break
                    st = _AFTER if stack else _DONE
                elif a == _A_OPEN_OBJ or a == _A_OPEN_ARR:
                    if len(stack) >= MAX_DEPTH:
                        st = _DEAD
                        break
                    stack.append(a == _A_OPEN_OBJ)
                    st = _OBJ if a == _A_OPEN_OBJ else _ARR
                elif a == _A_INT:
                    st = _INT
                    self._ndig = 0
                    i -= 1  # counted by the digit run below
                elif a == _A_LIT:
                    st = _LIT
                    self._lit = _LITERALS[c]
                else:
                    st = _DEAD
                    break
            elif st == _INT or st == _FRAC or st == _EXP_DIG:
                j = i - 1
                while j < n and "0" <= s[j] <= "9":
                    j += 1
                if st == _INT:
                    self._ndig += j - i + 1
                    if self._ndig > MAX_INT_DIGITS:
                        st = _DEAD
                        break
                i = j
                if i == n:
                    break
                c = s[i]
                if c == "." and st == _INT:
                    st = _DOT
                    i += 1
                elif (c == "e" or c == "E") and st != _EXP_DIG:
                    st = _EXP
                    i += 1
                else:
                    st = _AFTER  # the number ended; c is read again as what follows it
            elif st == _ESC:
                if c == "u":
                    st = _HEX
                    self._hex = 0
                elif c in '"\\/bfnrt':
                    st = _STR
                else:
                    st = _DEAD
                    break
            elif st == _HEX:
                # 4 hex digits, possibly split across fragments
                code = self._hex >> 3
                k = self._hex & 7
                i -= 1
                while k < 4 and i < n:
                    v = _HEXVAL.get(s[i])
                    if v is None:
                        break
                    code = code << 4 | v
                    k += 1
                    i += 1
                if k < 4:
                    if i < n:
                        st = _DEAD
                        break
                    self._hex = code << 3 | k
                elif self._hi:  # must be the low half of the pair
                    if not 0xDC00 <= code <= 0xDFFF:
                        st = _DEAD
                        break
                    self._hi = False
                    st = _STR
                elif 0xD800 <= code <= 0xDBFF:
                    self._hi = True
                    st = _SURR
                elif 0xDC00 <= code <= 0xDFFF:
                    st = _DEAD
                    break
                else:
                    st = _STR
            elif st == _LIT:
                rest = self._lit
                i -= 1
                k = min(len(rest), n - i)
                if s[i:i + k] != rest[:k]:
                    st = _DEAD
                    break
                i += k
                if k < len(rest):
                    self._lit = rest[k:]
                else:
                    st = _AFTER
            elif st == _ZERO:
                if c == ".":
                    st = _DOT
                elif c == "e" or c == "E":
                    st = _EXP
                elif "0" <= c <= "9":
                    st = _DEAD
                    break
                else:
                    st = _AFTER
                    i -= 1
            elif st == _MINUS:
                if c == "0":
                    st = _ZERO
                elif "1" <= c <= "9":
                    st = _INT
                    self._ndig = 0
                    i -= 1
                else:
                    st = _DEAD
                    break
            elif st == _DOT or st == _EXP_SIGN:
                if "0" <= c <= "9":
                    st = _FRAC if st == _DOT else _EXP_DIG
                else:
                    st = _DEAD
                    break
            elif st == _EXP:
                if c == "+" or c == "-":
                    st = _EXP_SIGN
                elif "0" <= c <= "9":
                    st = _EXP_DIG
                else:
                    st = _DEAD
                    break
            elif st == _SURR:
                if c != "\\":
                    st = _DEAD
                    break
                st = _SURR_U
            elif st == _SURR_U:
                if c != "u":
                    st = _DEAD
                    break
                st = _HEX
                self._hex = 0
            else:
                st = _DEAD
                break
        self._st = st
        return st != _DEAD


def is_json_object_prefix(text: str) -> bool:
    """``text`` can still become a JSON object (empty and whitespace-only text included)."""
    return JsonObjectScanner().feed(text)


def is_json_object(text: str) -> bool:
    """``text`` is exactly one JSON object (plus surrounding whitespace)."""
    sc = JsonObjectScanner()
    return sc.feed(text) and sc.complete()
