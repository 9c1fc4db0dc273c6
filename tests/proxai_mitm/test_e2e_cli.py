"""End to end, mitmdump command lines: a bad option value is a visible error; offline ``-nr`` reads
annotate a plain capture without rewriting it."""

from __future__ import annotations

import json

import pytest
from mitmproxy import http, io
from mitmproxy.test import tflow, tutils

from tests.fake_upstream import RECORDED, _enc_event
from tests.mitm_harness import Mitmdump, read_flows

pytestmark = pytest.mark.e2e


BAD = {
    "target": ({"proxai_target": "anthropic"}, "proxai: invalid option proxai_target: must be one of"),
    "redact": ({"proxai_redact": "maybe"}, "proxai: invalid option proxai_redact='maybe'"),
    "replay": ({"proxai_replay": "/nonexistent/session.mitm"},
               "proxai: invalid option proxai_replay: /nonexistent/session.mitm does not exist"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """All mitmdumps of this module start at once (startup dominates these tests)."""
    out: dict = {k: Mitmdump(options=o, save=False) for k, (o, _) in BAD.items()}
    tmp = tmp_path_factory.mktemp("offline")
    _write_capture(tmp / "plain.mitm")
    out["offline"] = Mitmdump(options={"proxai_target": "openai_chat_completions"}, save=False,
                              extra_args=["-n", "-r", str(tmp / "plain.mitm"), "-w", str(tmp / "out.mitm")])
    out["offline_out"] = tmp / "out.mitm"
    for m in out.values():
        if isinstance(m, Mitmdump):
            m.start(wait=False)
    yield out
    for m in out.values():
        if isinstance(m, Mitmdump):
            m.cleanup()


@pytest.mark.parametrize("key", list(BAD))
def test_bad_option_is_a_visible_error(runs, key):
    m = runs[key]
    rc = m.wait_exit(90)
    assert BAD[key][1] in m.log
    assert rc != 0  # mitmdump exits on errors logged during startup


def _flow(path: str, body: dict, status: int, content: bytes, ctype: str) -> http.HTTPFlow:
    req = tutils.treq(method=b"POST", scheme=b"https", host="api.example.com", port=443, path=path.encode(),
                      content=json.dumps(body).encode(),
                      headers=http.Headers([(b"content-type", b"application/json")]))
    f = tflow.tflow(req=req)
    f.response = tutils.tresp(status_code=status, content=content,
                              headers=http.Headers([(b"content-type", ctype.encode())]))
    return f


def _write_capture(src) -> None:
    sse = b"".join(_enc_event(e) for e in RECORDED["anthropic_messages"]["refusal"]["sse"])
    flows = [
        _flow("/v1/messages", {"model": "claude", "max_tokens": 5, "stream": True,
                               "messages": [{"role": "user", "content": "hi"}]}, 200, sse, "text/event-stream"),
        _flow("/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}, 200,
              json.dumps(RECORDED["openai_chat_completions"]["max"]["json"]).encode(), "application/json"),
        _flow("/v1/responses", {"model": "gpt-5", "input": "hi"}, 429,
              b'{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}',
              "application/json"),
    ]
    with open(src, "wb") as fo:
        w = io.FlowWriter(fo)
        for f in flows:
            w.add(f)


def test_offline_read_annotates_plain_capture(runs):
    m = runs["offline"]
    assert m.wait_exit(90) == 0, m.log
    out = read_flows(runs["offline_out"])
    assert [f.request.path for f in out] == ["/v1/messages", "/v1/chat/completions", "/v1/responses"]  # no rewrite
    reasons = [f.metadata["proxai"]["stop"]["reason"] for f in out]
    assert reasons == ["refusal", "max_output", "interrupted"]
    assert [f.marked for f in out] == [":no_entry:", ":scissors:", ":electric_plug:"]
    assert out[0].comment.startswith("refusal (cyber)")
    assert "proxai: anthropic_messages → anthropic_messages (pass-through)" in m.log
