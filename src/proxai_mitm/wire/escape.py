"""Control characters made visible before text reaches a terminal.

Model names, stop messages and upstream error texts come from the network. Printed raw, an ANSI /
OSC escape sequence in them could recolour or rewrite the terminal, set its title, or plant a
clickable link. :func:`escape` replaces every C0 control (ESC, BEL, CR, backspace, ...), DEL, every C1
control (including the one-character CSI ``\\x9b``) and the Unicode bidirectional overrides with a
visible ``\\xNN`` / ``\\uNNNN`` form, in one ``str.translate`` pass. Tab and newline are kept only
when asked (multi-line output).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["escape"]

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _table(keep: str) -> dict[int, str]:
    t = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))}
    t.update({c: f"\\u{c:04x}" for c in _BIDI})
    for ch in keep:
        t.pop(ord(ch), None)
    return t


def _any_of(table: dict[int, str]) -> re.Pattern[str]:
    return re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(table)) + "]")


_ONE_LINE = _table("")
_MULTI_LINE = _table("\n\t")
# a text with none of the table's characters (nearly all) is returned as it is: one regex scan
# instead of a dict lookup per character
_ONE_LINE_ANY = _any_of(_ONE_LINE)
_MULTI_LINE_ANY = _any_of(_MULTI_LINE)


def escape(value: Any, *, multiline: bool = False) -> str:
    """``str(value)`` with control characters shown as escapes (see the module docstring)."""
    text = value if isinstance(value, str) else str(value)
    if (_MULTI_LINE_ANY if multiline else _ONE_LINE_ANY).search(text) is None:
        return text
    return text.translate(_MULTI_LINE if multiline else _ONE_LINE)
