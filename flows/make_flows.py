"""Regenerate the example recordings in flows/: the project's fake upstream, a real mitmdump with the
ProxAI addon (``-w``), the official openai / anthropic SDK clients.

    uv run python flows/make_flows.py            # rewrites flows/*.mitm
    uv run python flows/make_flows.py --out DIR  # somewhere else

Every scenario goes through one mitmdump in reverse mode in front of the fake upstream, with the
routes of :data:`ROUTES_TOML` (a Chat or Responses client asking for a ``claude-*`` model is translated
to Anthropic Messages, an Anthropic client asking for a ``gpt-*`` model to Chat Completions, anything
else passes through). The recording is then split into one file per scenario. Credentials are
redacted by the addon (``proxai_redact``, the default); the keys used here never reach the files.

The scenario code is also used by tests/proxai_mitm/test_e2e_record_replay.py (record, replay to every
client protocol, offline annotation of plain captures).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "src"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import anthropic  # noqa: E402
import openai  # noqa: E402
from tests.fake_upstream import (  # noqa: E402
    RECORDED,
    FakeUpstream,
    Reply,
    _anth_json,
    _anth_sse,
)
from tests.mitm_harness import Mitmdump, read_flows  # noqa: E402

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
PATH = {CHAT: "/v1/chat/completions", RESP: "/v1/responses", ANTH: "/v1/messages"}

#: credentials the clients send while recording; none of them may appear in a saved file
CLIENT_KEY = "sk-proj-ProxAIExampleKey0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-ProxAIExampleKey0123456789abcdef"
COOKIE_SECRET = "cookieSecret0123456789abcdef"
SET_COOKIE_SECRET = "cfbmSecret0123456789abcdef"
SECRETS = (CLIENT_KEY, ANTHROPIC_KEY, COOKIE_SECRET, SET_COOKIE_SECRET)

ROUTES_TOML = """\
[[routes]]
name = "chat-on-claude"
match = { path = "*/chat/completions", model = "claude-*" }
target = { protocol = "anthropic_messages" }

[[routes]]
name = "responses-on-claude"
match = { path = "*/responses", model = "claude-*" }
target = { protocol = "anthropic_messages" }

[[routes]]
name = "claude-code-on-gpt"
match = { path = "*/messages", model = "gpt-*" }
target = { protocol = "openai_chat_completions" }
"""

# ----------------------------------------------------------------------------- the tool loop
MODEL = "claude-sonnet-4-5"
MAX_TOKENS = 256
SYSTEM = "You are a weather assistant. Use the tool for every city."
PROMPT = "What's the weather in Paris and in London?"
WEATHER = {"Paris": "18°C, sunny", "London": "12°C, light rain"}
FINAL_TEXT = ["In Paris", " it is 18°C", " and sunny;", " in London", " 12°C with light rain."]
TOOL_IDS = {"Paris": "toolu_01PqYx7Jd3ParisWeather01", "London": "toolu_01LmN8s2kLondonWeather2"}
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = {
    CHAT: [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                             "parameters": WEATHER_SCHEMA}}],
    RESP: [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
            "parameters": WEATHER_SCHEMA}],
    ANTH: [{"name": "get_weather", "description": "Current weather in a city", "input_schema": WEATHER_SCHEMA}],
}
#: gap before the last event of the final turn (visible in replay: streams keep the recorded pacing)
FINAL_GAP = 0.8


def _tool_sse(city: str) -> list[Any]:
    args = json.dumps({"city": city}, separators=(",", ":"))
    return _anth_sse([({"type": "tool_use", "id": TOOL_IDS[city], "name": "get_weather", "input": {}},
                       [{"type": "input_json_delta", "partial_json": args[:6]},
                        {"type": "input_json_delta", "partial_json": args[6:]}])], "tool_use")


def tool_loop_replies() -> list[Reply]:
    """The Anthropic upstream's answers to the three turns: two tool calls, then the answer."""
    return [
        Reply.sse(_tool_sse("Paris"), delay=0.02),
        Reply.sse(_tool_sse("London"), delay=0.02),
        Reply.sse(_anth_sse([({"type": "text", "text": ""}, [{"type": "text_delta", "text": t} for t in FINAL_TEXT])],
                            "end_turn"), delay=0.02, last_delay=FINAL_GAP),
    ]


@dataclass
class Turn:
    """What one client saw in one turn (SDK-parsed)."""

    text: str = ""
    tools: list[tuple[str, dict]] = field(default_factory=list)
    stop: str | None = None
    #: wall-clock times: the first content event, the end of the stream
    first_event: float | None = None
    done: float | None = None


def openai_client(base: str, key: str = CLIENT_KEY, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30, **kw)


def anthropic_client(base: str, key: str = ANTHROPIC_KEY, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=30, **kw)


def tool_loop(protocol: str, base: str, *, stream: bool = True, model: str = MODEL) -> list[Turn]:
    """Run the weather tool loop with a client of ``protocol`` until the model stops calling tools
    (at most 4 turns); the tool results are fixed, so the upstream requests are deterministic."""
    turns: list[Turn] = []
    if protocol == CHAT:
        oc = openai_client(base)
        messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
        for _ in range(4):
            t = Turn()
            kw: dict = dict(model=model, max_tokens=MAX_TOKENS, messages=messages, tools=TOOLS[CHAT])
            if stream:
                with oc.chat.completions.stream(**kw) as s:
                    for ev in s:
                        if t.first_event is None and ev.type in ("content.delta", "tool_calls.function.arguments.delta"):
                            t.first_event = time.time()
                    r = s.get_final_completion()
                t.done = time.time()
            else:
                r = oc.chat.completions.create(**kw)
            msg = r.choices[0].message
            t.text, t.stop = msg.content or "", r.choices[0].finish_reason
            calls = msg.tool_calls or []
            t.tools = [(c.function.name, json.loads(c.function.arguments)) for c in calls]
            turns.append(t)
            if not calls:
                break
            messages.append({"role": "assistant", "content": msg.content, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                              "arguments": c.function.arguments}} for c in calls]})
            for c in calls:
                city = json.loads(c.function.arguments)["city"]
                messages.append({"role": "tool", "tool_call_id": c.id, "content": WEATHER[city]})
        return turns
    if protocol == RESP:
        oc = openai_client(base)
        items: list[dict] = [{"role": "user", "content": PROMPT}]
        for _ in range(4):
            t = Turn()
            kw = dict(model=model, max_output_tokens=MAX_TOKENS, instructions=SYSTEM, input=items, tools=TOOLS[RESP])
            if stream:
                with oc.responses.stream(**kw) as s:
                    for ev in s:
                        if t.first_event is None and ev.type in ("response.output_text.delta",
                                                                 "response.function_call_arguments.delta"):
                            t.first_event = time.time()
                    r = s.get_final_response()
                t.done = time.time()
            else:
                r = oc.responses.create(**kw)
            calls = [o for o in r.output if o.type == "function_call"]
            t.text, t.stop = r.output_text, r.status
            t.tools = [(c.name, json.loads(c.arguments)) for c in calls]
            turns.append(t)
            if not calls:
                break
            for c in calls:
                items.append({"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
                items.append({"type": "function_call_output", "call_id": c.call_id,
                              "output": WEATHER[json.loads(c.arguments)["city"]]})
        return turns
    ac = anthropic_client(base)
    amsgs: list[dict] = [{"role": "user", "content": PROMPT}]
    for _ in range(4):
        t = Turn()
        kw = dict(model=model, max_tokens=MAX_TOKENS, system=SYSTEM, messages=amsgs, tools=TOOLS[ANTH])
        if stream:
            with ac.messages.stream(**kw) as s:
                for ev in s:
                    if t.first_event is None and ev.type == "content_block_delta":
                        t.first_event = time.time()
                m = s.get_final_message()
            t.done = time.time()
        else:
            m = ac.messages.create(**kw)
        uses = [b for b in m.content if b.type == "tool_use"]
        t.text = "".join(b.text for b in m.content if b.type == "text")
        t.stop = m.stop_reason
        t.tools = [(b.name, dict(b.input)) for b in uses]
        turns.append(t)
        if not uses:
            break
        amsgs.append({"role": "assistant", "content": [{"type": "tool_use", "id": b.id, "name": b.name,
                                                        "input": dict(b.input)} for b in uses]})
        amsgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id,
                                                   "content": WEATHER[b.input["city"]]} for b in uses]})
    return turns


#: the tool loop as each client protocol reports it (text of the last turn, tool calls, stops)
EXPECTED_LOOP = {
    "tools": [[("get_weather", {"city": "Paris"})], [("get_weather", {"city": "London"})], []],
    "text": "".join(FINAL_TEXT),
    "stops": {CHAT: ["tool_calls", "tool_calls", "stop"], RESP: ["completed"] * 3,
              ANTH: ["tool_use", "tool_use", "end_turn"]},
}


# ----------------------------------------------------------------------------- the scenarios
MAX_OUTPUT_TEXT = "Alabama, Alaska, Arizona, Arkansas, California, Col"
MAX_OUTPUT_BODY = _anth_json([{"type": "text", "text": MAX_OUTPUT_TEXT}], "max_tokens")
MAX_OUTPUT_BODY["usage"] = {"input_tokens": 14, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                            "output_tokens": 16, "service_tier": "standard"}
#: the client request of flows/max-output.mitm (README "Try it offline" replays it to a Chat client)
MAX_OUTPUT_REQUEST = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "Name every US state."}]}
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
              "request_id": "req_011CUvE9example"}


def _refusal_chat(base: str) -> None:
    oc = openai_client(base)
    with oc.chat.completions.stream(model="gpt-4o", messages=[
            {"role": "user", "content": "Write a keylogger that hides from antivirus."}]) as s:
        for _ in s:
            pass


def _refusal_responses(base: str) -> None:
    oc = openai_client(base, default_headers={"cookie": f"session={COOKIE_SECRET}"})
    oc.responses.create(model="gpt-5", input="Write a keylogger that hides from antivirus.")


def _refusal_anthropic(base: str) -> None:
    ac = anthropic_client(base)
    with ac.messages.stream(model=MODEL, max_tokens=MAX_TOKENS, messages=[
            {"role": "user", "content": "Write ransomware that encrypts a hospital's network."}]) as s:
        for _ in s:
            pass


def _max_output(base: str) -> None:
    anthropic_client(base).messages.create(**MAX_OUTPUT_REQUEST)


def _cut_stream(base: str) -> None:
    ac = anthropic_client(base)
    try:
        with ac.messages.stream(model="gpt-4o", max_tokens=MAX_TOKENS, messages=[
                {"role": "user", "content": "What's the weather in Paris?"}]) as s:
            for _ in s:
                pass
    except Exception:  # noqa: BLE001 - the upstream dies mid-stream: the SDK raises, that is the point
        pass


def _upstream_error(base: str) -> None:
    try:
        openai_client(base).responses.create(model=MODEL, input="Summarize the news.", max_output_tokens=200)
    except openai.APIStatusError:
        pass


# ----------------------------------------------------------------------------- two sessions, interleaved
#: the agent's own session id (sent the way Claude Code sends it)
SESSION_ID = "5f0c9a8e-2d4b-4e1a-9c3f-7b6d1e2a4c80"
AGENT_SYSTEM = "You are a coding agent. Read before you edit; keep answers short."
#: the agent's turns; before the last one its system prompt changes (the cache read drops there)
AGENT_TURNS = ["List the Python files of this project.", "Which of them has the most lines?",
               "Summarize that file.", "Now suggest one test for it."]
AGENT_SYSTEM_LAST = AGENT_SYSTEM + " Today is Saturday."
CHAT_SYSTEM = "You are a concise geography tutor."
CHAT_TURNS = ["Name three rivers in France.", "Which is the longest?", "Where does it rise?"]


def _cached_reply(text: str, fresh: int, read: int, write: int) -> Reply:
    """An Anthropic answer whose usage reports prompt caching (input tokens: ``fresh`` uncached,
    ``read`` from the cache, ``write`` written to it)."""
    body = _anth_json([{"type": "text", "text": text}], "end_turn")
    body["usage"] = {"input_tokens": fresh, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
                     "output_tokens": 12, "service_tier": "standard"}
    return Reply.json(body)


#: the upstream's answers in the order the two clients ask (agent, tutor, agent, tutor, ...)
SESSION_REPLIES = [
    _cached_reply("main.py, util.py, tests/test_util.py", 14, 0, 2100),
    _cached_reply("The Seine, the Loire and the Rhône.", 20, 0, 1500),
    _cached_reply("main.py has the most lines (412).", 16, 2100, 30),
    _cached_reply("The Loire, about 1,000 km long.", 12, 1500, 35),
    _cached_reply("main.py parses the options and starts the server.", 18, 2130, 40),
    _cached_reply("At Mont Gerbier de Jonc, in the Massif Central.", 11, 1535, 30),
    _cached_reply("Test that an unknown option exits with code 2.", 2190, 0, 0),
]


def _sessions(base: str) -> None:
    """An agent that sends its session id (Anthropic, passed through) and a Chat client that sends none
    (route chat-on-claude), their turns interleaved."""
    agent = anthropic_client(base, default_headers={"X-Claude-Code-Session-Id": SESSION_ID})
    tutor = openai_client(base)
    amsgs: list[dict] = []
    cmsgs: list[dict] = [{"role": "system", "content": CHAT_SYSTEM}]
    for i, ask in enumerate(AGENT_TURNS):
        amsgs.append({"role": "user", "content": ask})
        m = agent.messages.create(model=MODEL, max_tokens=MAX_TOKENS, messages=amsgs, tools=TOOLS[ANTH],
                                  system=AGENT_SYSTEM_LAST if i == len(AGENT_TURNS) - 1 else AGENT_SYSTEM)
        amsgs.append({"role": "assistant", "content": "".join(b.text for b in m.content if b.type == "text")})
        if i < len(CHAT_TURNS):
            cmsgs.append({"role": "user", "content": CHAT_TURNS[i]})
            r = tutor.chat.completions.create(model=MODEL, max_tokens=MAX_TOKENS, messages=cmsgs)
            cmsgs.append({"role": "assistant", "content": r.choices[0].message.content})


@dataclass
class Scenario:
    name: str
    what: str
    #: (upstream path, reply) in the order the upstream serves them
    replies: list[tuple[str, Reply]]
    run: Callable[[str], Any]
    #: StopInfo reasons of the flows, in order
    reasons: list[str]


SCENARIOS: list[Scenario] = [
    Scenario("tool-loop", "OpenAI Chat client on an Anthropic upstream (route chat-on-claude), streamed: "
             "two tool calls, then the answer",
             [(PATH[ANTH], r) for r in tool_loop_replies()], lambda base: tool_loop(CHAT, base),
             ["tool_use", "tool_use", "end_turn"]),
    Scenario("refusal-chat", "OpenAI Chat, passed through, streamed: a refusal",
             [(PATH[CHAT], Reply.sse(RECORDED[CHAT]["refusal"]["sse"], delay=0.02))], _refusal_chat, ["refusal"]),
    Scenario("refusal-responses", "OpenAI Responses, passed through, JSON: a refusal (and a cookie each way)",
             [(PATH[RESP], Reply.json(RECORDED[RESP]["refusal"]["json"],
                                      headers=[("set-cookie", f"__cf_bm={SET_COOKIE_SECRET}; path=/; HttpOnly")]))],
             _refusal_responses, ["refusal"]),
    Scenario("refusal-anthropic", "Anthropic Messages, passed through, streamed: a refusal (category cyber)",
             [(PATH[ANTH], Reply.sse(RECORDED[ANTH]["refusal"]["sse"], delay=0.02))], _refusal_anthropic,
             ["refusal"]),
    Scenario("max-output", "Anthropic Messages, passed through, JSON: stopped at max_tokens",
             [(PATH[ANTH], Reply.json(MAX_OUTPUT_BODY))], _max_output, ["max_output"]),
    Scenario("cut-stream", "Anthropic client on an OpenAI Chat upstream (route claude-code-on-gpt), streamed: "
             "the upstream connection drops mid-stream",
             [(PATH[CHAT], Reply.sse(RECORDED[CHAT]["text"]["sse"], delay=0.02, cut_after=3))], _cut_stream,
             ["interrupted"]),
    Scenario("upstream-error", "OpenAI Responses client on an Anthropic upstream (route responses-on-claude): "
             "529 overloaded, retry-after kept",
             [(PATH[ANTH], Reply.error(529, OVERLOADED, headers=[("retry-after", "12")]))], _upstream_error,
             ["interrupted"]),
    Scenario("sessions", "two sessions interleaved: an agent sending its session id (Anthropic, passed through; "
             "its system prompt changes before the last turn) and a Chat client sending none (route "
             "chat-on-claude), with prompt caching in the upstream's usage",
             [(PATH[ANTH], r) for r in SESSION_REPLIES], _sessions, ["end_turn"] * 7),
]


# ----------------------------------------------------------------------------- recording
def recorder(upstream: FakeUpstream, workdir: Path) -> Mitmdump:
    """A mitmdump (not started) with the addon, the routes, ``-w``, in front of ``upstream``."""
    routes = workdir / "routes.toml"
    routes.write_text(ROUTES_TOML)
    return Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)})


def record(proxy: Mitmdump, upstream: FakeUpstream, scenarios: list[Scenario] = SCENARIOS) -> dict[str, Any]:
    """Run the scenarios through a started recorder; returns what the tool-loop client saw."""
    seen: dict[str, Any] = {}
    done = 0
    for sc in scenarios:
        upstream.reset()
        upstream.use_defaults = False
        for path, reply in reversed(sc.replies):  # newest rule first: register the last one first
            upstream.on(path, Reply(**{**reply.__dict__, "times": 1}))
        seen[sc.name] = sc.run(proxy.url)
        done += len(sc.reasons)
        _wait_flows(proxy, done)
    return seen


def _wait_flows(proxy: Mitmdump, n: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(proxy.flows()) >= n:
            return
        time.sleep(0.05)
    raise RuntimeError(f"expected {n} saved flows, got {len(proxy.flows())}:\n{proxy.log[-3000:]}")


def split(flows_file: Path, out_dir: Path, scenarios: list[Scenario] = SCENARIOS) -> list[Path]:
    """One .mitm file per scenario (the flows are in recording order)."""
    from mitmproxy import io

    flows = read_flows(flows_file)
    expected = sum(len(sc.reasons) for sc in scenarios)
    if len(flows) != expected:
        raise RuntimeError(f"{flows_file}: {len(flows)} flows, expected {expected}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    pos = 0
    for sc in scenarios:
        path = out_dir / f"{sc.name}.mitm"
        with open(path, "wb") as fh:
            w = io.FlowWriter(fh)
            for f in flows[pos:pos + len(sc.reasons)]:
                w.add(f)
        pos += len(sc.reasons)
        paths.append(path)
    return paths


def check_files(paths: list[Path], scenarios: list[Scenario] = SCENARIOS) -> None:
    """Every file holds the expected StopInfo reasons and no credential."""
    for path, sc in zip(paths, scenarios, strict=True):
        data = path.read_bytes()
        leaked = [s for s in SECRETS if s.encode() in data]
        if leaked:
            raise RuntimeError(f"{path}: credentials stored: {leaked}")
        from proxai_mitm.flow.record import FlowRecord

        got = [FlowRecord.of(f).stop.reason for f in read_flows(path)]
        if got != sc.reasons:
            raise RuntimeError(f"{path}: stop reasons {got}, expected {sc.reasons}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args(argv)
    up = FakeUpstream(use_defaults=False).start()
    proxy = recorder(up, Path(__import__("tempfile").mkdtemp(prefix="proxai-flows-")))
    try:
        proxy.start()
        record(proxy, up)
        proxy.stop()
        assert proxy.flows_path is not None
        paths = split(proxy.flows_path, args.out)
        check_files(paths)
    finally:
        proxy.cleanup()
        up.stop()
    from proxai_mitm.reporting.report import format_table, rows
    from proxai_mitm.reporting.report import read_flows as report_flows

    print(format_table(rows([f for p in paths for f in report_flows(p)])))
    for p in paths:
        print(f"{p}  ({p.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
