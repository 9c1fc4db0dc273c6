"""recorder.py: what is stored is redacted, the live flow is not."""

from __future__ import annotations

import io
from typing import Any

from mitmproxy import flow as mflow
from mitmproxy import http
from mitmproxy import io as mio
from mitmproxy.test import tflow, tutils

from ..helpers import CHAT, json_bytes, make_flow, respond

SECRET = "sk-client-secret-123"  # the Authorization of make_flow


def run(tctx: Any, res: Any) -> Any:
    if res is not None and hasattr(res, "__await__"):
        return tctx.master.event_loop.run_until_complete(res)
    return res


def stored(f: http.HTTPFlow) -> bytes:
    """The bytes `-w` writes for this flow."""
    buf = io.BytesIO()
    mio.FlowWriter(buf).add(f)
    return buf.getvalue()


def reread(f: http.HTTPFlow) -> http.HTTPFlow:
    return next(iter(mio.FlowReader(io.BytesIO(stored(f))).stream()))


def test_stored_flow_is_redacted_live_flow_is_not(addon):
    f = make_flow(CHAT, headers=[("cookie", "session=abc123secret")])
    addon.requestheaders(f)
    addon.request(f)
    respond(f, 200, json_bytes(CHAT), "application/json", [("set-cookie", "__cf_bm=cfsecret42; path=/")])
    addon.responseheaders(f)
    addon.response(f)
    # the live flow (what mitmproxy sends on: the response is not on the wire yet) is untouched
    assert f.request.headers["authorization"] == f"Bearer {SECRET}"
    assert f.response.headers["set-cookie"] == "__cf_bm=cfsecret42; path=/"
    data = stored(f)
    for s in (SECRET, "abc123secret", "cfsecret42"):
        assert s.encode() not in data
    g = reread(f)
    assert g.request.headers["authorization"] == "Bearer <redacted>"
    assert g.request.headers["cookie"] == "session=<redacted>"
    assert g.response.headers["set-cookie"] == "__cf_bm=<redacted>; path=/"
    assert g.metadata["proxai"]["stop"]["reason"] == "end_turn"  # the rest is stored as it was
    assert g.response.content == f.response.content
    # a copy (mitmproxy's "duplicate", client replay) has the live request: a replay still authenticates
    assert f.copy().request.headers["authorization"] == f"Bearer {SECRET}"


def test_redaction_covers_non_llm_flows_urls_and_errors(addon):
    req = tutils.treq(method=b"GET", path=b"/v1beta/models?key=AIzaSyD-0123456789abcdefghijklmnopqrstu",
                      headers=http.Headers([(b"x-api-key", b"my-gateway-key-000")]))
    f = tflow.tflow(req=req)
    addon.requestheaders(f)
    f.error = mflow.Error("Client disconnected.")
    addon.error(f)
    data = stored(f)
    assert b"AIzaSyD-0123456789" not in data and b"my-gateway-key-000" not in data
    assert f.request.path.endswith("abcdefghijklmnopqrstu")  # live


def test_redaction_off_stores_everything(addon):
    addon.configure(proxai_redact=False)
    f = make_flow(CHAT)
    addon.requestheaders(f)
    assert SECRET.encode() in stored(f)


def test_recorder_alone_redacts_what_is_stored_with_the_flows_own_secrets():
    import json

    from mitmproxy.test import taddons

    from proxai_core import Protocol
    from proxai_mitm.addons.recorder import Recorder
    from proxai_mitm.flow.state import FlowState, set_flow_state

    from ..helpers import ANTH

    r = Recorder()
    with taddons.context(r) as tctx:
        tctx.configure(r, proxai_redact=True)
        key = "plain-injected-key-0042"  # no known key shape: only the flow's own secrets find it
        f = make_flow(ANTH)
        respond(f, 401, f'{{"error": "bad key {key}"}}'.encode(), "application/json")
        set_flow_state(f, FlowState("generate", Protocol(ANTH), Protocol(CHAT), "r", secrets=(key,)))
        r.requestheaders(f)
        assert key not in json.dumps(f.get_state(), default=repr)
        assert key.encode() in f.response.content  # the live flow keeps it
        tctx.configure(r, proxai_redact=False)
        assert key.encode() in f.get_state()["response"]["content"]
