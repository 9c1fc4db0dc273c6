"""Request translation side by side with LiteLLM, any-llm and martian-linguafranca, in one run.

    bash benchmarks/setup_peers.sh                                    # once
    benchmarks/.venv-peers/bin/python benchmarks/request_translation.py [--reps 21] [--write]

Timed unit (as in ../shared/notes/peer-benchmark.md §2): the raw bytes of one client request in,
the upstream request's bytes out — ``orjson.loads``, the translation, ``orjson.dumps`` (peers' own
objects are dumped with their ``model_dump``/``default=str``) — per request. Median over repetitions
(min–max), cases of one request interleaved, GC collected outside the timing; × = ratio to the bare
orjson decode + encode of the same body.

Directions and peer entry points (landscape.md §4.1/§4.2):

- Anthropic Messages → Chat: ProxAI ``translate_request``; LiteLLM
  ``LiteLLMAnthropicMessagesAdapter().translate_anthropic_to_openai``; any-llm
  ``messages_params_to_completion_params(MessagesParams(**body))`` (SDK kwargs, not a wire body:
  ``model_id``); linguafranca ``convert_request_json``.
- Chat → Anthropic Messages: ProxAI; LiteLLM ``AnthropicConfig().map_openai_params`` +
  ``transform_request`` (what its Anthropic provider runs); any-llm ``anthropic.utils._convert_params``
  (``CompletionParams``; private, what its Anthropic provider runs); linguafranca.
- Responses → Chat: ProxAI; LiteLLM ``LiteLLMCompletionResponsesConfig
  .transform_responses_api_request_to_chat_completion_request``; linguafranca (``open_responses``).
- Anthropic Messages → Responses: ProxAI; LiteLLM ``LiteLLMAnthropicToResponsesAPIAdapter
  .translate_request``; linguafranca. (any-llm 1.40.2 has no public M→R request converter.)
- Chat → Responses and Responses → Anthropic Messages: ProxAI; linguafranca (the other peers offer
  no request converter for these).
- Gemini generateContent ↔ each of the others: ProxAI only (no peer offers a Gemini request converter
  here). A Gemini request keeps its model and stream flag in the URL: the Gemini source is translated with
  the path of a streaming call (``translate_request(..., path=...)``); its built-in request is the
  Anthropic one translated into Gemini by ProxAI. The protocols come from the codec registry.

Each direction runs on the built-in 6-turn request, on a 1,000-message history of the same turns
(what a long agent session sends), and on a real recorded request where ../shared/fixtures has one.
Peers that are not installed (plain ``uv run``) say so in their column.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# keep this folder off sys.path: a script here must never shadow a library a peer imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import orjson  # noqa: E402
from benchmarks._common import machine, write_section  # noqa: E402

from proxai_core import Protocol, translate_request  # noqa: E402
from proxai_core.codecs import all_codecs  # noqa: E402

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
#: every protocol the codec registry serves
#: the protocols this benchmark has request bodies for (Bedrock Converse is not measured here yet)
PROTOCOLS = tuple(c.protocol for c in all_codecs() if c.protocol is not Protocol.BEDROCK_CONVERSE)
FIX = ROOT.parent / "shared" / "fixtures"

# ----------------------------------------------------------------------------- requests
TOOLS_M = [{"name": "get_weather", "description": "Get the current weather in a given location",
            "input_schema": {"type": "object", "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}},
           {"name": "get_time", "description": "Current local time of a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
M_REQUEST = {
    "model": "claude-sonnet-4-5", "max_tokens": 1024, "temperature": 0.7, "stream": True,
    "system": [{"type": "text", "text": "You are a helpful travel assistant. Answer briefly and use the tools "
                                        "when the user asks about the weather or the time."}],
    "metadata": {"user_id": "user-1234"},
    "tools": TOOLS_M, "tool_choice": {"type": "auto"},
    "messages": [
        {"role": "user", "content": "I'm flying to Paris tomorrow. What's the weather like there right now?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check the current weather in Paris for you."},
            {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
             "input": {"location": "Paris, France", "unit": "celsius"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
             "content": "15 degrees celsius, light rain, wind 20 km/h from the west"}]},
        {"role": "assistant", "content": "It's 15 °C with light rain in Paris. Pack an umbrella!"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks. And what time is it there and in Tokyo?"}]},
    ],
}
TOOLS_C = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}} for t in TOOLS_M]
C_REQUEST = {
    "model": "gpt-4o", "max_tokens": 1024, "temperature": 0.7, "stream": True,
    "stream_options": {"include_usage": True}, "user": "user-1234", "tools": TOOLS_C, "tool_choice": "auto",
    "messages": [
        {"role": "system", "content": M_REQUEST["system"][0]["text"]},
        {"role": "user", "content": M_REQUEST["messages"][0]["content"]},
        {"role": "assistant", "content": "Let me check the current weather in Paris for you.", "tool_calls": [
            {"id": "call_Wx3kq8Paris", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris, France\",\"unit\":\"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_Wx3kq8Paris",
         "content": "15 degrees celsius, light rain, wind 20 km/h from the west"},
        {"role": "assistant", "content": "It's 15 °C with light rain in Paris. Pack an umbrella!"},
        {"role": "user", "content": "Thanks. And what time is it there and in Tokyo?"},
    ],
}
R_REQUEST = {
    "model": "gpt-5", "instructions": M_REQUEST["system"][0]["text"], "max_output_tokens": 1024, "stream": True,
    "tools": [{"type": "function", "name": t["name"], "description": t["description"],
               "parameters": t["input_schema"]} for t in TOOLS_M], "tool_choice": "auto",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": M_REQUEST["messages"][0]["content"]}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Let me check the current weather in Paris for you."}]},
        {"type": "function_call", "call_id": "call_Wx3kq8Paris", "name": "get_weather",
         "arguments": "{\"location\":\"Paris, France\",\"unit\":\"celsius\"}"},
        {"type": "function_call_output", "call_id": "call_Wx3kq8Paris",
         "output": "15 degrees celsius, light rain, wind 20 km/h from the west"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "It's 15 °C with light rain in Paris. Pack an umbrella!"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Thanks. And what time is it there and in Tokyo?"}]},
    ],
}
#: the URL of a streaming Gemini call (model and method live there, not in the body)
G_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
#: the built-in conversation as a Gemini client sends it
G_REQUEST = translate_request(M_REQUEST, A, G)


def history_key(proto: Protocol) -> str:
    return {R: "input", G: "contents"}.get(proto, "messages")


def history(src: Protocol, n: int = 1000) -> dict:
    """The built-in request of ``src`` with ``n`` messages: its turns (user question, assistant tool
    call, tool result, assistant answer) repeated with fresh tool-call ids, ending on a user turn."""
    body = orjson.loads(orjson.dumps(BODIES[src]))
    key = history_key(src)
    lead = [m for m in body[key] if m.get("role") == "system"]
    turn = [m for m in body[key] if m.get("role") != "system"]
    first_user, last_user = turn[0], turn[-1]
    out = list(lead)
    i = 0
    while len(out) + 1 < n + len(lead):
        rep = orjson.dumps(turn[:-1]).replace(b"Wx3kq8Paris", b"Wx3kq8P%04d" % i).replace(
            b"toolu_01A09q90qw90lq917835lq9", b"toolu_01A09q90qw90lq91783%04d" % i)
        out.extend(orjson.loads(rep)[: n + len(lead) - 1 - len(out)])
        i += 1
    if out[-1].get("role") == "user" or out[-1] is first_user:
        out.pop()
    out.append(last_user)
    body[key] = out
    return body


#: real recorded requests (../shared/fixtures), when present
REAL = {
    A: "anthropic/mirascope__python_tests_e2e_output_cassettes_test_call_with_tools_anthropic_claude_sonnet_4_0_stream__i0.request.json",
    C: "chat/mirascope__python_tests_e2e_output_cassettes_test_call_with_tools_openai_gpt_4o_completions_stream__i0.request.json",
    G: "gemini/mirascope__python_tests_e2e_output_cassettes_test_call_with_tools_google_gemini_2_5_flash_stream__i0.request.json",
}


def request_path(src: Protocol, rel: str | None) -> str | None:
    """The request path to translate with: the recording's own (``.url.txt``) or a streaming call's."""
    if src is not G:
        return None
    if rel:
        url = FIX / rel.replace(".request.json", ".url.txt")
        if url.exists():
            return url.read_text().strip()
    return G_PATH


# ----------------------------------------------------------------------------- cases
def dumps(obj) -> bytes:
    return orjson.dumps(obj, default=_default)


def _default(o):
    md = getattr(o, "model_dump", None)
    if callable(md):
        return md(exclude_none=True)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def case_bare(raw: bytes):
    return lambda: orjson.dumps(orjson.loads(raw))


def case_ours(raw: bytes, src, dst, path=None):
    return lambda: orjson.dumps(translate_request(orjson.loads(raw), src, dst, path=path))


def case_litellm_m2c(raw: bytes):
    from litellm.llms.anthropic.messages.adapters.transformation import LiteLLMAnthropicMessagesAdapter

    ad = LiteLLMAnthropicMessagesAdapter()
    return lambda: dumps(ad.translate_anthropic_to_openai(orjson.loads(raw))[0])


def case_anyllm_m2c(raw: bytes):
    from any_llm.types.messages import MessagesParams
    from any_llm.utils.messages_compat import messages_params_to_completion_params

    return lambda: dumps(messages_params_to_completion_params(MessagesParams(**orjson.loads(raw))))


def case_lf(raw: bytes, src: str, dst: str):
    import linguafranca as lf

    s, d = lf.FormatName(src), lf.FormatName(dst)

    def run():
        res = lf.convert_request_json(orjson.loads(raw), source_format=s, target_format=d)
        return dumps(getattr(res, "value", res) if not isinstance(res, dict) else res)

    return run


def case_litellm_c2m(raw: bytes):
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    cfg = AnthropicConfig()

    def run():
        body = orjson.loads(raw)
        model = body.pop("model")
        messages = body.pop("messages")
        body.pop("stream", None)
        body.pop("stream_options", None)
        opt = cfg.map_openai_params(non_default_params=body, optional_params={}, model=model, drop_params=True)
        return dumps(cfg.transform_request(model=model, messages=messages, optional_params=opt,
                                           litellm_params={}, headers={}))

    return run


def case_anyllm_c2m(raw: bytes):
    from any_llm.providers.anthropic.utils import _convert_params
    from any_llm.types.completion import CompletionParams

    def run():
        body = orjson.loads(raw)
        body["model_id"] = body.pop("model")
        return dumps(_convert_params(CompletionParams(**body), provider_name="anthropic"))

    return run


def case_litellm_r2c(raw: bytes):
    from litellm.responses.litellm_completion_transformation.transformation import (
        LiteLLMCompletionResponsesConfig,
    )

    def run():
        body = orjson.loads(raw)
        model, inp = body.pop("model"), body.pop("input")
        return dumps(LiteLLMCompletionResponsesConfig.transform_responses_api_request_to_chat_completion_request(
            model=model, input=inp, responses_api_request=body))

    return run


def case_litellm_m2r(raw: bytes):
    from litellm.llms.anthropic.messages.responses_adapters.transformation import (
        LiteLLMAnthropicToResponsesAPIAdapter,
    )

    ad = LiteLLMAnthropicToResponsesAPIAdapter()
    return lambda: dumps(ad.translate_request(orjson.loads(raw)))


# ----------------------------------------------------------------------------- timing
def bench(cases: dict, reps: int, rep_ms: float) -> dict[str, list[float]]:
    for fn in cases.values():
        for _ in range(5):
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
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, k = cases[name], calls[name]
            gc.collect()
            t0 = time.process_time_ns()
            for _ in range(k):
                fn()
            res[name].append((time.process_time_ns() - t0) / k / 1000.0)
    gc.unfreeze()
    return res


def expectations(raw: bytes) -> dict[str, str]:
    """Strings the translation must keep: tool names, the tool result text, the last user text."""
    body = orjson.loads(raw)
    exp = {}
    for t in body.get("tools") or []:
        decls = t.get("functionDeclarations") or [t.get("function") or t]  # Gemini groups them
        for d in decls:
            name = d.get("name")
            if name:
                exp[f"tool {name}"] = name
    s = raw.decode()
    if "15 degrees" in s:
        exp["tool result"] = "15 degrees"
    if "Tokyo" in s:
        exp["last user text"] = "Tokyo"
    return exp


def sanity(name: str, out: bytes, target: str, expect: dict[str, str]) -> str:
    """A short note on what came out (is it a wire body of the target, with what it must keep?)."""
    try:
        obj = orjson.loads(out)
    except orjson.JSONDecodeError:
        return "not JSON"
    if not isinstance(obj, dict):
        return f"{type(obj).__name__}"
    notes = []
    if "model" not in obj and target != "gemini":  # Gemini: the model is in the URL
        notes.append("no 'model' (SDK kwargs, not a wire body)" if "model_id" in obj else "no 'model'")
    key = {"responses": "input", "gemini": "contents"}.get(target, "messages")
    msgs = obj.get(key)
    if not isinstance(msgs, list) and not (target == "responses" and isinstance(msgs, str)):
        notes.append(f"no '{key}' list")
    s = out.decode()
    for what, needle in expect.items():
        if needle not in s:
            notes.append(f"{what} lost")
    return "ok" if not notes else "; ".join(notes)


#: per protocol: its letter in the direction labels, its linguafranca format (None: none), its short name
NAMES = {C: ("C", "openai_chat_completions", "chat"), R: ("R", "open_responses", "responses"),
         A: ("M", "anthropic_messages", "anthropic"), G: ("G", None, "gemini")}
# (the protocols the peer libraries speak; the Claude-hosting protocols are Anthropic bodies)
DIRECTIONS = {f"{NAMES[s][0]}→{NAMES[d][0]}": (s, d, NAMES[s][1], NAMES[d][1], NAMES[d][2])
              for s in PROTOCOLS for d in PROTOCOLS if s is not d and s in NAMES and d in NAMES}
BODIES = {A: M_REQUEST, C: C_REQUEST, R: R_REQUEST, G: G_REQUEST}


def peers_for(direction: str, raw: bytes) -> dict:
    src, dst, lsrc, ldst, _ = DIRECTIONS[direction]
    mk = {
        "M→C": {"LiteLLM": lambda: case_litellm_m2c(raw), "any-llm": lambda: case_anyllm_m2c(raw)},
        "C→M": {"LiteLLM": lambda: case_litellm_c2m(raw), "any-llm": lambda: case_anyllm_c2m(raw)},
        "R→C": {"LiteLLM": lambda: case_litellm_r2c(raw)},
        "M→R": {"LiteLLM": lambda: case_litellm_m2r(raw)},
    }.get(direction, {})
    if lsrc and ldst:
        mk["linguafranca"] = lambda: case_lf(raw, lsrc, ldst)
    return mk


PEER_MODULES = {"LiteLLM": "litellm", "any-llm": "any_llm", "linguafranca": "linguafranca"}


def per_round(v: list[float], base: list[float]) -> float:
    """Median of the per-round ratios: both ran in the same round (load that comes and goes cancels)."""
    return statistics.median(a / b for a, b in zip(v, base, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--rep-ms", type=float, default=40)
    ap.add_argument("--history", type=int, default=1000, help="messages in the long-history rows")
    ap.add_argument("--write", action="store_true", help="update docs/performance.md")
    ap.add_argument("--only", action="append", default=[], help="only these directions, e.g. C->M (repeatable)")
    args = ap.parse_args()
    t_imp, installed = {}, {}
    for peer, mod in PEER_MODULES.items():
        t0 = time.perf_counter()
        try:
            __import__(mod)
            installed[peer] = True
        except ImportError:
            installed[peer] = False
        t_imp[mod] = time.perf_counter() - t0
    versions = {}
    for dist in ("litellm", "any-llm-sdk", "martian-linguafranca", "pydantic", "orjson"):
        try:
            from importlib.metadata import version

            versions[dist] = version(dist)
        except Exception:  # noqa: BLE001
            versions[dist] = "not installed"
    inputs: list[tuple[str, str, bytes, str | None]] = []
    for d, (src, *_rest) in DIRECTIONS.items():
        if args.only and d not in [o.replace("->", "→") for o in args.only]:
            continue
        inputs.append((d, "built-in", orjson.dumps(BODIES[src]), request_path(src, None)))
        long = history(src, args.history)
        inputs.append((d, f"{len(long[history_key(src)]):,} messages", orjson.dumps(long), request_path(src, None)))
        rel = REAL.get(src)
        if rel and (FIX / rel).exists():
            inputs.append((d, "recorded", (FIX / rel).read_bytes(), request_path(src, rel)))
    peers = list(PEER_MODULES)
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `{Path(sys.executable).name} "
             f"benchmarks/request_translation.py --reps {args.reps}` on {machine()}; " + ", ".join(f"{k} {v}" for k, v in versions.items())
             + ". µs (CPU) per request: median (min–max); × = median of the per-round ratios to bare orjson "
             "decode + encode of the same body (target ≤ 4 in every direction); **ProxAI / peer** = median of the "
             "per-round ratios (< 1: ProxAI faster). Built-in = a 6-turn conversation with system prompt, two "
             f"tools, a tool call and its result; {args.history:,} messages = its turns repeated; recorded = a "
             "real request from ../shared/fixtures.", "",
             "| direction, request | bare orjson | ProxAI | " + " | ".join(peers) + " | "
             + " | ".join(f"ProxAI / {p}" for p in peers) + " |",
             "|---|---|---|" + "---|" * (2 * len(peers))]
    notes = []
    worst: dict[str, float] = {}
    for d, label, raw, path in inputs:
        src, dst, *_x, tshort = DIRECTIONS[d]
        cases = {"bare": case_bare(raw), "ProxAI": case_ours(raw, src, dst, path)}
        failed = {p: "not installed" for p in peers if not installed[p]}
        exp = expectations(raw)
        offered = peers_for(d, raw)
        for p in peers:
            if installed[p] and p not in offered:
                failed[p] = "no such converter"
        for peer, mk in offered.items():
            if not installed[peer]:
                continue
            try:
                fn = mk()
                out = fn()
                cases[peer] = fn
                notes.append(f"{d} {label}, {peer}: {sanity(peer, out, tshort, exp)}")
            except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not hidden
                failed[peer] = f"fails: {type(e).__name__}"
                notes.append(f"{d} {label}, {peer}: raised {type(e).__name__}: {str(e)[:120]}")
        notes.append(f"{d} {label}, ProxAI: {sanity('ProxAI', cases['ProxAI'](), tshort, exp)}")
        res = bench(cases, args.reps, args.rep_ms)
        base = res["bare"]
        worst[d] = max(worst.get(d, 0.0), per_round(res["ProxAI"], base))

        def cell(name: str, res=res, failed=failed, base=base) -> str:
            if name in failed:
                return failed[name]
            v = res[name]
            return f"**{statistics.median(v):.1f}** ({min(v):.1f}–{max(v):.1f}) ×{per_round(v, base):.1f}"

        def versus(name: str, res=res) -> str:
            return f"**{per_round(res['ProxAI'], res[name]):.2f}**" if name in res else "–"

        lines.append(f"| {d} {label} ({len(raw):,} B) | {cell('bare')} | {cell('ProxAI')} | "
                     + " | ".join(cell(p) for p in peers) + " | " + " | ".join(versus(p) for p in peers) + " |")
        print(lines[-1], flush=True)
    lines += ["", "Worst ratio to the floor per direction: " + ", ".join(f"{d} {w:.2f}" for d, w in worst.items())
              + ". Cold import: " + ", ".join(f"{k} {v:.2f} s" for k, v in t_imp.items() if installed.get(
                  next(p for p, m in PEER_MODULES.items() if m == k))) + ".", "",
              "What each produced (one run: is it a wire body of the target (`model` + messages/input), with the "
              "request's tool names, the tool result text and the last user text?):", ""] + [f"- {n}" for n in notes]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "performance.md", "requests",
                      "### Request translation, every direction, side by side with the peers\n\n" + text,
                      "Performance")
        print("wrote the requests section of docs/performance.md")


if __name__ == "__main__":
    main()
