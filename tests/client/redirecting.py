"""Two loopback servers: every path of ``first`` answers 302 to ``second``, which logs
what reaches it (a redirect must not be followed, nor carry the headers to it)."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from aiohttp import web


class RedirectingServers:
    def __init__(self) -> None:
        self.reached: list[dict[str, Any]] = []  # requests that reached the second server
        self._runners: list[web.AppRunner] = []
        self.url = self.target = ""

    async def _start(self, handler: Any) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    async def _second(self, request: web.Request) -> web.Response:
        self.reached.append({"method": request.method, "headers": dict(request.headers)})
        return web.Response(text="data: [DONE]\n\n", content_type="text/event-stream")

    async def _first(self, request: web.Request) -> web.Response:
        await request.read()
        raise web.HTTPFound(self.target + request.path)

    async def __aenter__(self) -> RedirectingServers:
        self.target = await self._start(self._second)
        self.url = await self._start(self._first)
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        for runner in self._runners:
            await runner.cleanup()
