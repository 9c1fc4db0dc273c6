"""A key-injecting route exposed beyond loopback, through real mitmproxy processes (issue 21, rows
10 and 11): ``proxyauth=any`` counts as no proxyauth, and ``proxai run --web`` with a ``web_host``
beyond loopback warns that mitmweb shows the injected key. Tests only connect to 127.0.0.1."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.mitm_harness import ROOT, Mitmdump, free_port

pytestmark = pytest.mark.e2e

KEY_ENV = "PROXAI_EXPOSURE_KEY"
ROUTE = {"proxai_target": "anthropic_messages", "proxai_key_env": KEY_ENV}


def test_proxyauth_any_is_warned_and_loopback_still_served():
    closed = free_port()  # nothing listens: the routed request gets a native 502, not the guard's 403
    with Mitmdump(options={**ROUTE, "proxai_upstream": f"http://127.0.0.1:{closed}", "proxyauth": "any"},
                  env={KEY_ENV: "k-exposure-123456"}, save=False,
                  extra_args=["--listen-host", "0.0.0.0"]) as m:
        line = m.wait_for_log(r"inject an API key and mitmproxy listens on", 30)[0]
        assert "with proxyauth=any, which accepts any user:password" in line
        assert "LLM requests from other machines get 403" in line
        conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=30)
        body = json.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        auth = base64.b64encode(b"anyone:anything").decode()
        conn.request("POST", f"http://127.0.0.1:{closed}/v1/chat/completions", body,
                     {"content-type": "application/json", "proxy-authorization": f"Basic {auth}"})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        assert resp.status == 502, text  # served (upstream unreachable), not refused: the client is local
        assert "refuses clients from other machines" not in text


class _Proc:
    """A ``proxai run`` / mitmweb subprocess with its merged output collected; stopped by PID."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.lines: list[str] = []
        full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            full_env.pop(k, None)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=full_env, cwd=str(ROOT), text=True, bufsize=1)
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            if text in self.log:
                return
            time.sleep(0.05)
        assert text in self.log, self.log

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode


def _run_web(tmp_path, *sets: str) -> _Proc:
    argv = [sys.executable, "-m", "proxai_mitm", "run", "--web", "-p", str(free_port()),
            "--set", f"confdir={tmp_path}", "--set", "web_open_browser=false",
            "--set", f"web_port={free_port()}"]
    for s in sets:
        argv += ["--set", s]
    return _Proc(argv, {KEY_ENV: "k-exposure-123456"})


def test_proxai_run_web_with_web_host_beyond_loopback_warns(tmp_path):
    p = _run_web(tmp_path, "web_host=0.0.0.0", "proxai_target=anthropic_messages",
                 "proxai_upstream=https://api.example.com", f"proxai_key_env={KEY_ENV}")
    try:
        p.wait_for("Web server listening at", 90)
        p.wait_for("mitmweb's UI listens on 0.0.0.0 (web_host)", 10)
        assert "--set web_host=127.0.0.1" in p.log
        assert "mitmproxy listens on" not in p.log  # proxai run bound the proxy itself to 127.0.0.1
    finally:
        p.stop()


def test_mitmweb_bad_option_is_one_line_and_no_listening(tmp_path):
    p = _run_web(tmp_path, "proxai_target=nonsense")
    try:
        rc = p.proc.wait(120)
    finally:
        p.stop()
    errors = [ln for ln in p.lines if "proxai: invalid option" in ln]
    assert len(errors) == 1 and "proxai_target: must be one of" in errors[0], p.log
    assert rc == 1 and "Traceback" not in p.log and "listening at" not in p.log, p.log
