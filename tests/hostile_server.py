"""A hostile OpenAI-style server on loopback: raw asyncio, answers that no client asked for.

Every answer closes its connection. ``models`` says what ``GET /v1/models`` gets and
``streams`` (a list, used in turn, the last one repeated) what each ``POST`` gets:

- models: ``"ok"`` a one-model list; ``"trickle"`` a valid list (and ``pad`` blanks) sent one byte
  every ``trickle_s``; ``"bomb"`` a gzip list that inflates to ``size`` bytes (one long string).
- streams: ``"ok"`` four tokens and ``[DONE]``; ``"longline"`` a gzip stream whose first
  event is one valid ``data:`` line of ``size`` bytes; ``"flood"`` ``size`` bytes of tiny events
  in one gzip body; ``"stream_flood"`` tiny output events, chunked, 64 KiB a write until
  ``size`` bytes or the client goes; ``"interim"`` ``100 Continue`` and ``103 Early Hints``
  before an ok stream; ``"slow"`` 20 tokens, one every 0.5 s; ``"endless_header"`` a header line that never ends (64 KiB a write
  until ``size`` bytes); ``"error_bomb"`` HTTP 500 with a gzip body inflating to ``size``
  bytes; ``"echo_status"`` HTTP 401 whose text repeats every request header;
  ``"echo_event"`` an SSE ``event: error`` repeating them; ``"echo_object"`` a
  ``data: {"error": ...}`` repeating them (JSON-escaped); ``"echo_redirect"`` a 307 whose
  ``Location`` holds them; ``"echo_malformed"`` a broken JSON event holding them;
  ``"form:WHERE:NAME"`` the ``Authorization`` header's token in the form NAME of
  :func:`echo_forms`, WHERE being ``status`` (an HTTP 401 body), ``event`` (a
  ``data: {"error": ...}`` event) or ``content`` (an ``ok`` stream whose text and whose
  ``loadgen`` vendor object hold it).

``handled`` counts the POSTs answered, ``model_requests`` the GETs begun. Runs in a thread of its own (:meth:`start`), so a
``loadgen`` subprocess or a test's own event loop can use it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import zlib
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["HostileServer", "echo_forms", "gzip_bytes"]

_MIB = 1 << 20


def gzip_bytes(parts: Any) -> bytes:
    """``parts`` (an iterable of bytes) gzip-compressed."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [z.compress(p) for p in parts]
    out.append(z.flush())
    return b"".join(out)


@lru_cache(maxsize=8)
def _bomb(prefix: bytes, size: int, suffix: bytes) -> bytes:
    block = b"a" * _MIB
    blocks = (block for _ in range(size // _MIB))
    return gzip_bytes(iter([prefix, *blocks, suffix]))


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _tokens(n: int = 4) -> bytes:
    events = [
        _event({"choices": [{"index": 0, "text": f" w{i}", "finish_reason": "length" if i == n - 1 else None}]})
        for i in range(n)
    ]
    return b"".join(events) + b"data: [DONE]\n\n"


def _b64_blob(secret: str, offset: int, urlsafe: bool = False) -> str:
    blob = b"x" * offset + b"Authorization: Bearer " + secret.encode() + b"\r\nHost: upstream\r\n"
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(blob).decode()


def echo_forms(secret: str) -> dict[str, str]:
    """The forms in which a proxy may echo ``secret``, by name."""
    return {
        "percent, dashes only": secret.replace("-", "%2D"),
        "percent, reserved": quote(secret, safe=""),
        "percent, every byte": "".join(f"%{b:02X}" for b in secret.encode()),
        "percent, every byte, lower hex": "".join(f"%{b:02x}" for b in secret.encode()),
        "percent, plus for space": quote_plus(f"Bearer {secret}"),
        "json, every char": "".join(f"\\u{ord(c):04x}" for c in secret),
        "json, escaped slash": json.dumps(secret)[1:-1].replace("/", "\\/"),
        "html, decimal": "".join(f"&#{ord(c)};" for c in secret),
        "html, hex": "".join(f"&#x{ord(c):x};" for c in secret),
        "base64": base64.b64encode(secret.encode()).decode(),
        "base64 url-safe, no padding": base64.urlsafe_b64encode(secret.encode()).decode().rstrip("="),
        **{f"base64 of a header block, offset {k}": _b64_blob(secret, k) for k in range(3)},
        "base64 url-safe of a header block, offset 1": _b64_blob(secret, 1, urlsafe=True),
    }


class HostileServer:
    def __init__(
        self,
        models: str = "ok",
        streams: list[str] | None = None,
        size: int = 256 * _MIB,
        trickle_s: float = 3.0,
        pad: int = 0,
    ) -> None:
        self.models = models
        self.streams = streams or ["ok"]
        self.size = size
        self.trickle_s = trickle_s
        self.pad = pad  # trailing blanks after the trickled list: as many more bytes to send
        self.handled = 0
        self.model_requests = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HostileServer:
        ready = threading.Event()

        def main() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            server.close()
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(30), "the hostile server did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            lines = head.split("\r\n")
            method = lines[0].split(" ")[0]
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
            if length:
                await reader.readexactly(length)
            if method == "GET":
                self.model_requests += 1
                await self._models(writer)
            else:
                mode = self.streams[min(self.handled, len(self.streams) - 1)]
                self.handled += 1
                await self._stream(writer, mode, headers)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _head(status: str, ctype: str, length: int | None, extra: str = "") -> bytes:
        size = f"Content-Length: {length}\r\n" if length is not None else ""
        return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{size}{extra}Connection: close\r\n\r\n".encode()

    async def _models(self, writer: asyncio.StreamWriter) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "hostile", "object": "model"}]}).encode()
        if self.models == "bomb":
            gz = _bomb(b'{"object": "list", "data": [{"id": "hostile"}], "pad": "', self.size, b'"}')
            writer.write(self._head("200 OK", "application/json", len(gz), "Content-Encoding: gzip\r\n") + gz)
        elif self.models == "trickle":
            body += b" " * self.pad
            writer.write(self._head("200 OK", "application/json", len(body)))
            for i in range(len(body)):
                writer.write(body[i : i + 1])
                await writer.drain()
                await asyncio.sleep(self.trickle_s)
        else:
            writer.write(self._head("200 OK", "application/json", len(body)) + body)
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, mode: str, headers: dict[str, str]) -> None:
        sse = "text/event-stream"
        echoed = "; ".join(f"{k}={v}" for k, v in headers.items())
        gz_head = "Content-Encoding: gzip\r\n"
        if mode == "longline":
            head = b'data: {"choices": [{"index": 0, "finish_reason": null, "text": "'
            gz = _bomb(head, self.size, b'"}]}\n\n' + _tokens())  # valid JSON: one huge token
            writer.write(self._head("200 OK", sse, len(gz), gz_head) + gz)
        elif mode == "flood":
            ev = _event({"choices": [{"index": 0, "text": "w", "finish_reason": None}]})
            gz = gzip_bytes(iter([ev * (self.size // len(ev)), _tokens()]))
            writer.write(self._head("200 OK", sse, len(gz), gz_head) + gz)
        elif mode == "stream_flood":
            ev = _event({"choices": [{"index": 0, "text": "w", "finish_reason": None}]})
            block = ev * ((64 << 10) // len(ev))
            writer.write(self._head("200 OK", sse, None, "Transfer-Encoding: chunked\r\n"))
            for _ in range(self.size // len(block)):
                writer.write(b"%x\r\n%s\r\n" % (len(block), block))
                await writer.drain()
        elif mode == "slow":
            writer.write(self._head("200 OK", sse, None, "Transfer-Encoding: chunked\r\n"))
            for i in range(20):
                ev = _event(
                    {"choices": [{"index": 0, "text": f" w{i}", "finish_reason": "length" if i == 19 else None}]}
                )
                writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                await writer.drain()
                await asyncio.sleep(0.5)
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (14, b"data: [DONE]\n\n"))
        elif mode == "interim":
            body = _tokens()
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)  # the final answer in a read of its own
            writer.write(self._head("200 OK", sse, len(body)) + body)
        elif mode == "endless_header":
            writer.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
            for _ in range(self.size // (64 << 10)):
                writer.write(b"a" * (64 << 10))
                await writer.drain()
        elif mode == "error_bomb":
            gz = _bomb(b"bad request: ", self.size, b"")
            writer.write(self._head("500 Internal Server Error", "text/plain", len(gz), gz_head) + gz)
        elif mode == "echo_status":
            body = f"bad credentials: {echoed}".encode()
            writer.write(self._head("401 Unauthorized", "text/plain", len(body)) + body)
        elif mode == "echo_redirect":
            writer.write(
                self._head(
                    "307 Temporary Redirect", "text/plain", 0, f"Location: http://127.0.0.1:1/login?{quote(echoed)}\r\n"
                )
            )
        elif mode in ("echo_event", "echo_object", "echo_malformed"):
            if mode == "echo_event":
                body = f"event: error\ndata: upstream refused {echoed}\n\n".encode()
            elif mode == "echo_object":
                body = _event({"error": {"message": f"upstream refused: {echoed}"}})
            else:
                body = b"data: {not json " + echoed.encode() + b"\n\n"
            writer.write(self._head("200 OK", sse, len(body)) + body)
        elif mode.startswith("form:"):
            await self._form(writer, mode, headers)
        else:
            body = _tokens()
            writer.write(self._head("200 OK", sse, len(body)) + body)
        await writer.drain()

    async def _form(self, writer: asyncio.StreamWriter, mode: str, headers: dict[str, str]) -> None:
        _, where, name = mode.split(":", 2)
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        form = echo_forms(auth.partition(" ")[2])[name]
        if where == "status":
            body = f"bad key: {form}".encode()
            writer.write(self._head("401 Unauthorized", "text/plain", len(body)) + body)
            return
        if where == "event":
            body = _event({"error": {"message": f"upstream refused {form}"}})
        else:
            text = {"index": 0, "text": f" {form}", "finish_reason": None}
            body = _event({"choices": [text], "loadgen": {"upstream": f"key={form}", form: 1}}) + _tokens()
        writer.write(self._head("200 OK", "text/event-stream", len(body)) + body)
