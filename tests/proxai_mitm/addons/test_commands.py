"""commands.py: the contentview registration and the report / export commands."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mitmproxy import contentviews, exceptions
from mitmproxy import io as mio
from mitmproxy.test import taddons, tflow

from proxai_mitm.addon import ProxAI

from ..chain import Chain
from ..helpers import ANTH, CHAT, json_bytes, make_flow, respond

SECRET = "sk-client-secret-123"  # the Authorization of make_flow


def _commands(addon: Chain, v: Any, tctx: Any, tmp_path: Any) -> None:
    assert {"proxai.report", "proxai.export"} <= set(tctx.master.commands.commands)
    f1 = make_flow(ANTH)
    respond(f1, 200, json_bytes(ANTH, "refusal"), "application/json")
    f2 = make_flow(CHAT)
    respond(f2, 200, json_bytes(CHAT, "max"), "application/json")
    other = tflow.tflow(resp=True)
    v.add([f1, f2, other])
    lines = tctx.command(addon.commands.report, "@all")
    assert isinstance(lines, list)  # the console shows one row per line
    assert lines[0].split()[:3] == ["time", "api", "model"]
    assert "refusal" in lines[2] and "cyber" in lines[2] and "max_output" in lines[3]
    assert "2 exchange(s): max_output 1, refusal 1" in lines and "totals per model" in lines
    out = tmp_path / "x.jsonl"
    assert tctx.command(addon.commands.export, "@all", str(out)) == f"exported 2 LLM exchange(s) to {out}"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["stop"]["reason"] for r in rows] == ["refusal", "max_output"]
    assert tctx.command(addon.commands.export, "~u chat/completions", str(out)) == f"exported 1 LLM exchange(s) to {out}"
    assert "1 exchange(s): refusal 1" in tctx.master.commands.execute("proxai.report \"~u /v1/messages\"")
    with pytest.raises(exceptions.CommandError):
        tctx.command(addon.commands.export, "@all", str(tmp_path / "no" / "such" / "dir.jsonl"))


def test_contentview_registered_on_load(addon):
    assert contentviews.registry["llm"].name == "LLM"


def test_commands(tmp_path):
    """The commands as the console / mitmweb run them: flow specs resolved by mitmproxy's view."""
    from mitmproxy.addons import view

    proxai, v = ProxAI(), view.View()
    with taddons.context(proxai, v) as tctx:
        _commands(Chain(tctx, proxai), v, tctx, tmp_path)


@pytest.mark.parametrize("name", ["tool-loop", "refusal-chat", "refusal-responses", "refusal-anthropic",
                                  "max-output", "cut-stream", "upstream-error"])
def test_llm_view_renders_the_shipped_flows(name):
    """Every request and response body of flows/ through the view, as mitmproxy calls it."""
    from pathlib import Path

    from proxai_mitm.reporting.contentview import LLMContentview

    view = LLMContentview()
    path = Path(__file__).resolve().parents[3] / "flows" / f"{name}.mitm"
    flows = list(mio.FlowReader(open(path, "rb")).stream())  # noqa: SIM115
    assert flows
    for f in flows:
        for msg in (f.request, f.response):
            data = msg.get_content(strict=False)
            md = contentviews.Metadata(flow=f, http_message=msg, content_type=msg.headers.get("content-type"))
            assert view.render_priority(data, md) > 1  # auto-selected
            out = view.prettify(data, md)
            assert "[LLM view: could not" not in out, (name, out)
            if msg is f.response and f.error is None:
                stop = f.metadata["proxai"]["stop"]["reason"]
                assert "stop: " in out or "error" in out.lower(), out
                assert stop in out or f.response.status_code >= 400, (stop, out)
