"""Credential sources: SigV4 identical to boto3's own, profiles and regions, Bedrock API keys and env
tokens, Google ADC through a loopback token endpoint, and the secrets a client's AWS headers carry."""

from __future__ import annotations

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import botocore.auth
import botocore.awsrequest
import pytest

from proxai_mitm.wire.credentials import (
    AwsSigV4,
    CredentialError,
    EnvBearer,
    GoogleADC,
    Unavailable,
    make_source,
    seen_secrets,
)

ACCESS = "AKIAPROXAITEST000001"
SECRET = "proxai/test/secret/key/0123456789abcdefghij"
TOKEN = "proxai-session-token-" + "x" * 40
FROZEN = dt.datetime(2026, 1, 2, 3, 4, 5)


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """Only the environment's credentials: no shared files, no instance metadata."""
    for k in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN",
              "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_BEARER_TOKEN_BEDROCK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: FROZEN)
    return tmp_path


def _boto3_requests(token: str | None) -> list[botocore.awsrequest.AWSPreparedRequest]:
    """What boto3's own bedrock-runtime client would send (captured before sending: no network)."""
    client = boto3.Session(aws_access_key_id=ACCESS, aws_secret_access_key=SECRET, aws_session_token=token,
                           region_name="us-west-2").client("bedrock-runtime")
    sent: list[Any] = []

    def capture(request: Any, **_: Any) -> botocore.awsrequest.AWSResponse:
        sent.append(request)
        raise _Captured

    client.meta.events.register("before-send.bedrock-runtime.*", capture)
    msgs = [{"role": "user", "content": [{"text": "hi ünïcode"}]}]
    model = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    calls = [
        lambda: client.converse(modelId=model, messages=msgs, inferenceConfig={"maxTokens": 64}),
        lambda: client.converse_stream(modelId="us." + model, messages=msgs),
        lambda: client.invoke_model(modelId=model, body=b'{"anthropic_version":"bedrock-2023-05-31"}',
                                    accept="application/json", contentType="application/json", trace="ENABLED",
                                    guardrailIdentifier="gr-1", guardrailVersion="1"),
        lambda: client.invoke_model_with_response_stream(modelId=model, body=b"{}"),
        lambda: client.count_tokens(modelId=model, input={"converse": {"messages": msgs}}),
        lambda: client.converse(modelId="arn:aws:bedrock:us-west-2:123456789012:inference-profile/x.y:1",
                                messages=msgs),
    ]
    for call in calls:
        with pytest.raises(_Captured):
            call()
    return sent


class _Captured(Exception):
    pass


@pytest.mark.parametrize("token", [None, TOKEN], ids=["long-term", "session"])
def test_sigv4_equals_boto3_for_the_same_request(aws_env, monkeypatch, token):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    if token:
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    src = AwsSigV4()
    assert not src.ready()
    src.refresh()
    assert src.ready()
    sent = _boto3_requests(token)
    assert len(sent) == 6
    for req in sent:
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in req.headers.items()}
        theirs = {k.lower(): headers.pop(k) for k in list(headers)
                  if k.lower() in ("authorization", "x-amz-date", "x-amz-security-token")}
        ours = src.authorize(req.method, req.url, headers, req.body or b"", "bedrock-runtime.us-west-2.amazonaws.com")
        assert ours == theirs, req.url
    assert "%3A" in sent[0].url  # the model id's ":" as boto3 sends it
    assert set(src.secrets()) == {ACCESS, SECRET} | ({token} if token else set())


def test_sigv4_changes_with_every_signed_part(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    src = AwsSigV4()
    src.refresh()
    url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse"
    host = "bedrock-runtime.us-east-1.amazonaws.com"
    base = src.authorize("POST", url, {"content-type": "application/json"}, b"{}", host)["authorization"]
    assert "/us-east-1/bedrock/aws4_request" in base
    variants = [
        src.authorize("POST", url, {"content-type": "application/json"}, b"{ }", host),
        src.authorize("POST", url + "-stream", {"content-type": "application/json"}, b"{}", host),
        src.authorize("POST", url, {"content-type": "text/plain"}, b"{}", host),
        src.authorize("PUT", url, {"content-type": "application/json"}, b"{}", host),
    ]
    assert all(v["authorization"] != base for v in variants)
    # headers outside the signed set (lengths, user agents, an SDK's own) do not change it
    same = src.authorize("POST", url, {"content-type": "application/json", "content-length": "2",
                                       "user-agent": "x", "x-stainless-lang": "js",
                                       "authorization": "Bearer client"}, b"{}", host)
    assert same["authorization"] == base


def test_named_profile_and_its_errors(aws_env):
    (aws_env / "credentials").write_text(f"[dev]\naws_access_key_id = {ACCESS}\naws_secret_access_key = {SECRET}\n")
    (aws_env / "config").write_text("[profile dev]\nregion = eu-central-1\n")
    src = make_source("aws:dev")
    assert isinstance(src, AwsSigV4) and src.profile == "dev" and "profile dev" in src.label
    src.refresh()
    assert src.region_for("127.0.0.1") == "eu-central-1"  # the profile's region
    assert src.region_for("bedrock-runtime.ap-south-1.amazonaws.com") == "ap-south-1"  # the host's
    assert make_source("aws:dev@us-east-2").region_for("bedrock-runtime.ap-south-1.amazonaws.com") == "us-east-2"
    with pytest.raises(CredentialError, match="AWS profile 'nope' is not in the shared config files"):
        make_source("aws:nope").refresh()


def test_no_aws_credentials_and_no_region_are_named(aws_env, monkeypatch):
    with pytest.raises(CredentialError, match=r"no AWS credentials \(default chain\) found"):
        AwsSigV4().refresh()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    src = AwsSigV4()
    src.refresh()
    with pytest.raises(CredentialError, match=r'no AWS region for 127.0.0.1: write auth = "aws@<region>"'):
        src.authorize("POST", "http://127.0.0.1:1/model/m/converse", {}, b"", "127.0.0.1")
    monkeypatch.setenv("AWS_REGION", "sa-east-1")
    src = AwsSigV4()
    src.refresh()
    assert src.region_for("127.0.0.1") == "sa-east-1"


def test_refreshable_credentials_renew_before_expiry(aws_env):
    from botocore.credentials import ReadOnlyCredentials, RefreshableCredentials

    calls = []

    def fetch() -> dict[str, str]:
        calls.append(1)
        expiry = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=3 if len(calls) == 1 else 60)
        return {"access_key": ACCESS, "secret_key": SECRET, "token": f"{TOKEN}{len(calls)}",
                "expiry_time": expiry.isoformat()}

    src = AwsSigV4(region="us-east-1")
    src._creds = RefreshableCredentials.create_from_metadata(fetch(), fetch, "test")
    src._frozen = ReadOnlyCredentials(ACCESS, SECRET, f"{TOKEN}1")  # what the first load gave
    assert not src.ready()  # 3 minutes left: inside the margin, renewed before use
    src.refresh()
    assert src.ready() and src._frozen.token == f"{TOKEN}2"


@pytest.mark.parametrize("auth, env", [("aws-bearer", "AWS_BEARER_TOKEN_BEDROCK"), ("aws-bearer:MY_BR", "MY_BR"),
                                       ("bearer:VERTEX_TOKEN", "VERTEX_TOKEN")])
def test_env_bearer(monkeypatch, auth, env):
    monkeypatch.delenv(env, raising=False)
    src = make_source(auth)
    assert isinstance(src, EnvBearer) and src.ready()
    with pytest.raises(CredentialError, match=f"environment variable {env} is not set"):
        src.authorize("POST", "https://x/y", {}, b"", "x")
    monkeypatch.setenv(env, " tok-0123456789 ")
    assert src.authorize("POST", "https://x/y", {}, b"", "x") == {"authorization": "Bearer tok-0123456789"}
    assert src.secrets() == ("tok-0123456789",)


# ----------------------------------------------------------------------------- Google ADC
class TokenEndpoint:
    """A loopback OAuth token endpoint: each grant gets a new access token."""

    def __init__(self, expires_in: int = 3600, status: int = 200) -> None:
        self.grants: list[dict[str, str]] = []
        self.expires_in, self.status = expires_in, status
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                from urllib.parse import parse_qsl
                n = int(self.headers.get("content-length", 0))
                outer.grants.append(dict(parse_qsl(self.rfile.read(n).decode())))
                body = json.dumps({"access_token": f"ya29.proxai-test-{len(outer.grants)}",
                                   "expires_in": outer.expires_in, "token_type": "Bearer"} if outer.status == 200
                                  else {"error": "invalid_grant"}).encode()
                self.send_response(outer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def adc_file(path: Any, token_uri: str) -> str:
    """A service-account ADC file (a fresh RSA key) whose token endpoint is ``token_uri``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "proxai-test", "private_key_id": "k1", "private_key": pem,
        "client_email": "proxai@proxai-test.iam.gserviceaccount.com", "client_id": "1", "token_uri": token_uri}))
    return str(path)


def test_google_adc_refreshes_through_the_token_uri(monkeypatch, tmp_path):
    ep = TokenEndpoint(expires_in=3600)
    try:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", adc_file(tmp_path / "adc.json", ep.url))
        src = make_source("google")
        assert isinstance(src, GoogleADC) and not src.ready()
        src.refresh()
        assert src.ready() and ep.grants[0]["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        assert src.authorize("POST", "https://x/y", {}, b"", "x") == {"authorization": "Bearer ya29.proxai-test-1"}
        assert src.secrets() == ("ya29.proxai-test-1",)
        src.refresh()  # still valid: no second grant
        assert len(ep.grants) == 1
        src._creds.expiry = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(minutes=4)
        assert not src.ready()  # about to expire: refreshed before use
        src.refresh()
        assert len(ep.grants) == 2 and src.authorize("GET", "https://x", {}, b"", "x")["authorization"].endswith("-2")
    finally:
        ep.close()


def test_google_adc_failures(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(CredentialError, match="Google Application Default Credentials: none found"):
        GoogleADC().refresh()
    ep = TokenEndpoint(status=400)
    try:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", adc_file(tmp_path / "adc.json", ep.url))
        with pytest.raises(Unavailable, match="could not be refreshed: RefreshError"):
            GoogleADC().refresh()
    finally:
        ep.close()


def test_seen_secrets_of_a_client_sigv4():
    sig = "a" * 64
    headers = {"authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS}/20260102/us-east-1/bedrock/aws4_request, "
                                f"SignedHeaders=host;x-amz-date, Signature={sig}",
               "x-amz-security-token": TOKEN}
    assert seen_secrets(headers) == [ACCESS, sig, TOKEN]
    assert seen_secrets({"authorization": "Bearer x"}) == []


def test_no_secret_in_debug_logs(aws_env, monkeypatch, caplog):
    """botocore logs the canonical request and the signature at DEBUG: those lines are kept quiet."""
    import logging

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    caplog.set_level(logging.DEBUG)
    src = AwsSigV4()
    for name in ("botocore.auth", "google.auth", "google.oauth2"):
        assert logging.getLogger(name).getEffectiveLevel() >= logging.INFO
    src.refresh()
    out = src.authorize("POST", "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse",
                        {"content-type": "application/json"}, b"{}", "bedrock-runtime.us-east-1.amazonaws.com")
    sig = out["authorization"].rpartition("Signature=")[2]
    for secret in (SECRET, TOKEN, sig):
        assert secret not in caplog.text


@pytest.mark.parametrize("target", ["anthropic_messages", "gemini_generate_content", "openai_chat_completions"])
def test_client_cloud_credentials_never_cross_to_another_host(target):
    from mitmproxy import http

    from proxai_core import Protocol
    from proxai_mitm.wire import routing

    client = [("authorization", "AWS4-HMAC-SHA256 Credential=AKIACLIENT/x, SignedHeaders=host, Signature=ab"),
              ("x-amz-security-token", "t"), ("x-amz-date", "20260101T000000Z"), ("x-amz-content-sha256", "e"),
              ("x-goog-api-key", "AIza-client"), ("x-goog-user-project", "p"), ("cookie", "a=b"),
              ("proxy-authorization", "Basic x"), ("x-amzn-bedrock-trace", "ENABLED"), ("content-type", "a/b")]
    h = http.Headers([(k.encode(), v.encode()) for k, v in client])
    routing.rewrite_headers(h, client=Protocol("anthropic_messages"), target=Protocol(target), same_host=False,
                            key=None, upstream_host="other.example")
    left = {k.lower() for k in h.keys()}
    assert not left & {"authorization", "x-amz-security-token", "x-amz-date", "x-amz-content-sha256",
                       "x-goog-api-key", "x-goog-user-project", "cookie", "proxy-authorization"}
    for name, _ in client[:8]:
        assert not routing.forwardable(name, Protocol(target))
