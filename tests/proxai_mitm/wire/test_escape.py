"""Control characters never reach the terminal raw (escape.py)."""

from __future__ import annotations

from proxai_mitm.wire.escape import escape

HOSTILE = "gpt\x1b[31mRED\x1b[0m\x1b]0;owned\x07\x1b]8;;http://evil/\x1b\\link\x9b2J\r\x08\x7f\u202eevil"


def test_escape_makes_every_control_visible():
    out = escape(HOSTILE)
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 for c in out)
    assert "\u202e" not in out and "\\u202e" in out
    assert out.startswith("gpt\\x1b[31mRED\\x1b[0m\\x1b]0;owned\\x07")
    assert "\\x9b2J" in out and "\\x0d\\x08\\x7f" in out


def test_plain_text_unchanged_and_multiline():
    for s in ("claude-sonnet-4", "日本語 ü ß ✓ 🚀", ""):
        assert escape(s) == s
    assert escape("a\nb\tc", multiline=True) == "a\nb\tc"
    assert escape("a\nb\tc") == "a\\x0ab\\x09c"
    assert escape(None) == "None" and escape(42) == "42"
