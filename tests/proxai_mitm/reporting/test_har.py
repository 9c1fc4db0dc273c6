"""HAR export (hardump / save.har) through mitmproxy's own SaveHar: redacted, the client's request
paired with the client's response, the StopInfo carried."""

from __future__ import annotations

import gzip
import json

from mitmproxy import http
from mitmproxy.addons.savehar import SaveHar
from mitmproxy.test import taddons, tflow

from proxai_core import Protocol, StopInfo
from proxai_mitm.flow.record import FlowRecord, StopRecord
from proxai_mitm.reporting.har import HarExport

CLIENT_KEY = "sk-proj-client0key0that0must0not0leak0123"
INJECTED = "injected-upstream-key-without-shape-77"
GATEWAY = "portkey-secret-value-99"


def _flow(har: HarExport) -> http.HTTPFlow:
    f = tflow.tflow(resp=True)
    req = f.request
    req.method, req.scheme, req.host, req.port = "POST", "http", "127.0.0.1", 8080
    req.path = "/v1/chat/completions?api_key=" + CLIENT_KEY
    req.headers = http.Headers(authorization=f"Bearer {CLIENT_KEY}", x_portkey_api_key=GATEWAY,
                               content_type="application/json")
    client_body = json.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": f"my key {CLIENT_KEY}"}]})
    req.content = client_body.encode()
    har.request(f)  # captured before any rewrite
    # the route rewrites the request for another host and protocol
    req.url = "https://api.anthropic.test/v1/messages"
    req.headers = http.Headers(x_api_key=INJECTED, content_type="application/json")
    req.content = b'{"model":"claude-x","messages":[],"max_tokens":10}'
    f.response.headers = http.Headers(content_type="application/json")
    f.response.content = json.dumps({"error": {"message": f"bad key {INJECTED}"}}).encode()
    f.response.status_code = 401
    FlowRecord.write_dict(f, FlowRecord(
        client_protocol=Protocol.CHAT, upstream_protocol=Protocol.ANTHROPIC, route="r1",
        client_request=client_body, upstream_response=f"echo {INJECTED}",
        stop=StopRecord.model_validate(StopInfo.from_dict({"reason": "error", "raw": "authentication_error",
                                                           "message": f"bad key {INJECTED}"}).to_dict()),
    ).dump())
    return f


def test_har_entry_is_redacted_client_side_and_annotated(tmp_path):
    har, save = HarExport(), SaveHar()
    with taddons.context(save, har):
        har._wrap()
        f = _flow(har)
        out = tmp_path / "x.har"
        save.export_har([f], str(out))  # the save.har command
        text = out.read_text()
        for secret in (CLIENT_KEY, INJECTED, GATEWAY):
            assert secret not in text, secret
        entry = json.loads(text)["log"]["entries"][0]
        assert entry["request"]["url"].startswith("http://127.0.0.1:8080/v1/chat/completions")
        assert entry["request"]["method"] == "POST"
        assert '"gpt-x"' in entry["request"]["postData"]["text"]  # the client's body, not the translated one
        assert "claude-x" not in text
        assert entry["response"]["status"] == 401
        assert "bad key <redacted>" in entry["response"]["content"]["text"]
        assert "(authentication_error): bad key <redacted>" in entry["comment"]
        assert entry["_proxai"]["stop"]["raw"] == "authentication_error"
        assert entry["_proxai"]["route"] == "r1" and "upstream_response" not in entry["_proxai"]
        headers = {h["name"].lower(): h["value"] for h in entry["request"]["headers"]}
        assert headers["authorization"] == "Bearer <redacted>"
        assert headers["x-portkey-api-key"] == "<redacted>"


def test_har_hardump_path_and_bomb_response(tmp_path):
    har, save = HarExport(), SaveHar()
    with taddons.context(save, har) as tctx:
        har._wrap()
        f = tflow.tflow(resp=True)
        f.response.headers["content-encoding"] = "gzip"
        f.response.raw_content = gzip.compress(b"\0" * (64 * 1024 * 1024))
        tctx.configure(save, hardump=str(tmp_path / "d.har"))
        save.response(f)
        save.done()
        entry = json.loads((tmp_path / "d.har").read_text())["log"]["entries"][0]
        assert "body not exported" in entry["response"]["content"]["text"]
        assert entry["response"]["content"]["size"] < 1024


def test_offline_flow_without_capture_uses_the_record_body():
    har, save = HarExport(), SaveHar()
    with taddons.context(save, har):
        har._wrap()
        f = _flow(har)
        del f._proxai_client_request  # as read back from a file
        entry = save.make_har([f])["log"]["entries"][0]
        assert '"gpt-x"' in entry["request"]["postData"]["text"]
        assert CLIENT_KEY not in json.dumps(entry)


def test_capture_only_where_a_har_can_be_written(monkeypatch):
    """mitmdump without hardump can never export a HAR: the capture hook is off (no per-flow cost);
    hardump switches it on."""
    from proxai_mitm.reporting import har as har_mod

    har, save = HarExport(), SaveHar()
    with taddons.context(save, har) as tctx:
        tctx.configure(har, hardump="")  # what mitmproxy does when the script loads
        assert har.request is not None  # an interactive master: save.har may come any time
    monkeypatch.setattr(har_mod, "_interactive", lambda master: False)  # as in mitmdump
    har2, save2 = HarExport(), SaveHar()
    with taddons.context(save2, har2) as tctx:
        tctx.configure(har2, hardump="")
        assert har2.request is None
        tctx.options.update(hardump="x.har")
        assert har2.request is not None
