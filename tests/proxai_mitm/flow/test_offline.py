"""offline.py (through the annotation addon): flows read from a file are never rewritten; annotated
from their record or their bodies."""

from __future__ import annotations

import json

from ..helpers import ANTH, CHAT, RESP, json_bytes, make_flow, respond, sse_bytes


def test_offline_annotation_from_stored_sse(addon):
    f = make_flow(RESP, stream=True)
    respond(f, 200, sse_bytes(RESP, "tool"), "text/event-stream")
    f.live = False
    addon.cycle(f)
    assert f.request.path == "/v1/responses"
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "tool_use" and m["route"] is None
    assert f.comment.startswith("tool_use")


def test_offline_annotation_from_json_and_errors(addon):
    f = make_flow(CHAT)
    respond(f, 200, json_bytes(CHAT, "max"), "application/json")
    f.live = False
    addon.cycle(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "max_output" and f.marked == ":scissors:"

    f = make_flow(ANTH)
    respond(f, 529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "application/json")
    f.live = False
    addon.cycle(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted"
    assert f.comment.startswith("interrupted")


def test_offline_keeps_recorded_metadata(addon):
    f = make_flow(ANTH)
    respond(f, 200, b"{}", "application/json")
    f.metadata["proxai"] = {"client_protocol": CHAT, "upstream_protocol": ANTH, "route": "r",
                            "stop": {"reason": "refusal", "raw": "refusal", "category": "cyber", "message": None,
                                     "recommended_model": None, "detail": {}},
                            "warnings": [], "client_request": "{}", "upstream_response": "{}", "usage": None}
    before = json.dumps(f.metadata)
    f.live = False
    addon.cycle(f)
    assert json.dumps(f.metadata) == before


def test_offline_stream_without_body(addon):
    f = make_flow(CHAT, stream=True)
    respond(f, 200, None, "text/event-stream")
    f.response.raw_content = None
    f.live = False
    addon.cycle(f)
    m = f.metadata["proxai"]
    assert m["stop"] is None and any("not stored" in w for w in m["warnings"])


def test_annotator_alone_observes_a_plain_capture():
    from mitmproxy.test import taddons

    from proxai_mitm.addons.annotate import Annotator
    from proxai_mitm.flow.state import flow_state

    a = Annotator()
    with taddons.context(a):
        f = make_flow(ANTH, stream=True)
        respond(f, 200, sse_bytes(ANTH, "refusal"), "text/event-stream")
        f.live = False
        a.response(f)
        st = flow_state(f)
        assert st.translation == "observe" and st.stop.reason.value == "refusal" and st.route is None
        assert f.metadata["proxai"]["stop"]["reason"] == "refusal" and f.marked == ":no_entry:"
        g = make_flow(ANTH)  # a live flow without state: nothing to annotate
        a.response(g)
        assert flow_state(g) is None and "proxai" not in g.metadata


def test_offline_gemini_capture_reads_model_and_stream_from_the_url(addon):
    from tests.fake_upstream import RECORDED

    chunks = RECORDED["gemini_generate_content"]["text"]["sse"]
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
    f = make_flow(ANTH, body={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                  path="/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    respond(f, 200, body, "text/event-stream")
    f.live = False
    addon.cycle(f)
    m = f.metadata["proxai"]
    assert m["client_protocol"] == "gemini_generate_content" and m["client_model"] == "gemini-2.5-flash"
    assert m["stream"] is True and m["stop"]["reason"] == "end_turn"
