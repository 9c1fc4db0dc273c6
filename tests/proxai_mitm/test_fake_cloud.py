"""The cloud fakes themselves: boto3 with the fake's credentials gets the recordings; a wrong signature,
an unknown key, a replayed body, a missing credential or a path Bedrock does not serve is refused as
AWS refuses it; Vertex checks its bearer token, its paths and Google's query rule."""

from __future__ import annotations

import json

import boto3
import httpx2
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.conftest import needs_fixtures
from tests.fake_cloud import EVENTSTREAM, CloudReply, FakeBedrock, FakeVertex, fixture_reply

pytestmark = needs_fixtures

ACCESS, SECRET, TOKEN = "AKIAFAKECLOUD0000001", "fake/cloud/secret/0123456789abcdefghijkl", "fake-session-token-0123"
MSGS = [{"role": "user", "content": [{"text": "hi"}]}]
MODEL = "us.anthropic.claude-sonnet-4-6"


@pytest.fixture(scope="module")
def bedrock():
    with FakeBedrock({ACCESS: (SECRET, None), "AKIAFAKECLOUD0000002": ("other/secret/0123456789", TOKEN)},
                     api_keys=("ABSKbedrock-api-key-0123",)) as fake:
        yield fake


def _client(fake: FakeBedrock, access: str = ACCESS, secret: str = SECRET, token: str | None = None,
            region: str = "us-east-1"):
    return boto3.Session(aws_access_key_id=access, aws_secret_access_key=secret, aws_session_token=token,
                         region_name=region).client("bedrock-runtime", endpoint_url=fake.url,
                                                    config=Config(retries={"max_attempts": 1}))


def test_boto3_gets_the_recordings(bedrock):
    c = _client(bedrock)
    out = c.converse(modelId=MODEL, messages=MSGS)
    assert out["ResponseMetadata"]["HTTPStatusCode"] == 200 and out["stopReason"]
    assert bedrock.requests[-1].principal == ACCESS and "%3A" not in bedrock.requests[-1].path
    out = c.converse(modelId="anthropic.claude-3-5-haiku-20241022-v1:0", messages=MSGS)
    assert "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse" == bedrock.requests[-1].path
    events = list(c.converse_stream(modelId=MODEL, messages=MSGS)["stream"])
    assert "messageStart" in events[0] and "metadata" in events[-1]
    chunks = list(c.invoke_model_with_response_stream(modelId=MODEL, body=b"{}")["body"])
    assert chunks and all("chunk" in ch for ch in chunks)
    body = json.loads(c.invoke_model(modelId=MODEL, body=b"{}")["body"].read())
    assert body["type"] == "message"
    assert c.count_tokens(modelId=MODEL, input={"converse": {"messages": MSGS}})["inputTokens"] > 0


def test_session_token_is_checked(bedrock):
    c = _client(bedrock, "AKIAFAKECLOUD0000002", "other/secret/0123456789", TOKEN)
    assert c.converse(modelId=MODEL, messages=MSGS)["stopReason"]
    with pytest.raises(ClientError) as e:
        _client(bedrock, "AKIAFAKECLOUD0000002", "other/secret/0123456789", "another-token").converse(
            modelId=MODEL, messages=MSGS)
    assert e.value.response["Error"]["Code"] == "UnrecognizedClientException"


@pytest.mark.parametrize("kw, code", [
    ({"secret": "wrong/secret/0123456789"}, "InvalidSignatureException"),
    ({"access": "AKIAUNKNOWN000000000"}, "UnrecognizedClientException"),
    ({"region": "eu-west-1"}, "InvalidSignatureException"),
])
def test_bad_credentials_get_aws_403s(bedrock, kw, code):
    with pytest.raises(ClientError) as e:
        _client(bedrock, **kw).converse(modelId=MODEL, messages=MSGS)
    err = e.value.response
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 403 and err["Error"]["Code"] == code
    assert err["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"].startswith(code + ":")
    assert err["Error"]["Message"]


def test_a_signature_over_another_body_or_path_is_refused(bedrock):
    """The signed request replayed with one byte changed (body, path, a signed header): 403."""
    c = _client(bedrock)
    c.converse(modelId=MODEL, messages=MSGS)
    good = bedrock.requests[-1]
    headers = {k: v for k, v in good.headers.items() if k not in ("content-length", "connection")}
    with httpx2.Client() as h:
        assert h.post(bedrock.url + good.path, content=good.body, headers=headers).status_code == 200
        r = h.post(bedrock.url + good.path, content=good.body.replace(b"hi", b"ho"), headers=headers)
        assert r.status_code == 403 and r.headers["x-amzn-errortype"].startswith("InvalidSignatureException:")
        assert r.json() == {"message": r.json()["message"]} and "signature we calculated" in r.json()["message"]
        r = h.post(bedrock.url + good.path.replace("/converse", "/converse-stream"), content=good.body,
                   headers=headers)
        assert r.status_code == 403
        r = h.post(bedrock.url + good.path, content=good.body, headers={**headers, "content-type": "text/plain"})
        assert r.status_code == 403
        r = h.post(bedrock.url + good.path, content=good.body, headers={"content-type": "application/json"})
        assert r.status_code == 403 and r.headers["x-amzn-errortype"].startswith("MissingAuthenticationToken")


def test_bedrock_api_key_and_paths(bedrock):
    with httpx2.Client() as h:
        ok = h.post(f"{bedrock.url}/model/{MODEL}/converse-stream", json={"messages": MSGS},
                    headers={"authorization": "Bearer ABSKbedrock-api-key-0123"})
        assert ok.status_code == 200 and ok.headers["content-type"] == EVENTSTREAM
        assert bedrock.requests[-1].principal == "bearer:ABSKbedrock-api-key-0123"
        bad = h.post(f"{bedrock.url}/model/{MODEL}/converse", json={}, headers={"authorization": "Bearer nope"})
        assert bad.status_code == 403 and bad.headers["x-amzn-errortype"].startswith("UnrecognizedClient")
        for method, path in (("POST", f"/model/{MODEL}/chat"), ("GET", f"/model/{MODEL}/converse"),
                             ("POST", "/v1/messages"), ("POST", f"/models/{MODEL}/converse")):
            r = h.request(method, bedrock.url + path, headers={"authorization": "Bearer ABSKbedrock-api-key-0123"})
            assert r.status_code == 404 and r.headers["x-amzn-errortype"].startswith("UnknownOperationException")


def test_event_stream_bodies_are_the_recordings_byte_for_byte(bedrock):
    rec = fixture_reply("bedrock-converse",
                        "pydantic-ai__tests_models_bedrock_cassettes_test_native_output_test_bedrock_native_output_"
                        "stream__i0")
    assert rec.content_type == EVENTSTREAM
    bedrock.on("converse-stream", rec)
    try:
        with httpx2.Client() as h:
            r = h.post(f"{bedrock.url}/model/{MODEL}/converse-stream", json={},
                       headers={"authorization": "Bearer ABSKbedrock-api-key-0123"})
        assert r.content == rec.body
    finally:
        bedrock.replies.clear()
    bedrock.on("converse", CloudReply.aws_error(429, "ThrottlingException", "Too many requests"))
    try:
        with pytest.raises(ClientError) as e:
            _client(bedrock).converse(modelId=MODEL, messages=MSGS)
        assert e.value.response["Error"]["Code"] == "ThrottlingException"
    finally:
        bedrock.replies.clear()


def test_vertex_fake():
    with FakeVertex(tokens=("ya29.vertex-token-0123",)) as v, httpx2.Client() as h:
        path = "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-3-7-sonnet@20250219"
        auth = {"authorization": "Bearer ya29.vertex-token-0123"}
        body = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 16, "messages": [{"role": "user",
                                                                                          "content": "hi"}]}
        r = h.post(v.url + path + ":rawPredict", json=body, headers=auth)
        assert r.status_code == 200 and r.json()["type"] == "message"
        r = h.post(v.url + path + ":streamRawPredict", json={**body, "stream": True}, headers=auth)
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        assert b"event: message_stop" in r.content
        r = h.post(v.url + path + ":streamRawPredict?alt=sse", json=body, headers=auth)
        assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert 'Unknown name "alt"' in r.json()["error"]["message"]
        r = h.post(v.url + path + ":rawPredict", json=body, headers={"authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.json()["error"]["status"] == "UNAUTHENTICATED"
        assert h.post(v.url + path + ":rawPredict", json=body).status_code == 401
        r = h.post(v.url + path + ":generateContent", json=body, headers=auth)
        assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
        assert h.post(v.url + path.replace("anthropic", "google") + ":rawPredict", json=body,
                      headers=auth).status_code == 404
