"""Conformance on real traffic: every recording in ../shared/fixtures through every direction.

    uv run python benchmarks/conformance.py            # prints the summary, writes docs/conformance.md
    uv run python benchmarks/conformance.py --no-write # print only

Cases (one per recording × target protocol):

- ``json``: a complete response (``*.json``) through ``translate_response_result`` into each protocol
  (same protocol: the body must come back unchanged);
- ``json→sse``: the same body for a streaming client (``stream_from_response``);
- ``sse``: a recorded stream (``*.sse``) through ``StreamTranslator`` into each protocol (same
  protocol: byte-exact pass-through);
- ``sse→json``: the same stream for a non-streaming client (``response_from_stream``);
- ``error``: an HTTP error body (``*.json`` that is an error) through ``translate_error``;
- ``request``: a recorded client request (``*.request.json``) through ``translate_request`` into both
  other protocols.

Judges: the official SDK types (``ChatCompletion``, ``Response``, ``Message``, the request param
TypedDicts, the error shapes) and the SDKs' own stream accumulators (tests/sdk.py), then the
semantic comparison of the core and streaming tests (tests/proxai_core/semantics.py: text, refusal,
tool calls with JSON-equal arguments, reasoning present, normalized stop), plus two checks of this
script: usage numbers (total input, output, cached, reasoning tokens, read from the raw bodies of
both sides, not through our decoders) and citations (count kept, or the drop named in a warning).

Each case is classified:

- ``pass``: everything above holds;
- ``rejected``: rejected by design — a ``TranslationError`` whose message names the field and a
  feature the target cannot represent, listed in docs/mapping.md (the core sweep's rule), or a
  documented lossy drop (the lost feature is named in the
  translator's warnings);
- ``fail``: anything else (an exception, an SDK validation error, a semantic difference nobody
  warned about, a hang). ``KNOWN_FAILS`` lists the ones reported to the lead, with the reason;
  the test suite (tests/test_conformance.py) fails on any other.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# keep this folder off sys.path: a script here must never shadow a library a peer imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import orjson  # noqa: E402
import pydantic  # noqa: E402
from benchmarks._common import Hang, time_limit, write_section  # noqa: E402
from tests.conftest import fixture_folder  # noqa: E402
from tests.proxai_core import test_fixture_sweep as _sweep  # noqa: E402
from tests.proxai_core.semantics import assert_same_semantics, summary_from_neutral  # noqa: E402
from tests.proxai_core.test_stream_sweep import _reason_of_client_stream, neutral_of_stream  # noqa: E402
from tests.sdk import (  # noqa: E402
    ANTHROPIC_BODIES,
    EVENTSTREAM,
    FIXTURES,
    HOSTED,
    PROTOCOLS,
    StreamError,
    accumulate_stream,
    client_events,
    fixture_files,
    gemini_array_files,
    hosted_as_anthropic,
    sdk_converse,
    sdk_gemini,
    summarize_response,
    validate_response,
)

from proxai_core import (  # noqa: E402
    Protocol,
    StopReason,
    StreamTranslator,
    TranslationError,
    decode_request,
    decode_response,
    response_from_stream,
    stop_info,
    stream_from_response,
    translate_error,
    translate_request,
    translate_response_result,
)
from proxai_core import neutral as n  # noqa: E402

# the core sweep's own helpers (tests/proxai_core/test_fixture_sweep.py), reused as they are
_is_error_body, _tool_shape, _texts = _sweep._is_error_body, _sweep._tool_shape, _sweep._texts


def documented_rejection(exc: TranslationError) -> bool:
    """The core sweep's rule: the message names the field and why, and docs/mapping.md lists the feature."""
    check = getattr(_sweep, "assert_documented_rejection", None)
    if check is not None:
        try:
            check(exc)
            return True
        except (AssertionError, OSError, ValueError):
            return False
    return any(k in str(exc) for k in getattr(_sweep, "REJECTABLE", ()))


A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
B = Protocol.BEDROCK_CONVERSE
#: each protocol's recording folder (INDEX.tsv names files by it)
SHORT = {p: fixture_folder(p) for p in PROTOCOLS}
#: Anthropic Messages bodies: Claude on the API and hosted by a cloud (Vertex AI, Bedrock InvokeModel)
AB = ANTHROPIC_BODIES
#: protocols whose recordings keep the request path in ``<stem>.url.txt`` (the model lives in the URL)
URL_KEYED = (G, B, *HOSTED)


def recorded_path(f: Path) -> str | None:
    """The request path a Gemini recording was made with (model and method live in the URL)."""
    stem = f.name
    for suffix in (".request.json", ".json", ".sse", ".eventstream"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    u = f.with_name(stem + ".url.txt")
    return u.read_text().strip() if u.exists() else None
DOC = ROOT / "docs" / "conformance.md"
CASE_TIMEOUT = 10.0  # seconds; a case that takes longer is a hang (fail)

KINDS = ("json", "json→sse", "sse", "sse→json", "error", "request")

#: Feature tags (rows of the feature matrix) from INDEX.tsv's features column.
FEATURES = ("tool calls", "parallel tools", "refusal", "reasoning", "citations", "max output", "errors", "usage",
            "server tools", "other stops", "plain")
_TAGS = {
    "tool calls": {"tool_use", "tool_calls", "function_call", "legacy_function_call", "stop:tool_use",
                   "finish:tool_calls", "custom_tool_call"},
    "parallel tools": {"parallel_tool_use", "parallel_tool_calls", "parallel_function_calls"},
    "refusal": {"refusal", "stop:refusal", "ev:response.refusal.delta"},
    "reasoning": {"reasoning", "thinking", "signature", "redacted_thinking", "encrypted_content", "reasoning_summary",
                  "reasoning:reasoning", "reasoning:reasoning_content", "reasoning:reasoning_details",
                  "ev:response.reasoning_text.delta", "ev:response.reasoning_summary_text.delta"},
    "citations": {"citations", "url_citation", "file_citation", "annotations",
                  "ev:response.output_text.annotation.added"},
    "max output": {"stop:max_tokens", "finish:length", "status:incomplete", "incomplete:max_output_tokens",
                   "ev:response.incomplete"},
    "errors": {"error", "error-midstream", "status:failed", "ev:response.failed", "response.error"},
    "usage": {"usage-chunk", "cached_tokens>0", "cache_creation>0", "cache_read>0", "reasoning_tokens>0"},
    "server tools": {"server_tool_use", "web_search_tool_result", "web_search_call", "mcp_list_tools", "mcp_call",
                     "mcp_tool_use", "mcp_tool_result", "code_interpreter_call", "file_search_call",
                     "image_generation_call", "bash_code_execution_tool_result", "code_execution_tool_result",
                     "text_editor_code_execution_tool_result", "web_fetch_tool_result", "tool_search_call",
                     "tool_search_tool_result", "compaction"},
    "other stops": {"stop:pause_turn", "stop:stop_sequence", "status:queued", "ev:response.queued"},
}

#: Fails reported to the lead (bugs with a reproducer in the report; docs/conformance.md lists them).
#: Each entry: (kind, source, target, file glob, substring of the fail reason) -> explanation; "*" matches
#: anything. The test suite accepts only these (as xfail, with the explanation) and fails on any other.
KNOWN_FAILS: dict[tuple[str, str, str, str, str], str] = {
    # fixed: Responses file/container citations and re-streamed Chat annotations are now dropped with a warning
}

#: Warnings that mean content or a request field did not reach the other side (a documented lossy
#: drop: the case is "rejected by design" even when every check passes).
LOSSY = re.compile(r"dropp|cannot (carry|represent|receive|run)|not sent|not translated|was ignored|"
                   r"no \w+ equivalent|without an? \w+ equivalent", re.I)


# ----------------------------------------------------------------------------- cases
@dataclass
class Case:
    kind: str
    source: Protocol
    target: Protocol
    path: Path
    features: frozenset[str] = frozenset()
    status: str = ""
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: what was actually verified beyond the SDK and semantics (e.g. citations=3, usage)
    checked: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"{SHORT[self.source]}/{self.path.name}"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.kind, SHORT[self.source], SHORT[self.target], self.path.name)

    @property
    def known(self) -> str | None:
        import fnmatch

        kind, src, tgt, name = self.key
        for (k, s, t, f, sub), why in KNOWN_FAILS.items():
            if (k in ("*", kind) and s in ("*", src) and t in ("*", tgt) and fnmatch.fnmatchcase(name, f)
                    and sub in self.reason):
                return why
        return None


class Rejected(Exception):
    """Rejected by design (an unrepresentable feature, or a drop the translator warned about)."""


def index_features() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    idx = FIXTURES / "INDEX.tsv"
    if not idx.exists():
        return out
    with open(idx, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            out[row["file"]] = {t.strip() for t in (row.get("features") or "").split(",") if t.strip()}
    return out


def tags_of(raw_tags: set[str]) -> frozenset[str]:
    out = set()
    for feat, toks in _TAGS.items():
        if raw_tags & toks:
            out.add(feat)
    if any(t.startswith(("error:", "http-")) for t in raw_tags):
        out.add("errors")
    return frozenset(out or {"plain"})


def request_tags(body: Any, proto: Protocol) -> frozenset[str]:
    """Feature tags of a client request, from its content."""
    s = orjson.dumps(body).decode() if isinstance(body, (dict, list)) else ""
    out = set()
    if isinstance(body, dict) and (body.get("tools") or body.get("functions")
                                  or re.search(r'"(tool_use|function_call|tool_calls|tool_result)"', s)):
        out.add("tool calls")
    if isinstance(body, dict) and ("parallel_tool_calls" in body or "disable_parallel_tool_use" in s):
        out.add("parallel tools")
    if '"refusal"' in s:
        out.add("refusal")
    if isinstance(body, dict) and (body.get("thinking") or body.get("reasoning") or body.get("reasoning_effort")
                                  or '"thinking"' in s or '"reasoning"' in s or "encrypted_content" in s):
        out.add("reasoning")
    if '"citations"' in s:
        out.add("citations")
    if isinstance(body, dict) and any(k in body for k in ("max_tokens", "max_output_tokens", "max_completion_tokens")):
        out.add("max output")
    if re.search(r'"type":\s*"(web_search[^"]*|code_interpreter|file_search|mcp|image_generation|computer[^"]*|'
                 r'bash_[^"]*|text_editor[^"]*|web_fetch[^"]*)"', s):
        out.add("server tools")
    return frozenset(out or {"plain"})


def build_cases(sample: int | None = None) -> list[Case]:
    feats = index_features()
    cases: list[Case] = []
    for proto in PROTOCOLS:
        d = fixture_folder(proto)
        for f in fixture_files(proto, ".json"):
            tags = tags_of(feats.get(f"{d}/{f.name}", set()))
            try:
                body = json.loads(f.read_text())
            except ValueError:
                body = None
            if _is_error_body(proto, body):
                cases += [Case("error", proto, t, f, tags | {"errors"}) for t in PROTOCOLS]
                continue
            cases += [Case("json", proto, t, f, tags) for t in PROTOCOLS]
            cases += [Case("json→sse", proto, t, f, tags) for t in PROTOCOLS]
        streams = fixture_files(proto, ".sse") + (gemini_array_files() if proto is G else [])
        for f in streams:
            tags = tags_of(feats.get(f"{d}/{f.name}", set()))
            cases += [Case("sse", proto, t, f, tags) for t in PROTOCOLS]
            cases += [Case("sse→json", proto, t, f, tags) for t in PROTOCOLS]
        for f in fixture_files(proto, ".request.json"):
            try:
                tags = request_tags(json.loads(f.read_text()), proto)
            except ValueError:
                tags = frozenset({"plain"})
            cases += [Case("request", proto, t, f, tags) for t in PROTOCOLS if t is not proto]
    if sample:
        cases = cases[::max(1, len(cases) // sample)]
    return cases


# ----------------------------------------------------------------------------- independent readers
def _i(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _usage_dict(proto: Protocol, u: Any) -> dict[str, int | None] | None:
    """Normalized usage read straight from a wire usage object: total input (cache included),
    output, cache reads, reasoning tokens."""
    if not isinstance(u, dict):
        return None
    if proto is B:  # inputTokens exclude cache reads and writes
        parts = [_i(u.get("inputTokens")), _i(u.get("cacheReadInputTokens")), _i(u.get("cacheWriteInputTokens"))]
        total = None if all(p is None for p in parts) else sum(p or 0 for p in parts)
        return {"input": total, "output": _i(u.get("outputTokens")), "cached": _i(u.get("cacheReadInputTokens")),
                "reasoning": None}
    if proto is G:  # usageMetadata: prompt includes cached; candidates exclude thoughts
        prompt, tool = _i(u.get("promptTokenCount")), _i(u.get("toolUsePromptTokenCount"))
        cand, thoughts = _i(u.get("candidatesTokenCount")), _i(u.get("thoughtsTokenCount"))
        return {"input": None if prompt is None and tool is None else (prompt or 0) + (tool or 0),
                "output": None if cand is None and thoughts is None else (cand or 0) + (thoughts or 0),
                "cached": _i(u.get("cachedContentTokenCount")), "reasoning": thoughts}
    if proto in AB:
        parts = [_i(u.get("input_tokens")), _i(u.get("cache_read_input_tokens")),
                 _i(u.get("cache_creation_input_tokens"))]
        total = None if all(p is None for p in parts) else sum(p or 0 for p in parts)
        return {"input": total, "output": _i(u.get("output_tokens")), "cached": _i(u.get("cache_read_input_tokens")),
                "reasoning": None}
    if proto is C:
        pd = u.get("prompt_tokens_details") or {}
        cd = u.get("completion_tokens_details") or {}
        prompt, completion = _i(u.get("prompt_tokens")), _i(u.get("completion_tokens"))
        reasoning = _i(cd.get("reasoning_tokens")) if isinstance(cd, dict) else None
        if (reasoning and prompt is not None and completion is not None
                and _i(u.get("total_tokens")) == prompt + completion + reasoning):
            completion += reasoning  # xAI counts reasoning outside completion_tokens (wire-facts)
        return {"input": prompt, "output": completion,
                "cached": _i(pd.get("cached_tokens")) if isinstance(pd, dict) else None,
                "reasoning": reasoning}
    idt = u.get("input_tokens_details") or {}
    odt = u.get("output_tokens_details") or {}
    return {"input": _i(u.get("input_tokens")), "output": _i(u.get("output_tokens")),
            "cached": _i(idt.get("cached_tokens")) if isinstance(idt, dict) else None,
            "reasoning": _i(odt.get("reasoning_tokens")) if isinstance(odt, dict) else None}


def usage_of_body(proto: Protocol, body: Any) -> dict | None:
    if not isinstance(body, dict):
        return None
    return _usage_dict(proto, body.get("usageMetadata" if proto is G else "usage"))


def usage_of_sse(proto: Protocol, data: bytes) -> dict | None:
    """Usage of the first response in a stream (a few recordings hold several turns back to back;
    the translators stop at the first terminal event)."""
    if proto is B:  # the metadata frame
        from proxai_core.eventstream import EventStreamReader

        r = EventStreamReader()
        for name, payload in r.feed(data) + r.close():
            if name == "metadata":
                return _usage_dict(B, orjson.loads(payload).get("usage"))
        return None
    if proto is G:  # usageMetadata repeats in every chunk; the last one counts
        got = [c["usageMetadata"] for c in sdk_gemini.chunks_of_stream(data)
               if isinstance(c, dict) and isinstance(c.get("usageMetadata"), dict)]
        return _usage_dict(G, got[-1]) if got else None
    last: dict = {}
    for _name, payload in client_events(proto, data):
        if payload.strip() == "[DONE]":
            break
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if proto in AB:
            u = None
            if obj.get("type") == "message_start" and isinstance(obj.get("message"), dict):
                u = obj["message"].get("usage")
            elif obj.get("type") == "message_delta":
                u = obj.get("usage")
            if isinstance(u, dict):
                last.update({k: v for k, v in u.items() if v is not None})
        elif proto is C:
            if isinstance(obj.get("usage"), dict):
                last = obj["usage"]
        elif isinstance(obj.get("response"), dict) and isinstance(obj["response"].get("usage"), dict):
            last = obj["response"]["usage"]
        if obj.get("type") in ("message_stop", "response.completed", "response.incomplete", "response.failed"):
            break
    return _usage_dict(proto, last) if last else None


def citations_of_body(proto: Protocol, body: Any) -> int:
    k = 0
    if not isinstance(body, dict):
        return 0
    if proto is B:
        for b in ((body.get("output") or {}).get("message") or {}).get("content") or []:
            if isinstance(b, dict) and isinstance(b.get("citationsContent"), dict):
                k += len(b["citationsContent"].get("citations") or [])
        return k
    if proto is G:  # citations, and the web pages a grounded answer's segments cite (one per support)
        for cand in body.get("candidates") or []:
            k += len(((cand or {}).get("citationMetadata") or {}).get("citations") or [])
            for sup in ((cand or {}).get("groundingMetadata") or {}).get("groundingSupports") or []:
                k += len(sup.get("groundingChunkIndices") or []) if isinstance(sup, dict) else 0
        return k
    if proto is C:
        for ch in body.get("choices") or []:
            k += len((ch.get("message") or {}).get("annotations") or [])
    elif proto is R:
        for item in body.get("output") or []:
            if item.get("type") == "message":
                for c in item.get("content") or []:
                    k += len(c.get("annotations") or []) if isinstance(c, dict) else 0
    else:
        for b in body.get("content") or []:
            if isinstance(b, dict) and b.get("type") == "text":
                k += len(b.get("citations") or [])
    return k


def citations_of_sse(proto: Protocol, data: bytes) -> int:
    if proto is B:  # (citation deltas are not carried to Converse clients)
        return 0
    if proto is G:
        return sum(citations_of_body(G, c) for c in sdk_gemini.chunks_of_stream(data))
    k = 0
    final = None
    for _name, payload in client_events(proto, data):
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if proto in AB:
            if obj.get("type") == "content_block_delta" and (obj.get("delta") or {}).get("type") == "citations_delta":
                k += 1
            elif obj.get("type") == "content_block_start":
                k += len((obj.get("content_block") or {}).get("citations") or [])
        elif proto is C:
            for ch in obj.get("choices") or []:
                k += len((ch.get("delta") or {}).get("annotations") or [])
        elif obj.get("type") in ("response.completed", "response.incomplete"):
            final = obj.get("response")
    if proto is R:
        return citations_of_body(R, final)
    return k


def citations_of_neutral(resp: n.Response) -> int:
    return sum(len(p.citations or []) for p in resp.parts if isinstance(p, n.Text))


# ----------------------------------------------------------------------------- checks
def _warned(warnings: list[str], *words: str) -> str | None:
    for w in warnings:
        lw = w.lower()
        if any(x in lw for x in words):
            return w
    return None


_LOSS_WORDS = {
    "reasoning dropped": ("reasoning", "thinking"),
    "text differs": ("text", "dropped"),
    "refusal": ("refusal",),
    "arguments": ("argument", "tool"),
}


def semantic(src, dst, src_reason, dst_reason, target, where, warnings) -> None:
    """assert_same_semantics; a difference the translator warned about is a documented lossy drop."""
    try:
        assert_same_semantics(src, dst, src_reason, dst_reason, target, where=where)
    except AssertionError as e:
        msg = str(e) or "semantics differ"
        for key, words in _LOSS_WORDS.items():
            if key in msg:
                w = _warned(warnings, *words)
                if w:
                    raise Rejected(f"lossy ({msg.split(': ', 1)[-1][:80]}); warned: {w}") from None
        raise


def check_usage(src: dict | None, dst: dict | None, target: Protocol, case: Case) -> None:
    if not src or src.get("input") is None and src.get("output") is None:
        return
    case.checked.add("usage")
    if not dst:
        raise AssertionError(f"usage lost: source {src}, client got none")
    for k in ("input", "output"):
        if src.get(k) is not None and dst.get(k) != src[k]:
            raise AssertionError(f"usage {k}: client {dst.get(k)} != source {src[k]} ({src} → {dst})")
    if (src.get("cached") or 0) > 0 and dst.get("cached") != src["cached"]:
        raise AssertionError(f"usage cached tokens: client {dst.get('cached')} != source {src['cached']}")
    if target not in AB and target is not B and (src.get("reasoning") or 0) > 0 and dst.get("reasoning") != src["reasoning"]:
        raise AssertionError(f"usage reasoning tokens: client {dst.get('reasoning')} != source {src['reasoning']}")


def check_citations(n_src: int, n_dst: int, case: Case) -> None:
    if n_src:
        case.checked.add("citations")
    if n_src == n_dst:
        return
    if n_dst < n_src:
        w = _warned(case.warnings, "citation", "annotation")
        if w:
            raise Rejected(f"lossy (citations {n_src} → {n_dst}); warned: {w}")
        raise AssertionError(f"citations silently dropped: {n_src} in the source, {n_dst} for the client")
    raise AssertionError(f"citations: {n_src} in the source, {n_dst} for the client")


def _stream_request(target: Protocol) -> dict | None:
    if target is G:
        return {"contents": []}
    if target is B:
        return {"messages": []}
    # a streaming Chat client that asked for usage (what the SDKs' stream helpers send)
    return {"stream": True, "stream_options": {"include_usage": True}} if target is C else {"stream": True}


def _opaque_note(case: Case, src_resp: n.Response, check) -> bool:
    """Same-protocol output that carries the upstream's own opaque items unchanged is only as valid
    as the recording: SDK rejections of real traffic there are notes, not fails (as in the sweeps)."""
    try:
        check()
        return True
    except (pydantic.ValidationError, StreamError, AssertionError) as e:
        # (the issuer's own wire object: an opaque item, or a web search call kept as the provider sent it)
        issued = (n.Opaque, n.WebSearchCall, n.WebSearchResults)
        if case.target is case.source and any(isinstance(p, issued) for p in src_resp.parts):
            case.notes.append(f"the SDK rejects the recording itself ({type(e).__name__}); output = recording")
            return False
        raise


def run_json(case: Case) -> None:
    body = json.loads(case.path.read_text())
    proto, target = case.source, case.target
    src_resp = decode_response(body, proto)
    res = translate_response_result(body, proto, target)
    case.warnings = list(res.warnings)
    if target is proto:
        assert res.body is body or res.body == body, "same protocol: body changed"
        return
    if res.status != 200:  # an upstream failure (Responses status failed) becomes a native error
        assert src_resp.stop.reason is StopReason.INTERRUPTED, f"status {res.status} for a {src_resp.stop.reason}"
        check_error_body(target, res.body)
        return
    validate_response(target, res.body)
    dst = summarize_response(target, res.body)
    semantic(summary_from_neutral(src_resp), dst, src_resp.stop.reason, stop_info(res.body, target).reason, target,
             f"{proto}->{target}", case.warnings)
    check_usage(usage_of_body(proto, body), usage_of_body(target, res.body), target, case)
    check_citations(citations_of_neutral(src_resp), citations_of_body(target, res.body), case)


def run_json_to_sse(case: Case) -> None:
    body = json.loads(case.path.read_text())
    proto, target = case.source, case.target
    src_resp = decode_response(body, proto)
    out, stop, w = stream_from_response(body, proto, target, _stream_request(target))
    case.warnings = list(w)
    if src_resp.extra.get("error") is not None:
        try:
            accumulate_stream(target, out)
        except StreamError:
            return
        raise AssertionError("upstream failure: no native error event")
    box: list = []
    if not _opaque_note(case, src_resp, lambda: box.append(accumulate_stream(target, out))):
        return
    semantic(summary_from_neutral(src_resp), box[0], src_resp.stop.reason,
             _reason_of_client_stream(target, out).reason, target, f"{proto}->{target} json->sse", case.warnings)
    check_usage(usage_of_body(proto, body), usage_of_sse(target, out), target, case)
    check_citations(citations_of_neutral(src_resp), citations_of_sse(target, out), case)


def run_sse(case: Case) -> None:
    data = case.path.read_bytes()
    proto, target = case.source, case.target
    col, src_resp = neutral_of_stream(proto, data)
    t = StreamTranslator(proto, target, _stream_request(target))
    out = t.feed(data) + t.close()
    case.warnings = list(t.warnings)
    if target is proto:
        same = out.replace(b"\r\n", b"\n") == data.replace(b"\r\n", b"\n")
        assert same or t.stop.reason is StopReason.INTERRUPTED, "pass-through changed the bytes"
        return
    if col.error is not None:
        try:
            accumulate_stream(target, out)
        except StreamError:
            assert t.stop.reason is StopReason.INTERRUPTED, t.stop
            return
        raise AssertionError("upstream error: the client got no native error event")
    dst = accumulate_stream(target, out)
    assert t.stop is not None and t.stop.reason is src_resp.stop.reason, (t.stop, src_resp.stop)
    semantic(summary_from_neutral(src_resp), dst, src_resp.stop.reason,
             _reason_of_client_stream(target, out).reason, target, f"{proto}->{target}", case.warnings)
    check_usage(usage_of_sse(proto, data), usage_of_sse(target, out), target, case)
    check_citations(citations_of_neutral(src_resp), citations_of_sse(target, out), case)


def run_sse_to_json(case: Case) -> None:
    raw = case.path.read_bytes()
    proto, target = case.source, case.target
    col, src_resp = neutral_of_stream(proto, raw)
    res = response_from_stream(raw, proto, target)
    case.warnings = list(res.warnings)
    if col.error is not None:
        assert res.status >= 400, f"upstream error: status {res.status}"
        check_error_body(target, res.body)
        return
    if not _opaque_note(case, src_resp, lambda: validate_response(target, res.body)):
        return
    dst = summarize_response(target, res.body)
    semantic(summary_from_neutral(src_resp), dst, src_resp.stop.reason, stop_info(res.body, target).reason, target,
             f"{proto}->{target} sse->json", case.warnings)
    check_usage(usage_of_sse(proto, raw), usage_of_body(target, res.body), target, case)
    check_citations(citations_of_neutral(src_resp), citations_of_body(target, res.body), case)


_ERR_ADAPTERS: dict = {}


def check_error_body(target: Protocol, body: Any) -> None:
    import anthropic.types as at
    import openai.types as ot

    if target is B:  # {"message"} (the type travels in the x-amzn-errortype header)
        assert isinstance(body, dict) and set(body) == {"message"} and isinstance(body["message"], str) \
            and body["message"], body
        return
    if target is G:  # {"error": {"code", "message", "status"}}, code the HTTP status
        err = body.get("error") if isinstance(body, dict) else None
        assert isinstance(err, dict) and isinstance(err.get("code"), int) and isinstance(err.get("status"), str), body
    elif target in EVENTSTREAM:  # Bedrock: {"message"}, the type in the x-amzn-errortype header
        assert isinstance(body, dict) and set(body) == {"message"} and body["message"], body
        return
    elif target in AB:
        assert isinstance(body, dict) and body.get("type") == "error", body
        at.ErrorResponse.model_validate(body)
    else:
        assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
        ot.ErrorObject.model_validate(body["error"])
    msg = body["error"].get("message")
    assert isinstance(msg, str) and msg, "error without a message"


def _recorded_status(case: Case) -> dict | None:
    """A recording's ``<stem>.status.json`` (status and error type header), where it has one."""
    f = case.path.with_name(case.path.name[:-5] + ".status.json")
    return json.loads(f.read_text()) if f.is_file() else None


def _status_of(case: Case) -> int:
    meta = _recorded_status(case)
    if meta is not None:
        return int(meta["status"])
    feats = index_features_cached().get(f"{fixture_folder(case.source)}/{case.path.name}", set())
    for t in feats:
        if t.startswith("http-") and t[5:].isdigit():
            return int(t[5:])
    return 400


_FEATS: dict[str, set[str]] | None = None


def index_features_cached() -> dict[str, set[str]]:
    global _FEATS
    if _FEATS is None:
        _FEATS = index_features()
    return _FEATS


def run_error(case: Case) -> None:
    from proxai_core.errors import parse_error

    raw = case.path.read_bytes()
    status = _status_of(case)
    meta = _recorded_status(case) or {}
    headers = {"x-amzn-errortype": meta["x-amzn-errortype"]} if "x-amzn-errortype" in meta else None
    err = parse_error(status, raw, headers)
    st, out = translate_error(status, raw, case.source, case.target)
    assert 400 <= st < 600, st
    check_error_body(case.target, out)
    if err.message:
        assert err.message[:60] in (out["error"] if "error" in out else out)["message"], "error message lost"
    # the status class survives (a 429 stays a rate limit, a 4xx never becomes a 5xx)
    assert (st >= 500) == (status >= 500), f"status {status} became {st}"
    if status == 429:
        assert st == 429, f"429 became {st}"


_REQ_ADAPTERS: dict = {}


def request_adapter(proto: Protocol, streaming: bool):
    key = (proto, streaming)
    if key not in _REQ_ADAPTERS:
        from anthropic.types import message_create_params as mcp
        from openai.types.chat import completion_create_params as ccp
        from openai.types.responses import response_create_params as rcp

        mod = {C: ccp, R: rcp, A: mcp}[proto]
        name = {C: "CompletionCreateParams", R: "ResponseCreateParams", A: "MessageCreateParams"}[proto]
        typ = getattr(mod, f"{name}Streaming" if streaming else f"{name}NonStreaming")
        _REQ_ADAPTERS[key] = pydantic.TypeAdapter(typ)
    return _REQ_ADAPTERS[key]


def validate_request(proto: Protocol, body: dict) -> None:
    if proto in HOSTED:  # the host's form checked, then judged as the Anthropic request it stands for
        body, proto = hosted_as_anthropic(proto, body), A
    if proto is G:
        sdk_gemini.validate_request(body)
        return
    if proto is B:
        try:
            sdk_converse.validate_request(body, "CountTokens" if "input" in body else "Converse")
        except AssertionError as e:  # (botocore's report, as a validation failure of the params)
            raise pydantic.ValidationError.from_exception_data(str(e)[:200], []) from None
        return
    if proto is R and isinstance(body.get("input"), list):
        # The SDK's param types require ``id`` and ``status`` on assistant output messages in the
        # history; the API accepts them without (Codex and the SDKs' own examples send none).
        items = []
        for it in body["input"]:
            if isinstance(it, dict) and it.get("type") == "message" and it.get("role") == "assistant" \
                    and isinstance(it.get("content"), list):
                it = {"id": "msg_x", "status": "completed", **it}
            items.append(it)
        body = {**body, "input": items}
    request_adapter(proto, bool(body.get("stream"))).validate_python(body)


def run_request(case: Case) -> None:
    try:
        body = json.loads(case.path.read_text())
    except ValueError:  # a recording that stored a body which is not JSON: the client gets a native 400
        raise Rejected("TranslationError: request body must be a JSON object (the recording is not JSON)") from None
    proto, target = case.source, case.target
    path = recorded_path(case.path) if proto in URL_KEYED else None
    w: list[str] = []
    try:
        src = decode_request(body, proto, path=path)
        out = translate_request(body, proto, target, warnings=w, path=path)
    except TranslationError as e:
        case.warnings = w
        if documented_rejection(e):
            raise Rejected(f"TranslationError: {e}") from None
        raise AssertionError(f"rejection not documented in docs/mapping.md: TranslationError: {e}") from None
    case.warnings = w
    assert isinstance(out, dict) and orjson.loads(orjson.dumps(out)) == out, "not a JSON object"
    try:
        validate_request(proto, body)
        src_valid = True
    except pydantic.ValidationError:
        src_valid = False
        case.notes.append("the recorded request itself does not validate with the SDK param types")
    if src_valid:
        validate_request(target, out)
    back = decode_request(out, target)
    assert _tool_shape(back) == _tool_shape(src), "tool calls/results differ"
    if any("sent as text parts" in x for x in w):  # text files became text: each text is still there
        got, want = _texts(back), _texts(src)
        assert got[0] == want[0] and len(got[1]) == len(want[1]), "texts differ"
        assert all(_sweep._in_order(x[2], y[2]) for x, y in zip(want[1], got[1], strict=True)), "texts differ"
    else:
        assert _texts(back) == _texts(src), "texts differ"


RUNNERS = {"json": run_json, "json→sse": run_json_to_sse, "sse": run_sse, "sse→json": run_sse_to_json,
           "error": run_error, "request": run_request}


def _short(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}" if not isinstance(e, AssertionError) else (str(e) or "assertion failed")
    s = " ".join(s.split())
    return s[:300]


def run_case(case: Case) -> Case:
    t0 = time.perf_counter()
    try:
        with time_limit(CASE_TIMEOUT):
            RUNNERS[case.kind](case)
        case.status, case.reason = "pass", ""
        lossy = [w for w in case.warnings if LOSSY.search(w)]
        if lossy:
            case.status, case.reason = "rejected", f"lossy: {lossy[0]}" + (f" (+{len(lossy) - 1} more)" if len(lossy) > 1 else "")
    except Rejected as e:
        case.status, case.reason = "rejected", _short(e).removeprefix("Rejected: ")
    except Hang as e:
        case.status, case.reason = "fail", f"hang: {e}"
    except pydantic.ValidationError as e:
        first = e.errors()[0] if e.errors() else {}
        loc = ".".join(str(x) for x in first.get("loc", ()))
        case.status, case.reason = "fail", f"SDK validation: {e.error_count()} error(s), first at {loc}: {first.get('msg')}"
    except Exception as e:  # noqa: BLE001 - every failure is classified and reported
        case.status, case.reason = "fail", _short(e)
    case.seconds = time.perf_counter() - t0
    return case


def run_all(cases: list[Case] | None = None, *, progress: bool = False) -> list[Case]:
    cases = build_cases() if cases is None else cases
    for i, c in enumerate(cases):
        run_case(c)
        if progress and i % 200 == 0:
            print(f"  {i}/{len(cases)}", file=sys.stderr, flush=True)
    return cases


# ----------------------------------------------------------------------------- report
def _cell(cnt: Counter) -> str:
    if not sum(cnt.values()):
        return "–"
    s = f"{cnt['pass']}"
    if cnt["rejected"]:
        s += f" / {cnt['rejected']}r"
    if cnt["fail"]:
        s += f" / **{cnt['fail']}F**"
    return s


def report(cases: list[Case], seconds: float) -> str:
    tot = Counter(c.status for c in cases)
    unexplained = [c for c in cases if c.status == "fail" and not c.known]
    lines = [
        "Generated by `uv run python benchmarks/conformance.py` (checked by `tests/test_conformance.py`); do not "
        "edit by hand. Every recording in `../shared/fixtures` (see its INDEX.tsv) through every direction, "
        "judged by the official SDK types and stream accumulators and by the semantic comparison of the core "
        "tests (text, refusal, tool calls with JSON-equal arguments, reasoning present, normalized stop), plus "
        "usage numbers and citations read from the raw bodies of both sides. See the script's docstring for the "
        "case kinds and the rules.",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {len(cases)} cases in {seconds:.0f} s: "
        f"**{tot['pass']} pass, {tot['rejected']} rejected by design, {tot['fail']} fail** "
        f"({len(unexplained)} not yet explained).",
        "",
        f"Beyond the SDK judges and the semantic comparison, usage numbers were compared in "
        f"{sum('usage' in c.checked for c in cases)} cases and citation counts in "
        f"{sum('citations' in c.checked for c in cases)} cases (those whose source has usage / citations).",
        "",
        "Cells: passes / `r` rejected by design (a `TranslationError` naming an unrepresentable feature, or a "
        "documented lossy drop: the translator's warnings name what the client or upstream did not get) / "
        "**`F` fails**.",
        "",
        "## By direction",
        "",
        "| source → target | " + " | ".join(KINDS) + " | total |",
        "|---|" + "---|" * (len(KINDS) + 1),
    ]
    by: dict[tuple, Counter] = defaultdict(Counter)
    for c in cases:
        by[(c.source, c.target, c.kind)][c.status] += 1
        by[(c.source, c.target, "total")][c.status] += 1
    for s in PROTOCOLS:
        for t in PROTOCOLS:
            tag = " (same)" if s is t else ""
            lines.append(f"| {SHORT[s]} → {SHORT[t]}{tag} | " + " | ".join(_cell(by[(s, t, k)]) for k in KINDS)
                         + f" | {_cell(by[(s, t, 'total')])} |")
    lines += ["", "## By source protocol × feature", "",
              "A case counts under every feature its recording has (INDEX.tsv `features`; requests: from their "
              "content). Same-protocol cases included.", "",
              "| feature | " + " | ".join(f"from {SHORT[p]}" for p in PROTOCOLS) + " | all |",
              "|---|" + "---|" * (len(PROTOCOLS) + 1)]
    bf: dict[tuple, Counter] = defaultdict(Counter)
    for c in cases:
        for f in c.features:
            bf[(f, c.source)][c.status] += 1
            bf[(f, "all")][c.status] += 1
    for f in FEATURES:
        lines.append(f"| {f} | " + " | ".join(_cell(bf[(f, p)]) for p in PROTOCOLS) + f" | {_cell(bf[(f, 'all')])} |")
    fails = [c for c in cases if c.status == "fail"]
    rej = [c for c in cases if c.status == "rejected"]
    lines += ["", f"## Fails ({len(fails)})", ""]
    if not fails:
        lines.append("None.")
    else:
        lines.append("| kind | direction | recording | reason | known |")
        lines.append("|---|---|---|---|---|")
        for c in fails:
            lines.append(f"| {c.kind} | {SHORT[c.source]} → {SHORT[c.target]} | `{c.name}` | {_md(c.reason)} | "
                         f"{_md(c.known) if c.known else '**not yet explained**'} |")
    lines += ["", f"## Rejected by design ({len(rej)})", ""]
    if not rej:
        lines.append("None.")
    else:
        groups: dict[str, list[Case]] = defaultdict(list)
        for c in rej:
            groups[_group(c.reason)].append(c)
        lines.append("| reason | cases | examples |")
        lines.append("|---|---|---|")
        for _g, cs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            ex = "; ".join(f"{c.kind} {SHORT[c.source]}→{SHORT[c.target]} `{c.path.name[:70]}`" for c in cs[:3])
            lines.append(f"| {_md(cs[0].reason)} | {len(cs)} | {_md(ex)} |")
    noted = [c for c in cases if c.notes and c.status == "pass"]
    if noted:
        lines += ["", f"## Passes with notes ({len(noted)})", ""]
        groups = defaultdict(list)
        for c in noted:
            groups[c.notes[0]].append(c)
        for g, cs in groups.items():
            lines.append(f"- {g}: {len(cs)} case(s), e.g. {cs[0].kind} {SHORT[cs[0].source]}→{SHORT[cs[0].target]} "
                         f"`{cs[0].path.name[:80]}`")
    warned = Counter()
    for c in cases:
        for w in c.warnings:
            warned[re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", w)[:140]] += 1
    if warned:
        lines += ["", "## Warnings the translators emitted (lossy conversions, most frequent first)", ""]
        for w, k in warned.most_common(25):
            lines.append(f"- {k}× {_md(w)}")
    return "\n".join(lines) + "\n"


def _group(reason: str) -> str:
    r = re.sub(r"`[^`]*`|'[^']*'|\"[^\"]*\"|\d+", "…", reason)
    return r[:90]


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def summary_line(cases: list[Case]) -> str:
    tot = Counter(c.status for c in cases)
    un = sum(1 for c in cases if c.status == "fail" and not c.known)
    return (f"{len(cases)} cases: {tot['pass']} pass, {tot['rejected']} rejected by design, {tot['fail']} fail "
            f"({un} not yet explained)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="do not write docs/conformance.md")
    ap.add_argument("--sample", type=int, default=None, help="run about this many cases only")
    ap.add_argument("-v", action="store_true", help="list every non-pass")
    args = ap.parse_args()
    if not FIXTURES.is_dir():
        sys.exit(f"{FIXTURES} is required")
    t0 = time.perf_counter()
    cases = run_all(build_cases(args.sample), progress=True)
    dt = time.perf_counter() - t0
    text = report(cases, dt)
    print(summary_line(cases))
    if args.v:
        for c in cases:
            if c.status != "pass":
                print(f"{c.status:8} {c.kind:9} {SHORT[c.source]}->{SHORT[c.target]} {c.path.name[:80]}: {c.reason}")
    if not args.no_write and not args.sample:
        write_section(DOC, "conformance", text, "Conformance on real traffic")
        print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
