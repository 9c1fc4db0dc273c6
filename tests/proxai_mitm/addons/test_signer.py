"""signer.py: routes with ``auth`` get the final request signed (SigV4 valid over what is sent, after any
addon that edits the request), bearer tokens, credential failures answered in the client's protocol,
credentials fetched off the event loop, and every secret used kept out of what is stored."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from mitmproxy.test import taddons

from proxai_mitm.addon import ProxAI, make_addons
from proxai_mitm.addons import signer as signer_mod
from proxai_mitm.addons.signer import Signer
from proxai_mitm.flow.state import flow_state
from proxai_mitm.redaction.redact import redacted_state
from proxai_mitm.reporting.har import har_flow
from tests.fake_cloud import Received, sigv4_signature
from tests.proxai_mitm.redaction.test_redact_encoded import encoded_forms, leaks

from ..helpers import ANTH, CHAT, make_flow, respond

ACCESS = "AKIAPROXAISIGNER0001"
SECRET = "signer/secret/0123456789+abcdefghijklmn"
TOKEN = "signer-session-token-0123456789"
BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com"


@pytest.fixture
def aws(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    for k in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class BodyEditor:
    """A later addon that rewrites the routed request's body (as a user's addon might)."""

    def request(self, flow: Any) -> None:
        if flow.response is None and flow_state(flow) is not None:
            body = json.loads(flow.request.content)
            body["metadata"] = {"user_id": "edited-after-routing"}
            flow.request.content = json.dumps(body).encode()


def _chain(extra_after_router: list[Any] | None = None, signer_first: bool = False):
    addons = make_addons()
    i = next(n for n, a in enumerate(addons) if type(a).__name__ == "Router")
    if signer_first:  # the wrong order, to show the test would see it
        s = next(a for a in addons if isinstance(a, Signer))
        addons.remove(s)
        addons.insert(i + 1, s)
        i += 1
    addons[i + 1:i + 1] = extra_after_router or []
    return ProxAI(addons)


def _received(flow: Any) -> Received:
    r = flow.request
    return Received(r.method, r.path, {k.lower(): v for k, v in r.headers.items()}, r.raw_content or b"")


def _valid(flow: Any) -> bool:
    """The signature checked as the Bedrock fake checks it: recomputed by botocore over the request."""
    rec = _received(flow)
    auth = rec.headers["authorization"]
    names = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    sig = auth.rpartition("Signature=")[2]
    region = auth.split("Credential=")[1].split("/")[2]
    return sig == sigv4_signature(rec, ACCESS, SECRET, TOKEN, region, names, rec.headers["x-amz-date"])


def _run(tctx: Any, proxai: ProxAI, flow: Any) -> None:
    res = proxai.request(flow)
    if res is not None:
        tctx.master.event_loop.run_until_complete(res)


def _routed_flow(tctx: Any, proxai: ProxAI, auth: str, base: str = BEDROCK, **kw: Any) -> Any:
    tctx.configure(proxai, proxai_target=ANTH, proxai_upstream=base, proxai_auth=auth, proxai_model="claude-x")
    f = make_flow(CHAT, host="api.openai.com", **kw)
    _run(tctx, proxai, f)
    return f


def test_sigv4_over_the_final_request_after_a_later_edit(aws):
    proxai = _chain([BodyEditor()])
    with taddons.context(proxai) as tctx:
        f = _routed_flow(tctx, proxai, "aws")
        assert f.response is None
        assert b"edited-after-routing" in f.request.raw_content  # the editor ran before the signer
        h = f.request.headers
        assert h["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS}/")
        assert "/us-east-1/bedrock/aws4_request" in h["authorization"]  # region from the host
        assert h["x-amz-security-token"] == TOKEN and _valid(f)
        st = flow_state(f)
        assert {ACCESS, SECRET, TOKEN, h["authorization"].rpartition("=")[2]} <= set(st.secrets)


def test_a_signature_before_the_edit_would_be_invalid(aws):
    wrong = _chain([BodyEditor()], signer_first=True)
    with taddons.context(wrong) as tctx:
        f = _routed_flow(tctx, wrong, "aws")
        assert not _valid(f)  # signed before the edit: what the upstream would refuse


def test_client_aws_and_google_credentials_never_cross(aws):
    proxai = _chain()
    client = [("authorization", "AWS4-HMAC-SHA256 Credential=AKIACLIENT0000000001/20260101/us-east-1/bedrock/"
                                "aws4_request, SignedHeaders=host, Signature=" + "c" * 64),
              ("x-amz-security-token", "client-session-token-0123"), ("x-amz-date", "20260101T000000Z"),
              ("x-amz-content-sha256", "e" * 64), ("x-goog-user-project", "client-project"),
              ("x-goog-api-key", "AIzaClientKey0123456789")]
    with taddons.context(proxai) as tctx:
        f = _routed_flow(tctx, proxai, "aws", headers=client)
        h = f.request.headers
        assert "AKIACLIENT" not in h["authorization"] and h["x-amz-security-token"] == TOKEN
        assert "x-amz-content-sha256" not in h and "x-goog-user-project" not in h and "x-goog-api-key" not in h
        assert h["x-amz-date"] != "20260101T000000Z"
        st = flow_state(f)
        assert {"AKIACLIENT0000000001", "c" * 64, "client-session-token-0123"} <= set(st.secrets)


def test_same_host_reroute_replaces_the_client_signature(aws):
    """A route without base_url (the client addressed the upstream itself): our signature, not the client's."""
    proxai = _chain()
    with taddons.context(proxai) as tctx:
        tctx.configure(proxai, proxai_target=ANTH, proxai_auth="aws@us-west-2")
        f = make_flow(ANTH, host="bedrock-runtime.us-east-1.amazonaws.com",
                      headers=[("x-amz-security-token", "client-session-token-0123")])
        _run(tctx, proxai, f)
        assert f.request.host == "bedrock-runtime.us-east-1.amazonaws.com"
        assert "/us-west-2/bedrock/" in f.request.headers["authorization"]  # @region wins over the host
        assert f.request.headers.get_all("x-amz-security-token") == [TOKEN] and _valid(f)


@pytest.mark.parametrize("auth, env", [("aws-bearer", "AWS_BEARER_TOKEN_BEDROCK"), ("bearer:VTX_TOKEN", "VTX_TOKEN")])
def test_bearer_sources(monkeypatch, auth, env):
    monkeypatch.setenv(env, "bearer-secret-0123456789")
    proxai = _chain()
    with taddons.context(proxai) as tctx:
        f = _routed_flow(tctx, proxai, auth)
        assert f.request.headers["authorization"] == "Bearer bearer-secret-0123456789"
        assert "x-api-key" not in f.request.headers  # the target protocol's key header is not used
        assert "bearer-secret-0123456789" in flow_state(f).secrets
        monkeypatch.delenv(env)
        f = _routed_flow(tctx, proxai, auth)
        assert f.response is not None and f.response.status_code == 401
        err = json.loads(f.response.content)["error"]  # the Chat client's own error shape
        assert err["type"] in ("authentication_error", "invalid_request_error") and env in err["message"]


def test_missing_aws_credentials_are_a_native_401_naming_the_profile(monkeypatch, tmp_path):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    proxai = _chain()
    with taddons.context(proxai) as tctx:
        f = _routed_flow(tctx, proxai, "aws:team-dev")
        assert f.response.status_code == 401
        msg = json.loads(f.response.content)["error"]["message"]
        assert "AWS profile 'team-dev' is not in the shared config files" in msg and "route 'default'" in msg


def test_refresh_runs_in_a_worker_thread_with_a_bounded_wait(aws, monkeypatch):
    proxai = _chain()
    threads: list[str] = []
    release = threading.Event()
    with taddons.context(proxai) as tctx:
        tctx.configure(proxai, proxai_target=ANTH, proxai_upstream=BEDROCK, proxai_auth="aws")
        src = next(a for a in proxai.concerns if isinstance(a, Signer)).source("aws")
        real = src.refresh

        def slow() -> None:
            threads.append(threading.current_thread().name)
            release.wait(5)
            real()

        monkeypatch.setattr(src, "refresh", slow)
        monkeypatch.setattr(signer_mod, "REFRESH_TIMEOUT", 0.2)
        f = make_flow(CHAT, host="api.openai.com")
        res = proxai.request(f)
        assert asyncio.iscoroutine(res)  # the flow waits; the event loop does not
        tctx.master.event_loop.run_until_complete(res)
        release.set()
        assert threads and threads[0] != threading.main_thread().name
        assert f.response.status_code == 502
        assert "AWS credentials (default chain): no answer within 0 s" in json.loads(f.response.content)["error"][
            "message"]


def test_replayed_and_unrouted_flows_are_not_signed(aws):
    proxai = _chain()
    with taddons.context(proxai) as tctx:
        tctx.configure(proxai, proxai_target=ANTH, proxai_upstream=BEDROCK, proxai_auth="aws")
        f = make_flow(CHAT, path="/api/other", body={"x": 1})
        _run(tctx, proxai, f)
        assert f.request.headers["authorization"] == "Bearer sk-client-secret-123"
        signer = next(a for a in proxai.concerns if isinstance(a, Signer))
        f = make_flow(CHAT, host="api.openai.com")
        proxai.concerns[[type(a).__name__ for a in proxai.concerns].index("Router")].request(f)
        flow_state(f).replay = {"result": "sent"}
        assert signer.request(f) is None and "authorization" not in f.request.headers


def test_signer_is_off_without_auth_routes():
    off = _chain()
    with taddons.context(off) as tctx:
        tctx.configure(off, proxai_target=ANTH, proxai_upstream=BEDROCK, proxai_key_env="K")
        assert next(a for a in off.concerns if isinstance(a, Signer)).request is None  # no auth route: off


def test_secrets_used_never_stored_in_any_encoding(aws):
    """The upstream echoes every secret we sent, in every encoded form: the stored flow, its HAR entry
    and the record carry none of them."""
    proxai = _chain()
    with taddons.context(proxai) as tctx:
        f = _routed_flow(tctx, proxai, "aws")
        sig = f.request.headers["authorization"].rpartition("Signature=")[2]
        secrets = (ACCESS, SECRET, TOKEN, sig)
        echo = " ".join(form for s in secrets for form in encoded_forms(s).values())
        respond(f, 403, json.dumps({"message": echo}).encode(), "application/json",
                [("x-amzn-errortype", "UnrecognizedClientException")])
        for hook in ("responseheaders", "response"):
            res = getattr(proxai, hook)(f)
            if res is not None:
                tctx.master.event_loop.run_until_complete(res)
        st = flow_state(f)
        state = redacted_state(f, st.secrets)  # what the recorder saves
        blob = json.dumps(state, default=lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b))
        har = har_flow(f)
        har_blob = json.dumps(har.get_state(), default=lambda b: b.decode("utf-8", "replace")
                              if isinstance(b, bytes) else str(b))
        for s in secrets:
            assert not leaks(blob, s), (s, leaks(blob, s))
            assert not leaks(har_blob, s), (s, leaks(har_blob, s))
        assert "proxai" in f.metadata and not any(leaks(json.dumps(f.metadata["proxai"], default=str), s)
                                                  for s in secrets)
