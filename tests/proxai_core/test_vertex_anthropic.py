"""Claude on Vertex AI (``vertex_anthropic``): paths, hosted request bodies, recordings and the
documented cases (errors in Google's and Anthropic's shapes), judged by anthropic's types. The
sweeps over every protocol (fixture, stream, directions) cover the translations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxai_core import Exchange, Protocol, StopReason, StreamTranslator, translate_error, translate_request
from proxai_core.codecs import get, match_path, sniff_request
from proxai_core.codecs.vertex_anthropic import VERSION, parse_path, path_for
from proxai_core.errors import parse_error
from tests.conftest import DOCUMENTED, fixture_dir, needs_fixtures
from tests.sdk import accumulate_stream, fixture_files, validate_request, validate_response

V, A = Protocol.VERTEX_ANTHROPIC, Protocol.ANTHROPIC
CODEC = get(V)
PREFIX = "/v1/projects/my-project/locations/us-east5"
MODEL = "claude-3-7-sonnet@20250219"


def _url(f: Path) -> str:
    return f.with_name(f.name.split(".")[0] + ".url.txt").read_text().strip()


# ----------------------------------------------------------------------------- paths
@pytest.mark.parametrize("version", ["v1", "v1beta1"])
@pytest.mark.parametrize("method,stream", [("rawPredict", False), ("streamRawPredict", True)])
def test_paths_name_the_model_and_the_stream(version, method, stream):
    prefix = PREFIX.replace("/v1", f"/{version}")
    f = parse_path(f"{prefix}/publishers/anthropic/models/{MODEL}:{method}")
    assert f is not None and (f.kind, f.prefix, f.model, f.stream, f.sse) == ("generate", prefix, MODEL, stream, True)
    assert parse_path(prefix + path_for(MODEL, stream)) == f


def test_token_counting_path_and_foreign_paths():
    f = parse_path(f"https://us-east5-aiplatform.googleapis.com{PREFIX}/publishers/anthropic/models/count-tokens:rawPredict")
    assert f is not None and (f.kind, f.prefix, f.model) == ("count_tokens", PREFIX, "")
    assert parse_path(f"{PREFIX}/publishers/anthropic/models/count-tokens:streamRawPredict") is None
    assert parse_path(f"{PREFIX}/publishers/google/models/gemini-2.5-flash:generateContent") is None
    assert parse_path(f"{PREFIX}/publishers/anthropic/models/{MODEL}:predict") is None
    m = match_path(f"{PREFIX}/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert m is not None and m.codec is get(Protocol.GEMINI)


# ----------------------------------------------------------------------------- requests
def test_a_hosted_request_reads_its_model_and_stream_from_the_url():
    body = {"anthropic_version": VERSION, "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    ex = Exchange(V, body, path=f"{PREFIX}/publishers/anthropic/models/{MODEL}:streamRawPredict")
    assert (ex.request.model, ex.request.stream, ex.stream) == (MODEL, True, True)
    assert ex.warnings == []  # anthropic_version is the host's field, not an unknown one
    assert ex.context.model == MODEL and ex.context.sse


def test_a_request_for_vertex_names_the_version_and_no_model():
    chat = {"model": "claude-3-7-sonnet@20250219", "stream": True, "max_tokens": 50,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}
    w: list[str] = []
    out = translate_request(chat, Protocol.CHAT, V, warnings=w)
    assert list(out)[0] == "anthropic_version" and out["anthropic_version"] == VERSION
    assert "model" not in out and out["stream"] is True and out["system"] == "Be brief."
    assert not any("model" in x for x in w)
    validate_request(V, out)
    assert sniff_request(out) is CODEC


@needs_fixtures
def test_recorded_requests_decode_without_warnings_and_validate():
    files = fixture_files(V, ".request.json")
    assert len(files) >= 10
    for f in files:
        body = json.loads(f.read_text())
        if body.get("model") is None:  # (token counting names the model in the body)
            validate_request(V, body)
        w: list[str] = []
        req = Exchange(V, body, path=_url(f), warnings=w).request
        assert req.messages and not any("anthropic_version" in x for x in w), (f.name, w)


# ----------------------------------------------------------------------------- answers
@needs_fixtures
def test_every_recorded_answer_is_annotated():
    files = sorted(fixture_dir(V).glob("*.json")) + sorted(fixture_dir(V).glob("*.sse"))
    answers = [f for f in files if not f.name.endswith((".request.json", ".status.json"))]
    assert len(answers) == 10
    for f in answers:
        raw = f.read_bytes()
        ex = Exchange(V, json.loads(_req(f).read_text()), path=_url(f))
        if f.suffix == ".sse":
            ex.respond(V, 200, "text/event-stream")
            assert ex.feed(raw) + ex.close() == raw  # observed: the bytes are the upstream's
            accumulate_stream(V, raw)
        else:
            ex.respond(V, 200, "application/json")
            ex.complete(raw)
            validate_response(V, json.loads(raw))
        assert ex.stop is not None and ex.stop.reason in (StopReason.END_TURN, StopReason.TOOL_USE), f.name
        assert ex.usage is not None and ex.usage.input and ex.usage.output, f.name
        assert ex.model == "claude-3-7-sonnet-20250219"


def _req(f: Path) -> Path:
    return f.with_name(f.name.split(".")[0] + ".request.json")


def test_padded_sse_data_is_read():
    raw = (DOCUMENTED / "vertex-anthropic" / "vertex_thinking_streaming.sse").read_bytes()
    assert b"          }" in raw
    t = StreamTranslator(V, Protocol.RESPONSES)
    t.feed(raw)
    t.close()
    assert t.stop is not None and t.stop.reason is StopReason.END_TURN and t.warnings == []


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("stem,kind,status", [
    ("vertex_error_429_resource_exhausted", "rate_limit", 429),
    ("vertex_error_403_permission_denied", "permission", 403),
    ("vertex_error_404_not_found", "not_found", 404),
    ("vertex_error_503_unavailable", "overloaded", 503),
    ("vertex_error_529_overloaded", "overloaded", 529),
    ("vertex_error_400_invalid_request", "invalid_request", 400),
])
def test_documented_errors_keep_their_kind_and_status(stem, kind, status):
    d = DOCUMENTED / "vertex-anthropic"
    body = (d / f"{stem}.json").read_bytes()
    assert json.loads((d / f"{stem}.status.json").read_text())["status"] == status
    err = parse_error(status, body)
    assert err.kind == kind and err.message
    st, out = translate_error(status, body, V, V)
    assert st == status and out["type"] == "error"  # a Vertex client reads Anthropic errors
    st, out = translate_error(status, body, V, A)
    assert st == (529 if kind == "overloaded" else status)  # Anthropic's overloaded is 529
