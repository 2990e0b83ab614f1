"""Shared plumbing of the benchmark scripts: a loopback aiohttp server in its own process."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

RouteSetup = Callable[[web.Application], None]


def use_uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass


def raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))


def _serve(setup: RouteSetup, port_q: Any) -> None:
    async def main() -> None:
        app = web.Application()
        setup(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port_q.put(runner.addresses[0][1])
        await asyncio.sleep(3600)  # bounded: the parent terminates us long before

    use_uvloop()
    asyncio.run(main())


@contextmanager
def server_process(setup: RouteSetup) -> Iterator[str]:
    """Run an app whose routes ``setup`` adds (a module-level function) in a child process."""
    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(setup, q), daemon=True)
    proc.start()
    try:
        yield f"http://127.0.0.1:{q.get(timeout=30)}"
    finally:
        proc.terminate()
        proc.join(10)
