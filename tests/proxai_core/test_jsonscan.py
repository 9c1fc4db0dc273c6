"""JsonObjectScanner: valid JSON-object prefixes accepted, whole objects complete, and nothing
accepted that jiter's partial mode (what the anthropic SDK runs on every input_json_delta) rejects."""

from __future__ import annotations

import json

import jiter
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai_core.jsonscan import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    JsonObjectScanner,
    is_json_object,
    is_json_object_prefix,
)

SETTINGS = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def accepted_chars(text: str) -> int:
    """How many leading characters the scanner accepts, fed one at a time."""
    sc = JsonObjectScanner()
    for i, ch in enumerate(text):
        if not sc.feed(ch):
            assert not sc.feed("}") and not sc.valid  # stays dead
            return i
    return len(text)


def jiter_partial_ok(text: str) -> bool:
    try:
        jiter.from_json(text.encode("utf-8"), partial_mode=True)
    except ValueError:
        return False
    return True


def feed_all(frags: list[str]) -> JsonObjectScanner:
    sc = JsonObjectScanner()
    for f in frags:
        sc.feed(f)
    return sc


# ----------------------------------------------------------------------------- examples
VALID = [
    "{}",
    " \t\r\n{ } \n",
    '{"a":1}',
    '{"a": [1, 2.5e-3, -0, 0.0, 1E+2, -12.5e10, true, false, null, {"b": "x"}], "c": {}}',
    '{"": "", "k": [[], [{}], [[[]]]]}',
    '{"esc": "\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0000 \\u00e9 \\uFFFF \\ud83d\\ude00 \\uDBFF\\uDFFF"}',
    '{"raw": "é 😀 \x7f \u2028 ü"}',
    '{"n": 123456789012345678901234567890, "m": -0.000001}',
    '{\n  "pretty": [\n    1,\n    {\n      "x": null\n    }\n  ]\n}',
]


@pytest.mark.parametrize("text", VALID)
def test_valid_objects_every_prefix_and_every_split(text):
    assert is_json_object(text)
    assert json.loads(text) is not None
    for i in range(len(text) + 1):
        assert is_json_object_prefix(text[:i]), (text, i)
        if text[:i].strip():
            assert jiter_partial_ok(text[:i]), text[:i]
        for j in range(i, len(text) + 1, 3):  # three fragments
            sc = feed_all([text[:i], text[i:j], text[j:]])
            assert sc.valid and sc.complete()
    assert accepted_chars(text) == len(text)


# (text, characters accepted before the first bad one)
INVALID = [
    ("[]", 0), ('"x"', 0), ("1", 0), ("null", 0), ("\x0c{}", 0), ("\u00a0{}", 0),
    ("{,", 1), ("{1", 1), ("{'a': 1}", 1), ('{"a" 1', 5), ('{"a"::1', 5),
    ('{"a":01', 6), ('{"a":-01', 7), ('{"a":00', 6), ('{"a":1.}', 7), ('{"a":.5}', 5), ('{"a":-}', 6),
    ('{"a":1e}', 7), ('{"a":1e+}', 8), ('{"a":1.e5}', 7), ('{"a":+1}', 5), ('{"a":0x1}', 6),
    ('{"a":NaN}', 5), ('{"a":Infinity}', 5), ('{"a":-Infinity}', 6),
    ('{"a":tru}', 8), ('{"a":truex}', 9), ('{"a":nul}', 8), ('{"a":falsy}', 9), ('{"a":True}', 5),
    ('{"a":1,}', 7), ('{"a":[1,]}', 8), ('{"a":[,1]}', 6), ('{"a":[}', 6), ('{"a":{]}', 6),
    ('{"a":1 2}', 7), ('{"a":1}x', 7), ('{"a":1}{}', 7), ('{"a":1}}', 7), ('{"a"}', 4),
    ('{"a":"\\x"}', 7), ('{"a":"\\U0041"}', 7), ('{"a":"\\u00g0"}', 10), ('{"a":"\\u12"}', 10),
    ('{"a":"\\ud800"}', 12), ('{"a":"\\ud800x"}', 12), ('{"a":"\\ud800\\n"}', 13),
    ('{"a":"\\ud800\\ud800"}', 17), ('{"a":"\\ud800\\u0041"}', 17), ('{"a":"\\udc00"}', 11),
    ('{"a":"\x01"}', 6), ('{"a":"\n"}', 6), ('{"a":"\x1f"}', 6), ('{"a\t":1}', 3),
    ('{"a":"\ud800"}', 6), ("{\ud800", 1),
]


@pytest.mark.parametrize("text,good", INVALID)
def test_invalid_rejected_at_the_first_bad_character(text, good):
    assert not is_json_object_prefix(text)
    assert accepted_chars(text) == good
    assert is_json_object_prefix(text[:good])
    for i in range(len(text) + 1):  # however it is split, the verdict is the same
        sc = feed_all([text[:i], text[i:]])
        assert not sc.valid and not sc.complete()


def test_dead_stays_dead_and_incomplete_is_not_complete():
    sc = JsonObjectScanner()
    assert sc.feed('{"a": [1, {"b": "c') and not sc.complete() and sc.valid
    assert not sc.feed("\x00")
    assert not sc.feed('"}]}')
    assert not sc.complete() and not sc.valid


def test_opened():
    sc = JsonObjectScanner()
    assert not sc.opened and sc.feed("") and sc.feed(" \n\t\r ") and not sc.opened
    assert sc.feed(" {") and sc.opened and not sc.complete()
    assert sc.feed("} ") and sc.complete() and sc.feed("\n") and sc.complete()
    assert not JsonObjectScanner().complete()


def test_escapes_and_surrogate_pairs_split_anywhere():
    text = '{"s":"a\\u00e9\\ud83d\\ude00\\n\\"b"}'
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            sc = feed_all([text[:i], text[i:j], text[j:]])
            assert sc.complete(), (i, j)


def test_number_and_literal_split_anywhere():
    text = '{"n":[-12.5e+10,0,7E-1,true,false,null,123]}'
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert feed_all([text[:i], text[i:j], text[j:]]).complete(), (i, j)


# ----------------------------------------------------------------------------- jiter's limits
def _nested(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def test_depth_limit_matches_jiter():
    ok = _nested(MAX_DEPTH)
    assert is_json_object(ok)
    assert all(jiter_partial_ok(ok[:i]) for i in range(1, len(ok) + 1))
    mixed = '{"a":' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    assert is_json_object(mixed) and jiter_partial_ok(mixed)
    too_deep = _nested(MAX_DEPTH + 2)
    assert not is_json_object_prefix(too_deep)
    assert not jiter_partial_ok(too_deep)  # why the limit: the SDK would raise here
    assert accepted_chars(too_deep) == len('{"a":' * MAX_DEPTH)


def test_integer_digit_limit_matches_jiter():
    for sign in ("", "-"):
        ok = '{"n":' + sign + "9" * MAX_INT_DIGITS
        assert is_json_object_prefix(ok) and jiter_partial_ok(ok)
        assert is_json_object(ok + ".5e3}")
        long = ok + "9"
        assert not is_json_object_prefix(long)
        assert not jiter_partial_ok(long)
    # fraction and exponent digits are not limited
    assert is_json_object('{"f":1.' + "0" * 20000 + "1e" + "9" * 50 + "}")


def test_long_string_in_many_fragments():
    sc = JsonObjectScanner()
    assert sc.feed('{"s": "')
    for _ in range(20000):
        assert sc.feed("abc é 😀 ")
    assert sc.feed('"}') and sc.complete()


# ----------------------------------------------------------------------------- properties
_scalar = (st.none() | st.booleans() | st.integers() | st.integers(-(2 ** 70), 2 ** 70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
_value = st.recursive(_scalar, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=6), ch, max_size=4),
                      max_leaves=12)
_objects = st.dictionaries(st.text(max_size=8), _value, max_size=5)
_writers = st.sampled_from([
    lambda o: json.dumps(o),  # ASCII: \uXXXX escapes, surrogate pairs for astral characters
    lambda o: json.dumps(o, ensure_ascii=False),
    lambda o: json.dumps(o, indent=2),
    lambda o: json.dumps(o, separators=(",", ":")),
    lambda o: json.dumps(o, separators=(" ,\t", " :\n ")),
    lambda o: " \n" + json.dumps(o, ensure_ascii=False) + "\r\n ",
])


def _splits(text: str, cuts: list[int]) -> list[str]:
    pts = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *pts], [*pts, len(text)])]


@SETTINGS
@given(obj=_objects, write=_writers, cuts=st.lists(st.integers(0, 10 ** 6), max_size=12))
def test_property_valid_objects(obj, write, cuts):
    text = write(obj)
    # complete, and every prefix accepted (char by char), jiter agreeing on each
    sc = JsonObjectScanner()
    for i, ch in enumerate(text):
        assert sc.feed(ch), (text, i)
        p = text[:i + 1]
        if p.strip() and (len(text) <= 300 or i % 17 == 0):
            assert jiter_partial_ok(p), p
    assert sc.complete()
    # any fragmentation gives the same verdict
    frags = _splits(text, cuts)
    sc = JsonObjectScanner()
    assert all(sc.feed(f) for f in frags) and sc.complete()


_GARBAGE_ALPHABET = '{}[]:,"\\ \t\n\r\x0c0123456789-+.eEtrufalsnbxuU/aAdDcF\x00\x1fé😀\u2028\ud800'
_garbage = st.text(alphabet=_GARBAGE_ALPHABET, max_size=60)


@st.composite
def _mutated(draw):
    text = draw(_writers)(draw(_objects))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "cut"]))
        ch = draw(st.sampled_from(_GARBAGE_ALPHABET))
        if op == "insert":
            text = text[:i] + ch + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1:]
        elif op == "replace":
            text = text[:i] + ch + text[i + 1:]
        else:
            text = text[:i]
    return text


@SETTINGS
@given(text=st.one_of(_mutated(), _garbage, _garbage.map(lambda s: "{" + s), _garbage.map(lambda s: '{"k":' + s)),
       cuts=st.lists(st.integers(0, 10 ** 6), max_size=8))
def test_property_never_accept_what_jiter_rejects(text, cuts):
    k = accepted_chars(text)
    # whatever the scanner accepts (and the SDK would parse: not only whitespace), jiter accepts
    for i in range(1, k + 1):
        p = text[:i]
        if p.strip():
            assert jiter_partial_ok(p), repr(p)
    whole = JsonObjectScanner()
    ok = whole.feed(text)
    assert ok == (k == len(text))
    sc = JsonObjectScanner()
    assert all([sc.feed(f) for f in _splits(text, cuts)]) == ok
    assert sc.complete() == whole.complete()
    if whole.complete():
        assert isinstance(json.loads(text), dict)
        assert isinstance(jiter.from_json(text.encode()), dict)
    # and no valid object is refused (within jiter's limits)
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        assert whole.complete(), repr(text)
