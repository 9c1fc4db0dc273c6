"""The command samples of README.md and docs/*.md, run as a reader would run them.

- Every command in a ``sh`` block that runs offline and ends by itself (``proxai report``,
  ``proxai export``, ``proxai addon-path``, ``proxai --version``, ``mitmdump -n -r …``) is run in a
  scratch folder that holds the example recordings (``flows/``, and ``session.mitm`` for the samples
  that name a recording of yours): it must exit 0 without a traceback. Servers, real clients and
  commands that need a key are the end-to-end tests' business.
- A shown output is tied to its command by a comment just before it, invisible on the rendered page:
  ``<!-- output: COMMAND -->``. The next fenced block (or Markdown table) must equal what COMMAND
  prints, after mitmproxy's time/client prefix and trailing spaces are taken off. COMMAND is run by
  bash (a pipe to ``grep`` picks lines), with ``uv run`` meaning this environment.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
#: mitmdump's line prefix: ``[23:40:24.123][127.0.0.1:54321] ``
_PREFIX = re.compile(r"^\[\d\d:\d\d:\d\d\.\d{3}\](?:\[[^\]]*\])? ?")
_MARK = re.compile(r"^<!-- output: (?P<cmd>.+?) -->$")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    lang: str
    text: str
    #: the command whose output this block shows (an ``output`` comment before it), or None
    output_of: str | None


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    pending: str | None = None
    while i < len(lines):
        ln = lines[i]
        m = _MARK.match(ln.strip())
        if m:
            pending = m.group("cmd")
        elif ln.startswith("```"):
            lang = ln[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append(Block(path.name, i + 1, lang, "\n".join(lines[i + 1:j]), pending))
            pending, i = None, j
        elif pending is not None and ln.startswith("|"):  # a Markdown table as the shown output
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(Block(path.name, i + 1, "table", "\n".join(lines[i:j]), pending))
            pending, i = None, j - 1
        elif ln.strip() and pending is not None and not ln.startswith(("(", "prints")):
            pass  # prose between the comment and its block is allowed
        i += 1
    return out


def _commands(block: Block) -> list[str]:
    """The commands of a ``sh`` block: continuation lines joined, comments and heredocs dropped."""
    cmds: list[str] = []
    cur = ""
    heredoc: str | None = None
    for ln in block.text.splitlines():
        if heredoc is not None:
            if ln.strip() == heredoc:
                heredoc = None
            continue
        cur += ln.rstrip("\\").rstrip() + " " if ln.rstrip().endswith("\\") else ln
        if ln.rstrip().endswith("\\"):
            continue
        m = re.search(r"<<-?'?(\w+)'?", cur)
        if m:
            heredoc = m.group(1)
        try:
            words = shlex.split(cur, comments=True)
        except ValueError:
            words = []
        if words:
            cmds.append(shlex.join(words))
        cur = ""
    return cmds


def _offline(cmd: str) -> bool:
    """Runs with no network and ends by itself (see the module docstring)."""
    words = shlex.split(cmd)
    if words[:2] == ["uv", "run"]:
        words = words[2:]
    if words[:3] == ["python", "-m", "proxai_mitm"]:
        words = ["proxai", *words[3:]]
    if any("..." in w or w.startswith("[") or w.isupper() for w in words):
        return False  # a usage synopsis, not a command
    if words[:1] == ["proxai"]:
        return len(words) > 1 and words[1] in ("report", "export", "addon-path", "--version")
    if words[:1] == ["mitmdump"]:
        flags = "".join(w[1:] for w in words if w.startswith("-") and not w.startswith("--"))
        return "n" in flags and "r" in flags
    return False


def _all_blocks() -> list[Block]:
    return [b for p in DOCS for b in _blocks(p)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROXAI_", "MITMPROXY_"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", TZ="UTC", COLUMNS="200", NO_COLOR="1",
               PYTHONPATH=str(ROOT))
    return env


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "flows", d / "flows")
    shutil.copytree(ROOT / "addon", d / "addon")
    for name in ("session.mitm", "capture.mitm"):  # the samples' names for a recording of yours
        shutil.copy(ROOT / "flows" / "tool-loop.mitm", d / name)
    return d


def _run(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    shell = re.sub(r"(^|[|;&]\s*)uv run ", r"\1", cmd)
    shell = re.sub(r"(^|[|;&]\s*)proxai ", r"\1python -m proxai_mitm ", shell)
    return subprocess.run(["bash", "-o", "pipefail", "-c", shell], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def _normal(text: str) -> list[str]:
    return [_PREFIX.sub("", ln).rstrip() for ln in text.strip("\n").splitlines()]


RUNNABLE = [(b, c) for b in _all_blocks() if b.lang in ("sh", "bash", "console") for c in _commands(b)
            if _offline(c)]
SHOWN = [b for b in _all_blocks() if b.output_of is not None]


def test_the_docs_have_runnable_samples_and_shown_outputs():
    assert len(RUNNABLE) >= 10, [c for _, c in RUNNABLE]
    assert len(SHOWN) >= 5, [b.output_of for b in SHOWN]


@pytest.mark.parametrize("block, cmd", RUNNABLE, ids=[f"{b.doc}:{b.line}:{c[:60]}" for b, c in RUNNABLE])
def test_offline_command_runs(block, cmd, scratch):
    r = _run(cmd, scratch)
    assert r.returncode == 0, f"{block.doc}:{block.line}: `{cmd}` exited {r.returncode}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]


@pytest.mark.parametrize("block", SHOWN, ids=[f"{b.doc}:{b.line}" for b in SHOWN])
def test_shown_output_is_what_the_command_prints(block, scratch):
    r = _run(block.output_of, scratch)
    assert r.returncode == 0, f"`{block.output_of}` exited {r.returncode}\n{r.stderr[-3000:]}"
    got = _normal(r.stdout if r.stdout.strip() else r.stderr)
    assert got == _normal(block.text), (
        f"{block.doc}:{block.line}: the output shown for `{block.output_of}` differs from what it prints:\n"
        + "\n".join(got))


def test_the_sh_block_parser():
    b = Block("x.md", 1, "sh", "uv run proxai report flows   # a table\nproxai run \\\n  --web\n"
              "uv run python - <<'PY'\nprint(1)\nPY\nproxai report FILE_OR_DIR... [-f table]", None)
    cmds = _commands(b)
    assert cmds[:2] == ["uv run proxai report flows", "proxai run --web"]
    assert [c for c in cmds if _offline(c)] == ["uv run proxai report flows"]
    assert _offline("uv run mitmdump -nr flows/tool-loop.mitm -s addon/proxai.py")
    assert not _offline("uv run mitmdump --listen-host 127.0.0.1 -s addon/proxai.py")


def update(root: Path = ROOT) -> list[str]:
    """Rewrite every shown output with what its command prints now; the documents changed."""
    import tempfile

    changed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "docs"
        d.mkdir()
        shutil.copytree(ROOT / "flows", d / "flows")
        shutil.copytree(ROOT / "addon", d / "addon")
        for path in DOCS:
            lines = path.read_text(encoding="utf-8").split("\n")
            for b in reversed([b for b in _blocks(path) if b.output_of is not None]):
                r = _run(b.output_of, d)
                new = _normal(r.stdout if r.stdout.strip() else r.stderr)
                if b.lang == "table":
                    start = b.line - 1
                    end = start
                    while end < len(lines) and lines[end].startswith("|"):
                        end += 1
                else:
                    start = b.line
                    end = start
                    while not lines[end].startswith("```"):
                        end += 1
                if lines[start:end] != new:
                    lines[start:end] = new
                    changed.append(f"{path.name}:{b.line}")
            path.write_text("\n".join(lines), encoding="utf-8")
    return changed


if __name__ == "__main__":  # uv run python tests/test_docs.py: refresh the shown outputs
    print("\n".join(update()) or "nothing changed")
