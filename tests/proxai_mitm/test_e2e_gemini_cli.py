"""End to end: Gemini CLI (npm ``@google/gemini-cli``), run non-interactively with its base URL on a
real mitmdump, completes a tool loop on a loopback Anthropic upstream (the CLI reads a file with its
own ``read_file`` tool, the result goes back, the answer comes out).

Runs in CI: the CLI is installed with npm into ``~/.cache/proxai/gemini-cli`` (or
``$PROXAI_GEMINI_CLI_CACHE``) when missing (``npm_clients.GEMINI_CLI``); when it cannot be installed
the test fails with the reason, never skips.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.fake_upstream import Reply, _anth_json, _anth_sse

from .e2e_util import ANTH, CLIENT_KEY, ENV_KEY, ENV_KEY_VALUE, UPSTREAM_MODEL, reverse_mitmdump, route_toml
from .npm_clients import GEMINI_CLI

pytestmark = pytest.mark.e2e

NOTE = "secret-note-content-42"
ANSWER = "The note says: secret-note-content-42."
CALL_ID = "toolu_01GeminiCliLoop0000000"


@pytest.fixture(scope="module", params=["routes-file", "user-guide-command"])
def proxy(request, upstream, tmp_path_factory):
    if request.param == "routes-file":
        # every Gemini request of the CLI (its main turns and its helper calls) goes to Claude
        proxy = reverse_mitmdump(upstream, route_toml("cli", "/v1beta/*", ANTH, upstream), tmp_path_factory)
    else:
        # the user guide's "Gemini CLI on Claude" command (no base URL: the reverse target's host,
        # reached on Anthropic's own path, never the CLI's /v1beta prefix)
        proxy = reverse_mitmdump(upstream, options={"proxai_target": ANTH, "proxai_key_env": ENV_KEY,
                                                    "proxai_model": f"*={UPSTREAM_MODEL[ANTH]}"})
    with proxy as m:
        yield m


def test_gemini_cli_tool_loop_on_an_anthropic_upstream(proxy, upstream, tmp_path):
    exe = GEMINI_CLI.install()
    work = tmp_path / "work"
    work.mkdir()
    note = work / "notes.txt"
    note.write_text(NOTE + "\n")
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "telemetry": {"enabled": False},
    }))
    tool = {"type": "tool_use", "id": CALL_ID, "name": "read_file", "input": {"file_path": str(note)}}
    answer = {"type": "text", "text": ANSWER}
    upstream.reset()
    # the first streamed turn asks for the file, every later one answers (helper calls included)
    upstream.on("/v1/messages", Reply.sse(_anth_sse([({"type": "text", "text": ""},
                                                      [{"type": "text_delta", "text": ANSWER}])], "end_turn")),
                stream=True)
    upstream.on("/v1/messages", Reply.sse(_anth_sse([(dict(tool, input={}), [
        {"type": "input_json_delta", "partial_json": json.dumps(tool["input"])}])], "tool_use"), times=1),
        stream=True)
    upstream.on("/v1/messages", Reply.json(_anth_json([answer], "end_turn")), stream=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env.update(HOME=str(home), GEMINI_API_KEY=CLIENT_KEY, GOOGLE_GEMINI_BASE_URL=proxy.url,
               NO_COLOR="1", CI="1")
    r = subprocess.run([str(exe), "-p", "Read notes.txt and tell me what it says.", "--approval-mode", "yolo",
                        "--skip-trust", "-o", "json", "-m", "gemini-2.5-flash"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, f"gemini exited {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert ANSWER in out["response"], out
    # the fake answers only Anthropic's real path: every request the CLI caused went there, with no query
    assert {q.path for q in upstream.requests} == {"/v1/messages"}, [q.path for q in upstream.requests]
    turns = upstream.requests
    sent = [q.body.decode() for q in turns]
    # the tool result went back to Claude as a tool_result paired with Claude's call id
    back = [json.loads(b) for b in sent if CALL_ID in b and NOTE in b]
    assert back, sent
    blocks = [b for m in back[0]["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert any(b.get("type") == "tool_result" and b.get("tool_use_id") == CALL_ID for b in blocks), blocks
    for q in turns:
        assert q.header("x-api-key") == ENV_KEY_VALUE
        assert CLIENT_KEY not in json.dumps(q.headers) and CLIENT_KEY not in q.path
    assert CLIENT_KEY not in proxy.log
