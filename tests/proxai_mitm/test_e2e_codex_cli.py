"""End to end: Codex CLI (npm ``@openai/codex``), ``codex exec`` with a model provider whose base URL
is a real mitmdump in reverse mode, completes a tool loop: the upstream asks for a shell command with
Codex's ``exec_command`` tool, Codex runs it, its output goes back upstream and the answer comes out.
Once on a Responses upstream (passed through), once on an Anthropic upstream through a route
(translated both ways).

Codex runs with a fresh HOME and CODEX_HOME (its config.toml: the provider, analytics, feedback,
update checks and plugins off) and a trap proxy for anything not on loopback: a request leaving
127.0.0.1 fails the test. The CLI is installed with npm into ``~/.cache/proxai/codex-cli`` when
missing (``npm_clients``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mitm_harness import Mitmdump

from .e2e_util import (
    ANTH,
    CLIENT_KEY,
    ENV_KEY_VALUE,
    RESP,
    UPSTREAM_MODEL,
    UPSTREAM_PATH,
    reverse_mitmdump,
    route_toml,
)
from .npm_clients import CODEX_CLI, OutboundTrap, errors_answered, run_client, script_tool_loop, tool_results

pytestmark = pytest.mark.e2e

#: the command's output is not in its text, so finding it upstream proves the command ran
COMMAND = "echo codex-loop-$((6*7))"
OUTPUT = "codex-loop-42"
ANSWER = "The command printed codex-loop-42."
CALL_ID = {RESP: "call_CodexLoop000000001", ANTH: "toolu_01CodexCliLoop0000000"}
KEY_VAR = "PROXAI_CODEX_KEY"


def codex_config(base_url: str) -> str:
    """A config.toml whose only provider is the proxy and that turns off every call elsewhere."""
    return (f'model = "gpt-5"\nmodel_provider = "proxai"\ncheck_for_update_on_startup = false\n\n'
            f'[model_providers.proxai]\nname = "ProxAI"\nbase_url = "{base_url}/v1"\nwire_api = "responses"\n'
            f'env_key = "{KEY_VAR}"\n\n'
            '[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n\n'
            '[features]\nplugins = false\napps = false\n')


def codex_tool_loop(proxy: Mitmdump, upstream, protocol: str, tmp_path: Path) -> str:
    """Script ``upstream`` for an exec_command tool loop in ``protocol``, run ``codex exec`` against
    ``proxy``, check the answer, that no answer was an error and that the command's output went
    back as the tool result; what Codex printed."""
    exe = CODEX_CLI.install()
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(codex_config(proxy.url))
    upstream.reset()
    script_tool_loop(upstream, protocol, call_id=CALL_ID[protocol], name="exec_command", args={"cmd": COMMAND},
                     answer=ANSWER)
    mark = len(proxy.log)
    with OutboundTrap() as trap:
        r = run_client([str(exe), "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
                        "Run the echo command and tell me what it printed."], cwd=work, home=home,
                       env={"CODEX_HOME": str(codex_home), KEY_VAR: CLIENT_KEY}, trap=trap)
    assert r.returncode == 0, f"codex exited {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
    trap.assert_no_egress()
    assert not errors_answered(proxy.log[mark:])
    assert r.stdout.strip() == ANSWER, r.stdout
    assert {q.path for q in upstream.requests} == {UPSTREAM_PATH[protocol]}, [q.path for q in upstream.requests]
    assert all(q.method == "POST" for q in upstream.requests)
    back = [res for q in upstream.requests for res in tool_results(q.json(), protocol, CALL_ID[protocol])]
    assert back and OUTPUT in back[0], [q.body[-2000:] for q in upstream.requests]
    return r.stdout


@pytest.fixture(scope="module")
def passthrough(upstream):
    with reverse_mitmdump(upstream) as m:
        yield m


@pytest.fixture(scope="module")
def routed(upstream, tmp_path_factory):
    with reverse_mitmdump(upstream, route_toml("codex", "/v1/responses", ANTH, upstream), tmp_path_factory) as m:
        yield m


def test_codex_cli_tool_loop_on_a_responses_upstream(passthrough, upstream, tmp_path):
    codex_tool_loop(passthrough, upstream, RESP, tmp_path)
    # passed through: Codex's own key reaches the (same-host) upstream
    for q in upstream.requests:
        assert q.header("authorization") == f"Bearer {CLIENT_KEY}"
    assert "openai_responses" in passthrough.log


def test_codex_cli_tool_loop_on_an_anthropic_upstream_through_a_route(routed, upstream, tmp_path):
    codex_tool_loop(routed, upstream, ANTH, tmp_path)
    for q in upstream.requests:
        body = q.json()
        assert body["model"] == UPSTREAM_MODEL[ANTH] and body["stream"] is True
        assert q.header("x-api-key") == ENV_KEY_VALUE
        assert CLIENT_KEY not in json.dumps(q.headers)
        # Codex's function tools arrive as Anthropic tools, exec_command among them
        assert "exec_command" in [t["name"] for t in body["tools"]]
    assert CLIENT_KEY not in routed.log
