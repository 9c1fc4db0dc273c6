"""What a translated agent session costs: prompt caching across translation, measured on real
sessions (not a timed test).

    uv run python benchmarks/session.py            # record (once), replay, print the table
    uv run python benchmarks/session.py --write    # and write the "Sessions" section of docs/performance.md
    uv run python benchmarks/session.py --turns 30 --rerecord

1. **Record** (once per client version, kept in ``~/.cache/proxai/sessions``): a real Claude Code
   and a real Codex CLI (npm, pinned like the end-to-end tests) each run a 30-turn agent session —
   29 tool calls (Claude Code's ``Read`` of 29 files, Codex's ``exec_command`` of 29 commands) and an
   answer — against a scripted loopback upstream, through the addon (a mitmdump passing the
   traffic through). What the client sent each turn is the session: its real system prompt, tool
   list, growing history and its own caching hints.
2. **Replay** each session through a real mitmdump to upstreams that account caching by each
   provider's documented rules (``benchmarks/caching_upstream.py``): the native route (the
   client's own protocol) and a route to each other protocol, with the route's ``cache_hints`` on
   (the default) and off (what translation did before).
3. **Report**, per session and route: the share of input tokens read from the cache, that share
   against the native route's, and the session's cost (``proxai_mitm.flow.cost``: the prices ProxAI
   shows) with and without hints.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.caching_upstream import ANTH, CHAT, GEMINI, RESP, CachingUpstream  # noqa: E402
from tests.fake_upstream import FakeUpstream  # noqa: E402
from tests.mitm_harness import Mitmdump  # noqa: E402

from proxai_mitm.flow.cost import load_prices, price  # noqa: E402

CACHE = Path.home() / ".cache" / "proxai" / "sessions"
#: each target's model and the host its prices are looked up for
MODEL = {ANTH: "claude-sonnet-4-5", RESP: "gpt-5", CHAT: "gpt-5", GEMINI: "gemini-2.5-pro"}
HOST = {ANTH: "api.anthropic.com", RESP: "api.openai.com", CHAT: "api.openai.com",
        GEMINI: "generativelanguage.googleapis.com"}
SHORT = {ANTH: "Anthropic", RESP: "Responses", CHAT: "Chat", GEMINI: "Gemini"}
OUTPUT_TOKENS = 20  # what each scripted answer bills (the same on every route)


@dataclass
class Turn:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


# ----------------------------------------------------------------------------- recording
def _script(up: FakeUpstream, protocol: str, calls: list[tuple[str, str, dict]], answer: str) -> None:
    """Streamed turns: the calls in order (one each), then the answer; complete requests: the answer."""
    from dataclasses import replace

    from tests.proxai_mitm.npm_clients import _turns

    path = {ANTH: "/v1/messages", RESP: "/v1/responses"}[protocol]
    _, text, whole = _turns(protocol, "unused", "unused", {}, answer)
    up.on(path, whole, stream=False)
    up.on(path, text, stream=True)
    for k, (call_id, name, args) in reversed(list(enumerate(calls))):  # newest rule first: the first call first
        call, _, _ = _turns(protocol, call_id, name, args, answer)
        up.on(path, replace(call, times=1, events=_unique_ids(call.events or [], k)), stream=True)


def _unique_ids(events: list, k: int) -> list:
    """Each scripted turn its own message / response ids, as a real provider mints them (a client
    merges the turns that share one into one message)."""
    text = json.dumps(events)
    for old in ("msg_01XFDUDYJgAACzvnptvVoYEL", "resp_", "fc_68f9a1b2loop", "msg_68f9a1b2loop"):
        text = text.replace(old, f"{old}{k:04d}")
    return [tuple(e) if isinstance(e, list) else e for e in json.loads(text)]


def record(client: str, turns: int) -> list[Turn]:
    from tests.proxai_mitm.npm_clients import CLAUDE_CODE, CODEX_CLI, OutboundTrap, run_client

    tmp = Path(tempfile.mkdtemp(prefix="proxai-session-"))
    work, home = tmp / "work", tmp / "home"
    work.mkdir()
    home.mkdir()
    for k in range(turns - 1):
        (work / f"step{k:02d}.txt").write_text(f"Step {k}: " + "the build log says all is fine. " * 40 + "\n")
    up = FakeUpstream().start()
    proxy = Mitmdump(mode=f"reverse:{up.url}", save=False)
    proxy.start()
    try:
        if client == "claude-code":
            protocol = ANTH
            calls = [(f"toolu_01Session{k:010d}", "Read", {"file_path": str(work / f"step{k:02d}.txt")})
                     for k in range(turns - 1)]
            _script(up, protocol, calls, "All steps are fine.")
            exe = CLAUDE_CODE.install()
            quiet = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
                     "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_BUG_COMMAND": "1"}
            with OutboundTrap() as trap:
                r = run_client([str(exe), "-p", "Read every stepNN.txt file one by one and summarize them.",
                                "--output-format", "json", "--allowedTools", "Read", "--max-turns", str(turns + 5)],
                               cwd=work, home=home, trap=trap, timeout=600,
                               env={**quiet, "ANTHROPIC_BASE_URL": proxy.url, "ANTHROPIC_API_KEY": "sk-session"})
        else:
            protocol = RESP
            calls = [(f"call_Session{k:010d}", "exec_command", {"cmd": f"cat step{k:02d}.txt"})
                     for k in range(turns - 1)]
            _script(up, protocol, calls, "All steps are fine.")
            exe = CODEX_CLI.install()
            codex_home = home / ".codex"
            codex_home.mkdir()
            from tests.proxai_mitm.test_e2e_codex_cli import KEY_VAR, codex_config

            (codex_home / "config.toml").write_text(codex_config(proxy.url))
            with OutboundTrap() as trap:
                r = run_client([str(exe), "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
                                "Print every stepNN.txt file one by one and summarize them."], cwd=work, home=home,
                               trap=trap, timeout=600, env={"CODEX_HOME": str(codex_home), KEY_VAR: "sk-session"})
        if r.returncode != 0:
            raise SystemExit(f"{client} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        path = {ANTH: "/v1/messages", RESP: "/v1/responses"}[protocol]
        out = [Turn(q.path, {k.lower(): v for k, v in q.headers if k.lower() in _KEPT_HEADERS}, q.json())
               for q in up.requests if q.path.partition("?")[0] == path and q.json().get("tools")]
    finally:
        proxy.cleanup()
        up.stop()
    return out


#: request headers a replay sends again (the protocol's version and session ids; never a key)
_KEPT_HEADERS = ("anthropic-version", "anthropic-beta", "x-claude-code-session-id", "session_id",
                 "conversation_id", "openai-beta")


def session(client: str, turns: int, rerecord: bool) -> tuple[str, list[Turn]]:
    from tests.proxai_mitm.npm_clients import CLAUDE_CODE, CODEX_CLI

    version = (CLAUDE_CODE if client == "claude-code" else CODEX_CLI).version
    f = CACHE / f"{client}-{version}-{turns}.json"
    protocol = ANTH if client == "claude-code" else RESP
    if f.exists() and not rerecord:
        data = json.loads(f.read_text())
    else:
        data = [t.__dict__ for t in record(client, turns)]
        CACHE.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(data))
    return protocol, [Turn(**t) for t in data]


# ----------------------------------------------------------------------------- replaying
@dataclass
class Result:
    client: str
    target: str
    hints: bool
    requests: int
    input_total: int
    cache_read: int
    cache_write: int
    cost: float | None

    @property
    def share(self) -> float:
        return self.cache_read / self.input_total if self.input_total else 0.0


def replay(client: str, protocol: str, turns: list[Turn], target: str, hints: bool) -> Result:
    up = CachingUpstream(target, MODEL[target]).start()
    routes = Path(tempfile.mkdtemp(prefix="proxai-session-routes-")) / "routes.toml"
    routes.write_text(f'[[routes]]\nname = "session"\ncache_hints = {"true" if hints else "false"}\n'
                      f'target = {{ protocol = "{target}", base_url = "{up.url}", api_key_env = "SESSION_KEY", '
                      f'model = "{MODEL[target]}" }}\n')
    proxy = Mitmdump(mode=f"reverse:{up.url}", options={"proxai_config": str(routes)},
                     env={"SESSION_KEY": "sk-session-upstream"}, save=False)
    proxy.start()
    try:
        with requests.Session() as s:
            for t in turns:
                headers = dict(t.headers, **{"content-type": "application/json", "x-api-key": "sk-client",
                                             "authorization": "Bearer sk-client"})
                r = s.post(proxy.url + t.path, data=json.dumps(t.body), headers=headers, stream=True, timeout=60)
                if r.status_code != 200:
                    raise SystemExit(f"{client} → {target}: HTTP {r.status_code}: {r.content[:600]!r}")
                for _ in r.iter_content(65536):
                    pass
    finally:
        proxy.cleanup()
        up.stop()
    led = up.ledger
    cost = 0.0
    for e in led.entries:
        c = price(MODEL[target], HOST[target], input_total=e.input_total, output=OUTPUT_TOKENS,
                  cache_read=e.cache_read, cache_write=e.cache_write)
        if c.usd is None:
            cost = None
            break
        cost += c.usd
    return Result(client, target, hints, len(led.entries), led.input_total, led.cache_read, led.cache_write,
                  cost if cost is None else round(cost, 4))


def run(turns: int, rerecord: bool) -> list[Result]:
    load_prices()
    out = []
    for client in ("claude-code", "codex"):
        protocol, recorded = session(client, turns, rerecord)
        print(f"{client}: {len(recorded)} turns recorded", file=sys.stderr)
        out.append(replay(client, protocol, recorded, protocol, True))
        for target in (ANTH, RESP, CHAT, GEMINI):
            if target != protocol:
                for hints in (False, True):
                    out.append(replay(client, protocol, recorded, target, hints))
    return out


def table(results: list[Result]) -> str:
    native = {r.client: r for r in results if r.target == (ANTH if r.client == "claude-code" else RESP)}
    lines = ["| session | route | hints | turns | input tokens | cache read | read share | vs native | "
             "session cost |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        nat = native[r.client]
        is_native = r is nat
        route = f"native ({SHORT[r.target]})" if is_native else f"→ {SHORT[r.target]}"
        vs = "—" if is_native else f"{r.share / nat.share:.0%}" if nat.share else "n/a"
        cost = f"${r.cost:.3f}" if r.cost is not None else "unknown"
        lines.append(f"| {r.client} | {route} | {'—' if is_native else 'on' if r.hints else 'off'} | {r.requests} "
                     f"| {r.input_total:,} | {r.cache_read:,} | {r.share:.1%} | {vs} | {cost} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--rerecord", action="store_true")
    ap.add_argument("--write", action="store_true", help="write the Sessions section of docs/performance.md")
    a = ap.parse_args()
    t0 = time.monotonic()
    results = run(a.turns, a.rerecord)
    text = table(results)
    print(text)
    print(f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    if a.write:
        from benchmarks._common import write_section

        heading = ("## Sessions: prompt caching across translation\n\n"
                   f"`uv run python benchmarks/session.py --write` ({a.turns}-turn sessions of real clients, replayed "
                   "through mitmdump to upstreams that account caching by each provider's documented rules; "
                   "`benchmarks/caching_upstream.py`).\n\n")
        write_section(ROOT / "docs" / "performance.md", "sessions", heading + text, "Performance")


if __name__ == "__main__":
    main()
