"""A raw HTTP/1.1 streaming server that advertises keep-alive and then closes, on loopback.

It answers like llama.cpp's ``llama-server`` does: every response says ``Connection:
keep-alive`` and ``Keep-Alive: timeout=5, max=100``, and the connection is closed anyway.
``mode`` says when:

- ``"next"``: when the next request's bytes arrive on the connection, the socket is
  closed without reading them (an RST: the stale keep-alive race, made deterministic,
  every reuse fails and the server never takes the request).
- ``"partial"``: the next request on the connection gets ``HTTP/1.1 200 OK`` and no
  more, then the close (a request the server did take: it must never be sent twice).
- ``"after"``: right after each streamed answer (llama.cpp's own timing; whether the
  client sees the close before reusing the connection is a race).
- ``"never"``: an honest keep-alive server (connections are reused).

``handled`` counts the requests it answered (or began to answer), ``connections`` the
TCP connections it accepted. Raw asyncio on purpose: aiohttp's server would not close a
connection it has promised to keep.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from typing import Any

__all__ = ["ClosingServer"]

_HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ClosingServer:
    def __init__(self, mode: str = "next", tokens: int = 4) -> None:
        self.mode = mode
        self.tokens = tokens
        self.handled = 0
        self.connections = 0
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for writer in list(self._writers):
            writer.close()
        await asyncio.sleep(0)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def start_in_thread(self) -> None:
        """Serve from a thread of its own (for a ``loadgen`` subprocess or a sync test)."""
        ready = threading.Event()

        def main() -> None:
            loop = self._loop = asyncio.new_event_loop()
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop_thread(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        answered = 0
        try:
            while True:
                if answered and self.mode == "next":
                    await reader.read(1)  # the next request is here: close, unread
                    _reset(writer)
                    return
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, length = _head(head)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if answered and self.mode == "partial":
                    self.handled += 1
                    writer.write(b"HTTP/1.1 200 OK\r\n")
                    await writer.drain()
                    writer.close()  # a FIN after the status line (an RST would discard it unread)
                    return
                if method == "GET":
                    await self._models(writer)
                else:
                    self.handled += 1
                    await self._stream(writer, path, body)
                answered += 1
                if self.mode == "after":
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
        finally:
            self._writers.discard(writer)

    async def _models(self, writer: asyncio.StreamWriter) -> None:
        data = json.dumps({"object": "list", "data": [{"id": "closing-model", "object": "model"}]}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\n\r\n%s" % (len(data), data)
        )
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, path: str, body: dict[str, Any]) -> None:
        chat = path.endswith("/chat/completions")
        n = min(int(body.get("max_tokens") or self.tokens), self.tokens)
        writer.write(_HEADERS)
        for i in range(n):
            last = i == n - 1
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": {"content": f" w{i}"},
                    "finish_reason": "length" if last else None,
                }
            else:
                choice = {"index": 0, "text": f" w{i}", "finish_reason": "length" if last else None}
            event: dict[str, Any] = {"id": "x", "choices": [choice]}
            if last:
                event["usage"] = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}
            writer.write(_chunk(b"data: " + json.dumps(event).encode() + b"\n\n"))
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


def _head(head: bytes) -> tuple[str, str, int]:
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return method, path, length


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close at once, unread bytes and all: the kernel answers with an RST."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
