"""The console flow list shows an LLM flow's summary under its row (the console's own row renderer,
rendered to text as urwid draws it)."""

from __future__ import annotations

import pytest
from mitmproxy.test import tflow
from mitmproxy.tools.console import common

from proxai_mitm.consolesummary import install, uninstall

SUMMARY = "refusal (cyber) · 21→12 tok · TTFT 50 ms · $0.0002 · gpt-4o→claude-sonnet-4-5"


@pytest.fixture
def wrapped():
    assert install()
    yield
    uninstall()
    assert not getattr(common.format_flow, "_proxai_summary", False)


def _text(f, mode: common.RenderMode, cols: int = 140) -> list[str]:
    w = common.format_flow(f, render_mode=mode, focused=False)
    return [line.decode().rstrip() for line in w.render((cols,)).text]


def _llm_flow():
    f = tflow.tflow(resp=True)
    f.metadata["proxai"] = {"version": 2, "kind": "generate"}
    f.comment = SUMMARY
    f.marked = ":no_entry:"
    return f


@pytest.mark.parametrize("mode", [common.RenderMode.LIST, common.RenderMode.TABLE])
def test_an_llm_flow_row_shows_its_summary(wrapped, mode):
    f = _llm_flow()
    plain = _text(f, mode)
    assert plain[-1].strip() == SUMMARY
    assert len(plain) == len(common.format_flow.__wrapped__(f, render_mode=mode, focused=False)
                             .render((140,)).text) + 1


def test_stop_reason_survives_a_narrow_terminal(wrapped):
    line = _text(_llm_flow(), common.RenderMode.LIST, cols=40)[-1]
    assert line.strip().startswith("refusal (cyber)") and len(line) <= 40


def test_other_flows_and_the_detail_head_are_untouched(wrapped):
    other = tflow.tflow(resp=True)
    other.comment = "a user's note"  # not ours: the console shows it where it always did
    original = common.format_flow.__wrapped__
    for f, mode in ((other, common.RenderMode.LIST), (_llm_flow(), common.RenderMode.DETAILVIEW)):
        assert _text(f, mode) == [x.decode().rstrip() for x in
                                  original(f, render_mode=mode, focused=False).render((140,)).text]


def test_install_is_idempotent(wrapped):
    assert not install()
