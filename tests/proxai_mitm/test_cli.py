"""cli.py / reportfmt.py: the ``proxai`` command, report formats, filters, totals, export to stdout."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxai_mitm import cli
from proxai_mitm.reporting.report import read_flows, rows
from proxai_mitm.reporting.reportfmt import filter_rows, format_rows, select_flows, totals

FLOWS = Path(__file__).resolve().parents[2] / "flows"


def _all_flows():
    return [f for p in sorted(FLOWS.glob("*.mitm")) for f in read_flows(p)]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ----------------------------------------------------------------------------- run / addon-path
def test_run_argv_binds_loopback_unless_told():
    argv = cli.run_argv("dump", ["-p", "9090", "--set", "proxai_target=anthropic_messages"])
    assert argv[0] == sys.executable and "mitmdump" in argv[2]
    assert argv[3:5] == ["-s", str(cli.addon_path())]
    assert argv[5:7] == ["--listen-host", "127.0.0.1"]
    assert argv[7:] == ["-p", "9090", "--set", "proxai_target=anthropic_messages"]
    for chosen in (["--listen-host", "0.0.0.0"], ["--listen-host=::"], ["--set", "listen_host=10.0.0.1"]):
        argv = cli.run_argv("web", chosen)
        assert "mitmweb" in argv[2] and argv.count("--listen-host") == chosen.count("--listen-host")
        assert argv[-len(chosen):] == chosen and "127.0.0.1" not in argv


def test_addon_path_is_a_loadable_script_in_the_package(capsys):
    rc, out, _ = _run(capsys, "addon-path")
    path = Path(out.strip())
    assert rc == 0 and path == cli.addon_path() and path.is_file()
    assert path.parent == Path(cli.__file__).resolve().parent  # inside the package: in the wheel
    from mitmproxy.addons import script

    mod = script.load_script(str(path))
    assert mod is not None and [type(a).__name__ for a in mod.addons] == ["ProxAI"]
    assert {type(a).__name__ for a in mod.addons[0].concerns} >= {"Router", "Translator", "Measure"}


def test_console_script_declared():
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'proxai = "proxai_mitm.cli:main"' in text


@pytest.mark.e2e
def test_proxai_run_starts_mitmdump_on_loopback(tmp_path):
    """``proxai run`` really starts mitmdump with the addon, bound to 127.0.0.1, options passed on."""
    proc = subprocess.Popen([sys.executable, "-m", "proxai_mitm", "run", "-p", "0", "--set",
                             f"confdir={tmp_path}", "--set", "proxai_idle_timeout=30"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "listening at" in line:
                break
        text = "".join(seen)
        assert "listening at 127.0.0.1:" in text, text
        assert "--listen-host 127.0.0.1" in text  # the command line it ran is shown
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ----------------------------------------------------------------------------- report
def test_report_rows_sorted_by_time_and_measured():
    flows = _all_flows()
    r = rows(list(reversed(flows)))
    stamps = [x["timestamp"] for x in r]
    assert stamps == sorted(stamps) and len(r) == 16
    for x in r:
        assert x["duration_ms"] is not None
        if x["reason"] in ("end_turn", "tool_use", "refusal", "max_output"):
            assert x["ttft_ms"] is not None and x["cost_usd"] > 0
    unknown = [x for x in r if x["input_tokens"] is None]
    assert unknown and all(x["cost_usd"] is None for x in unknown)


def test_report_formats(capsys, tmp_path):
    rc, out, _ = _run(capsys, "report", str(FLOWS), "--format", "json", "-o", "-")
    doc = json.loads(out)
    assert rc == 0 and len(doc["exchanges"]) == 16 and out.isascii()
    ex = doc["exchanges"][0]
    assert {"ttft_ms", "duration_ms", "cost_usd", "output_tps", "cache_read_tokens", "route", "model"} <= ex.keys()
    assert sum(t["exchanges"] for t in doc["totals"]) == 16
    priced = [e["cost_usd"] for e in doc["exchanges"] if e["cost_usd"] is not None]
    assert sum(t["cost_usd"] for t in doc["totals"]) == pytest.approx(sum(priced))

    rc, out, _ = _run(capsys, "report", str(FLOWS), "-f", "csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert len(table) == 16 and table[0]["ttft_ms"] and "cost_usd" in table[0]
    assert [t["cost_usd"] for t in table if t["reason"] == "interrupted"] == ["", ""]  # unknown, not 0

    dest = tmp_path / "r.md"
    rc, out, _ = _run(capsys, "report", str(FLOWS), "-f", "markdown", "-o", str(dest))
    md = dest.read_text()
    assert rc == 0 and out == "" and md.startswith("| time | client → upstream | model | status | stop |")
    assert "**Totals per model**" in md
    assert sum(1 for line in md.splitlines() if line.startswith("| 20")) == 16

    rc, out, _ = _run(capsys, "report", str(FLOWS))
    assert "TTFT" in out and "totals per model" in out and "unknown" in out


def test_report_filters(capsys):
    flows = _all_flows()
    r = rows(flows)
    assert {x["reason"] for x in filter_rows(r, stop="refusal,max_output")} == {"refusal", "max_output"}
    assert {x["reason"] for x in filter_rows(r, stop=["interrupted"])} == {"interrupted"}
    assert all("gpt" in x["model"] for x in filter_rows(r, model="GPT"))
    assert filter_rows(r, route="-") == [x for x in r if not x["route"]]
    sel = select_flows(flows, "~u /v1/messages")
    assert sel and all(f.request.path.startswith("/v1/messages") for f in sel)
    with pytest.raises(ValueError, match="bad filter expression"):
        select_flows(flows, "~nope(")
    rc, out, _ = _run(capsys, "report", str(FLOWS), "--stop", "refusal", "-f", "json")
    assert {e["reason"] for e in json.loads(out)["exchanges"]} == {"refusal"}
    rc, out, _ = _run(capsys, "report", str(FLOWS), "--filter", "~u /v1/responses", "-f", "json")
    assert {e["client_protocol"] for e in json.loads(out)["exchanges"]} == {"openai_responses"}
    rc, _, err = _run(capsys, "report", str(FLOWS), "--filter", "~nope(")
    assert rc == 1 and "bad filter expression" in err


def test_totals_unknown_prices_are_counted_not_zero():
    r = [{"model": "a", "input_tokens": 10, "output_tokens": 2, "cost_usd": 0.5},
         {"model": "a", "input_tokens": None, "output_tokens": None, "cost_usd": None},
         {"model": "b", "input_tokens": 1, "output_tokens": 1, "cost_usd": None}]
    t = {x["model"]: x for x in totals(r)}
    assert t["a"]["cost_usd"] == 0.5 and t["a"]["unpriced"] == 1 and t["a"]["input_tokens"] == 10
    assert t["b"]["unpriced"] == 1
    text = format_rows(r, "table")
    assert "$0.5000 + 1 unknown" in text and "\nb " in text and text.rstrip().endswith("unknown")


def test_control_characters_escaped_in_every_format():
    r = [{"time": "t", "model": "evil\x1b]0;pwned\x07\x9b31m", "reason": "end_turn", "cost_usd": None,
          "client_protocol": "openai_chat_completions", "upstream_protocol": "openai_chat_completions"}]
    for fmt in ("table", "markdown", "csv", "json"):
        out = format_rows(r, fmt)
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out, fmt


def test_export_to_stdout(capsys, tmp_path):
    rc, out, err = _run(capsys, "export", str(FLOWS / "refusal-chat.mitm"), "-")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 1 and "to stdout" in err
    ex = json.loads(lines[0])
    assert ex["stop"]["reason"] == "refusal" and ex["metrics"]["cost_usd"] > 0
    assert not (Path.cwd() / "-").exists()
    dest = tmp_path / "x.jsonl"
    rc, out, _ = _run(capsys, "export", str(FLOWS), str(dest), "--filter", "~marked")
    assert rc == 0 and dest.read_text().count("\n") >= 1


def test_python_m_still_works():
    out = subprocess.run([sys.executable, "-m", "proxai_mitm", "report", str(FLOWS / "max-output.mitm")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "max_output" in out.stdout


# ----------------------------------------------------------------------------- UX: version, html, empty reports
def test_version_from_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"proxai {version('proxai-mitm')}"
    out = subprocess.run([sys.executable, "-m", "proxai_mitm", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("proxai ") and out.stdout.strip() != "proxai unknown"


def test_html_also_prints_the_table(capsys, tmp_path):
    """``--html FILE`` writes the page *and* prints the table, as ``--help`` says ("also write")."""
    page = tmp_path / "r.html"
    rc, out, err = _run(capsys, "report", str(FLOWS), "--html", str(page))
    assert rc == 0 and page.read_text().startswith("<!DOCTYPE html>")
    assert "16 exchange(s)" in out and "totals per model" in out and f"wrote 16 exchange(s) to {page}" in err
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert "also write" in capsys.readouterr().out


def test_not_a_flow_file_is_an_error_naming_it(capsys, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("hello, not a flow file\n")
    for cmd in (["report", str(junk)], ["report", str(FLOWS), str(junk)], ["export", str(junk), "-"]):
        rc, out, err = _run(capsys, *cmd)
        assert rc == 2 and out == "" and err == f"error: {junk} is not a readable mitmproxy flow file " \
            "(not a flow record (no length prefix))\n", cmd
    har = tmp_path / "x.json"
    har.write_text('{"not": "a har"}')
    rc, _, err = _run(capsys, "report", str(har))
    assert rc == 2 and f"{har} is not a readable mitmproxy flow file" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = _run(capsys, "report", str(tmp_path / "empty"))
    assert rc == 2 and err == f"error: {tmp_path / 'empty'}: no *.mitm flow file in this folder\n"


def test_empty_report_says_why(capsys, tmp_path):
    from mitmproxy import io as mio
    from mitmproxy.test import tflow

    rc, out, _ = _run(capsys, "report", str(FLOWS), "--filter", "~u /nothing")
    assert rc == 0 and out == "no flow matches --filter ~u /nothing (16 flow(s) read)\n"
    rc, out, _ = _run(capsys, "report", str(FLOWS), "--stop", "paused", "--model", "gpt")
    assert rc == 0 and out == "no LLM exchange matches --stop paused --model gpt (16 exchange(s) read)\n"
    rc, out, err = _run(capsys, "report", str(FLOWS), "--model", "nope", "-f", "json")
    assert rc == 0 and json.loads(out)["exchanges"] == [] and "no LLM exchange matches --model nope" in err
    plain = tmp_path / "web.mitm"
    with open(plain, "wb") as fh:
        mio.FlowWriter(fh).add(tflow.tflow(resp=True))  # GET http://address:22/path: not an LLM flow
    rc, out, _ = _run(capsys, "report", str(plain))
    assert rc == 0 and out == "no LLM flows among the 1 flow(s) read\n"
    rc, out, err = _run(capsys, "export", str(plain), "-")
    assert rc == 0 and out == "" and err == "exported 0 LLM exchange(s) to stdout (no LLM flows among the 1 flow(s) read)\n"
    rc, out, err = _run(capsys, "export", str(FLOWS), "-", "--filter", "~u /nothing")
    assert rc == 0 and "(no flow matches --filter ~u /nothing (16 flow(s) read))" in err
    empty = tmp_path / "empty.mitm"
    empty.write_bytes(b"")  # what `mitmdump -w` leaves when nothing was captured
    rc, out, _ = _run(capsys, "report", str(empty))
    assert rc == 0 and out == f"no flows in {empty}\n"


# ----------------------------------------------------------------------------- table width, hostile bytes
LONG = {"time": "2026-12-02 14:06:08", "client_protocol": "openai_responses",
        "upstream_protocol": "gemini_generate_content", "model": "my-long-model-alias → gemini-2.5-pro-preview",
        "response_model": "gemini-2.5-pro-preview-05-06-experimental", "reason": "context_full",
        "category": "input-too-long-for-the-window", "status": 200, "input_tokens": 1234567,
        "output_tokens": 65536, "cache_read_tokens": 1000, "ttft_ms": 12345.0, "duration_ms": 123456.0,
        "cost_usd": 12.3456}


def test_table_fits_120_columns_and_shows_the_answered_model(capsys):
    rc, out, _ = _run(capsys, "report", str(FLOWS))
    lines = out.splitlines()
    assert rc == 0 and max(map(len, lines)) <= 120
    assert lines[0].split() == ["time", "api", "model", "HTTP", "stop", "in→out", "TTFT", "duration", "cost"]
    for answered in ("claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06", "gpt-5-2025-08-07"):
        assert f"  {answered}  " in lines[2] + lines[5] + lines[6]
    # the time without its year, the protocols abbreviated; the data stays whole in json/csv:
    assert re.match(r"\d\d-\d\d \d\d:\d\d:\d\d  chat→anth  ", lines[2]) and "resp→anth" in out
    rc, out, _ = _run(capsys, "report", str(FLOWS), "-f", "json")
    ex = json.loads(out)["exchanges"][0]
    assert ex["time"].endswith(lines[2][:14]) and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", ex["time"])
    assert ex["client_protocol"] == "openai_chat_completions"

    text = format_rows([LONG, dict(LONG, model="gpt-5", response_model="claude-sonnet-4-5-20250929")])
    assert max(map(len, text.splitlines())) <= 120
    assert "…review-05-06-experimental " in text and "…laude-sonnet-4-5-20250929 " in text  # the ends stay
    assert "input-too-long" not in text.split("\n\n")[0]  # the stop text gave room first
    wide = format_rows([LONG], width=0)
    assert "my-long-model-alias → gemini-2.5-pro-preview-05-06-experimental" in wide
    assert "context_full (input-too-long-for-the-window)" in wide
    rc, out, _ = _run(capsys, "report", str(FLOWS), "--width", "100")
    assert rc == 0 and max(map(len, out.splitlines())) <= 100
    rc, out, _ = _run(capsys, "report", str(FLOWS), "--width", "60")  # narrower than the columns allow:
    # as narrow as the columns go (the stop and model columns keep their minimum), and readable
    assert rc == 0 and 60 < max(map(len, out.splitlines())) <= 100
    assert "…nnet-4-5-20250929 " in out and "refusal (o… " in out


HOSTILE = "\x1b[2J\r\n\t\x00\x07\x7f\x9b\u202e|<b>&amp;`*_[x](y)\\"


def test_hostile_bytes_never_break_table_markdown_or_html(tmp_path):
    from html.parser import HTMLParser

    from proxai_mitm.reporting.htmlreport import render_html

    row = {k: (HOSTILE if isinstance(v, str) and k != "time" else v) for k, v in LONG.items()}
    row.update(message=HOSTILE, route=HOSTILE, id=HOSTILE, client_protocol=HOSTILE, time=HOSTILE)
    rows_ = [row, dict(row, reason=HOSTILE + "2")]
    controls = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x202E)} - {"\n"}
    for fmt in ("table", "markdown", "csv", "json"):
        out = format_rows(rows_, fmt)
        assert not set(out) & controls, fmt
    table = format_rows(rows_).splitlines()
    assert len(table) == 2 + 2 + 1 + 1 + 1 + 2 + 1  # heads, rule, 2 rows, summary, blank, title, totals, 1 model
    md = format_rows(rows_, "markdown").splitlines()
    unescaped = [len([i for i, ch in enumerate(line) if ch == "|" and line[i - 1] != "\\"]) for line in md if line]
    assert unescaped[:4] == [10, 10, 10, 10] and "<" not in "".join(md)

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags = set()

        def handle_starttag(self, tag, attrs):
            self.tags.add(tag)

    page = Tags()
    page.feed(render_html([], rows_))
    assert "b" not in page.tags and not set(render_html([], rows_)) & (controls - {"\t"})


# ----------------------------------------------------------------------------- --by session
SESSIONS = FLOWS / "sessions.mitm"  # an agent sending its session id and a Chat client sending none


def test_report_by_session_table(capsys):
    assert cli.main(["report", str(SESSIONS), "--by", "session"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["session", "from", "turns", "tokens", "in→out", "cache", "read", "stops", "cost"]
    agent = next(ln for ln in lines if "x-claude-code-session-id" in ln)
    tutor = next(ln for ln in lines if " prefix " in ln)
    assert agent.split()[2] == "4" and "end_turn 4" in agent and tutor.split()[2] == "3"
    assert "2 session(s), 7 exchange(s)" in out
    drop = lines[-1]  # the agent's last turn: its system prompt changed, its cache read fell to 0
    assert drop.split()[2:6] == [agent.split()[0], "4", "0%", "98%"] and drop.endswith("system prompt changed")


def test_report_by_session_formats(capsys):
    assert cli.main(["report", str(SESSIONS), "--by", "session", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    agent, tutor = doc["sessions"]
    assert agent["source"] == "header:x-claude-code-session-id" and tutor["source"] == "prefix"
    assert (agent["turns"], tutor["turns"]) == (4, 3) and len(agent["exchanges"]) == 4
    assert agent["cache_read_tokens"] == 4230 and agent["cache_read_share"] == round(4230 / 8638, 4)
    assert agent["stops"] == {"end_turn": 4} and agent["cost_usd"] > 0 and agent["unpriced"] == 0
    (d,) = agent["drops"]
    assert d["turn"] == 4 and d["cache_read_share"] == 0.0 and d["changed"] == ["system prompt changed"]
    assert tutor["drops"] == []
    # the per-exchange JSON carries the session too
    assert cli.main(["report", str(SESSIONS), "-f", "json"]) == 0
    ex = json.loads(capsys.readouterr().out)["exchanges"]
    assert [e["session"] for e in ex].count(agent["session"]) == 4
    assert cli.main(["report", str(SESSIONS), "--by", "session", "-f", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["turns"] for r in table] == ["4", "3"] and table[0]["drops"] == "1"
    assert table[0]["stops"] == "end_turn 4"
    assert cli.main(["report", str(SESSIONS), "--by", "session", "-f", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("| session | from | turns |") and "| system prompt changed |" in md


def test_report_by_session_filters_and_empty(capsys):
    assert cli.main(["report", str(FLOWS), "--by", "session", "--route", "chat-on-claude"]) == 0
    out = capsys.readouterr().out
    assert "2 session(s), 6 exchange(s)" in out  # the tool loop and the tutor
    assert cli.main(["report", str(FLOWS), "--by", "session", "--stop", "paused"]) == 0
    assert capsys.readouterr().out.startswith("no LLM exchange matches --stop paused")
