"""readdir.py: ``-r FOLDER`` reads every ``*.mitm`` file of the folder, in path order, through
mitmproxy's own reader (``mitmdump -nr flows`` exits when done; ``proxai run --web -r flows``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from proxai_mitm.redaction.flowfile import flow_files, read_path
from tests.mitm_harness import Mitmdump, free_port, read_flows

FLOWS = Path(__file__).resolve().parents[3] / "flows"


def _ids_in_file_order(folder: Path) -> list[str]:
    return [f.id for f in read_path(folder)[0]]


def _collapse(ids) -> list[str]:
    """mitmproxy's Save writes a flow with an error twice (on its response and its error hook)."""
    out: list[str] = []
    for i in ids:
        if not out or out[-1] != i:
            out.append(i)
    return out


def test_flow_files_are_the_mitm_files_in_path_order(tmp_path):
    (tmp_path / "b.mitm").write_bytes(b"")
    (tmp_path / "a.mitm").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.mitm").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "dir.mitm").mkdir()  # a folder named like a flow file is not one
    assert [p.relative_to(tmp_path).as_posix() for p in flow_files(tmp_path)] == ["a.mitm", "b.mitm", "sub/c.mitm"]


@pytest.mark.e2e
def test_mitmdump_nr_folder_reads_every_file_and_exits(tmp_path):
    """``mitmdump -nr FOLDER -s addon -w out``: no IsADirectoryError, every flow in file order, exit 0;
    a damaged file is named and the next file still read."""
    folder = tmp_path / "flows"
    shutil.copytree(FLOWS, folder, ignore=shutil.ignore_patterns("*.py"))
    good = (folder / "refusal-chat.mitm").read_bytes()
    (folder / "m-damaged.mitm").write_bytes(good + b"99999999999:")  # read after cut-stream.mitm
    want = _ids_in_file_order(folder)
    files = len(list(folder.glob("*.mitm")))
    assert len(want) == len(_ids_in_file_order(FLOWS)) + 1  # the example exchanges, and the damaged file's intact one
    m = Mitmdump(extra_args=["-n", "-r", str(folder)])
    try:
        t0 = time.monotonic()
        m.start(wait=False)
        assert m.wait_exit(timeout=120) == 0, m.log
        took = time.monotonic() - t0
        got = m.flows()
        assert _collapse(f.id for f in got) == want
        assert all(f.metadata.get("proxai") for f in got)  # the addon annotated each flow read
        log = m.log
        assert "IsADirectoryError" not in log and "Traceback" not in log, log
        assert "m-damaged.mitm" in log and f"read {len(want)} flow(s) from {files} file(s) in {folder}" in log, log
        print(f"mitmdump -nr of {len(want)} flows in {files} files: {took:.1f} s")
    finally:
        m.cleanup()


@pytest.mark.e2e
def test_mitmdump_nr_empty_folder_says_so_and_exits(tmp_path):
    """Like a missing file: an error message, and mitmdump exits with 1 (its ErrorCheck)."""
    m = Mitmdump(extra_args=["-n", "-r", str(tmp_path)])
    try:
        m.start(wait=False)
        assert m.wait_exit(timeout=120) == 1, m.log
        assert "no *.mitm flow file in this folder" in m.log and "Traceback" not in m.log
    finally:
        m.cleanup()


@pytest.mark.e2e
def test_proxai_run_nr_folder(tmp_path):
    """``proxai run -nr FOLDER -w out`` (mitmdump with the addon) reads the folder the same way."""
    out = tmp_path / "out.mitm"
    proc = subprocess.run([sys.executable, "-m", "proxai_mitm", "run", "-n", "-r", str(FLOWS), "-w", str(out),
                           "--set", f"confdir={tmp_path}", "--set", "flow_detail=0"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert _collapse(f.id for f in read_flows(out)) == _ids_in_file_order(FLOWS)


@pytest.mark.e2e
def test_proxai_run_web_r_folder(tmp_path):
    """``proxai run --web -r FOLDER``: mitmweb shows every flow of the folder (its flow list, read back
    through its own download of all flows)."""
    port, proxy_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "proxai_mitm", "run", "--web", "-r", str(FLOWS), "-p", str(proxy_port),
           "--web-host", "127.0.0.1", "--web-port", str(port), "--set", "web_open_browser=false",
           "--set", f"confdir={tmp_path}", "--set", "web_password=pw"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        want = len(read_path(FLOWS)[0])
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        deadline = time.monotonic() + 90
        flows: list = []
        while time.monotonic() < deadline and len(flows) < want:
            time.sleep(0.5)
            try:
                opener.open(f"http://127.0.0.1:{port}/?token=pw", timeout=5).read()  # sets the auth cookie
                data = opener.open(f"http://127.0.0.1:{port}/flows/dump", timeout=10).read()
            except OSError:
                continue
            dump = tmp_path / "dump.mitm"
            dump.write_bytes(data)
            flows = read_flows(dump)
        assert sorted(f.id for f in flows) == sorted(_ids_in_file_order(FLOWS))  # mitmweb orders by time
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate(timeout=10)
    assert "IsADirectoryError" not in out and "Traceback" not in out, out


@pytest.mark.e2e
def test_documented_folder_filter_line():
    """docs/recording.md: ``mitmdump -nr flows -s addon/proxai.py -w refusals.mitm '~comment ^refusal'``:
    the filter selects at read time (the recorded comment) and at save time (the addon's comment, which
    starts with the stop reason too)."""
    m = Mitmdump(extra_args=["-n", "-r", str(FLOWS), "~comment ^refusal"])
    try:
        m.start(wait=False)
        assert m.wait_exit(timeout=120) == 0, m.log
        got = m.flows()
        assert len(got) == 3 and all(f.comment.startswith("refusal") for f in got), [f.comment for f in got]
    finally:
        m.cleanup()


def _peak_rss_mb(m: Mitmdump) -> float:
    """mitmdump's peak RSS (VmHWM), read from /proc until the process exits."""
    assert m.proc is not None
    peak = 0.0
    status = Path(f"/proc/{m.proc.pid}/status")
    while m.proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except (OSError, ValueError):
            break
        time.sleep(0.05)
    return peak


def _write_big_flows(path: Path, count: int, size: int) -> None:
    import os

    import orjson
    from mitmproxy import http
    from mitmproxy import io as mio
    from mitmproxy.test import tflow, tutils

    with open(path, "wb") as fh:
        w = mio.FlowWriter(fh)
        for _ in range(count):
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": os.urandom(size // 2).hex()}]}
            req = tutils.treq(method=b"POST", host="api.openai.com", port=443, scheme=b"https",
                              path=b"/v1/chat/completions", content=orjson.dumps(body),
                              headers=http.Headers([(b"content-type", b"application/json")]))
            w.add(tflow.tflow(req=req, resp=tutils.tresp(content=b'{"choices":[]}')))


@pytest.mark.e2e
def test_mitmdump_nr_folder_memory_as_for_one_file(tmp_path):
    """A folder of 96 MB of flows (3 files) peaks < 64 MB above mitmproxy's own reading of the same flows
    as one file: the folder is read one flow at a time, never held whole."""
    folder = tmp_path / "big"
    folder.mkdir()
    for name in ("a", "b", "c"):
        _write_big_flows(folder / f"{name}.mitm", 32, 1 << 20)
    whole = tmp_path / "whole.mitm"
    whole.write_bytes(b"".join(p.read_bytes() for p in flow_files(folder)))
    peaks = {}
    for label, rfile in (("one file", whole), ("folder", folder)):
        m = Mitmdump(save=False, extra_args=["-n", "-r", str(rfile)])
        try:
            m.start(wait=False)
            peaks[label] = _peak_rss_mb(m)
            assert m.wait_exit(timeout=300) == 0, m.log
            assert "Traceback" not in m.log
        finally:
            m.cleanup()
    growth = peaks["folder"] - peaks["one file"]
    print(f"peak RSS reading 96 x 1 MB flows: one file {peaks['one file']:.0f} MB, "
          f"a folder of 3 files {peaks['folder']:.0f} MB, difference {growth:.1f} MB")
    assert growth < 64, peaks
