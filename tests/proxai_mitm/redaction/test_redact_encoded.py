"""Every encoded form of a flow secret is redacted: JSON (``\\/``, ``\\u00xx`` in any hex case, mixed
with literal characters), percent (upper / lower hex, ``+`` for a space), HTML references, base64,
an escaped escape — in the scanner, the record strings and the log line (state.scrub), a saved flow,
and again in the readers (report, CSV/JSON, export, HTML report) of a file written without redaction."""

from __future__ import annotations

import base64
import html
import io
import json
import random
import re
import time
import tracemalloc
from contextlib import redirect_stdout
from urllib.parse import quote, quote_plus, unquote_plus

import pytest
from mitmproxy import http
from mitmproxy import io as mio
from mitmproxy.test import tflow, tutils

from proxai_mitm.__main__ import main
from proxai_mitm.flow.state import scrub
from proxai_mitm.redaction.flowfile import read_file
from proxai_mitm.redaction.redact import REDACTED, Redactor, redact_flow, redacted_state

#: a configured key with no known shape (only exact matching can find it), with "/" and "+"
KEY = "gw/Secret+Key-0123456789abcdefXYZ"
#: a secret with a space (percent "+" form)
SPACE_KEY = "gateway secret 0123456789 abc"


def _alternate(key: str, enc: str) -> str:
    return "".join((enc % ord(c)) if i % 2 else c for i, c in enumerate(key))


def encoded_forms(key: str) -> dict[str, str]:
    """The ways an upstream may echo ``key`` (each a str to put into a body)."""
    raw = key.encode()
    return {
        "raw": key,
        "json_slash": key.replace("/", "\\/"),
        "json_u_lower": "".join(f"\\u{ord(c):04x}" for c in key),
        "json_u_upper": "".join(f"\\u{ord(c):04X}" for c in key),
        "json_mixed": _alternate(key, "\\u%04X").replace("/", "\\/"),
        "pct_upper": quote(key, safe=""),
        "pct_lower": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(key, safe="")),
        "pct_every_byte": "".join(f"%{b:02x}" for b in raw),
        "pct_plus": quote_plus(key),
        "html_hex": "".join(f"&#x{ord(c):x};" for c in key),
        "html_dec": "".join(f"&#{ord(c)};" for c in key),
        "html_mixed": _alternate(key, "&#%d;"),
        "base64": base64.b64encode(raw).decode(),
        "base64_basic": base64.b64encode(b"user:" + raw).decode(),
        "base64_offset2": base64.b64encode(b"ab" + raw + b"z").decode(),
        "base64url": base64.urlsafe_b64encode(b"x" + raw).decode(),
        # an escaped escape (two layers)
        "pct_twice": quote(quote(key, safe=""), safe=""),
        "html_escaped_refs": html.escape("".join(f"&#x{ord(c):x};" for c in key)),
        "pct_of_json_u": quote("".join(f"\\u{ord(c):04x}" for c in key), safe=""),
    }


def _json_unescape(text: str) -> str:
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text).replace("\\/", "/")


def leaks(blob: bytes | str, key: str = KEY) -> list[str]:
    """Where ``key`` still shows in ``blob``: as it is, once decoded (JSON, percent, HTML), or as one
    of its encoded forms."""
    text = blob if isinstance(blob, str) else blob.decode("utf-8", "replace")
    views = {"raw": text, "json": _json_unescape(text), "percent": unquote_plus(text), "html": html.unescape(text)}
    found = [f"decoded:{n}" for n, v in views.items() if key in v]
    return found + [f"form:{n}" for n, e in encoded_forms(key).items() if e in text]


FORMS = list(encoded_forms(KEY))


# ----------------------------------------------------------------------------- the scanner
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("key", [KEY, SPACE_KEY], ids=["slash-plus", "space"])
def test_each_encoded_form_is_redacted(key, form):
    enc = encoded_forms(key)[form]
    text = f'{{"error":{{"message":"Incorrect API key provided: {enc}. See the docs."}}}}'
    out = Redactor([key]).text(text)
    assert REDACTED in out and not leaks(out, key), out
    assert out.startswith('{"error":{"message":"Incorrect API key provided: ')
    assert out.endswith('. See the docs."}}')
    assert Redactor([key]).text(out) == out  # idempotent


def test_escaped_backslash_is_not_an_escape_and_text_around_is_kept():
    r = Redactor([KEY])
    text = "path C:\\\\u0041dir 100% &amp more %zz \\/ plain"
    assert r.text(text) == text
    assert r.data(text.encode()) is not None


def test_encoded_key_shape_is_masked_after_decoding():
    """A known key shape written with escapes is found too (the readers know no secret of a
    redacted file: the shapes are what they can still catch)."""
    out = Redactor().text('{"k":"sk\\u002dproj-Abc123def456GHI789jkl012"}')
    assert out == '{"k":"sk-<redacted>"}'


def test_state_scrub_uses_the_one_placeholder_and_every_form():
    for enc in encoded_forms(KEY).values():
        out = scrub(f"upstream said: {enc}!", (KEY,))
        assert out == f"upstream said: {REDACTED}!" or (REDACTED in out and not leaks(out)), (enc, out)
    assert "[REDACTED]" not in (scrub(KEY, (KEY,)) or "")
    assert scrub("sk-proj-Abc123def456GHI789jkl012", (KEY,)) == "sk-proj-Abc123def456GHI789jkl012"  # exact only


def test_escape_heavy_text_is_linear_and_bounded():
    """Every character an escape: time grows with the size (min of 3 runs), memory stays small."""
    r = Redactor([KEY])

    def took(n: int) -> float:
        data = b"%41" * n
        best = 1e9
        for _ in range(3):
            t0 = time.perf_counter()
            r.data(data)
            best = min(best, time.perf_counter() - t0)
        return best

    small, big = took(200_000), took(800_000)
    assert big < small * 4 * 1.6 + 0.05, (small, big)
    data = b"\\u0041" * 500_000  # 3 MB
    tracemalloc.start()
    try:
        r.data(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) * 2 + 16 * 1024 * 1024, peak


def test_random_mixes_of_forms_are_found():
    rnd = random.Random(21)
    forms = ["%c", "\\u%04x", "\\u%04X", "%%%02X", "%%%02x", "&#%d;", "&#x%x;"]
    for _ in range(200):
        enc = "".join((rnd.choice(forms) % ord(c)) if c != "/" or rnd.random() < 0.5 else "\\/" for c in KEY)
        out = Redactor([KEY]).text(f"x {enc} y")
        assert out == f"x {REDACTED} y", enc


# ----------------------------------------------------------------------------- saved flows
def _echo_flow(form: str) -> http.HTTPFlow:
    f = tflow.tflow(resp=True)
    f.request.headers["authorization"] = f"Bearer {KEY}"
    f.response.status_code = 401
    f.response.content = ('{"error":{"message":"bad key ' + encoded_forms(KEY)[form] + '"}}').encode()
    f.metadata["proxai"] = {"upstream_response": f.response.content.decode()}
    f.comment = "echo " + encoded_forms(KEY)[form]
    return f


@pytest.mark.parametrize("form", FORMS)
def test_saved_flow_has_no_form_of_the_key(form):
    f = _echo_flow(form)
    blob = json.dumps(redacted_state(f), default=lambda b: b.decode("utf-8", "replace"))
    assert not leaks(blob), leaks(blob)
    redact_flow(f)
    buf = io.BytesIO()
    mio.FlowWriter(buf).add(f)
    assert not leaks(buf.getvalue())


# ----------------------------------------------------------------------------- the readers
def _unredacted_file(tmp_path, forms=FORMS):
    """A recording written without redaction (or by an older version): the key in the request's
    header and echoed in the error body in every form."""
    path = tmp_path / "old.mitm"
    with open(path, "wb") as fh:
        w = mio.FlowWriter(fh)
        for i, form in enumerate(forms):
            req = tutils.treq(method=b"POST", scheme=b"https", host="api.openai.com", port=443,
                              path=b"/v1/chat/completions",
                              headers=http.Headers([(b"content-type", b"application/json"),
                                                    (b"authorization", f"Bearer {KEY}".encode())]),
                              content=b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}',
                              timestamp_start=1700000000.0 + i, timestamp_end=1700000000.1 + i)
            body = ('{"error":{"message":"Incorrect API key provided: ' + encoded_forms(KEY)[form]
                    + '","type":"invalid_request_error","code":"invalid_api_key"}}').encode()
            resp = tutils.tresp(status_code=401, headers=http.Headers([(b"content-type", b"application/json")]),
                                content=body, timestamp_start=1700000000.5 + i, timestamp_end=1700000000.6 + i)
            w.add(tflow.tflow(req=req, resp=resp))
    assert all(encoded_forms(KEY)[f].encode() in path.read_bytes() for f in forms)
    return path


def test_reader_redacts_every_flow_it_reads(tmp_path):
    path = _unredacted_file(tmp_path)
    got = read_file(path)
    assert len(got.flows) == len(FORMS)
    for f in got.flows:
        assert not leaks(f.request.headers["authorization"]) and not leaks(f.response.content)
        assert f.response.content.startswith(b'{"error":{"message":"Incorrect API key provided: ')
        assert REDACTED.encode() in f.response.content
    raw = read_file(path, redact=False)  # the opt-out keeps the bytes
    assert KEY in raw.flows[0].request.headers["authorization"]


@pytest.mark.parametrize("fmt", ["json", "csv", "table", "markdown"])
def test_report_formats_show_no_form_of_the_key(tmp_path, fmt):
    path = _unredacted_file(tmp_path)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(path), "-f", fmt]) == 0
    assert "invalid" in out.getvalue().lower() or fmt != "json"  # the error itself is shown
    assert not leaks(out.getvalue()), leaks(out.getvalue())


def test_export_and_html_report_show_no_form_of_the_key(tmp_path):
    path = _unredacted_file(tmp_path)
    jsonl, page = tmp_path / "x.jsonl", tmp_path / "r.html"
    with redirect_stdout(io.StringIO()):
        assert main(["export", str(path), str(jsonl)]) == 0
        assert main(["report", str(path), "--html", str(page)]) == 0
    for out in (jsonl.read_text(), page.read_text()):
        assert "Incorrect API key provided" in out
        assert not leaks(out), leaks(out)
