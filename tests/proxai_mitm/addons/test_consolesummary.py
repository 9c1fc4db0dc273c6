"""The console flow list shows an LLM flow's summary under its row (the console's own row renderer,
rendered to text as urwid draws it)."""

from __future__ import annotations

import pytest
from mitmproxy.test import tflow
from mitmproxy.tools.console import common

from proxai_mitm.addons.consolesummary import install, uninstall

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


@pytest.mark.e2e
def test_real_console_under_tmux(tmp_path):
    """A real ``mitmproxy`` (console UI) reading a recorded refusal shows its summary in the flow list."""
    import shutil
    import subprocess
    import sys
    import time
    from pathlib import Path

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    root = Path(__file__).resolve().parents[3]
    exe = Path(sys.executable).parent / "mitmproxy"
    sock = f"proxai-test-{tmp_path.name}"
    cmd = (f"{exe} --listen-host 127.0.0.1 -p 0 --set confdir={tmp_path} -s {root / 'addon' / 'proxai.py'} "
           f"-r {root / 'flows' / 'refusal-chat.mitm'}")
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "t", "-x", "90", "-y", "12", cmd], check=True)
    try:
        screen = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "tok · TTFT" not in screen:
            time.sleep(0.5)
            screen = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-t", "t"],
                                    capture_output=True, text=True).stdout
        lines = [ln.strip() for ln in screen.splitlines()]
        assert any(ln.startswith("refusal (output-refusal) · 21→9 tok · TTFT ") for ln in lines), screen
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
