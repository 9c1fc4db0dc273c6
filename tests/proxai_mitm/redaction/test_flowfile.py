"""Damaged recordings: every intact flow before the damage, where the damage is, never a
MemoryError or a traceback."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from mitmproxy import io as mio
from mitmproxy.test import tflow

from proxai_mitm.redaction.flowfile import read_file, read_path


def _records(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        f = tflow.tflow(resp=True)
        f.request.path = f"/v1/chat/completions?n={i}"
        f.request.method = "POST"
        f.request.content = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
        f.response.headers["content-type"] = "application/json"
        f.response.content = (b'{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,'
                              b'"message":{"role":"assistant","content":"yo"},"finish_reason":"stop"}]}')
        buf = io.BytesIO()
        mio.FlowWriter(buf).add(f)
        out.append(buf.getvalue())
    return out


def test_intact_file(tmp_path):
    p = tmp_path / "ok.mitm"
    p.write_bytes(b"".join(_records(3)))
    r = read_file(p)
    assert [f.request.path for f in r.flows] == [f"/v1/chat/completions?n={i}" for i in range(3)]
    assert r.damage is None
    (tmp_path / "empty.mitm").write_bytes(b"")
    assert read_file(tmp_path / "empty.mitm").flows == []


@pytest.mark.parametrize("cut", [1, 10, 200, -1])
def test_truncated_file_keeps_the_flows_before(tmp_path, cut):
    recs = _records(3)
    p = tmp_path / "cut.mitm"
    third = recs[2][:cut] if cut > 0 else recs[2][:-1]
    p.write_bytes(recs[0] + recs[1] + third)
    r = read_file(p)
    assert len(r.flows) == 2
    assert r.damage is not None and r.damage.offset == len(recs[0]) + len(recs[1])
    assert r.damage.intact == 2
    assert f"damaged at byte {r.damage.offset}" in str(r.damage)


@pytest.mark.parametrize("prefix", [b"99999999999:", b"999999999999:", b"9999999999999999:", b"12:abc"])
def test_lying_length_prefix_no_memory_error(tmp_path, prefix):
    recs = _records(2)
    p = tmp_path / "lie.mitm"
    p.write_bytes(recs[0] + prefix + recs[1])
    r = read_file(p)
    assert len(r.flows) == 1
    assert r.damage is not None and r.damage.offset == len(recs[0])


def test_garbage_and_non_flow_records(tmp_path):
    recs = _records(1)
    for junk, why in [(b"hello world", "no length prefix"), (b"5:hello,", "not a flow"),
                      (b"2:[]x", "does not parse"), (b"0:~", "not a flow")]:
        p = tmp_path / "junk.mitm"
        p.write_bytes(recs[0] + junk)
        r = read_file(p)
        assert len(r.flows) == 1 and r.damage is not None, junk
        assert r.damage.offset == len(recs[0]) and why in r.damage.reason, r.damage
    inner = b"0:]"  # 5000 nested lists: deeper than the parser's recursion allows
    for _ in range(5000):
        inner = str(len(inner)).encode() + b":" + inner + b"]"
    p.write_bytes(recs[0] + inner)
    r = read_file(p)
    assert len(r.flows) == 1 and r.damage is not None


def test_a_damaged_record_is_not_a_flow_state(tmp_path):
    recs = _records(1)
    p = tmp_path / "state.mitm"
    from mitmproxy.io import tnetstring

    p.write_bytes(recs[0] + tnetstring.dumps({"type": "http", "version": 21}))
    r = read_file(p)
    assert len(r.flows) == 1 and r.damage is not None and "not a readable flow" in r.damage.reason


def test_folder(tmp_path):
    recs = _records(2)
    (tmp_path / "a.mitm").write_bytes(recs[0])
    (tmp_path / "b.mitm").write_bytes(recs[1][:30])
    flows, damages = read_path(tmp_path)
    assert len(flows) == 1 and len(damages) == 1 and damages[0].path.endswith("b.mitm")


def test_cli_report_and_export_on_damaged_files(tmp_path):
    """``report`` / ``export`` use the intact flows and name the damage; exit code 0, no traceback."""
    recs = _records(2)
    p = tmp_path / "d.mitm"
    p.write_bytes(recs[0] + recs[1] + b"99999999999:")
    out = subprocess.run([sys.executable, "-m", "proxai_mitm", "report", str(p)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stderr
    assert f"damaged at byte {len(recs[0]) + len(recs[1])}" in out.stderr
    assert "2 intact flow(s)" in out.stderr
    assert "chat" in out.stdout and "2 exchange(s)" in out.stdout
    dest = tmp_path / "out.jsonl"
    out = subprocess.run([sys.executable, "-m", "proxai_mitm", "export", str(p), str(dest)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "damaged at byte" in out.stderr and "Traceback" not in out.stderr
    assert len(dest.read_text().splitlines()) == 2


def test_replay_index_uses_the_intact_flows(tmp_path, caplog):
    from proxai_mitm.replay.index import RecordingIndex

    recs = _records(2)
    p = tmp_path / "r.mitm"
    p.write_bytes(recs[0] + recs[1][:-5])
    idx = RecordingIndex.load(p)
    assert idx.sources == [str(p)]
    assert len(idx.damaged) == 1 and f"damaged at byte {len(recs[0])}" in idx.damaged[0]
    assert sum(len(v) for v in idx._by_key.values()) + idx.skipped == 1
    assert "damaged at byte" in caplog.text
