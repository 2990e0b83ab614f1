"""Running the reference server: in the current loop, forever (CLI), or in a thread.

All three run the app with ``handler_cancellation=True``, so a client that disconnects
while its request waits for the engine cancels the handler at once (and with it the
engine request), a header timeout (:mod:`loadgen.server.connection`), and a short shutdown
timeout, because the app's ``on_shutdown`` hook already ends open streams.
:func:`run_forever` drains first on SIGINT/SIGTERM/SIGHUP (:meth:`ServerApi.drain`: 503 for new
requests, up to ``drain_timeout_s`` for open ones, then a last event on open streams; a
second signal cuts the wait short).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

from loadgen.aio import new_event_loop
from loadgen.errors import ServerError
from loadgen.server.api import API_KEY
from loadgen.server.config import HttpLimits
from loadgen.server.connection import GuardedAppRunner

__all__ = ["make_runner", "run_forever", "serve_in_thread", "start_server"]


def _limits(app: web.Application) -> HttpLimits:
    api = app.get(API_KEY)
    return api.http if api is not None else HttpLimits()


def make_runner(app: web.Application) -> web.AppRunner:
    """An ``AppRunner`` with the settings the reference server needs."""
    return GuardedAppRunner(
        app,
        header_timeout_s=_limits(app).header_timeout_s,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=5.0,
    )


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def start_server(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start serving ``app`` (running its startup hooks) and return ``(runner, url)``.

    ``port=0`` binds a free port; the URL names the port actually bound. Stop with
    ``await runner.cleanup()``.
    """
    runner = make_runner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    return runner, _url(host, bound)


def run_forever(
    app: web.Application, host: str = "127.0.0.1", port: int = 8000, *, on_ready: Callable[[str], Any] | None = None
) -> None:
    """Serve until SIGINT, SIGTERM or SIGHUP, then shut down cleanly (engine stopped on cleanup).

    ``on_ready(url)`` is called once the port is bound (the CLI prints the URL there).
    """

    async def main() -> None:
        stop, hurry = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:  # the first drains, a second ends the drain at once
            (hurry if stop.is_set() else stop).set()

        # SIGHUP: the terminal closed; not under nohup, which asked for it to be survived
        hup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
        for sig in (signal.SIGINT, signal.SIGTERM, *hup):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal)
        runner, url = await start_server(app, host, port)
        try:
            if on_ready is not None:
                on_ready(url)
            await stop.wait()
            api = app.get(API_KEY)
            if api is not None:
                await api.drain(_limits(app).drain_timeout_s, hurry)
        finally:
            await runner.cleanup()

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


@contextlib.contextmanager
def serve_in_thread(
    app_factory: Callable[[], web.Application], host: str = "127.0.0.1", port: int = 0, *, startup_timeout: float = 60.0
) -> Iterator[str]:
    """Run the server in a background thread with its own event loop; yield its URL.

    ``app_factory`` is called inside that thread's loop (engines may bind to it). Startup
    errors are raised here; on exit the server is shut down and the thread joined.
    """
    loop = new_event_loop()
    ready: dict[str, Any] = {}
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            runner, url = await start_server(app_factory(), host, port)
        except BaseException as exc:  # handed to the caller's thread
            ready["error"] = exc
            started.set()
            return
        ready["url"] = url
        started.set()
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    def target() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    thread = threading.Thread(target=target, name="loadgen-server", daemon=True)
    thread.start()
    if not started.wait(startup_timeout):
        raise ServerError(f"the server did not start within {startup_timeout} s")
    if "error" in ready:
        thread.join()
        raise ready["error"]
    try:
        yield ready["url"]
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join()
