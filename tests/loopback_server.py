"""A raw asyncio HTTP server on 127.0.0.1 in a background thread, for fakes that must control every
byte they write (streams that never end, hostile events): subclasses implement ``_handle``."""

from __future__ import annotations

import asyncio
import threading

__all__ = ["LoopbackServer"]


class LoopbackServer:
    """Starts listening on an ephemeral loopback port (``.port``) when made; ``close()`` stops it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def close(self) -> None:
        def stop() -> None:
            if self._server is not None:
                self._server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self._thread.join(10)
