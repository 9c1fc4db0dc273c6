"""Every real recording in ../shared/fixtures translates into both other protocols (or raises a
TranslationError naming an unrepresentable feature), validates with the SDK types and keeps its
semantics. Skips when the folder is absent."""

from __future__ import annotations

import json
import re

import pytest

from proxai_core import (
    Protocol,
    StopReason,
    TranslationError,
    decode_request,
    decode_response,
    stop_info,
    translate_error,
    translate_request,
    translate_response_result,
)
from proxai_core.codecs import get
from proxai_core.errors import parse_error
from tests.conftest import ROOT

from ..sdk import FIXTURES, HOSTED, PROTOCOLS, fixture_files, summarize_response, validate_response
from .semantics import assert_same_semantics, summary_from_neutral

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/fixtures absent")

MAPPING_DOC = ROOT / "docs" / "mapping.md"


def _rejected_section() -> str:
    text = MAPPING_DOC.read_text()
    return text[text.index("## 8. Rejected features"):]


def assert_documented_rejection(exc: TranslationError) -> None:
    """A rejection names the field and why, and docs/mapping.md §8 lists the feature."""
    msg = str(exc)
    path, _, why = msg.partition(":")
    assert path and why.strip(), f"rejection does not name a field: {msg}"
    section = _rejected_section()
    field = re.sub(r"\[\d+\]", "[]", path.strip()).split(".")[-1].split("[")[0]
    quoted = re.findall(r"(?:'|`)([^'`]+)(?:'|`)", msg) + re.findall(r"not ([\w/.+-]+)", msg)
    assert field in section or any(q in section for q in quoted), f"rejection not listed in docs: {msg}"


def _is_error_body(proto, body) -> bool:
    if not isinstance(body, dict):
        return True
    if proto is Protocol.BEDROCK_CONVERSE:
        return get(proto).is_error_body(body) or "output" not in body
    if proto in HOSTED:  # Claude on a cloud: Anthropic errors, and the host's own
        return get(proto).is_error_body(body)
    if proto is Protocol.ANTHROPIC:
        return body.get("type") == "error"
    if proto is Protocol.CHAT:
        return "error" in body and not body.get("choices")
    return "error" in body and "output" not in body


def _responses():
    for p in PROTOCOLS:
        for f in fixture_files(p, ".json"):
            yield pytest.param(p, f, id=f"{p.name}/{f.name[:90]}")


def _requests():
    for p in PROTOCOLS:
        for f in fixture_files(p, ".request.json"):
            yield pytest.param(p, f, id=f"{p.name}/{f.name[:90]}")


@pytest.mark.parametrize("proto,path", list(_responses()))
def test_response_fixture_translates(proto, path):
    body = json.loads(path.read_text())
    if _is_error_body(proto, body):
        err = parse_error(400, body)
        assert err.message
        for target in PROTOCOLS:
            st, out = translate_error(400, path.read_bytes(), proto, target)
            assert 400 <= st < 600 and out
        return
    src_resp = decode_response(body, proto)
    src = summary_from_neutral(src_resp)
    src_reason = src_resp.stop.reason
    for target in PROTOCOLS:
        if target is proto:
            continue
        res = translate_response_result(body, proto, target)
        if res.status != 200:  # an upstream failure becomes the client's native error
            assert src_reason is StopReason.INTERRUPTED
            continue
        validate_response(target, res.body)
        dst = summarize_response(target, res.body)
        dst_reason = stop_info(res.body, target).reason
        assert_same_semantics(src, dst, src_reason, dst_reason, target, where=f"{proto}->{target}")


def _conversation(req):
    out = []
    for m in req.messages:
        for p in m.parts:
            t = type(p).__name__
            if t == "Text":
                out.append((m.role, "text", " ".join(_MOVED.sub("", p.text).split())))
            elif t == "ToolCall":
                out.append((m.role, "call", p.id, p.name))
            elif t == "ToolResult":
                out.append(("result", p.call_id))
    return out


@pytest.mark.parametrize("proto,path", list(_requests()))
def test_request_fixture_translates(proto, path):
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError:  # a recording that stored a body which is not JSON: a native 400
        with pytest.raises(TranslationError, match="must be a JSON object"):
            decode_request(None, proto)
        return
    try:
        src = decode_request(body, proto)
    except TranslationError as e:  # a source-only feature (e.g. Gemini cachedContent): rejected on reading
        assert_documented_rejection(e)
        return
    for target in PROTOCOLS:
        if target is proto:
            continue
        w: list[str] = []
        try:
            out = translate_request(body, proto, target, warnings=w)
        except TranslationError as e:
            assert_documented_rejection(e)
            continue
        assert isinstance(out, dict) and json.loads(json.dumps(out)) == out
        back = decode_request(out, target)
        # roles, texts, tool calls and results survive (system prompts may move)
        assert _tool_shape(back) == _tool_shape(src), f"{proto}->{target}"
        if any("sent as text parts" in x for x in w):  # text files became text: each text is still there
            got, want = _texts(back), _texts(src)
            assert got[0] == want[0] and len(got[1]) == len(want[1]), f"{proto}->{target}"
            assert all(_in_order(x[2], y[2]) for x, y in zip(want[1], got[1], strict=True)), f"{proto}->{target}"
        else:
            assert _texts(back) == _texts(src), f"{proto}->{target}"


def _in_order(part: str, whole: str) -> bool:
    """Every character of ``part`` is in ``whole``, in order (text from files may come between)."""
    it = iter(whole)
    return all(c in it for c in part)


def _tool_shape(req):
    """Calls and results with ids replaced by their order of appearance: a target may sanitize ids
    (Anthropic allows only [a-zA-Z0-9_-]) as long as calls and results still pair up."""
    ids: dict[str, int] = {}
    out = []
    for x in _conversation(req):
        if x[1] == "text":
            continue
        if x[0] == "result":
            out.append(("result", ids.setdefault(x[1], len(ids))))
        else:
            out.append((x[0], x[1], ids.setdefault(x[2], len(ids)), x[3]))
    return out


_MOVED = re.compile(r"\s*\[content returned by tool call [^\]]*\]")


def _texts(req):
    sys_text = " ".join(" ".join(t.text.split()) for t in req.system)
    convo = [x for x in _conversation(req) if x[1] == "text"]
    # system/developer messages inside the conversation may be hoisted into the system prompt
    body = [x for x in convo if x[0] in ("user", "assistant") and x[2]]
    merged: list = []
    for x in body:
        if merged and merged[-1][0] == x[0]:
            merged[-1] = (x[0], "text", merged[-1][2] + " " + x[2])
        else:
            merged.append(x)
    # a target with one content string joins the source's text blocks: compare without whitespace
    merged = [(r, k, "".join(t.split())) for r, k, t in merged]
    return (bool(sys_text) or any(x[0] in ("system", "developer") for x in convo), merged)
