"""End to end: real agent CLIs keep going through a route's fallbacks (a real mitmdump in reverse mode,
loopback fakes for every upstream).

- Claude Code on a primary Anthropic upstream that answers 529 (overloaded) to every second request,
  with a fallback on Responses: the tool call comes from the primary, the answer after the tool
  result from the fallback.
- Codex CLI on a primary that refuses connections, with a fallback on Anthropic.
- Gemini CLI on a primary Gemini upstream that answers 429 (quota), with a fallback on Chat.

Each completes its tool loop, the tool result reaching the upstream that answered, and none tries
to leave loopback (the trap of ``npm_clients``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_upstream import FakeUpstream, Reply, real_path
from tests.mitm_harness import Mitmdump, free_port

from .e2e_util import ANTH, CHAT, CLIENT_KEY, ENV_KEY, ENV_KEY_VALUE, RESP, UPSTREAM_MODEL, UPSTREAM_PATH
from .npm_clients import (
    CLAUDE_CODE,
    GEMINI_CLI,
    OutboundTrap,
    errors_answered,
    run_client,
    script_tool_loop,
    tool_results,
)
from .test_e2e_claude_code import QUIET
from .test_e2e_codex_cli import codex_tool_loop

pytestmark = pytest.mark.e2e

GEMINI = "gemini_generate_content"
NOTE = "secret-note-content-91"
ANSWER = "The note says: secret-note-content-91."
OVERLOADED = Reply.json({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                        status=529, headers=[("request-id", "req_011CfailoverE2E")])
QUOTA = Reply.json({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                              "status": "RESOURCE_EXHAUSTED"}}, status=429)


class FailingUpstream(FakeUpstream):
    """A fake whose generation paths answer ``error`` to every ``every``-th request (1: to all of
    them) and as scripted otherwise; paths no provider serves stay a 404."""

    def __init__(self, error: Reply, every: int) -> None:
        super().__init__()
        self.error = error
        self.every = every
        self.served = 0

    def _pick(self, path: str, streaming: bool) -> Reply | None:
        if not real_path(path)[0]:
            return None
        self.served += 1
        if self.served % self.every == 0:
            return self.error
        return super()._pick(path, streaming)


def _routes(tmp: Path, name: str, path: str, primary: tuple[str, str, str | None], fallback: tuple[str, str, str]) -> Path:
    """A routes file: requests on ``path`` go to ``primary`` (protocol, base URL, model), then to
    ``fallback``, both with the environment's key."""
    def upstream(protocol: str, url: str, model: str | None) -> str:
        m = f', model = "{model}"' if model else ""
        return f'{{ protocol = "{protocol}", base_url = "{url}", api_key_env = "{ENV_KEY}"{m} }}'

    p = tmp / "routes.toml"
    p.write_text(f'[[routes]]\nname = "{name}"\nmatch = {{ path = "{path}" }}\n'
                 f'target = {upstream(*primary)}\nfallbacks = [{upstream(*fallback)}]\n')
    return p


def _proxy(reverse_to: str, routes: Path) -> Mitmdump:
    return Mitmdump(mode=f"reverse:{reverse_to}", options={"proxai_config": str(routes)},
                    env={ENV_KEY: ENV_KEY_VALUE}).start()


def _workdir(tmp_path: Path) -> tuple[Path, Path, Path]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    note = work / "notes.txt"
    note.write_text(NOTE + "\n")
    return work, home, note


def test_claude_code_fails_over_from_an_overloaded_anthropic_upstream_to_responses(upstream, tmp_path):
    exe = CLAUDE_CODE.install()
    work, home, note = _workdir(tmp_path)
    call_id = "toolu_01FailoverClaude000000"
    upstream.reset()
    with FailingUpstream(OVERLOADED, every=2) as primary:
        script_tool_loop(primary, ANTH, call_id=call_id, name="Read", args={"file_path": str(note)}, answer=ANSWER)
        script_tool_loop(upstream, RESP, call_id=call_id, name="Read", args={}, answer=ANSWER, calls=0)
        routes = _routes(tmp_path, "claude-code", "/v1/messages", (ANTH, primary.url, None),
                         (RESP, upstream.url, UPSTREAM_MODEL[RESP]))
        m = _proxy(primary.url, routes)
        try:
            with OutboundTrap() as trap:
                r = run_client([str(exe), "-p", "Read notes.txt and tell me what it says.", "--output-format", "json",
                                "--allowedTools", "Read"], cwd=work, home=home, trap=trap,
                               env={**QUIET, "ANTHROPIC_BASE_URL": m.url, "ANTHROPIC_API_KEY": CLIENT_KEY})
            log = m.log
        finally:
            m.cleanup()
        assert r.returncode == 0, f"claude exited {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
        trap.assert_no_egress()
        assert not errors_answered(log)
        out = json.loads(r.stdout)
        assert out["is_error"] is False and out["result"] == ANSWER, out
        # the primary asked for the file, then was overloaded; the fallback got the tool result
        assert [q.path.partition("?")[0] for q in primary.requests][:2] == [UPSTREAM_PATH[ANTH]] * 2
        assert {q.path for q in upstream.requests} == {UPSTREAM_PATH[RESP]}
        back = [res for q in upstream.requests for res in tool_results(q.json(), RESP, call_id)]
        assert back and NOTE in back[0], [q.body[-2000:] for q in upstream.requests]
        for q in [*primary.requests, *upstream.requests]:
            assert CLIENT_KEY not in json.dumps(q.headers)
        assert CLIENT_KEY not in log


def test_codex_cli_fails_over_from_a_refused_connection_to_anthropic(upstream, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    routes = _routes(tmp_path, "codex", "/v1/responses", (RESP, dead, None), (ANTH, upstream.url, UPSTREAM_MODEL[ANTH]))
    m = _proxy(upstream.url, routes)
    try:
        codex_tool_loop(m, upstream, ANTH, tmp_path)
        log = m.log
    finally:
        m.cleanup()
    for q in upstream.requests:
        assert q.header("x-api-key") == ENV_KEY_VALUE
    assert CLIENT_KEY not in log


def test_gemini_cli_fails_over_from_a_rate_limited_gemini_upstream_to_chat(upstream, tmp_path):
    exe = GEMINI_CLI.install()
    work, home, note = _workdir(tmp_path)
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "telemetry": {"enabled": False},
    }))
    call_id = "call_FailoverGemini0001"
    upstream.reset()
    with FailingUpstream(QUOTA, every=1) as primary:
        script_tool_loop(upstream, CHAT, call_id=call_id, name="read_file", args={"file_path": str(note)},
                         answer=ANSWER)
        routes = _routes(tmp_path, "gemini-cli", "/v1beta/*", (GEMINI, primary.url, None),
                         (CHAT, upstream.url, UPSTREAM_MODEL[CHAT]))
        m = _proxy(primary.url, routes)
        try:
            with OutboundTrap() as trap:
                r = run_client([str(exe), "-p", "Read notes.txt and tell me what it says.", "--approval-mode", "yolo",
                                "--skip-trust", "-o", "json", "-m", "gemini-2.5-flash"], cwd=work, home=home,
                               trap=trap, env={"GEMINI_API_KEY": CLIENT_KEY, "GOOGLE_GEMINI_BASE_URL": m.url})
            log = m.log
        finally:
            m.cleanup()
        assert r.returncode == 0, f"gemini exited {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
        trap.assert_no_egress()
        assert not errors_answered(log)
        out = json.loads(r.stdout[r.stdout.index("{"):])
        assert ANSWER in out["response"], out
        # the primary was asked (and limited) at least once; every answer came from the fallback
        assert primary.requests and all(":" in q.path and q.path.startswith("/v1beta/models/")
                                        for q in primary.requests), [q.path for q in primary.requests]
        assert {q.path for q in upstream.requests} == {UPSTREAM_PATH[CHAT]}
        back = [res for q in upstream.requests for res in tool_results(q.json(), CHAT, call_id)]
        assert back and NOTE in back[0], [q.body[-2000:] for q in upstream.requests]
        for q in [*primary.requests, *upstream.requests]:
            assert CLIENT_KEY not in json.dumps(q.headers) and CLIENT_KEY not in q.path
        assert CLIENT_KEY not in log
