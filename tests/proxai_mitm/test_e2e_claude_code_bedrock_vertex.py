"""End to end: Claude Code in Amazon Bedrock mode and in Google Vertex AI mode, its base URL on a real
mitmdump in reverse mode, completes its Read tool loop on a Chat Completions upstream through a route.

What Claude Code sends in these modes (with authentication skipped, as behind a gateway):
- Bedrock (``CLAUDE_CODE_USE_BEDROCK=1``, ``ANTHROPIC_BEDROCK_BASE_URL``, ``CLAUDE_CODE_SKIP_BEDROCK_AUTH=1``,
  ``AWS_REGION``): first ``GET /inference-profiles?type=SYSTEM_DEFINED`` (a Bedrock control-plane call,
  to the same base URL; a 404 does not stop it), then ``POST /model/us.anthropic.<model>/invoke-with-response-stream``
  with an Anthropic body: ``anthropic_version: "bedrock-2023-05-31"``, ``anthropic_beta`` as a list,
  no ``model``, no ``stream``; no authorization header. It reads the answer as AWS event-stream frames.
- Vertex (``CLAUDE_CODE_USE_VERTEX=1``, ``ANTHROPIC_VERTEX_BASE_URL``, ``CLAUDE_CODE_SKIP_VERTEX_AUTH=1``,
  ``ANTHROPIC_VERTEX_PROJECT_ID``, ``CLOUD_ML_REGION``): ``POST {base}/projects/<p>/locations/<region>/
  publishers/anthropic/models/<model>:streamRawPredict`` — the base URL replaces
  ``https://<region>-aiplatform.googleapis.com/v1``, so it ends in ``/v1`` — with an Anthropic body:
  ``anthropic_version: "vertex-2023-10-16"``, ``stream: true``, no ``model``; betas in the
  ``anthropic-beta`` header; no authorization header.
"""

from __future__ import annotations

import pytest

from .e2e_util import CHAT, ENV_KEY_VALUE, UPSTREAM_MODEL, reverse_mitmdump, route_toml
from .test_e2e_claude_code import claude_tool_loop

pytestmark = pytest.mark.e2e

#: Bedrock's model-listing call Claude Code makes first; nothing routes it, so the fake's 404 answers
INFERENCE_PROFILES = "/inference-profiles?type=SYSTEM_DEFINED"
PROJECT, REGION = "proxai-e2e-project", "us-east5"
MODES = {
    "bedrock": ("/model/*", lambda url: {"CLAUDE_CODE_USE_BEDROCK": "1", "ANTHROPIC_BEDROCK_BASE_URL": url,
                                         "CLAUDE_CODE_SKIP_BEDROCK_AUTH": "1", "AWS_REGION": "us-east-1",
                                         "AWS_EC2_METADATA_DISABLED": "true"}),
    "vertex": ("/v1/projects/*", lambda url: {"CLAUDE_CODE_USE_VERTEX": "1", "ANTHROPIC_VERTEX_BASE_URL": url + "/v1",
                                              "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1",
                                              "ANTHROPIC_VERTEX_PROJECT_ID": PROJECT, "CLOUD_ML_REGION": REGION}),
}


@pytest.fixture(scope="module")
def routed(upstream, tmp_path_factory):
    """Both modes' generation paths routed to the Chat upstream."""
    routes = "".join(route_toml(f"claude-code-{mode}", path, CHAT, upstream) + "\n" for mode, (path, _) in MODES.items())
    with reverse_mitmdump(upstream, routes, tmp_path_factory) as m:
        yield m


@pytest.mark.parametrize("mode", list(MODES))
def test_claude_code_in_bedrock_and_vertex_mode_tool_loop_on_a_chat_upstream(mode, routed, upstream, tmp_path):
    _, env = MODES[mode]
    other = frozenset({INFERENCE_PROFILES}) if mode == "bedrock" else frozenset()
    claude_tool_loop(routed, env(routed.url), upstream, CHAT, tmp_path, other_paths=other)
    turns = [q for q in upstream.requests if q.path not in other]
    for q in turns:
        body = q.json()
        assert body["model"] == UPSTREAM_MODEL[CHAT] and body["stream"] is True
        assert q.header("authorization") == f"Bearer {ENV_KEY_VALUE}"
        # the Anthropic dialect's own fields stay behind (the version, Bedrock's beta list)
        assert "anthropic_version" not in body and "anthropic_beta" not in body
        assert "Read" in [t["function"]["name"] for t in body["tools"]]
    if mode == "bedrock":
        assert [q.method for q in upstream.requests if q.path == INFERENCE_PROFILES] in ([], ["GET"])
    # the flow is annotated in the client's dialect
    assert f"{'bedrock_invoke' if mode == 'bedrock' else 'vertex_anthropic'} → {CHAT}" in routed.log, \
        routed.log[-3000:]
