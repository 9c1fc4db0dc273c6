"""Web search across protocols: every real recording with a web search (Anthropic server_tool_use /
web_search_tool_result and citations, Responses web_search_call and url_citation annotations,
Gemini groundingMetadata, Chat url_citation annotations) translated into every other protocol,
complete and streamed, judged by the SDK types; the web search tool itself in requests; previous
turns' search blocks in a request. Skips the recordings when ../shared/fixtures is absent."""

from __future__ import annotations

import json
import re

import pytest

from proxai_core import (
    Protocol,
    StreamTranslator,
    decode_request,
    stop_info,
    stream_from_response,
    translate_request,
    translate_response_result,
)
from proxai_core.api import decode_response
from proxai_core.codecs import get
from proxai_core.neutral import Text, WebSearchCall, WebSearchResults
from tests.sdk import ANTHROPIC_BODIES

from ..sdk import (
    FIXTURES,
    PROTOCOLS,
    accumulate_stream,
    fixture_files,
    summarize_response,
    validate_request,
    validate_response,
)
from .semantics import assert_same_semantics, summary_from_neutral
from .test_stream_sweep import _reason_of_client_stream, neutral_of_stream

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
#: the protocols with search calls and results of their own (Chat has only citations)
SEARCHES = (A, R, G)
_MARKERS = re.compile(rb'web_search_tool_result|"web_search_call"|webSearchQueries|url_citation')


def _recordings(suffix: str):
    if not FIXTURES.is_dir():
        return []
    out = []
    for p in PROTOCOLS:
        for f in fixture_files(p, suffix):
            if not f.name.endswith(".request.json") and _MARKERS.search(f.read_bytes()):
                out.append(pytest.param(p, f, id=f"{p.name}/{f.name[:90]}"))
    return out


BODIES = _recordings(".json")
STREAMS = _recordings(".sse")


def _calls(parts) -> list[str | None]:
    return [p.query for p in parts if isinstance(p, WebSearchCall)]


def _results(parts) -> int:
    return sum(len(p.results) for p in parts if isinstance(p, WebSearchResults))


def _pages(parts) -> set[str]:
    return {r.url for p in parts if isinstance(p, WebSearchResults) for r in p.results}


def _url_citations(parts) -> int:
    return sum(1 for p in parts if isinstance(p, Text) for c in p.citations or () if c.get("type") == "url")


def _judge(proto, src_parts, target, dst_parts, warnings, where):
    """Searches, results and URL citations survive where the target has them; else the drop is named."""
    src_calls = _calls(src_parts)
    if not get(target).capabilities.web_search:  # (Bedrock Converse: no search, no citations)
        if src_calls:
            assert any("web_search_call" in w for w in warnings), where
        if _url_citations(src_parts):
            assert any("citations" in w for w in warnings), where
        return
    if target is C:
        if src_calls:
            assert any("web_search_call" in w for w in warnings), where
    elif target is G:
        # Gemini lists the queries; a call without one still leaves its pages
        assert [q for q in _calls(dst_parts) if q] == [q for q in src_calls if q], where
    else:
        assert _calls(dst_parts) == [q if q is not None else (q if target is R else "") for q in src_calls] or \
            [q or "" for q in _calls(dst_parts)] == [q or "" for q in src_calls], where
    if target in ANTHROPIC_BODIES:
        assert _results(dst_parts) == _results(src_parts), where
    elif target is G:  # (Gemini lists each page once, cited pages too)
        assert _pages(dst_parts) >= _pages(src_parts), where
    assert _url_citations(dst_parts) == _url_citations(src_parts), where


@pytest.mark.skipif(not BODIES, reason="no web search recordings")
@pytest.mark.parametrize("proto,path", BODIES)
def test_recorded_web_search_body_into_every_protocol(proto, path):
    body = json.loads(path.read_text())
    src_resp = decode_response(body, proto)
    src = summary_from_neutral(src_resp)
    if proto in SEARCHES and b"url_citation" not in path.read_bytes():
        assert _calls(src_resp.parts) or proto is R, "a search recording decodes to search parts"
    for target in PROTOCOLS:
        if target is proto:
            continue
        res = translate_response_result(body, proto, target)
        assert res.status == 200
        validate_response(target, res.body)
        dst = summarize_response(target, res.body)
        assert_same_semantics(src, dst, src_resp.stop.reason, stop_info(res.body, target).reason, target, where=f"{proto}->{target}")
        back = decode_response(res.body, target)
        _judge(proto, src_resp.parts, target, back.parts, res.warnings, f"{proto}->{target}")


@pytest.mark.skipif(not STREAMS, reason="no web search recordings")
@pytest.mark.parametrize("proto,path", STREAMS)
def test_recorded_web_search_stream_into_every_protocol(proto, path):
    data = path.read_bytes()
    col, src_resp = neutral_of_stream(proto, data)
    src = summary_from_neutral(src_resp)
    for target in PROTOCOLS:
        if target is proto:
            continue
        t = StreamTranslator(proto, target)
        out = t.feed(data) + t.close()
        dst = accumulate_stream(target, out)
        assert_same_semantics(src, dst, src_resp.stop.reason, _reason_of_client_stream(target, out).reason, target, where=f"{proto}->{target}")
        _, back = neutral_of_stream(target, out)
        _judge(proto, src_resp.parts, target, back.parts, t.warnings, f"{proto}->{target} (stream)")
        # chunking invariant: byte-sized pieces give the same stream
        t2 = StreamTranslator(proto, target)
        pieces = b"".join(t2.feed(data[i:i + 97]) for i in range(0, len(data), 97)) + t2.close()
        assert _strip(pieces) == _strip(out)


def _strip(out: bytes) -> bytes:
    return re.sub(rb'"created(_at)?":\d+', b'"created":0', out)


# ----------------------------------------------------------------------------- the tool
ANTHROPIC_REQ = {
    "model": "claude-sonnet-4-5", "max_tokens": 1024,
    "messages": [{"role": "user", "content": "What happened in Paris today?"}],
    "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3,
               "allowed_domains": ["lemonde.fr"],
               "user_location": {"type": "approximate", "city": "Paris", "country": "FR", "timezone": "Europe/Paris"}}],
}
RESPONSES_REQ = {
    "model": "gpt-5", "input": "What happened in Paris today?",
    "tools": [{"type": "web_search", "search_context_size": "low", "filters": {"allowed_domains": ["lemonde.fr"]},
               "user_location": {"type": "approximate", "city": "Paris", "country": "FR"}}],
}
GEMINI_REQ = {"contents": [{"role": "user", "parts": [{"text": "What happened in Paris today?"}]}],
              "tools": [{"googleSearch": {}}]}
CHAT_REQ = {"model": "gpt-4o-search-preview", "messages": [{"role": "user", "content": "What happened in Paris today?"}],
            "web_search_options": {"search_context_size": "high",
                                   "user_location": {"type": "approximate", "approximate": {"city": "Paris"}}}}
REQUESTS = {A: ANTHROPIC_REQ, R: RESPONSES_REQ, G: GEMINI_REQ, C: CHAT_REQ}


def _native_tool(target, out) -> dict | None:
    if target is C:
        return out.get("web_search_options")
    for t in out.get("tools") or ():
        if target in ANTHROPIC_BODIES and t.get("type", "").startswith("web_search_") or \
                target is R and t.get("type") == "web_search" or target is G and "googleSearch" in t:
            return t
    return None


@pytest.mark.parametrize("target", PROTOCOLS, ids=lambda p: p.name)
@pytest.mark.parametrize("source", list(REQUESTS), ids=lambda p: p.name)
def test_web_search_tool_becomes_the_targets_own(source, target):
    body = REQUESTS[source]
    w: list[str] = []
    path = "/v1beta/models/gemini-2.5-flash:generateContent" if source is G else None
    out = translate_request(body, source, target, warnings=w, path=path)
    validate_request(target, out)
    if not get(target).capabilities.web_search:  # no search tool there: dropped, named
        assert any("web_search" in x for x in w), w
        return
    if target is C and source is not C:
        # only Chat's search models search; another model gets nothing and a warning
        assert _native_tool(target, out) is None and any("web search dropped" in x for x in w)
        out = translate_request({**body, "model": "gpt-4o-search-preview"} if source is not G else body,
                                source, target, warnings=w, path=path)
        if source is G:
            return
    tool = _native_tool(target, out)
    assert tool is not None, f"{source}->{target}: {out.get('tools')}"
    assert decode_request(out, target).web_search is not None
    if source is A and target is R:
        assert tool["filters"] == {"allowed_domains": ["lemonde.fr"]} and tool["user_location"]["city"] == "Paris"
        assert any("max_uses" in x for x in w)
    if source is R and target is A:
        assert tool == {"type": "web_search_20250305", "name": "web_search", "allowed_domains": ["lemonde.fr"],
                        "user_location": {"type": "approximate", "city": "Paris", "country": "FR"}}
        assert any("search_context_size" in x for x in w)
    if source is A and target is G:
        assert tool == {"googleSearch": {}} and any("allowed_domains" in x for x in w)
    if target is source:
        assert tool == (body["web_search_options"] if source is C else body["tools"][0])
    if target is not C:
        assert not any("server tool" in x or "not sent: web_search_options" in x for x in w), w  # (translated)


def _recorded_requests():
    if not FIXTURES.is_dir():
        return []
    pat = re.compile(rb'web_search_20250305|"type": ?"web_search(_preview)?"|googleSearch|google_search')
    return [pytest.param(p, f, id=f"{p.name}/{f.name[:90]}") for p in PROTOCOLS
            for f in fixture_files(p, ".request.json") if pat.search(f.read_bytes())]


RECORDED_REQUESTS = _recorded_requests()


@pytest.mark.skipif(not RECORDED_REQUESTS, reason="no web search request recordings")
@pytest.mark.parametrize("proto,path", RECORDED_REQUESTS)
def test_recorded_web_search_request_into_every_protocol(proto, path):
    body = json.loads(path.read_text())
    assert decode_request(body, proto).web_search is not None
    url = path.with_name(path.name.replace(".request.json", ".url.txt"))
    upath = url.read_text().strip() if url.exists() else None
    for target in PROTOCOLS:
        if target is proto or target is C:
            continue
        w: list[str] = []
        out = translate_request(body, proto, target, warnings=w, path=upath)
        validate_request(target, out)
        if not get(target).capabilities.web_search:
            assert any("web_search" in x for x in w), f"{proto}->{target}"
            continue
        assert _native_tool(target, out) is not None, f"{proto}->{target}"


# ----------------------------------------------------------------------------- previous turns
CLAUDE_CODE_HISTORY = {
    "model": "claude-sonnet-4-5", "max_tokens": 1024,
    "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 8}],
    "messages": [
        {"role": "user", "content": "Perform a web search for the query: mitmproxy release"},
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "mitmproxy release"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
                {"type": "web_search_result", "url": "https://mitmproxy.org/", "title": "mitmproxy",
                 "encrypted_content": "EqgfCioIARgBIiQ3", "page_age": "2 days ago"}]},
            {"type": "text", "text": "mitmproxy 12 is out.", "citations": [
                {"type": "web_search_result_location", "url": "https://mitmproxy.org/", "title": "mitmproxy",
                 "cited_text": "mitmproxy 12", "encrypted_index": "Eo8BCioIAhgBIiQ"}]},
        ]},
        {"role": "user", "content": "Thanks. And the one before?"},
    ],
}


@pytest.mark.parametrize("target", PROTOCOLS, ids=lambda p: p.name)
def test_previous_search_blocks_translate_or_drop_with_warning(target):
    w: list[str] = []
    out = translate_request(CLAUDE_CODE_HISTORY, A, target, warnings=w)
    validate_request(target, out)
    text = json.dumps(out)
    if target in ANTHROPIC_BODIES:  # (Claude on any host reads them)
        assert "EqgfCioIARgBIiQ3" in text and "Eo8BCioIAhgBIiQ" in text  # the encrypted payloads go back as sent
        return
    # another provider cannot verify Anthropic's encrypted results: dropped, named in a warning
    assert "EqgfCioIARgBIiQ3" not in text
    assert any("server_tool_use" in x for x in w) and any("web_search_tool_result" in x for x in w), w
    assert "mitmproxy 12 is out." in text


def test_anthropic_client_gets_responses_search_with_its_results():
    """A Responses upstream's search (with sources) reaches an Anthropic client as a server_tool_use
    followed by its web_search_tool_result, and the cited text keeps its citation."""
    body = {
        "id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "gpt-5",
        "output": [
            {"id": "ws_1", "type": "web_search_call", "status": "completed",
             "action": {"type": "search", "query": "mitmproxy release",
                        "sources": [{"type": "url", "url": "https://mitmproxy.org/"}]}},
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [
                {"type": "output_text", "text": "mitmproxy 12 is out.", "annotations": [
                    {"type": "url_citation", "url": "https://mitmproxy.org/", "title": "mitmproxy",
                     "start_index": 0, "end_index": 12}]}]},
        ],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }
    res = translate_response_result(body, R, A)
    validate_response(A, res.body)
    content = res.body["content"]
    assert [b["type"] for b in content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert content[0]["input"] == {"query": "mitmproxy release"}
    assert content[1]["tool_use_id"] == content[0]["id"] and content[0]["id"].startswith("srvtoolu_")
    assert content[1]["content"][0]["url"] == "https://mitmproxy.org/"
    assert content[2]["citations"][0]["url"] == "https://mitmproxy.org/"
    # and as a stream
    out, _, _ = stream_from_response(body, R, A)
    s = accumulate_stream(A, out)
    assert s.text == "mitmproxy 12 is out."
    assert b'"type":"server_tool_use"' in out and b'"query":"mitmproxy release"' in out.replace(b'\\"', b'"')
