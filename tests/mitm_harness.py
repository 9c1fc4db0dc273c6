"""Start a real ``mitmdump`` subprocess with the ProxAI addon for end-to-end tests.

- a free loopback port, a temporary confdir (its CA, ``ca_path``, is what HTTPS clients trust in
  regular-mode tests), optional ``-w`` file, extra ``--set`` options and environment;
- waits until the proxy listens; collects its log (``log``, ``wait_for_log``);
- stops it by PID (terminate, then kill after a grace period).

    with Mitmdump(mode="reverse:http://127.0.0.1:18001", options={"proxai_target": "..."}) as m:
        client = openai.OpenAI(base_url=m.url + "/v1", api_key="sk-test")
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ADDON = ROOT / "addon" / "proxai.py"

__all__ = ["ADDON", "ROOT", "Mitmdump", "free_port", "read_flows"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mitmdump_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "mitmdump"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("mitmdump")
    if found:
        return [found]
    return [sys.executable, "-c", "from mitmproxy.tools.main import mitmdump; mitmdump()"]


class Mitmdump:
    def __init__(
        self,
        *,
        mode: str | None = None,
        options: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        save: bool = True,
        addon: Path | str | None = ADDON,
        extra_args: list[str] | None = None,
        confdir: str | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.mode = mode
        self.options = dict(options or {})
        self.env = dict(env or {})
        self.addon = addon
        self.extra_args = list(extra_args or [])
        self.startup_timeout = startup_timeout
        self._tmp = tempfile.TemporaryDirectory(prefix="proxai-mitm-")
        self.dir = Path(self._tmp.name)
        self.confdir = Path(confdir) if confdir else self.dir / "conf"
        self.confdir.mkdir(parents=True, exist_ok=True)
        self.flows_path = self.dir / "flows.mitm" if save else None
        self.log_path = self.dir / "mitmdump.log"
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._log_chunks: list[str] = []
        self._reader: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    proxy_url = url

    @property
    def ca_path(self) -> Path:
        return self.confdir / "mitmproxy-ca-cert.pem"

    @property
    def log(self) -> str:
        return "".join(self._log_chunks)

    def command(self) -> list[str]:
        cmd = _mitmdump_cmd() + ["--listen-host", "127.0.0.1", "-p", str(self.port),
                                 "--set", f"confdir={self.confdir}", "--set", "flow_detail=0",
                                 "--set", "termlog_verbosity=info"]
        if self.mode:
            cmd += ["--mode", self.mode]
        if self.addon:
            cmd += ["-s", str(self.addon)]
        if self.flows_path:
            cmd += ["-w", str(self.flows_path)]
        for k, v in self.options.items():
            if isinstance(v, bool):
                v = "true" if v else "false"
            cmd += ["--set", f"{k}={v}"]
        return cmd + self.extra_args

    def start(self, *, wait: bool = True) -> Mitmdump:
        self.port = free_port()
        env = dict(os.environ)
        env.update(self.env)
        env.pop("HTTP_PROXY", None)
        env.pop("HTTPS_PROXY", None)
        env.pop("http_proxy", None)
        env.pop("https_proxy", None)
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=str(ROOT), text=True, bufsize=1,
        )
        self._reader = threading.Thread(target=self._pump, name="mitmdump-log", daemon=True)
        self._reader.start()
        if wait:
            self.wait_listening()
        return self

    def _pump(self) -> None:
        assert self.proc and self.proc.stdout
        with open(self.log_path, "w") as f:
            for line in self.proc.stdout:
                self._log_chunks.append(line)
                f.write(line)
                f.flush()

    def wait_listening(self) -> None:
        end = time.monotonic() + self.startup_timeout
        while time.monotonic() < end:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"mitmdump exited with {self.proc.returncode}:\n{self.log}")
            if "listening at" in self.log:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"mitmdump did not start listening in {self.startup_timeout}s:\n{self.log}")

    def wait_for_log(self, pattern: str, timeout: float = 10.0, *, count: int = 1) -> list[str]:
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            hits = [ln for ln in self.log.splitlines() if rx.search(ln)]
            if len(hits) >= count:
                return hits
            if self.proc and self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"log line {pattern!r} (x{count}) not seen:\n{self.log[-4000:]}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc
        rc = self.proc.wait(timeout)
        if self._reader:
            self._reader.join(5)
        return rc

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if self._reader:
            self._reader.join(5)

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def flows(self) -> list:
        """Flows written so far to the ``-w`` file (mitmdump flushes after each flow)."""
        assert self.flows_path is not None
        return read_flows(self.flows_path)

    def __enter__(self) -> Mitmdump:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def read_flows(path: Path | str) -> list:
    from mitmproxy import io
    from mitmproxy.exceptions import FlowReadException

    out = []
    p = Path(path)
    if not p.exists():
        return out
    with open(p, "rb") as f:
        try:
            for fl in io.FlowReader(f).stream():
                out.append(fl)
        except FlowReadException:
            pass  # a flow being written right now
    return out
