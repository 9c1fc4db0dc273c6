"""1,100 idle connections to the replay server inside a real mitmdump (issue 21, row 12).

Before: every connection stayed open for ever (1,108 open files in the proxy). Now the server keeps
at most MAX_CONNECTIONS (the longest-idle one makes room for a newcomer), a replayed request through
the proxy is still answered during the flood, and idle connections are closed after IDLE_TIMEOUT.
Open files are counted in /proc/PID/fd, memory from /proc/PID/status. Loopback only.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import time

import pytest
from mitmproxy import io

from proxai_mitm.replay.server import IDLE_TIMEOUT, MAX_CONNECTIONS
from tests.mitm_harness import Mitmdump, free_port
from tests.proxai_mitm.replay.test_replay import JSON_BODY, REQ, make_flow
from tests.proxai_mitm_faults.echo_upstream import proc_stat

pytestmark = pytest.mark.e2e

FLOOD = 1100


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _replay_request(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/messages", json.dumps(REQ),
                 {"content-type": "application/json", "anthropic-version": "2023-06-01"})
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def test_idle_flood_is_capped_then_timed_out(tmp_path, capsys):
    rec = tmp_path / "rec.mitm"
    with open(rec, "wb") as f:
        io.FlowWriter(f).add(make_flow(REQ, JSON_BODY))
    with Mitmdump(mode=f"reverse:http://127.0.0.1:{free_port()}", options={"proxai_replay": str(rec)},
                  save=False) as m:
        line = m.wait_for_log(r"proxai replay server on http://127\.0\.0\.1:\d+", 30)[0]
        replay_port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
        assert _replay_request(m.port)[0] == 200  # warm: the proxy's own connections exist
        pid = m.proc.pid
        base_fds, base = _fds(pid), proc_stat(pid)
        socks = []
        try:
            for _ in range(FLOOD):
                s = socket.create_connection(("127.0.0.1", replay_port), timeout=10)
                socks.append(s)
            time.sleep(1.0)  # the server accepts (and evicts) at its pace
            flood_fds = _fds(pid)
            status, body = _replay_request(m.port)  # served during the flood
            peak = proc_stat(pid)
            t0 = time.monotonic()
            deadline = t0 + IDLE_TIMEOUT + 30
            while _fds(pid) > base_fds + 5 and time.monotonic() < deadline:
                time.sleep(0.5)
            drained_after = time.monotonic() - t0
            after_fds = _fds(pid)
            # (the drain above allows a few descriptors to remain: the last closes may still be on
            # their way; each socket is asked again until its close arrives, for a bounded while)
            open_ = list(socks)
            settle = time.monotonic() + 15
            while open_ and time.monotonic() < settle:
                open_ = [s for s in open_ if not _peer_closed(s)]
            closed = FLOOD - len(open_)
        finally:
            for s in socks:
                s.close()
    with capsys.disabled():
        print(f"\nreplay flood: fds base {base_fds}, with {FLOOD} idle connections {flood_fds}, "
              f"{drained_after:.1f}s later {after_fds}; RSS {base['rss_mb']:.1f} -> {peak['rss_mb']:.1f} MB, "
              f"HWM {base['hwm_mb']:.1f} -> {peak['hwm_mb']:.1f} MB")
    assert status == 200 and json.loads(body)["content"][0]["text"] == "Hi there"
    assert flood_fds <= base_fds + MAX_CONNECTIONS + 10, (base_fds, flood_fds)  # before: +1,100
    assert after_fds <= base_fds + 5 and drained_after < IDLE_TIMEOUT + 30, (base_fds, after_fds)
    assert closed == FLOOD  # every flood connection was closed by the server
    assert peak["rss_mb"] - base["rss_mb"] < 64 and peak["hwm_mb"] - base["hwm_mb"] < 64


def _peer_closed(s: socket.socket) -> bool:
    s.settimeout(0.5)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except OSError:
        return False
