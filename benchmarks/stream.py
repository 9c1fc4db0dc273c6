"""Stream translation cost per upstream event, every direction among the registry's protocols, side by side with the orjson floor
and the peers, in one run; and the SSE reader on one long event arriving in many reads.

Run by hand (prints markdown and, with --write, updates docs/performance.md):

    bash benchmarks/setup_peers.sh          # once: a separate venv with the peers + this project
    benchmarks/.venv-peers/bin/python benchmarks/stream.py [--reps 21] [--write]

(``uv run python benchmarks/stream.py`` works too: the peers' columns then say "not installed".)

Timed unit (same as ../shared/notes/peer-benchmark.md): the raw SSE bytes of one upstream event in,
client SSE bytes out (JSON decode, translation, JSON encode and SSE framing included), whole stream
divided by the number of upstream events. Cases of one stream interleaved, timed in this process's
CPU time (time.process_time_ns: other work on a shared machine does not count); × = the median of
the per-round ratios to the floor. The floor "bare orjson" is orjson decode + encode + framing of
the same payloads.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
FIX = ROOT.parent / "shared" / "fixtures"

import orjson  # noqa: E402
from benchmarks._common import machine, write_section  # noqa: E402

from proxai_core import Protocol, StreamTranslator  # noqa: E402
from proxai_core.codecs import all_codecs, get  # noqa: E402
from proxai_core.eventstream import EventStreamReader  # noqa: E402

C, R, A, G = Protocol.CHAT, Protocol.RESPONSES, Protocol.ANTHROPIC, Protocol.GEMINI
B, V, BI = Protocol.BEDROCK_CONVERSE, Protocol.VERTEX_ANTHROPIC, Protocol.BEDROCK_INVOKE
#: every protocol the codec registry serves
PROTOCOLS = tuple(c.protocol for c in all_codecs())

PEER_FIXTURES = {
    "C-text": "chat/mirascope__python_tests_e2e_output_cassettes_test_max_tokens_openai_gpt_4o_completions_stream__i0.sse",
    "C-tools": "chat/mirascope__python_tests_e2e_output_cassettes_test_call_with_tools_openai_gpt_4o_completions_stream__i0.sse",
    "C-refusal": "chat/mirascope__python_tests_e2e_output_cassettes_test_refusal_openai_gpt_4o_completions_stream__i0.sse",
}
#: per source: a text stream and a tool-call stream (real recordings)
STREAMS = {
    C: {"text": PEER_FIXTURES["C-text"], "tools": PEER_FIXTURES["C-tools"]},
    A: {"text": "anthropic/mirascope__python_tests_e2e_output_cassettes_test_max_tokens_anthropic_claude_sonnet_4_0_stream__i0.sse",
        "tools": "anthropic/mirascope__python_tests_e2e_output_cassettes_test_call_with_tools_anthropic_claude_sonnet_4_0_stream__i0.sse"},
    R: {"text": "responses/mirascope__python_tests_e2e_output_cassettes_test_max_tokens_openai_gpt_4o_responses_stream__i0.sse",
        "tools": "responses/mirascope__python_tests_e2e_output_cassettes_test_call_with_tools_openai_gpt_4o_responses_stream__i0.sse"},
    G: {"text": "gemini/js-genai__test_system_recordings_Chats_Tests_sendMessage_Google_AI_with_config_stream__i0.sse",
        "tools": "gemini/js-genai__test_system_recordings_MCP_related_client_Tests_generateContentStream_with_"
                 "streamFunctionCallingArguments_enabled_Vertex_AI_should_stream_arguments_when_afc_is_disabled_"
                 "explicitly__i0.sse"},
    B: {"text": "bedrock-converse/pydantic-ai__tests_models_cassettes_test_bedrock_test_bedrock_model_stream__i0.eventstream",
        "tools": "bedrock-converse/pydantic-ai__tests_models_cassettes_test_bedrock_test_bedrock_model_iter_stream__i0"
                 ".eventstream"},
    V: {"text": "vertex-anthropic/fantasy__providertests_testdata_TestGoogleCommon_vertex-claude-3-7-sonnet_simple_"
                "streaming__i0.sse",
        "tools": "vertex-anthropic/fantasy__providertests_testdata_TestGoogleCommon_vertex-claude-3-7-sonnet_tool_"
                 "streaming__i0.sse"},
    BI: {"text": "bedrock-invoke/fantasy__providertests_testdata_TestBedrockCommon_bedrock-anthropic-claude-haiku-4-5_"
                 "simple_streaming__i0.eventstream",
         "tools": "bedrock-invoke/fantasy__providertests_testdata_TestBedrockCommon_bedrock-anthropic-claude-haiku-4-5_"
                  "tool_streaming__i0.eventstream"},
}
DIRECTIONS = [(s, d) for s in PROTOCOLS for d in PROTOCOLS if s is not d]
#: a Gemini client's streaming path (model and method live in the URL; ?alt=sse asks for SSE framing)
GEMINI_CLIENT_PATH = "/v1beta/models/m:streamGenerateContent?alt=sse"
LF_FORMAT = {C: "openai_chat_completions", R: "open_responses", A: "anthropic_messages"}


def stream_path(src: Protocol, rel: str) -> str | None:
    """The recorded request path of a stream whose protocol keeps model and method in the URL."""
    url = FIX / rel.removesuffix(".sse").removesuffix(".eventstream")
    url = url.with_name(url.name + ".url.txt")
    return url.read_text().strip() if get(src).wire.endpoints.parse_path is not None and url.exists() else None


def split_events(raw: bytes) -> list[bytes]:
    """The raw bytes of each event (what one upstream read could deliver): SSE events, or the frames of
    an AWS event stream."""
    if raw[:1] == b"\x00":  # an event stream: each frame says its own length
        out, at = [], 0
        while at + 4 <= len(raw):
            size = int.from_bytes(raw[at:at + 4], "big")
            out.append(raw[at:at + size])
            at += size
        return out
    raw = raw.replace(b"\r\n", b"\n")
    parts = [p + b"\n\n" for p in raw.split(b"\n\n") if p.strip()]
    return parts


def payloads(events: list[bytes]) -> list[str]:
    out = []
    for e in events:
        if e[:1] == b"\x00":  # an event-stream frame: its payload
            out += [f.payload.decode() for f in EventStreamReader().frames(e)]
            continue
        data = [ln[5:].lstrip() for ln in e.decode().split("\n") if ln.startswith("data:")]
        if data:
            out.append("\n".join(data))
    return out


# ----------------------------------------------------------------------------- cases
def case_ours(src, dst, events, path=None):
    # a Gemini source reads its model from the upstream path; a Gemini client gets the framing its path asks for
    if dst is G:
        path, req = GEMINI_CLIENT_PATH, {"contents": []}
    else:
        req = None

    def run():
        t = StreamTranslator(src, dst, req, path=path)
        out = [t.feed(e) for e in events]
        out.append(t.close())
        return out

    return run


def case_bare_orjson(events):
    pl = payloads(events)

    def run():
        out = []
        for p in pl:  # payload extraction is part of an SSE reader's work too
            if p == "[DONE]":
                continue
            out.append(b"data: " + orjson.dumps(orjson.loads(p)) + b"\n\n")
        return out

    return run


def case_bare_json(events):
    pl = payloads(events)

    def run():
        out = []
        for p in pl:
            if p == "[DONE]":
                continue
            out.append(("data: " + json.dumps(json.loads(p)) + "\n\n").encode())
        return out

    return run


def case_litellm(events):
    from litellm.llms.anthropic.messages.adapters.streaming_iterator import AnthropicStreamWrapper
    from litellm.types.utils import ModelResponseStream

    pl = payloads(events)

    def run():
        chunks = (ModelResponseStream(**json.loads(p)) for p in pl if p != "[DONE]")
        w = AnthropicStreamWrapper(completion_stream=chunks, model="gpt-4o")
        return list(w.anthropic_sse_wrapper())

    return run


def case_anyllm(events):
    from any_llm.types.completion import ChatCompletionChunk
    from any_llm.utils.messages_compat import (
        MessageDeltaEvent,
        MessageStopEvent,
        StreamingState,
        chat_completion_chunk_to_message_stream_events,
        close_open_blocks,
    )

    pl = payloads(events)

    def run():
        state = StreamingState()
        out = []
        finish = None
        for p in pl:
            if p == "[DONE]":
                continue
            chunk = ChatCompletionChunk.model_validate(json.loads(p))
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
            for ev in chat_completion_chunk_to_message_stream_events(chunk, state):
                out.append(b"event: " + ev.type.encode() + b"\ndata: " + ev.model_dump_json(exclude_none=True).encode() + b"\n\n")
        for ev in close_open_blocks(state):
            out.append(b"event: " + ev.type.encode() + b"\ndata: " + ev.model_dump_json(exclude_none=True).encode() + b"\n\n")
        try:
            md = MessageDeltaEvent.model_validate({"type": "message_delta", "delta": {"stop_reason": "end_turn" if finish == "stop" else "tool_use"},
                                                   "usage": {"output_tokens": 1}})
            out.append(b"event: message_delta\ndata: " + md.model_dump_json(exclude_none=True).encode() + b"\n\n")
            out.append(b"event: message_stop\ndata: " + MessageStopEvent(type="message_stop").model_dump_json().encode() + b"\n\n")
        except Exception:
            out.append(b'event: message_delta\ndata: {"type":"message_delta"}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n')
        return out

    return run


def case_linguafranca(events, src=C, dst=A):
    import linguafranca as lf

    pl = payloads(events)
    sf, tf = lf.FormatName(LF_FORMAT[src]), lf.FormatName(LF_FORMAT[dst])

    def run():
        dicts = (json.loads(p) for p in pl if p != "[DONE]")
        conv = lf.convert_response_stream_json(dicts, source_format=sf, target_format=tf)
        out = []
        for ev in conv:
            if dst is C:
                out.append(b"data: " + json.dumps(ev).encode() + b"\n\n")
            else:
                out.append(b"event: " + str(ev.get("type")).encode() + b"\ndata: " + json.dumps(ev).encode() + b"\n\n")
        return out

    return run


#: peer -> (module to import, {(source, target): case factory}); a direction it does not offer is absent
PEERS = {
    "linguafranca": ("linguafranca", {(s, d): (lambda ev, s=s, d=d: case_linguafranca(ev, s, d))
                                      for s, d in DIRECTIONS if s in LF_FORMAT and d in LF_FORMAT}),
    "any-llm": ("any_llm", {(C, A): case_anyllm}),
    "LiteLLM": ("litellm", {(C, A): case_litellm}),
}


def peer_cases(events, src, dst, no_peers: bool) -> tuple[dict, dict[str, str]]:
    """Runnable peer cases for this direction, and a note for each peer that has none."""
    cases, notes = {}, {}
    for name, (module, offers) in PEERS.items():
        if no_peers:
            notes[name] = "not run"
            continue
        try:
            __import__(module)
        except ImportError:
            notes[name] = "not installed"
            continue
        mk = offers.get((src, dst))
        if mk is None:
            notes[name] = "no such converter"
            continue
        try:
            fn = mk(events)
            fn()
            cases[name] = fn
        except Exception as e:  # a peer that cannot run is reported, not hidden
            notes[name] = f"fails: {type(e).__name__}"
    return cases, notes


# ----------------------------------------------------------------------------- timing
def bench(cases: dict[str, callable], units: int, reps: int, rep_ms: float) -> dict[str, list[float]]:
    for fn in cases.values():  # warm-up
        for _ in range(3):
            fn()
    calls = {}
    for name, fn in cases.items():
        t0 = time.perf_counter()
        k = 0
        while time.perf_counter() - t0 < rep_ms / 1000:
            fn()
            k += 1
        calls[name] = max(1, k)
    gc.collect()
    gc.freeze()
    res: dict[str, list[float]] = {k: [] for k in cases}
    names = list(cases)
    for r in range(reps):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            fn, k = cases[name], calls[name]
            gc.collect()
            t0 = time.process_time_ns()
            for _ in range(k):
                fn()
            dt = time.process_time_ns() - t0
            res[name].append(dt / k / units / 1000.0)
    gc.unfreeze()
    return res


def ratio(v: list[float], base: list[float]) -> float:
    """Median of the per-round ratios: both ran in the same round, so load that comes and goes on a
    shared machine (a busy sibling CPU slows CPU time too) mostly cancels out."""
    return statistics.median(a / b for a, b in zip(v, base, strict=True))


def fmt(v: list[float], base: list[float]) -> str:
    med = statistics.median(v)
    return f"**{med:.1f}** ({min(v):.1f}–{max(v):.1f}) ×{ratio(v, base):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--rep-ms", type=float, default=40)
    ap.add_argument("--write", action="store_true", help="update docs/performance.md")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--source", action="append", default=[], help="only these sources (protocol value; repeatable)")
    ap.add_argument("--target", action="append", default=[], help="only these targets (protocol value; repeatable)")
    ap.add_argument("--streams-only", action="store_true", help="skip the long-event and memory sections")
    args = ap.parse_args()
    if not FIX.is_dir():
        sys.exit("../shared/fixtures is required")
    peer_names = list(PEERS)
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `{Path(sys.executable).name} "
             f"benchmarks/stream.py --reps {args.reps}` on {machine()}{peer_versions()}. µs (CPU) per upstream event: median (min–max); "
             "× = median of the per-round ratios to bare orjson (decode + encode + framing of the same "
             "payloads) — target ≤ 3 from every source.",
             "\n### Stream translation, every direction, with the peers on the same streams\n",
             "| source → target, stream | events | bare orjson | ProxAI | " + " | ".join(peer_names) + " |",
             "|---|---|---|---|" + "---|" * len(peer_names)]
    worst: dict[Protocol, float] = {}

    def wanted(src: Protocol, dst: Protocol) -> bool:
        return (not args.source or src.value in args.source) and (not args.target or dst.value in args.target)

    for src, dst in DIRECTIONS:
        if not wanted(src, dst):
            continue
        for kind, rel in STREAMS[src].items():
            events = split_events((FIX / rel).read_bytes())
            units = len([p for p in payloads(events) if p != "[DONE]"])
            cases = {"bare": case_bare_orjson(events), "ProxAI": case_ours(src, dst, events, stream_path(src, rel))}
            peers, notes = peer_cases(events, src, dst, args.no_peers)
            cases.update(peers)
            res = bench(cases, units, args.reps, args.rep_ms)
            base = res["bare"]
            worst[src] = max(worst.get(src, 0.0), ratio(res["ProxAI"], base))
            cells = [fmt(res[p], base) if p in res else notes[p] for p in peer_names]
            lines.append(f"| {src.value} → {dst.value}, {kind} | {units} | **{statistics.median(base):.1f}** | "
                         f"{fmt(res['ProxAI'], base)} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    lines.append("\nWorst ratio to the floor per source: " + ", ".join(f"{s.value} {w:.2f}" for s, w in worst.items())
                 + ".")
    lines.append("\n### Same protocol (pass-through: bytes forwarded, StopInfo still observed)\n")
    lines.append("| stream | events | bare orjson | ProxAI |")
    lines.append("|---|---|---|---|")
    for src in PROTOCOLS:
        if not wanted(src, src):
            continue
        rel = STREAMS[src]["tools"]
        events = split_events((FIX / rel).read_bytes())
        units = len([p for p in payloads(events) if p != "[DONE]"])
        res = bench({"bare": case_bare_orjson(events), "ProxAI": case_ours(src, src, events, stream_path(src, rel))},
                    units, args.reps, args.rep_ms)
        lines.append(f"| {src.value}, tools | {units} | **{statistics.median(res['bare']):.1f}** | "
                     f"{fmt(res['ProxAI'], res['bare'])} |")
        print(lines[-1], flush=True)
    if not args.streams_only:
        lines.append(sse_long_event(args.reps))
    if not args.no_memory and not args.streams_only:
        lines.append(memory())
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "performance.md", "stream", text, "Performance")


def peer_versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    got = []
    for dist in ("orjson", "martian-linguafranca", "any-llm-sdk", "litellm"):
        try:
            got.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            got.append(f"{dist} not installed")
    return "; " + ", ".join(got)


# ----------------------------------------------------------------------------- SSE: one long event
def sse_long_event(reps: int, size: int = 1 << 20, read: int = 1024) -> str:
    """A 1 MB event (one Chat chunk whose text delta is 1 MB) in 1 KB reads vs the same event in one
    read: the SSE reader alone (events; raw bytes, as a pass-through reads), and the whole translator."""
    from proxai_core.sse import SSEReader

    text = ("Grüße, ünïcode and plain words; " * (size // 32 + 1))[:size]
    event = b"data: " + orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                                      "model": "m", "choices": [{"index": 0, "delta": {"content": text},
                                                                 "finish_reason": None}]}) + b"\n\n"
    reads = [event[i:i + read] for i in range(0, len(event), read)]

    def reader(chunks, raw):
        def run():
            r = SSEReader()
            if raw:
                got = [r.feed_raw(c) for c in chunks]
                got.append(r.close_raw())
            else:
                got = [r.feed(c) for c in chunks]
                got.append(r.close())
            return got
        return run

    def translator(chunks):
        def run():
            t = StreamTranslator(C, A)
            return [t.feed(c) for c in chunks] + [t.close()]
        return run

    lines = ["\n### SSE: one 1 MB event in 1 KB reads\n",
             f"One {len(event) / 1e6:.2f} MB `data:` event (a Chat chunk carrying a 1 MB text delta, non-ASCII "
             f"included) fed in {len(reads)} reads of {read} bytes vs in one read; CPU ms per event, median "
             f"(min–max); ratio = median of the per-round ratios (target ≤ 1.5).\n",
             "| reader | one read | 1 KB reads | ratio |", "|---|---|---|---|"]
    for label, one, many in (("SSEReader.feed (events)", reader([event], False), reader(reads, False)),
                             ("SSEReader.feed_raw (events + raw bytes, pass-through)", reader([event], True),
                              reader(reads, True)),
                             ("StreamTranslator chat → anthropic (whole translation)", translator([event]),
                              translator(reads))):
        res = bench({"one": one, "many": many}, 1, reps, 40)
        ms = {k: [x / 1000 for x in v] for k, v in res.items()}
        lines.append(f"| {label} | {statistics.median(ms['one']):.2f} ({min(ms['one']):.2f}–{max(ms['one']):.2f}) | "
                     f"{statistics.median(ms['many']):.2f} ({min(ms['many']):.2f}–{max(ms['many']):.2f}) | "
                     f"**{ratio(res['many'], res['one']):.2f}** |")
        print(lines[-1], flush=True)
    return "\n".join(lines)


MEMORY_CHILD = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from proxai_core import StreamTranslator
src, dst, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
NL = bytes([10, 10])
HEAD = '{"id":"chatcmpl-m","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
def events():
    yield b"data: " + (HEAD + '"delta":{"role":"assistant"},"finish_reason":null}]}').encode() + NL
    for i in range(n):
        yield b"data: " + (HEAD + '"delta":{"content":"tok%06d "},"finish_reason":null}]}' % i).encode() + NL
    yield b"data: " + (HEAD + '"delta":{},"finish_reason":"stop"}]}').encode() + NL + b"data: [DONE]" + NL
import tracemalloc
t = StreamTranslator(src, dst)
tracemalloc.start()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = 0
batch = []
for e in events():
    batch.append(e)
    if len(batch) == 8:  # a few events per network read
        out += len(t.feed(b"".join(batch)))
        batch = []
out += len(t.feed(b"".join(batch))) + len(t.close())
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"kb": max(after - before, peak // 1024), "text_bytes": n * 10, "out_bytes": out}))
"""


def memory(n: int = 100_000) -> str:
    import subprocess

    lines = ["\n### Memory: a 100k-event stream\n",
             f"A Chat stream of {n:,} text deltas (10 bytes each, {n * 10 / 1e6:.1f} MB of text) translated in a "
             "fresh process, fed 8 events per read; peak memory growth during the translation (the larger of the "
             "ru_maxrss growth and the tracemalloc peak). Target: "
             "under 50 MB beyond the text the target must carry (the Responses terminal snapshot holds the whole "
             "text; the others hold none).\n",
             "| direction | peak growth | text carried | growth beyond the text |", "|---|---|---|---|"]
    for dst in (A, R, C):
        r = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(ROOT / "src"), C.value, dst.value, str(n)],
                           capture_output=True, text=True, check=True)
        d = json.loads(r.stdout)
        carried = d["text_bytes"] if dst is R else 0
        growth = d["kb"] / 1024
        lines.append(f"| {C.value} → {dst.value} | {growth:.1f} MB | {carried / 1e6:.1f} MB | "
                     f"{growth - carried / 1048576:.1f} MB |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
