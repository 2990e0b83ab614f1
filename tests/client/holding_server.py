"""A raw HTTP/1.1 streaming server on loopback that holds the connection open after its
last event: it never ends the chunked body and never closes, until the client does.

``ending`` says what the stream's end looks like (four output events, the last with
``finish_reason: "length"``):

- ``"usage"``: a usage-only event after the finish event (OpenAI's
  ``stream_options.include_usage``), no ``[DONE]``;
- ``"late_usage"``: the same, the usage event ``usage_delay_s`` after the finish event;
- ``"finish"``: the usage on the finish event itself, nothing after it;
- ``"done"``: the usage event and ``[DONE]``, and still no end of the body.

``closed`` counts the connections the client closed (the server read its EOF).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = ["ENDINGS", "HoldingServer"]

ENDINGS = ("usage", "late_usage", "finish", "done")
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: Any) -> bytes:
    return _chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


class HoldingServer:
    def __init__(self, ending: str, usage_delay_s: float = 0.1) -> None:
        assert ending in ENDINGS, ending
        self.ending = ending
        self.usage_delay_s = usage_delay_s
        self.closed = 0
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> HoldingServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def wait_closed(self, n: int, turns: int = 500) -> bool:
        """Whether ``n`` connections were closed by the client (a bounded wait)."""
        for _ in range(turns):
            if self.closed >= n:
                return True
            await asyncio.sleep(0.01)
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            chat = b"/chat/" in head.split(b"\r\n", 1)[0]
            await reader.readexactly(length)
            writer.write(_HEAD)
            for i in range(4):
                last = i == 3
                finish = "length" if last else None
                choice: dict[str, Any] = (
                    {"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": finish}
                    if chat
                    else {"index": 0, "text": f" w{i}", "finish_reason": finish}
                )
                obj: dict[str, Any] = {"id": "x", "choices": [choice]}
                if last and self.ending == "finish":
                    obj["usage"] = _USAGE
                writer.write(_event(obj))
                await writer.drain()
                await asyncio.sleep(0.005)
            if self.ending == "late_usage":
                await asyncio.sleep(self.usage_delay_s)
            if self.ending != "finish":
                writer.write(_event({"id": "x", "choices": [], "usage": _USAGE}))
            if self.ending == "done":
                writer.write(_chunk(b"data: [DONE]\n\n"))
            await writer.drain()
            if not await reader.read(1):  # hold: nothing more is sent until the client goes
                self.closed += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed += 1
        finally:
            self._writers.discard(writer)
            writer.close()
