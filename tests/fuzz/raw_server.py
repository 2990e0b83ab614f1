"""A raw asyncio server on loopback in a thread of its own, for the fuzz tests' hostile
answers: a subclass writes ``_serve`` (one connection); ``port`` is set once it listens."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["RawServer"]


class RawServer:
    """Listens on 127.0.0.1 (a free port) while entered; every connection goes to ``_serve``."""

    def __init__(self) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._ready = threading.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def _main(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        for task in asyncio.all_tasks(loop):
            task.cancel()
        server.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()

    def __enter__(self) -> Any:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
