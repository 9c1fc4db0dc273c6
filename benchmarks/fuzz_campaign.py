"""Fault and fuzz campaign: hostile client bodies and malformed upstream traffic, through
``proxai_core`` and through a running ``mitmdump`` with the addon.

    uv run python benchmarks/fuzz_campaign.py                 # ≥ 10,000 generated cases, writes the
                                                              # "fuzz" section of docs/conformance.md
    uv run python benchmarks/fuzz_campaign.py --scale 0.1     # a short run (no doc update)

Generated with hypothesis (``st.data()``; generation only, no shrinking: every finding is recorded
with its input instead of stopping the run). Categories:

- ``request``: a seed client request (real recordings + built-in ones) mutated (subtrees replaced
  by wrong types, huge strings, deep nesting, lone surrogates, deleted/added keys), or a whole body
  of the wrong type or of the wrong protocol, through ``translate_request`` in all six directions.
  Allowed outcomes: a result that ``orjson`` can serialize (the addon sends it), or
  ``TranslationError`` / ``ValueError``. Anything else, or > 2 s, is a finding.
- ``stream``: a seed upstream SSE stream with garbage lines, truncated JSON, unknown events,
  interleaved error events, mutated event JSON, stray ``[DONE]``, odd line ends, cut into random
  chunks, through ``StreamTranslator`` in all nine directions, and ``response_from_stream`` (the
  non-streaming client). Required: no exception, a StopInfo, and (translated directions) the output
  ends with the client's native terminal or error frame; pass-through output contains one.
- ``response``: a seed complete upstream body mutated, through ``translate_response_result`` and
  ``stream_from_response``: a serializable body or ``TranslationError`` / ``ValueError``.
- ``mitm-client``: hostile raw request bodies (the request cases above serialized, plus invalid
  UTF-8, truncated / non-JSON / non-object JSON, wrong protocol for the path, huge and deeply
  nested bodies) posted to a real ``mitmdump`` with the addon in front of the loopback fake
  upstream. Required: an answer within 20 s that is either a native error (4xx, the client
  protocol's error shape) or a correct translation (SDK-valid), never a 5xx / traceback / hang.
- ``mitm-upstream``: the fake upstream answers with malformed SSE / JSON; the client must get a
  native error or a correct translation.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
import traceback
from collections import Counter
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
from benchmarks._common import time_limit, write_section  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests.fake_upstream import RECORDED, _enc_event  # noqa: E402

from proxai_core import (  # noqa: E402
    Protocol,
    StreamTranslator,
    TranslationError,
    dumps,
    response_from_stream,
    stream_from_response,
    translate_request,
    translate_response_result,
)
from proxai_core.sse import SSEReader  # noqa: E402

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
PROTOCOLS = (C, R, A, G)
#: the protocols a client can speak through mitmdump (the addon's Gemini side comes later)
PROXY_PROTOCOLS = (C, R, A)
SHORT = {C: "chat", R: "responses", A: "anthropic", G: "gemini"}
FIXTURES = ROOT.parent / "shared" / "fixtures"
ALLOWED = (TranslationError, ValueError)
CASE_LIMIT = 2.0  # seconds a core call may take
HUGE = "A" * 1_000_000

# ----------------------------------------------------------------------------- seeds
BUILTIN_REQUESTS: dict[Protocol, list[dict]] = {
    G: [
        {"systemInstruction": {"parts": [{"text": "Be brief."}]},
         "contents": [{"role": "user", "parts": [{"text": "Hi"}]},
                      {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"x": 1}}}]},
                      {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "ok"}}}]}],
         "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}],
         "generationConfig": {"maxOutputTokens": 100, "stopSequences": ["END"],
                              "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}}},
    ],
    C: [
        {"model": "gpt-4o", "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                                      {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]},
                                         {"role": "assistant", "content": None, "tool_calls": [
                                             {"id": "call_1", "type": "function",
                                              "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                                         {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
         "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
         "tool_choice": "auto", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 100,
         "temperature": 0.5, "stop": ["END"]},
    ],
    R: [
        {"model": "gpt-5", "instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Hi"},
                                         {"type": "input_image", "image_url": "https://example.com/a.png"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
         "tools": [{"type": "function", "name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string"}}}},
             {"type": "custom", "name": "apply_patch", "description": "patch"}],
         "reasoning": {"effort": "low"}, "stream": True, "max_output_tokens": 100},
    ],
    A: [
        {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": [{"type": "text", "text": "Be brief."}],
         "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
                      {"role": "assistant", "content": [
                          {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny",
                                                    "is_error": False}]}],
         "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
         "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024}, "stream": True,
         "stop_sequences": ["END"]},
    ],
}


def _fixture_files(proto: Protocol, suffix: str, limit: int) -> list[Path]:
    d = FIXTURES / SHORT[proto]
    if not d.is_dir():
        return []
    files = sorted(d.glob(f"*{suffix}"))
    if suffix == ".json":
        files = [f for f in files if not f.name.endswith(".request.json")]
    step = max(1, len(files) // limit)
    return files[::step][:limit]


def load_seeds(limit: int = 25) -> dict[str, dict[Protocol, list]]:
    """Seed requests, complete bodies and streams (real recordings where present + built-in ones)."""
    reqs = {p: list(BUILTIN_REQUESTS.get(p, ())) for p in PROTOCOLS}
    bodies: dict[Protocol, list[dict]] = {p: [] for p in PROTOCOLS}
    streams: dict[Protocol, list[list[bytes]]] = {p: [] for p in PROTOCOLS}
    for p in PROTOCOLS:
        for sc in RECORDED.get(p.value, {}).values():
            bodies[p].append(sc["json"])
            streams[p].append([_enc_event(e) for e in sc["sse"]])
        for f in _fixture_files(p, ".request.json", limit):
            with contextlib.suppress(ValueError):
                reqs[p].append(json.loads(f.read_text()))
        for f in _fixture_files(p, ".json", limit):
            with contextlib.suppress(ValueError):
                b = json.loads(f.read_text())
                if isinstance(b, dict):
                    bodies[p].append(b)
        for f in _fixture_files(p, ".sse", limit):
            streams[p].append(split_events(f.read_bytes()))
    return {"requests": reqs, "bodies": bodies, "streams": streams}


def split_events(raw: bytes) -> list[bytes]:
    raw = raw.replace(b"\r\n", b"\n")
    return [p + b"\n\n" for p in raw.split(b"\n\n") if p.strip()]


# ----------------------------------------------------------------------------- strategies
KEYS = ["role", "content", "type", "text", "tool_calls", "function", "name", "arguments", "id", "tool_call_id",
        "input", "output", "call_id", "messages", "system", "tools", "tool_choice", "image_url", "url", "source",
        "data", "media_type", "thinking", "signature", "reasoning", "summary", "max_tokens", "stream", "model",
        "parameters", "input_schema", "cache_control", "refusal", "annotations", "index", "delta", "choices",
        "usage", "stop_reason", "finish_reason", "response", "item", "output_index", "content_block", "message",
        "partial_json", "encrypted_content", "status", "error", "instructions", "stream_options", "is_error"]
TOKENS = ["user", "assistant", "system", "tool", "developer", "function", "image_url", "tool_use", "tool_result",
          "text", "input_text", "output_text", "function_call", "function_call_output", "message", "thinking",
          "redacted_thinking", "custom", "refusal", "reasoning", "image", "document", "base64", "url",
          "content_block_delta", "message_start", "message_delta", "message_stop", "response.completed",
          "response.output_text.delta", "text_delta", "input_json_delta", "end_turn", "tool_calls", "length",
          "proxai.v1.e30", "proxai.v1.!!!", "<proxai-reasoning v1>e30</proxai-reasoning>",
          "data:image/png;base64,AAAA", "file:///etc/passwd", "http://127.0.0.1:1/x"]


def deep(depth: int, kind: str) -> Any:
    v: Any = "x"
    for _ in range(depth):
        v = [v] if kind == "list" else {"a": v}
    return v


_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1),  # orjson.loads: bigger ints become floats
    st.sampled_from([0, -1, 1, 2 ** 31, 2 ** 63]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12), st.sampled_from(TOKENS),
    st.just(""), st.builds(list), st.builds(dict),  # fresh objects: mutate() changes them
)
_json = st.recursive(_leaf, lambda ch: st.lists(ch, max_size=4)
                     | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), ch, max_size=4),
                     max_leaves=8)
#: hostile values a JSON body parsed from the wire can hold (what orjson.loads accepts: no lone
#: surrogates, no NaN/Infinity, nesting up to 1024). Invalid UTF-8 and the like are raw-bytes cases
#: (``raw_client_cases``): they never reach the translator as Python objects.
_hostile = st.one_of(
    _json,
    st.just(HUGE),
    st.builds(deep, st.sampled_from([50, 200, 254, 255, 400, 800, 1000]), st.sampled_from(["list", "dict"])),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.sampled_from(["\u0000", "\u202e\u200b", "\U0001f600" * 50, "\\u0000", "</proxai-reasoning>", "proxai.v1."]),
)


def paths(obj: Any, prefix: tuple = (), out: list | None = None, limit: int = 400) -> list[tuple]:
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    out.append(prefix)
    if isinstance(obj, dict):
        for k, v in obj.items():
            paths(v, prefix + (k,), out, limit)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:20]):
            paths(v, prefix + (i,), out, limit)
    return out


def _get(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def json_copy(obj: Any) -> Any:
    """A deep copy of a JSON value without recursion: a mutated event may already hold a value nested
    1024 deep, which copy.deepcopy (two frames per level) cannot copy."""
    if not isinstance(obj, (dict, list)):
        return obj
    root: Any = {} if isinstance(obj, dict) else []
    todo = [(obj, root)]
    while todo:
        src, dst = todo.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for k, v in items:
            if isinstance(v, (dict, list)):
                c: Any = {} if isinstance(v, dict) else []
                todo.append((v, c))
            else:
                c = v
            if isinstance(dst, dict):
                dst[k] = c
            else:
                dst.append(c)
    return root


def mutate(data: st.DataObject, obj: Any, max_ops: int = 3) -> tuple[Any, list[str]]:
    """Apply 1..max_ops random mutations (replace / delete / add key / wrap) to a deep copy."""
    obj = json_copy(obj)
    ops: list[str] = []
    for _ in range(data.draw(st.integers(1, max_ops), label="ops")):
        ps = paths(obj)
        path = data.draw(st.sampled_from(ps), label="path")
        op = data.draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "wrap"]), label="op")
        value = data.draw(_hostile, label="value") if op in ("replace", "add") else None
        if not path:
            if op == "replace":
                obj = value
            ops.append(f"{op} <root>")
            continue
        parent = _get(obj, path[:-1])
        key = path[-1]
        try:
            if op == "replace":
                parent[key] = value
            elif op == "delete":
                del parent[key]
            elif op == "wrap":
                parent[key] = [parent[key]]
            elif op == "add":
                target = parent[key]
                if isinstance(target, dict):
                    target[data.draw(st.sampled_from(KEYS), label="newkey")] = value
                elif isinstance(target, list):
                    target.append(value)
                else:
                    parent[key] = value
        except (KeyError, IndexError, TypeError):
            continue
        ops.append(f"{op} {'.'.join(map(str, path))}" + (f" = {_brief(value)}" if op in ("replace", "add") else ""))
    return obj, ops


def _brief(v: Any, n: int = 60) -> str:
    if isinstance(v, str) and len(v) > n:
        return f"<str len {len(v)}>"
    if isinstance(v, (list, dict)):
        d = _depth(v)
        if d > 20:
            return f"<{type(v).__name__} nested {d} deep>"
    s = repr(v)
    return s if len(s) <= n else s[:n] + "…"


def _depth(v: Any) -> int:
    d = 0
    while isinstance(v, (list, dict)) and v:
        v = v[0] if isinstance(v, list) else next(iter(v.values()))
        d += 1
    return d


# ----------------------------------------------------------------------------- findings
@dataclass
class Finding:
    category: str
    kind: str  # exception class / "slow" / "no terminal" / ...
    direction: str
    message: str
    repro: str
    #: the exact input (for --findings): raw bytes as latin-1 text, or the JSON body
    data: Any = None

    @property
    def signature(self) -> str:
        return f"{self.category}|{self.kind}|{self.direction}|{self.message[:80]}"


@dataclass
class Tally:
    cases: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    max_seconds: dict[str, float] = field(default_factory=dict)

    def add(self, category: str, outcome: str, seconds: float = 0.0) -> None:
        self.cases[category] += 1
        self.outcomes[f"{category}:{outcome}"] += 1
        self.max_seconds[category] = max(self.max_seconds.get(category, 0.0), seconds)

    def find(self, f: Finding) -> None:
        self.findings.append(f)

    def unique(self) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.signature, []).append(f)
        return out


#: Findings already reported to the lead (the final report has a minimal reproducer for each):
#: (name, predicate, explanation). The campaign labels them; tests/test_fuzz.py turns the open ones
#: into xfails with the explanation and fails on any other finding (fixed ones: FIXED_FINDINGS).
KNOWN_FINDINGS: list[tuple[str, Any, str]] = [
    ("deep-nesting",
     lambda f: "Recursion limit reached" in f.message or f.kind == "output not serializable"
     or ("nested" in f.repro and ("handling failed" in f.message or "HTTP 500" in f.kind)),
     "orjson.loads accepts nesting up to 1024 levels but orjson.dumps stops at 254: a client body with a "
     "tool schema nested 255-1024 deep translates to a body the addon cannot send (HTTP 500 'proxai failed "
     "to handle the request'); an upstream body nested that deep makes translate_response_result "
     "(_content_id) / stream_from_response (sse.frame) raise TypeError"),
    ("unhashable-sniff",
     lambda f: "unhashable type" in f.message and f.category.startswith("mitm"),
     "through mitmdump, a body whose message 'role' is a list or an object (any client protocol) gets "
     "HTTP 500 'proxai failed to handle the request': proxai_mitm/routing.py sniff_protocol builds a set "
     "of the roles and raises TypeError before the translator's own validation runs"),
    ("unhashable",
     lambda f: "unhashable type" in f.message,
     "in the core, a list/dict where a string is expected raises TypeError (a set/dict lookup on an "
     "unhashable value): requests (Responses input item 'role', Chat content part 'type') instead of "
     "TranslationError; and StreamTranslator.feed itself for a Responses stream whose output item 'type' "
     "is an object (codecs/responses.py _new_item)"),
    ("invalid-tool-args-stream",
     lambda f: "Unable to parse tool parameter JSON" in f.message,
     "tool-call arguments that are not valid JSON (Chat allows any string) are streamed to an Anthropic "
     "client as input_json_delta fragments unchecked: the anthropic SDK raises ValueError at the end of "
     "the block, while the complete-response path sends input {} with a warning"),
    ("non-object-json-upstream",
     lambda f: f.category == "mitm-upstream" and "valid dictionary or instance of" in f.message,
     "a translated route whose upstream answers 2xx with JSON that is not an object (e.g. [1]) hands that "
     "body to the client unchanged with status 200 (addon._finish_response only warns), instead of the "
     "native 502 a non-JSON body gets"),
    ("empty-sse-upstream",
     lambda f: f.category == "mitm-upstream" and "wrong kind" in f.repro
     and any(k in f.message for k in ("no message_stop", "no [DONE]", "0 terminal events")),
     "an upstream that answers 2xx text/event-stream with an empty body (content-length: 0) gives a "
     "streaming client of a translated route an empty 200 stream: no native error event (the stream "
     "callable never sees the end of an empty body)"),
]


#: Known findings since fixed, with how: no longer excused (a recurrence is a new finding); the
#: tests/test_fuzz.py test that reproduced each now passes.
FIXED_FINDINGS: dict[str, str] = {
    "deep-nesting": "proxai_core.dumps writes bodies past orjson's 254 levels with the stdlib (the addon "
                    "sends translated bodies with it; deeper than the stdlib writes is a native 400); the "
                    "core serialises nested tool input / arguments with it too",
    "invalid-tool-args-stream": "the Anthropic stream encoder forwards only fragments that keep the "
                                "arguments a valid JSON-object prefix (proxai_core.jsonscan); invalid "
                                "arguments, or arguments that end incomplete (but for a max_tokens cut), "
                                "end the turn with the native error event and a warning",
    "unhashable-sniff": "routing.sniff_protocol ignores roles that are not strings; the translator's own "
                        "validation answers a native 400",
    "unhashable": "request decoders check the type before any set/dict lookup (TranslationError, native "
                  "400); StreamTranslator and response_from_stream skip a malformed upstream event with a "
                  "warning, and a stream that never ends properly is answered with the native error",
    "non-object-json-upstream": "a 2xx JSON upstream body that is not an object is a native 502 on a "
                                "translated route",
    "empty-sse-upstream": "an empty 2xx event-stream upstream body gives a streaming client its native "
                          "error event (translated whole in the response hook)",
}


def known(f: Finding) -> str | None:
    for name, pred, _why in KNOWN_FINDINGS:
        if name not in FIXED_FINDINGS and pred(f):
            return name
    return None


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    for fr in reversed(tb):
        if "proxai_core" in fr.filename:
            return f"{Path(fr.filename).name}:{fr.lineno} {fr.name}"
    return tb[-1].name if tb else "?"


def _serializable(obj: Any) -> bool:
    """The addon writes translated bodies with proxai_core.dumps (orjson; the stdlib past orjson's
    254-level limit; TranslationError, a native 400, past the stdlib's)."""
    try:
        dumps(obj)
        return True
    except TranslationError:
        return True
    except TypeError:
        return False


# ----------------------------------------------------------------------------- core checks
def check_request(body: Any, src: Protocol, tgt: Protocol, repro: str) -> tuple[str, Finding | None]:
    """translate_request on a hostile body: ('ok'|'rejected', finding or None)."""
    direction = f"{SHORT[src]}->{SHORT[tgt]}"
    t0 = time.perf_counter()
    try:
        with time_limit(10):
            out = translate_request(body, src, tgt, warnings=[])
    except ALLOWED:
        outcome, out = "rejected", None
    except Exception as e:  # noqa: BLE001
        return "exception", Finding("request", type(e).__name__, direction, f"{_where(e)}: {str(e)[:160]}", repro)
    else:
        outcome = "ok"
    dt = time.perf_counter() - t0
    if dt > CASE_LIMIT:
        return "slow", Finding("request", "slow", direction, f"{dt:.1f} s", repro)
    # the input is what orjson.loads accepts (nesting ≤ 1024, no lone surrogates, no NaN); the addon
    # sends the translation with proxai_core.dumps
    if out is not None and not _serializable(out):
        try:
            dumps(out)
        except TypeError as e:
            msg = str(e)
        return "unserializable", Finding("request", "output not serializable", direction,
                                         f"dumps(translated body): {msg} (the input parses with orjson.loads)",
                                         repro)
    return outcome, None


def terminal_ok(target: Protocol, out: bytes, passthrough: bool, error: bool = False) -> str | None:
    """None if the translated output ends with the client's native terminal or error frame (a
    pass-through ended by an error or interruption must contain the native error frame)."""
    r = SSEReader()
    evs = r.feed(out) + r.close()
    if not evs:
        return None if passthrough and not error else "empty output"

    def is_term(name: str | None, data: str) -> bool:
        if target is C:
            if data.strip() == "[DONE]":
                return True
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                return False
            return isinstance(obj, dict) and isinstance(obj.get("error"), dict)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict):
            return False
        if target is G:  # a chunk with a finishReason or a prompt block, or a Google error
            cands = obj.get("candidates")
            return (isinstance(obj.get("error"), dict) or isinstance(obj.get("promptFeedback"), dict)
                    or (isinstance(cands, list) and bool(cands) and isinstance(cands[0], dict)
                        and cands[0].get("finishReason") is not None))
        if target is A:
            return name in ("message_stop", "error") and obj.get("type") in ("message_stop", "error")
        return obj.get("type") in ("response.completed", "response.incomplete", "response.failed", "error")

    if passthrough:
        # bytes pass unchanged (nothing is fabricated; an upstream's own error frame is forwarded as
        # it came); an interruption (cut) must still reach the client as its native error frame
        if error and not any(is_term(n, d) for n, d in evs):
            return "pass-through interrupted without a native error frame"
        return None
    name, data = evs[-1]
    if not is_term(name, data):
        return f"last frame is not a terminal or error: {(name or '')} {data[:80]}"
    return None


def check_stream(data: bytes, chunks: list[bytes], src: Protocol, tgt: Protocol, repro: str) -> tuple[str, Finding | None]:
    direction = f"{SHORT[src]}->{SHORT[tgt]}"
    t0 = time.perf_counter()
    try:
        with time_limit(10):
            t = StreamTranslator(src, tgt, {"stream": True, "stream_options": {"include_usage": True}}
                                 if tgt is C else {"stream": True})
            out = b"".join(t.feed(c) for c in chunks) + t.close()
    except Exception as e:  # noqa: BLE001
        return "exception", Finding("stream", type(e).__name__, direction, f"{_where(e)}: {str(e)[:160]}", repro)
    dt = time.perf_counter() - t0
    if dt > CASE_LIMIT:
        return "slow", Finding("stream", "slow", direction, f"{dt:.1f} s", repro)
    if t.stop is None:
        return "no stop", Finding("stream", "no StopInfo", direction, "stop is None after close()", repro)
    bad = terminal_ok(tgt, out, src is tgt,
                      t.error is not None and (src is not tgt or t.error.kind == "interrupted"))
    if bad:
        return "no terminal", Finding("stream", "no terminal", direction, bad, repro)
    outcome = "error-frame" if t.error is not None else "ok"
    # the same upstream for a non-streaming client
    try:
        with time_limit(10):
            res = response_from_stream(data, src, tgt)
    except Exception as e:  # noqa: BLE001
        return "exception", Finding("stream→json", type(e).__name__, direction, f"{_where(e)}: {str(e)[:160]}", repro)
    if not _serializable(res.body) or not (200 <= res.status < 600):
        return "bad json", Finding("stream→json", "bad result", direction, f"status {res.status}", repro)
    return outcome, None


def check_response(body: Any, src: Protocol, tgt: Protocol, repro: str) -> tuple[str, Finding | None]:
    direction = f"{SHORT[src]}->{SHORT[tgt]}"
    t0 = time.perf_counter()
    outcome = "ok"
    for name, fn in (("json", lambda: translate_response_result(body, src, tgt)),
                     ("json→sse", lambda: stream_from_response(body, src, tgt))):
        try:
            with time_limit(10):
                res = fn()
        except ALLOWED:
            outcome = "rejected"
            continue
        except Exception as e:  # noqa: BLE001
            return "exception", Finding(f"response ({name})", type(e).__name__, direction,
                                        f"{_where(e)}: {str(e)[:160]}", repro)
        if name == "json" and ((src is not tgt and not _serializable(res.body)) or not (200 <= res.status < 600)):
            return "bad", Finding(f"response ({name})", "bad result", direction, f"status {res.status}", repro)
        if name == "json→sse":
            bad = terminal_ok(tgt, res[0], False)
            if bad:
                return "no terminal", Finding("response (json→sse)", "no terminal", direction, bad, repro)
    dt = time.perf_counter() - t0
    if dt > CASE_LIMIT:
        return "slow", Finding("response", "slow", direction, f"{dt:.1f} s", repro)
    return outcome, None


# ----------------------------------------------------------------------------- stream case builder
def _error_frame(p: Protocol) -> bytes:
    if p is G:
        return b'data: {"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}\r\n\r\n'
    if p is A:
        return b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    if p is C:
        return b'data: {"error":{"message":"upstream exploded","type":"server_error","code":502}}\n\n'
    return (b'event: error\ndata: {"type":"error","code":"server_error","message":"boom","param":null,'
            b'"sequence_number":99}\n\n')


GARBAGE = [
    b"garbage line without a field\n\n", b"data: {\"truncated\": \n\n", b"data: not json at all\n\n",
    b": a comment\n\n", b"event: mystery\ndata: {\"type\":\"mystery.event\",\"x\":1}\n\n",
    b"data: {\"type\":\"response.unknown_thing\",\"sequence_number\":5}\n\n", b"data: [DONE]\n\n",
    b"data: null\n\n", b"data: 42\n\n", b"data: []\n\n", b"data: \"str\"\n\n", b"event: ping\ndata: {\"type\":\"ping\"}\n\n",
    b"\xff\xfe\xfd invalid utf-8\n\n", b"data: {\"a\":\"\xc3\x28\"}\n\n", b"event: content_block_delta\n\n",
    b"data:\n\n", b"\n\n\n\n", b"retry: 1000\n\n", b"id: 5\n\n",
]


def build_stream(data: st.DataObject, seeds: dict, src: Protocol) -> tuple[bytes, list[bytes], str]:
    frames = list(data.draw(st.sampled_from(seeds["streams"][src]), label="seed stream"))
    ops: list[str] = []
    for _ in range(data.draw(st.integers(1, 4), label="ops")):
        op = data.draw(st.sampled_from(["garbage", "truncate", "unknown", "error", "mutate", "delete", "dup",
                                        "cut-tail", "crlf"]), label="op")
        i = data.draw(st.integers(0, max(0, len(frames))), label="at")
        if op == "garbage":
            frames.insert(i, data.draw(st.sampled_from(GARBAGE) | st.binary(max_size=40).map(lambda b: b + b"\n\n"),
                                       label="garbage"))
        elif op == "truncate" and frames:
            j = min(i, len(frames) - 1)
            f = frames[j]
            frames[j] = f[: data.draw(st.integers(0, max(0, len(f) - 1)), label="cut")] + b"\n\n"
        elif op == "unknown":
            frames.insert(i, b'event: x.unknown\ndata: {"type":"x.unknown","sequence_number":3,"index":0}\n\n')
        elif op == "error":
            frames.insert(i, _error_frame(data.draw(st.sampled_from(PROTOCOLS), label="error proto")))
        elif op == "mutate" and frames:
            j = min(i, len(frames) - 1)
            f = frames[j]
            lines = f.split(b"\n")
            for k, ln in enumerate(lines):
                if ln.startswith(b"data:"):
                    try:
                        obj = orjson.loads(ln[5:])
                    except orjson.JSONDecodeError:
                        break
                    obj2, _ = mutate(data, obj, 2)
                    try:
                        lines[k] = b"data: " + orjson.dumps(obj2)
                    except TypeError:
                        lines[k] = b"data: " + json.dumps(obj2).encode("utf-8", "surrogatepass")
                    break
            frames[j] = b"\n".join(lines)
        elif op == "delete" and frames:
            frames.pop(min(i, len(frames) - 1))
        elif op == "dup" and frames:
            j = min(i, len(frames) - 1)
            frames.insert(j, frames[j])
        elif op == "cut-tail" and frames:
            frames = frames[: max(1, i)]
        elif op == "crlf" and frames:
            j = min(i, len(frames) - 1)
            frames[j] = frames[j].replace(b"\n", data.draw(st.sampled_from([b"\r\n", b"\r"]), label="eol"))
        ops.append(f"{op}@{i}")
    raw = b"".join(frames)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(raw)), max_size=6), label="cuts")))
    chunks = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
    return raw, chunks, ", ".join(ops)


# ----------------------------------------------------------------------------- core campaign
def _settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck), derandomize=False)


def _repro_body(body: Any) -> str:
    try:
        s = json.dumps(body, ensure_ascii=True, default=str)
    except (ValueError, RecursionError):
        s = repr(body)
    if len(s) > 600:
        s = s[:300] + f" …<{len(s)} chars>… " + s[-200:]
    return s


def run_requests(n: int, seeds: dict, tally: Tally) -> None:
    @_settings(n)
    @given(st.data())
    def one(data):
        src = data.draw(st.sampled_from(PROTOCOLS), label="src")
        tgt = data.draw(st.sampled_from([p for p in PROTOCOLS if p is not src]), label="tgt")
        mode = data.draw(st.sampled_from(["mutate", "mutate", "mutate", "wrong-protocol", "whole", "deep-schema"]),
                         label="mode")
        if mode == "deep-schema":
            d = data.draw(st.sampled_from([100, 254, 255, 300, 600, 1000]), label="depth")
            body = copy.deepcopy(BUILTIN_REQUESTS[src][0])
            schema = {"type": "object", "properties": {"p": deep(d, "dict")}}
            if src is C:
                body["tools"][0]["function"]["parameters"] = schema
            elif src is G:
                body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] = schema
            elif src is R:
                body["tools"][0]["parameters"] = schema
            else:
                body["tools"][0]["input_schema"] = schema
            ops = [f"tool schema nested {d} deep"]
        elif mode == "wrong-protocol":
            other = data.draw(st.sampled_from([p for p in PROTOCOLS if p is not src]), label="from")
            body = data.draw(st.sampled_from(seeds["requests"][other]), label="seed")
            ops = [f"a {SHORT[other]} body"]
        elif mode == "whole":
            body = data.draw(_hostile, label="body")
            ops = ["whole body"]
        else:
            seed = data.draw(st.sampled_from(seeds["requests"][src]), label="seed")
            body, ops = mutate(data, seed)
        repro = f"translate_request({_repro_body(body)}, {src.value!r}, {tgt.value!r})  # {'; '.join(ops)}"
        t0 = time.perf_counter()
        outcome, f = check_request(body, src, tgt, repro)
        tally.add("request", outcome, time.perf_counter() - t0)
        if f:
            tally.find(f)

    one()


def run_streams(n: int, seeds: dict, tally: Tally) -> None:
    @_settings(n)
    @given(st.data())
    def one(data):
        src = data.draw(st.sampled_from(PROTOCOLS), label="src")
        tgt = data.draw(st.sampled_from(PROTOCOLS), label="tgt")
        raw, chunks, ops = build_stream(data, seeds, src)
        repro = (f"t = StreamTranslator({src.value!r}, {tgt.value!r}); t.feed(RAW) + t.close()  # {ops}; "
                 f"RAW = {raw[:700]!r}{'…' if len(raw) > 700 else ''} ({len(raw)} bytes)")
        t0 = time.perf_counter()
        outcome, f = check_stream(raw, chunks, src, tgt, repro)
        tally.add("stream", outcome, time.perf_counter() - t0)
        if f:
            f.data = {"src": src.value, "tgt": tgt.value, "raw": raw.decode("latin-1"),
                      "chunks": [len(c) for c in chunks]}
            tally.find(f)

    one()


def run_responses(n: int, seeds: dict, tally: Tally) -> None:
    @_settings(n)
    @given(st.data())
    def one(data):
        src = data.draw(st.sampled_from(PROTOCOLS), label="src")
        tgt = data.draw(st.sampled_from(PROTOCOLS), label="tgt")
        seed = data.draw(st.sampled_from(seeds["bodies"][src]), label="seed")
        body, ops = mutate(data, seed)
        if not isinstance(body, dict):
            body = {"not": body}
        repro = f"translate_response_result({_repro_body(body)}, {src.value!r}, {tgt.value!r})  # {'; '.join(ops)}"
        t0 = time.perf_counter()
        outcome, f = check_response(body, src, tgt, repro)
        tally.add("response", outcome, time.perf_counter() - t0)
        if f:
            tally.find(f)

    one()


# ----------------------------------------------------------------------------- through mitmdump
PATHS = {C: "/v1/chat/completions", R: "/v1/responses", A: "/v1/messages"}


def routes_toml(upstream_url: str) -> str:
    out = []
    for p in PROXY_PROTOCOLS:
        out.append(f'[[routes]]\nname = "to-{SHORT[p]}"\nmatch = {{ path = "/to-{SHORT[p]}/*" }}\n'
                   f'target = {{ protocol = "{p.value}", base_url = "{upstream_url}", '
                   f'api_key_env = "PROXAI_FUZZ_KEY" }}\n')
    return "\n".join(out)


class MitmRig:
    """One mitmdump (reverse mode, path-routed to every protocol) in front of the fake upstream."""

    def __init__(self, save: bool = False):
        from tests.fake_upstream import FakeUpstream
        from tests.mitm_harness import Mitmdump

        self.up = FakeUpstream().start()
        import tempfile

        self._tmp = tempfile.TemporaryDirectory(prefix="proxai-fuzz-")
        routes = Path(self._tmp.name) / "routes.toml"
        routes.write_text(routes_toml(self.up.url))
        self.m = Mitmdump(mode=f"reverse:{self.up.url}", options={"proxai_config": str(routes)},
                          env={"PROXAI_FUZZ_KEY": "sk-fuzz-upstream-key-000"}, save=save)
        self.m.start()
        import httpx2

        self.http = httpx2.Client(base_url=self.m.url, timeout=20)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.http.close()
        self.m.cleanup()
        self.up.stop()
        self._tmp.cleanup()

    def alive(self) -> bool:
        return self.m.proc is not None and self.m.proc.poll() is None


def _judge(client: Protocol, status: int, ctype: str, content: bytes) -> str | None:
    import pydantic
    from tests.sdk import StreamError, accumulate_stream, validate_response

    if status >= 500:
        return f"HTTP {status}: {content[:200]!r}"
    if status >= 400:
        try:
            body = orjson.loads(content)
        except orjson.JSONDecodeError:
            return f"HTTP {status} with a body that is not JSON: {content[:120]!r}"
        err = _native_error(client, body)
        return err
    if "text/event-stream" in ctype:
        try:
            accumulate_stream(client, content)
        except StreamError:
            return None  # a native error event
        except (AssertionError, pydantic.ValidationError, ValueError, KeyError) as e:
            return f"stream not accepted by the SDK accumulator: {type(e).__name__}: {str(e)[:160]}"
        return None
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return f"HTTP {status} body is not JSON: {content[:120]!r}"
    if _native_error(client, body) is None:
        return None
    try:
        validate_response(client, body)
    except pydantic.ValidationError as e:
        return f"HTTP {status} body is neither a native error nor SDK-valid: {str(e)[:160]}"
    return None


def _native_error(client: Protocol, body: Any) -> str | None:
    if client is A:
        if isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict) \
                and isinstance(body["error"].get("message"), str):
            return None
        return f"not an Anthropic error body: {str(body)[:120]}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str):
        return None
    return f"not an OpenAI error body: {str(body)[:120]}"


def raw_client_cases(data: st.DataObject, seeds: dict) -> tuple[Protocol, Protocol, bytes, dict, str]:
    """(client protocol of the path, route target, raw body, headers, description)."""
    client = data.draw(st.sampled_from(PROXY_PROTOCOLS), label="client")
    target = data.draw(st.sampled_from([p for p in PROXY_PROTOCOLS if p is not client]), label="target")
    mode = data.draw(st.sampled_from(["mutated", "mutated", "mutated", "wrong-protocol", "invalid-utf8", "truncated",
                                      "not-json", "not-object", "huge", "deep", "empty", "gzip-garbage"]),
                     label="mode")
    headers = {"content-type": "application/json", "authorization": "Bearer sk-client-fuzz",
               "x-api-key": "sk-client-fuzz"}
    seed = data.draw(st.sampled_from(seeds["requests"][client]), label="seed")
    seed = {**seed, "stream": data.draw(st.booleans(), label="stream")}
    if mode == "mutated":
        body, ops = mutate(data, seed)
        raw = json.dumps(body, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
        desc = "; ".join(ops)
    elif mode == "wrong-protocol":
        other = data.draw(st.sampled_from([p for p in PROXY_PROTOCOLS if p is not client]), label="other")
        raw = orjson.dumps(data.draw(st.sampled_from(seeds["requests"][other]), label="other seed"))
        desc = f"a {SHORT[other]} body"
    elif mode == "invalid-utf8":
        s = orjson.dumps(seed)
        i = data.draw(st.integers(0, len(s) - 1), label="at")
        raw = s[:i] + data.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80", b"\xf8\x88"]),
                                label="bytes") + s[i:]
        desc = f"invalid UTF-8 at byte {i}"
    elif mode == "truncated":
        s = orjson.dumps(seed)
        raw = s[: data.draw(st.integers(0, len(s) - 1), label="cut")]
        desc = "truncated JSON"
    elif mode == "not-json":
        raw = data.draw(st.sampled_from([b"hello", b"<html></html>", b"{'a': 1}", b"\x00\x01\x02", b"NaN",
                                         b"{\"model\": NaN}"]), label="raw")
        desc = "not JSON"
    elif mode == "not-object":
        raw = data.draw(st.sampled_from([b"[]", b"[1,2]", b"null", b"42", b"\"str\"", b"true"]), label="raw")
        desc = "JSON that is not an object"
    elif mode == "huge":
        body = dict(seed)
        body["model"] = seed.get("model", "m")
        big = "B" * data.draw(st.sampled_from([100_000, 2_000_000, 8_000_000]), label="size")
        key = {C: "messages", R: "input", A: "messages"}[client]
        body[key] = [{"role": "user", "content": big}] if client is not R else big
        raw = orjson.dumps(body)
        desc = f"huge body ({len(raw)} bytes)"
    elif mode == "deep":
        d = data.draw(st.sampled_from([100, 254, 255, 600, 1000, 1024, 1100, 20000]), label="depth")
        body = dict(seed)
        if client is C:
            body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"p": deep(d, "dict")}}}}]
        elif client is R:
            body["tools"] = [{"type": "function", "name": "f", "parameters": {
                "type": "object", "properties": {"p": deep(d, "dict")}}}]
        else:
            body["tools"] = [{"name": "f", "input_schema": {"type": "object", "properties": {"p": deep(d, "dict")}}}]
        raw = _deep_json(body, d)
        desc = f"tool schema nested {d} deep"
    elif mode == "empty":
        raw = b""
        desc = "empty body"
    else:
        raw = b"\x1f\x8b\x08\x00garbage"
        headers["content-encoding"] = "gzip"
        desc = "content-encoding gzip with garbage"
    return client, target, raw, headers, f"{mode}: {desc}"


def _deep_json(body: dict, d: int) -> bytes:
    """The body with its tool schema nested ``d`` deep, written as text (json.dumps would recurse)."""
    inner = '{"a":' * d + '"x"' + "}" * d
    tool = body["tools"][0]
    if "input_schema" in tool:
        t = '{"name":"f","input_schema":{"type":"object","properties":{"p":' + inner + "}}}"
    elif "function" in tool:
        t = '{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"p":' + inner + "}}}}"
    else:
        t = '{"type":"function","name":"f","parameters":{"type":"object","properties":{"p":' + inner + "}}}"
    rest = json.dumps({k: v for k, v in body.items() if k != "tools"})
    return (rest[:-1] + ',"tools":[' + t + "]}").encode()


def mitm_client_case(rig: MitmRig, client: Protocol, target: Protocol, raw: bytes, headers: dict,
                     desc: str) -> tuple[str, Finding | None]:
    path = f"/to-{SHORT[target]}{PATHS[client]}"
    direction = f"{SHORT[client]}->{SHORT[target]}"
    log0 = len(rig.m.log)
    t0 = time.perf_counter()
    repro = f"POST {path} ({desc}) body={raw[:400]!r}{'…' if len(raw) > 400 else ''} ({len(raw)} bytes)"
    try:
        r = rig.http.post(path, content=raw, headers=headers)
    except Exception as e:  # noqa: BLE001
        return "transport", Finding("mitm-client", f"transport {type(e).__name__}", direction, str(e)[:160], repro)
    dt = time.perf_counter() - t0
    bad = _judge(client, r.status_code, r.headers.get("content-type", ""), r.content)
    new_log = rig.m.log[log0:]
    if "Traceback" in new_log or "handling failed" in new_log:
        return "traceback", Finding("mitm-client", "traceback in the log", direction,
                                    f"HTTP {r.status_code}; {_exception_line(new_log)}", repro)
    if bad:
        return f"bad {r.status_code}", Finding("mitm-client", f"HTTP {r.status_code}", direction, bad, repro)
    if dt > 20:
        return "slow", Finding("mitm-client", "slow", direction, f"{dt:.1f} s", repro)
    return ("native-error" if r.status_code >= 400 else "translated"), None


def _exception_line(log: str) -> str:
    """The exception that ended the first traceback in a log excerpt (without timestamps)."""
    import re as _re

    lines = log.splitlines()
    for i, ln in enumerate(lines):
        if "Traceback" in ln:
            for ln2 in lines[i + 1:]:
                if _re.match(r"^[A-Za-z_.]+(Error|Exception)\b", ln2.strip()):
                    return ln2.strip()[:200]
    hit = next((ln for ln in lines if "failed" in ln or "Error" in ln), lines[-1] if lines else "")
    return _re.sub(r"^\[[0-9:.]+\](\[[^]]*\])?\s*", "", hit.strip())[:200]


def run_mitm_client(n: int, seeds: dict, tally: Tally, rig: MitmRig, budget_s: float) -> None:
    end = time.monotonic() + budget_s

    @_settings(n)
    @given(st.data())
    def one(data):
        if time.monotonic() > end or not rig.alive():
            return
        client, target, raw, headers, desc = raw_client_cases(data, seeds)
        t0 = time.perf_counter()
        outcome, f = mitm_client_case(rig, client, target, raw, headers, desc)
        tally.add("mitm-client", outcome, time.perf_counter() - t0)
        if f:
            tally.find(f)

    one()


def run_mitm_upstream(n: int, seeds: dict, tally: Tally, rig: MitmRig, budget_s: float) -> None:
    from tests.fake_upstream import Reply

    end = time.monotonic() + budget_s

    @_settings(n)
    @given(st.data())
    def one(data):
        if time.monotonic() > end or not rig.alive():
            return
        client = data.draw(st.sampled_from(PROXY_PROTOCOLS), label="client")
        upstream = data.draw(st.sampled_from([p for p in PROXY_PROTOCOLS if p is not client]), label="upstream")
        stream = data.draw(st.booleans(), label="stream")
        kind = data.draw(st.sampled_from(["sse", "sse", "json", "text"]), label="kind")
        rig.up.reset()
        if kind == "sse":
            raw, _chunks, ops = build_stream(data, seeds, upstream)
            reply = Reply.sse(split_events(raw) or [b"\n\n"])
            desc = f"malformed SSE ({ops})"
        elif kind == "json":
            seed = data.draw(st.sampled_from(seeds["bodies"][upstream]), label="seed")
            body, ops = mutate(data, seed)
            reply = Reply.json(body if isinstance(body, (dict, list, str, int, float, bool, type(None))) else str(body))
            try:
                orjson.dumps(body)
            except TypeError:
                reply = Reply.json({"garbled": True})
            desc = f"malformed JSON ({'; '.join(ops)})"
        else:
            reply = Reply(status=200, headers=[("content-type", data.draw(st.sampled_from(
                ["application/json", "text/event-stream", "text/plain", "text/html"]), label="ctype"))],
                body=data.draw(st.sampled_from([b"", b"oops", b"<html>hi</html>", b"{", b"[1]"]), label="body"))
            desc = "2xx with a body of the wrong kind"
        rig.up.on(PATHS[upstream], reply)
        seed = data.draw(st.sampled_from(BUILTIN_REQUESTS[client]), label="req")
        body = {**seed, "stream": stream}
        path = f"/to-{SHORT[upstream]}{PATHS[client]}"
        log0 = len(rig.m.log)
        repro = f"client {SHORT[client]} (stream={stream}) -> upstream {SHORT[upstream]} answering {desc}"
        try:
            r = rig.http.post(path, content=orjson.dumps(body),
                              headers={"content-type": "application/json", "authorization": "Bearer sk-c",
                                       "x-api-key": "sk-c"})
        except Exception as e:  # noqa: BLE001
            tally.add("mitm-upstream", "transport")
            tally.find(Finding("mitm-upstream", f"transport {type(e).__name__}", f"{SHORT[client]}<-{SHORT[upstream]}",
                               str(e)[:160], repro))
            return
        bad = _judge(client, r.status_code, r.headers.get("content-type", ""), r.content)
        # an upstream that sent an error (event) or garbage gets a native error with a 4xx/5xx status
        if bad and r.status_code >= 400 and _native_error(client, _loads(r.content)) is None:
            bad = None
        new_log = rig.m.log[log0:]
        if "Traceback" in new_log:
            tally.add("mitm-upstream", "traceback")
            tally.find(Finding("mitm-upstream", "traceback in the log", f"{SHORT[client]}<-{SHORT[upstream]}",
                               _exception_line(new_log), repro))
            return
        if bad:
            tally.add("mitm-upstream", f"bad {r.status_code}")
            tally.find(Finding("mitm-upstream", f"HTTP {r.status_code}", f"{SHORT[client]}<-{SHORT[upstream]}", bad,
                               repro))
            return
        tally.add("mitm-upstream", "native-error" if r.status_code >= 400 or b"error" in r.content[-400:] else "ok")

    one()


def _loads(b: bytes) -> Any:
    try:
        return orjson.loads(b)
    except orjson.JSONDecodeError:
        return None


# ----------------------------------------------------------------------------- report
def report(tally: Tally, seconds: float, scale: float) -> str:
    total = sum(tally.cases.values())
    uniq = tally.unique()
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `uv run python benchmarks/fuzz_campaign.py"
             f"{'' if scale == 1 else f' --scale {scale}'}`: **{total} generated cases** in {seconds:.0f} s, "
             f"**{len(tally.findings)} findings** ({len(uniq)} distinct).", "",
             "| category | cases | outcomes | slowest case |", "|---|---|---|---|"]
    for cat, k in tally.cases.items():
        outs = ", ".join(f"{o.split(':', 1)[1]} {v}" for o, v in sorted(tally.outcomes.items()) if o.startswith(cat + ":"))
        lines.append(f"| {cat} | {k} | {outs} | {tally.max_seconds.get(cat, 0):.2f} s |")
    lines += ["", "Outcomes: `ok`/`translated` = a result (SDK-valid through mitmdump), `rejected`/`native-error` = "
              "`TranslationError`/`ValueError` in the core or the client protocol's native error through mitmdump, "
              "`error-frame` = the stream ended with the client's native error event. Everything else is a finding.",
              ""]
    if uniq:
        lines += ["Distinct findings (one reproducer each; full list printed by the script):", ""]
        for _sig, fs in sorted(uniq.items(), key=lambda kv: -len(kv[1])):
            f = fs[0]
            tag = f" — known: `{known(f)}`" if known(f) else " — **new**"
            lines.append(f"- **{f.category} / {f.kind}** ({f.direction}, {len(fs)}×){tag}: {_md(f.message)}  ")
            lines.append(f"  reproducer: `{_md(f.repro[:500])}`")
        lines += ["", "Known findings (reported with a minimal reproducer; see tests/test_fuzz.py's xfails):", ""]
        for name, _pred, why in KNOWN_FINDINGS:
            fixed = f" **Fixed**: {_md(FIXED_FINDINGS[name])}." if name in FIXED_FINDINGS else ""
            lines.append(f"- `{name}`: {_md(why)}.{fixed}")
    else:
        lines.append("No findings.")
    return "\n".join(lines)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("`", "'").replace("\n", " ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every case count (1.0: ≥ 10,000 cases)")
    ap.add_argument("--no-mitm", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--findings", default=None, help="write every finding with its exact input (JSON lines)")
    args = ap.parse_args()
    s = args.scale
    counts = {"request": int(4000 * s), "stream": int(3500 * s), "response": int(2000 * s),
              "mitm-client": int(1200 * s), "mitm-upstream": int(400 * s)}
    seeds = load_seeds()
    tally = Tally()
    t0 = time.perf_counter()
    for name, fn in (("request", run_requests), ("stream", run_streams), ("response", run_responses)):
        t1 = time.perf_counter()
        fn(counts[name], seeds, tally)
        print(f"{name}: {tally.cases[name]} cases, {sum(f.category.startswith(name) for f in tally.findings)} "
              f"findings, {time.perf_counter() - t1:.0f} s", flush=True)
    if not args.no_mitm:
        rig = MitmRig()
        try:
            t1 = time.perf_counter()
            run_mitm_client(counts["mitm-client"], seeds, tally, rig, budget_s=900 * s + 60)
            print(f"mitm-client: {tally.cases['mitm-client']} cases, "
                  f"{sum(f.category == 'mitm-client' for f in tally.findings)} findings, "
                  f"{time.perf_counter() - t1:.0f} s", flush=True)
            t1 = time.perf_counter()
            run_mitm_upstream(counts["mitm-upstream"], seeds, tally, rig, budget_s=400 * s + 60)
            print(f"mitm-upstream: {tally.cases['mitm-upstream']} cases, "
                  f"{sum(f.category == 'mitm-upstream' for f in tally.findings)} findings, "
                  f"{time.perf_counter() - t1:.0f} s", flush=True)
            if not rig.alive():
                tally.find(Finding("mitm", "mitmdump died", "-", rig.m.log[-500:], "see the log"))
        finally:
            rig.close()
    dt = time.perf_counter() - t0
    text = report(tally, dt, s)
    print()
    print(text)
    print("\nAll findings:")
    for f in tally.findings:
        print(f"- {f.category} {f.kind} {f.direction}: {f.message}\n    {f.repro[:1500]}")
    if args.findings:
        with open(args.findings, "w") as fh:
            for f in tally.findings:
                fh.write(json.dumps({"category": f.category, "kind": f.kind, "direction": f.direction,
                                     "message": f.message, "repro": f.repro, "data": f.data}, default=str) + "\n")
    if not args.no_write and s >= 1.0:
        write_section(ROOT / "docs" / "conformance.md", "fuzz",
                      "## Fuzz and fault campaign\n\n" + text, "Conformance on real traffic")
        print("wrote the fuzz section of docs/conformance.md")


if __name__ == "__main__":
    main()
