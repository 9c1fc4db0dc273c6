"""End to end: web search through a translated route with the real agent CLIs and loopback fakes.

- Claude Code on a Responses upstream: the model calls Claude Code's WebSearch tool; Claude Code asks
  its search (a request with Anthropic's ``web_search_20250305`` server tool), which reaches the
  upstream as the Responses ``web_search`` tool; the fake answers with a ``web_search_call`` item and
  text with a ``url_citation``; Claude Code's WebSearch tool gets the page (its result goes back
  upstream) and the answer comes out.
- Codex CLI on an Anthropic upstream: Codex's ``web_search`` tool reaches the upstream as Anthropic's
  server tool; the fake answers with ``server_tool_use``, ``web_search_tool_result`` and cited text;
  Codex receives a ``web_search_call`` item and the answer.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fake_upstream import (
    Reply,
    _anth_json,
    _anth_sse,
    _resp_sse,
    _resp_text_events,
)
from tests.mitm_harness import Mitmdump

from .e2e_util import ANTH, CLIENT_KEY, ENV_KEY, ENV_KEY_VALUE, RESP, UPSTREAM_MODEL, UPSTREAM_PATH
from .npm_clients import CLAUDE_CODE, CODEX_CLI, OutboundTrap, run_client, script_tool_loop
from .test_e2e_claude_code import QUIET
from .test_e2e_codex_cli import KEY_VAR, codex_config

pytestmark = pytest.mark.e2e

QUERY = "mitmproxy latest release"
PAGE = "https://mitmproxy.org/posts/releases/mitmproxy-12/"
TITLE = "mitmproxy 12 released"
FOUND = "mitmproxy 12 is the latest release."
ANSWER = "The latest release is mitmproxy 12."


def _route(tmp_path_factory, name: str, path: str, protocol: str, upstream) -> Mitmdump:
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(f'[[routes]]\nname = "{name}"\nmatch = {{ path = "{path}" }}\n'
                      f'target = {{ protocol = "{protocol}", base_url = "{upstream.url}", '
                      f'api_key_env = "{ENV_KEY}", model = "{UPSTREAM_MODEL[protocol]}" }}\n')
    return Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)}, env={ENV_KEY: ENV_KEY_VALUE})


@pytest.fixture(scope="module")
def claude_on_responses(upstream, tmp_path_factory):
    m = _route(tmp_path_factory, "claude-code", "/v1/messages", RESP, upstream)
    m.start()
    yield m
    m.cleanup()


@pytest.fixture(scope="module")
def codex_on_anthropic(upstream, tmp_path_factory):
    m = _route(tmp_path_factory, "codex", "/v1/responses", ANTH, upstream)
    m.start()
    yield m
    m.cleanup()


def _responses_search_reply() -> Reply:
    """A Responses turn that searched: the web_search_call item, then text citing the page."""
    ws = {"id": "ws_68f9a1b2search", "type": "web_search_call", "status": "completed",
          "action": {"type": "search", "query": QUERY}}
    ann = {"type": "url_citation", "url": PAGE, "title": TITLE, "start_index": 0, "end_index": len(FOUND)}
    msg = {"id": "msg_68f9a1b2search", "type": "message", "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": FOUND, "annotations": [ann], "logprobs": []}]}
    text = _resp_text_events(msg["id"], [FOUND])
    text.insert(-2, ("response.output_text.annotation.added",
                     {"item_id": msg["id"], "content_index": 0, "annotation_index": 0, "annotation": ann}))
    text[-1][1]["part"]["annotations"] = [ann]
    return Reply.sse(_resp_sse([ws, msg], [[], text]))


def _searched(body: dict) -> bool:
    return any(t.get("type") == "web_search" for t in body.get("tools") or ())


def test_claude_code_web_search_on_a_responses_upstream(claude_on_responses, upstream, tmp_path):
    exe = CLAUDE_CODE.install()
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    upstream.reset()
    path = UPSTREAM_PATH[RESP]
    # later turns answer; the first streamed turn calls WebSearch, the second is the search itself
    script_tool_loop(upstream, RESP, call_id="call_ClaudeCodeSearch0001", name="WebSearch", args={"query": QUERY},
                     answer=ANSWER, calls=0)
    upstream.on(path, replace(_responses_search_reply(), times=1), stream=True)
    script_call = _resp_call("call_ClaudeCodeSearch0001", "WebSearch", {"query": QUERY})
    upstream.on(path, script_call, stream=True)
    with OutboundTrap() as trap:
        r = run_client([str(exe), "-p", f"Search the web: {QUERY}", "--output-format", "json",
                        "--allowedTools", "WebSearch"], cwd=work, home=home,
                       env={**QUIET, "ANTHROPIC_BASE_URL": claude_on_responses.url, "ANTHROPIC_API_KEY": CLIENT_KEY},
                       trap=trap)
    assert r.returncode == 0, f"claude exited {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
    trap.assert_no_egress()
    out = json.loads(r.stdout)
    assert out["is_error"] is False and out["result"] == ANSWER, out
    bodies = [q.json() for q in upstream.requests if q.path.partition("?")[0] == path]
    # Claude Code's search request reached the upstream with the Responses web_search tool
    searches = [b for b in bodies if _searched(b)]
    assert searches, [b.get("tools") for b in bodies]
    # and its WebSearch tool got the page: the tool result that went back upstream names it
    results = [i for b in bodies for i in b.get("input", []) if isinstance(i, dict)
               and i.get("type") == "function_call_output" and i.get("call_id") == "call_ClaudeCodeSearch0001"]
    assert results and PAGE in json.dumps(results), [json.dumps(b)[-1500:] for b in bodies]


def _resp_call(call_id: str, name: str, args: dict) -> Reply:
    arguments = json.dumps(args)
    item = {"id": "fc_68f9a1b2search", "type": "function_call", "status": "completed", "call_id": call_id,
            "name": name, "arguments": arguments}
    return Reply.sse(_resp_sse([item], [[("response.function_call_arguments.delta",
                                          {"item_id": item["id"], "delta": arguments}),
                                         ("response.function_call_arguments.done",
                                          {"item_id": item["id"], "arguments": arguments})]]), times=1)


def _anthropic_search_reply() -> tuple[Reply, Reply]:
    """An Anthropic turn that searched (streamed and complete): server_tool_use, its results, cited text."""
    use = {"type": "server_tool_use", "id": "srvtoolu_01CodexSearch00001", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": use["id"], "content": [
        {"type": "web_search_result", "url": PAGE, "title": TITLE, "encrypted_content": "EqgfCioIARgBIiQ3",
         "page_age": "2 days ago"}]}
    cite = {"type": "web_search_result_location", "url": PAGE, "title": TITLE, "cited_text": FOUND,
            "encrypted_index": "Eo8BCioIAhgBIiQ"}
    sse = _anth_sse([(use, [{"type": "input_json_delta", "partial_json": json.dumps({"query": QUERY})}]),
                     (result, []),
                     ({"type": "text", "text": "", "citations": []},
                      [{"type": "citations_delta", "citation": cite}, {"type": "text_delta", "text": ANSWER}])],
                    "end_turn")
    whole = _anth_json([dict(use, input={"query": QUERY}), result,
                        {"type": "text", "text": ANSWER, "citations": [cite]}], "end_turn")
    return Reply.sse(sse), Reply.json(whole)


def test_codex_web_search_on_an_anthropic_upstream(codex_on_anthropic, upstream, tmp_path: Path):
    exe = CODEX_CLI.install()
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    # (a top-level key: before the config's tables)
    (codex_home / "config.toml").write_text('web_search = "live"\n' + codex_config(codex_on_anthropic.url))
    upstream.reset()
    path = UPSTREAM_PATH[ANTH]
    sse, whole = _anthropic_search_reply()
    upstream.on(path, whole, stream=False)
    upstream.on(path, sse, stream=True)
    with OutboundTrap() as trap:
        r = run_client([str(exe), "exec", "--skip-git-repo-check", "--json", f"Search the web: {QUERY}"],
                       cwd=work, home=home, env={"CODEX_HOME": str(codex_home), KEY_VAR: CLIENT_KEY}, trap=trap)
    assert r.returncode == 0, f"codex exited {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
    trap.assert_no_egress()
    bodies = [q.json() for q in upstream.requests if q.path == path]
    assert bodies
    # Codex's web search reached the upstream as Anthropic's web search server tool
    assert any(t.get("type") == "web_search_20250305" for b in bodies for t in b.get("tools") or ()), \
        [b.get("tools") for b in bodies]
    events = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    items = [e.get("item") or {} for e in events]
    assert any(i.get("type") == "web_search" for i in items), r.stdout[-3000:]
    assert any(i.get("type") == "agent_message" and i.get("text") == ANSWER for i in items), r.stdout[-3000:]
