"""Real agent CLIs from npm for the end-to-end tests: a pinned install, a clean and bounded run, and a
trap that catches any request leaving loopback.

- ``NpmClient.install()`` installs the pinned package into ``~/.cache/proxai/<name>`` (or the
  directory the client's ``cache_env`` variable names) when missing, so one install serves every
  checkout on the machine; the npm registry is the only network use. When it cannot be installed the
  test fails with the reason, never skips.
- ``run_client`` runs the CLI non-interactively with only the environment the test gives it (a
  fresh HOME in tmp, no inherited keys or base URLs), in its own process group, killed when the
  time is up.
- ``OutboundTrap`` is a loopback HTTP proxy put in ``HTTP_PROXY``/``HTTPS_PROXY`` (with ``NO_PROXY``
  for loopback): every request a client tries to send anywhere but 127.0.0.1 lands there, is refused
  and recorded, and ``assert_no_egress`` fails the test with the hosts it tried.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.fake_upstream import (
    FakeUpstream,
    Reply,
    _anth_json,
    _anth_sse,
    _chat_json,
    _chat_sse,
    _resp_envelope,
    _resp_sse,
    _resp_text_events,
    _resp_usage,
)

from .e2e_util import ANTH, CHAT, RESP, UPSTREAM_PATH

__all__ = ["CLAUDE_CODE", "CODEX_CLI", "GEMINI_CLI", "NpmClient", "OutboundTrap", "errors_answered", "run_client",
           "script_tool_loop", "tool_results"]


@dataclass(frozen=True)
class NpmClient:
    #: directory name under ``~/.cache/proxai``
    name: str
    package: str
    #: the version the tests are written against (flags, tool names and parameters)
    version: str
    #: the executable's name in ``node_modules/.bin``
    bin: str
    #: environment variable that overrides the install directory
    cache_env: str

    @property
    def cache(self) -> Path:
        return Path(os.environ.get(self.cache_env) or Path.home() / ".cache" / "proxai" / self.name)

    def installed(self) -> Path | None:
        exe = self.cache / "node_modules" / ".bin" / self.bin
        pkg = self.cache / "node_modules" / Path(self.package) / "package.json"
        if exe.exists() and pkg.exists() and json.loads(pkg.read_text()).get("version") == self.version:
            return exe
        return None

    def install(self) -> Path:
        """The pinned executable, installed with npm first when missing (a failure fails the test)."""
        exe = self.installed()
        if exe is not None:
            return exe
        what = f"{self.package}@{self.version}"
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(f"{what}: npm is not installed (install Node.js 20+ with npm)")
        self.cache.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(self.cache), what],
                           capture_output=True, text=True, timeout=600)
        exe = self.installed()
        if r.returncode != 0 or exe is None:
            pytest.fail(f"`npm install {what}` into {self.cache} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
        # a package that ships a native binary per platform puts it in place in a postinstall script
        v = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
        if v.returncode != 0 or self.version not in v.stdout:
            pytest.fail(f"{what} installed into {self.cache} but `{self.bin} --version` answered "
                        f"(exit {v.returncode}): {v.stdout[-500:]}{v.stderr[-1500:]}")
        return exe


GEMINI_CLI = NpmClient("gemini-cli", "@google/gemini-cli", "0.61.0", "gemini", "PROXAI_GEMINI_CLI_CACHE")
CLAUDE_CODE = NpmClient("claude-code", "@anthropic-ai/claude-code", "2.1.328", "claude", "PROXAI_CLAUDE_CODE_CACHE")
CODEX_CLI = NpmClient("codex-cli", "@openai/codex", "0.169.0", "codex", "PROXAI_CODEX_CLI_CACHE")


# ----------------------------------------------------------------------------- egress trap
class OutboundTrap:
    """A loopback forward proxy that refuses everything and records what was asked (``hits``: the
    request lines, e.g. ``CONNECT api.anthropic.com:443``)."""

    MAX_HEAD = 16384

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="outbound-trap", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Proxy variables in both spellings: loopback goes direct, anything else into the trap."""
        out = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            out[k] = out[k.lower()] = self.url
        return out

    def __enter__(self) -> OutboundTrap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # (shutdown wakes the blocked accept; close alone would leave it waiting)
        self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < self.MAX_HEAD:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                self.hits.append(" ".join(line.split(" ")[:2]) or "(a connection without a request)")
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            except OSError:
                self.hits.append("(a connection without a request)")

    def assert_no_egress(self) -> None:
        assert not self.hits, f"the client tried to leave loopback: {self.hits}"


# ----------------------------------------------------------------------------- running
#: what a CLI needs from the outer environment to start at all; nothing else is inherited
_KEEP = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR")


def run_client(argv: list[str], *, cwd: Path, home: Path, env: dict[str, str], trap: OutboundTrap,
               timeout: float = 100) -> subprocess.CompletedProcess:
    """Run a CLI to completion with a clean environment (``env`` plus HOME and the trap's proxy
    variables), stdin closed; past ``timeout`` its whole process group is killed and the test fails
    with what it printed."""
    full = {k: os.environ[k] for k in _KEEP if k in os.environ}
    full.update(HOME=str(home), NO_COLOR="1", CI="1")
    full.update(trap.env())
    full.update(env)
    p = subprocess.Popen(argv, cwd=cwd, env=full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"{Path(argv[0]).name} did not finish in {timeout}s\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


#: the proxy's log line for an answer that reached the client with an error status
_ERROR_ANSWER = re.compile(r"proxai: .*, [45]\d\d: .*")


def errors_answered(log: str) -> list[str]:
    """The proxy's log lines (of ``log``) for answers a client got with an error status: a CLI that
    retries a rejected request in another form still completes, so its exit status alone does not
    show them."""
    return _ERROR_ANSWER.findall(log)


# ----------------------------------------------------------------------------- scripted tool loops
def _turns(protocol: str, call_id: str, name: str, args: dict, answer: str) -> tuple[Reply, Reply, Reply]:
    """(the streamed tool call, the streamed answer, the complete answer) in ``protocol``'s wire form."""
    arguments = json.dumps(args)
    if protocol == ANTH:
        call = _anth_sse([({"type": "tool_use", "id": call_id, "name": name, "input": {}},
                           [{"type": "input_json_delta", "partial_json": arguments}])], "tool_use")
        text = _anth_sse([({"type": "text", "text": ""}, [{"type": "text_delta", "text": answer}])], "end_turn")
        return Reply.sse(call), Reply.sse(text), Reply.json(_anth_json([{"type": "text", "text": answer}], "end_turn"))
    if protocol == CHAT:
        call = _chat_sse([{"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]},
                          {"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}], "tool_calls")
        return (Reply.sse(call), Reply.sse(_chat_sse([{"content": answer}], "stop")),
                Reply.json(_chat_json({"content": answer}, "stop")))
    if protocol == RESP:
        item = {"id": "fc_68f9a1b2loop", "type": "function_call", "status": "completed", "call_id": call_id,
                "name": name, "arguments": arguments}
        call = _resp_sse([item], [[("response.function_call_arguments.delta",
                                    {"item_id": item["id"], "delta": arguments}),
                                   ("response.function_call_arguments.done",
                                    {"item_id": item["id"], "arguments": arguments})]])
        msg = {"id": "msg_68f9a1b2loop", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": answer, "annotations": [], "logprobs": []}]}
        return (Reply.sse(call), Reply.sse(_resp_sse([msg], [_resp_text_events(msg["id"], [answer])])),
                Reply.json(_resp_envelope("completed", [msg], _resp_usage())))
    raise ValueError(f"no scripted tool loop for {protocol}")


def script_tool_loop(up: FakeUpstream, protocol: str, *, call_id: str, name: str, args: dict, answer: str,
                     path: str | None = None, calls: int = 1) -> None:
    """Script ``up`` for one tool loop on ``protocol``'s real path: the first ``calls`` streamed turns
    call tool ``name`` with ``args`` (0: none, an upstream that only answers), every later streamed
    turn answers ``answer``, and so does every complete (non-streamed) request, such as a client's
    helper calls. Any other path stays the provider's 404."""
    path = path or UPSTREAM_PATH[protocol]
    call, text, whole = _turns(protocol, call_id, name, args, answer)
    up.on(path, whole, stream=False)
    up.on(path, text, stream=True)
    if calls:
        up.on(path, replace(call, times=calls), stream=True)


def tool_results(body: dict, protocol: str, call_id: str) -> list[str]:
    """The tool results for ``call_id`` in one request body of ``protocol``, each as JSON text."""
    if protocol == ANTH:
        found = [b for m in body.get("messages", []) if isinstance(m.get("content"), list)
                 for b in m["content"] if b.get("type") == "tool_result" and b.get("tool_use_id") == call_id]
    elif protocol == CHAT:
        found = [m for m in body.get("messages", []) if m.get("role") == "tool" and m.get("tool_call_id") == call_id]
    elif protocol == RESP:
        found = [i for i in body.get("input", []) if isinstance(i, dict)
                 and i.get("type") == "function_call_output" and i.get("call_id") == call_id]
    else:
        raise ValueError(f"no tool results reader for {protocol}")
    return [json.dumps(f) for f in found]
