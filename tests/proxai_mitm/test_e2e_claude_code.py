"""End to end: Claude Code (npm ``@anthropic-ai/claude-code``), run non-interactively with
``ANTHROPIC_BASE_URL`` on a real mitmdump in reverse mode, completes a tool loop: the upstream asks
for a file with Claude Code's ``Read`` tool, Claude Code reads it, the result goes back upstream and
the answer comes out. Once on an Anthropic upstream (passed through), once on a Chat Completions
upstream through a route (translated both ways).

Claude Code runs with a fresh HOME, a dummy key, telemetry, auto-update and non-essential traffic
off, and a trap proxy for anything not on loopback: a request leaving 127.0.0.1 fails the test.
The CLI is installed with npm into ``~/.cache/proxai/claude-code`` when missing (``npm_clients``).
"""

from __future__ import annotations

import json

import pytest

from tests.mitm_harness import Mitmdump

from .e2e_util import (
    ANTH,
    CHAT,
    CLIENT_KEY,
    ENV_KEY_VALUE,
    UPSTREAM_MODEL,
    UPSTREAM_PATH,
    reverse_mitmdump,
    route_toml,
)
from .npm_clients import (
    CLAUDE_CODE,
    OutboundTrap,
    errors_answered,
    run_client,
    script_tool_loop,
    tool_results,
)

pytestmark = pytest.mark.e2e

NOTE = "secret-note-content-77"
ANSWER = "The note says: secret-note-content-77."
CALL_ID = {ANTH: "toolu_01ClaudeCodeLoop000000", CHAT: "call_ClaudeCodeLoop0000"}

#: Claude Code's switches for a run that talks to its base URL and nothing else
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_BUG_COMMAND": "1"}


def claude_tool_loop(proxy: Mitmdump, proxy_env: dict[str, str], upstream, protocol: str, tmp_path, *,
                     other_paths: frozenset[str] = frozenset()) -> dict:
    """Script ``upstream`` for a Read tool loop in ``protocol``, run Claude Code with ``proxy_env``
    (its base URL on ``proxy``), check the answer, that no answer was an error and that the file's
    content went back as the tool result; the parsed JSON result of the CLI. ``other_paths``:
    requests besides the generation path the mode makes."""
    exe = CLAUDE_CODE.install()
    work = tmp_path / "work"
    work.mkdir()
    note = work / "notes.txt"
    note.write_text(NOTE + "\n")
    home = tmp_path / "home"
    home.mkdir()
    upstream.reset()
    script_tool_loop(upstream, protocol, call_id=CALL_ID[protocol], name="Read", args={"file_path": str(note)},
                     answer=ANSWER)
    mark = len(proxy.log)
    with OutboundTrap() as trap:
        r = run_client([str(exe), "-p", "Read notes.txt and tell me what it says.", "--output-format", "json",
                        "--allowedTools", "Read"], cwd=work, home=home, env={**QUIET, **proxy_env}, trap=trap)
    assert r.returncode == 0, f"claude exited {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
    trap.assert_no_egress()
    assert not errors_answered(proxy.log[mark:])
    out = json.loads(r.stdout)
    assert out["is_error"] is False and out["result"] == ANSWER, out
    assert out["num_turns"] >= 2, out
    # every generation request Claude Code caused reached the upstream's real path
    turns = [q for q in upstream.requests if q.path not in other_paths]
    assert {q.path.partition("?")[0] for q in turns} == {UPSTREAM_PATH[protocol]}, [q.path for q in upstream.requests]
    back = [res for q in turns for res in tool_results(q.json(), protocol, CALL_ID[protocol])]
    assert back and NOTE in back[0], [q.body[-2000:] for q in turns]
    return out


@pytest.fixture(scope="module")
def passthrough(upstream):
    with reverse_mitmdump(upstream) as m:
        yield m


@pytest.fixture(scope="module")
def routed(upstream, tmp_path_factory):
    with reverse_mitmdump(upstream, route_toml("claude-code", "/v1/messages", CHAT, upstream), tmp_path_factory) as m:
        yield m


def test_claude_code_tool_loop_on_an_anthropic_upstream(passthrough, upstream, tmp_path):
    claude_tool_loop(passthrough, {"ANTHROPIC_BASE_URL": passthrough.url, "ANTHROPIC_API_KEY": CLIENT_KEY}, upstream,
                     ANTH, tmp_path)
    # passed through: Claude Code's own key and beta flags reach the (same-host) upstream unchanged
    for q in upstream.requests:
        assert q.header("x-api-key") == CLIENT_KEY
        assert "claude-code-" in (q.header("anthropic-beta") or "")
    assert "anthropic_messages" in passthrough.log


def test_claude_code_tool_loop_on_a_chat_upstream_through_a_route(routed, upstream, tmp_path):
    claude_tool_loop(routed, {"ANTHROPIC_BASE_URL": routed.url, "ANTHROPIC_API_KEY": CLIENT_KEY}, upstream, CHAT,
                     tmp_path)
    for q in upstream.requests:
        body = q.json()
        assert body["model"] == UPSTREAM_MODEL[CHAT]
        assert q.header("authorization") == f"Bearer {ENV_KEY_VALUE}"
        assert CLIENT_KEY not in json.dumps(q.headers) and q.header("anthropic-beta") is None
        # Claude Code's tools arrive as Chat functions, Read among them
        assert "Read" in [t["function"]["name"] for t in body["tools"]]
    assert CLIENT_KEY not in routed.log
