"""The dashboard's HTTP server: the page, a Server-Sent Events stream of the feed, and the
run's Stop / Skip controls.

Routes: ``GET /`` the page, ``GET /events`` the stream, ``POST /stop`` and ``POST /skip``,
``GET /report``. Every route checks the Host (and Origin) header; POST routes need
:data:`CONTROL_HEADER` with a per-process secret only the served page knows; bound off
loopback, every route needs the printed token. A refused request is counted in
:attr:`Dashboard.refused`, never logged. The page is built and gzipped once, the snapshot
encoded once per tick, and what serving still costs is counted per level
(:meth:`Dashboard.level_cost`). Each client has a bounded queue; a client whose queue is
full is cut off, so no client delays the ticker.

Docs: docs/dashboard.md ("Where it listens, and who may use it", "What it costs the
measurement").
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import orjson
from aiohttp import web

from loadgen.dashboard.page import page_csp, render_page

__all__ = [
    "CONTROL_HEADER",
    "COST_NOTE_PERCENT",
    "MAX_CLIENTS",
    "QUEUE_SIZE",
    "TOKEN_HEADER",
    "WILDCARDS",
    "Controls",
    "Dashboard",
    "FeedLike",
]

CONTROL_HEADER = "X-Loadgen-Control"
TOKEN_HEADER = "X-Loadgen-Token"
MAX_CLIENTS = 16
QUEUE_SIZE = 32  # messages waiting per client before it is cut off
PING_S = 15.0
CLOSE_S = 2.0
COST_NOTE_PERCENT = 2.0  # the dashboard's own share of the loop over a level worth naming

_log = logging.getLogger(__name__)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FeedLike(Protocol):
    """What the dashboard reads: a snapshot for a page that connects, a point per tick."""

    loop_lag_ms: float | None

    def snapshot(self) -> dict[str, Any]: ...

    def tick(self) -> dict[str, Any]: ...


@dataclass
class Controls:
    """The run's controls; ``None`` hides the button (``loadgen watch`` has neither)."""

    stop: Callable[[], None] | None = None
    skip: Callable[[], bool] | None = None  # False: no level to skip


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


WILDCARDS = ("0.0.0.0", "::")


class _Counted(logging.Handler):
    """aiohttp's server log, counted: each request it failed or refused is one refusal."""

    def __init__(self, board: Dashboard) -> None:
        super().__init__(logging.DEBUG)
        self.board = board

    def emit(self, record: logging.LogRecord) -> None:
        # "Error handling request" (a request it could not parse, or a handler that
        # failed); the rest it logs at error level are other failures of a request
        if record.levelno >= logging.ERROR or str(record.msg).startswith("Error handling request"):
            self.board.refused += 1


def _server_log(board: Dashboard) -> logging.Logger:
    log = logging.Logger("loadgen.dashboard.http", logging.DEBUG)  # in no hierarchy: reaches no handler of the run
    log.propagate = False
    log.addHandler(_Counted(board))
    return log


def _dual_stack(port: int) -> socket.socket | None:
    """A listening socket on ``::`` that takes IPv4 too (None where the system cannot)."""
    if not socket.has_dualstack_ipv6():
        return None
    sock = socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True)
    sock.setblocking(False)
    return sock


def _accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip (not with ``q=0``)."""
    for part in header.lower().split(","):
        name, _, params = part.partition(";")
        if name.strip() not in ("gzip", "*"):
            continue
        q = params.strip().removeprefix("q=")
        try:
            return q == params.strip() or float(q) > 0  # no q: accepted
        except ValueError:
            return False
    return False


def _sse(event: str, msg: dict[str, Any]) -> bytes:
    try:  # orjson: a 3,600-point snapshot in about a tenth of json's time (NaN written as null)
        data = orjson.dumps(msg)
    except TypeError:  # an integer over 64 bits
        data = json.dumps(msg, separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode()
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


class _Client:
    __slots__ = ("queue", "request")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=QUEUE_SIZE)


class Dashboard:
    """The live dashboard of one run (or of a folder being watched), served on ``host:port``."""

    def __init__(
        self,
        feed: FeedLike,
        *,
        host: str = "127.0.0.1",
        port: int = 8089,
        controls: Controls | None = None,
        interval_s: float = 1.0,
        before_tick: Callable[[], None] | None = None,
        report: Callable[[], Path | None] | None = None,
        title: str = "loadgen live",
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, not {interval_s}")
        self.feed = feed
        self.host = host
        self.port = port
        self.controls = controls or Controls()
        self.interval_s = interval_s
        self.before_tick = before_tick
        self.report = report
        self.title = title
        self.url = ""
        self.ticks = 0  # points pushed
        self.dropped = 0  # clients cut off for not reading
        self.refused = 0  # requests refused or failed (the module docstring), never logged
        self.everywhere = host in WILDCARDS  # listening on every interface: the URL is loopback's
        self._control = secrets.token_urlsafe(24)
        self._token = None if is_loopback(host) else secrets.token_urlsafe(24)
        self._clients: set[_Client] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._hosts: set[str] = set()
        self._page = b""
        self._page_gz = b""
        self._snapshot: bytes | None = None  # the SNAPSHOT frame of this tick, once a page asked
        self._closed = False
        self._pages = 0  # page loads since the last level_cost()
        self._work_ns = 0  # the dashboard's own work on the loop (ticks, snapshots) since then
        self._since = time.monotonic()

    @property
    def clients(self) -> int:
        """How many pages are connected to the stream now."""
        return len(self._clients)

    async def start(self) -> str:
        """Bind, start the ticker; returns the URL to open (with ``?token=`` off loopback)."""
        self._page = render_page(self._control, self.title).encode()
        self._page_gz = await asyncio.to_thread(gzip.compress, self._page, 6, mtime=0)
        app = web.Application(middlewares=[self._guard], client_max_size=1024)
        app.router.add_get("/", self._index)
        app.router.add_get("/events", self._events)
        app.router.add_post("/stop", self._stop)
        app.router.add_post("/skip", self._skip)
        app.router.add_get("/report", self._report)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.5, logger=_server_log(self)
        )
        await self._runner.setup()
        sock = _dual_stack(self.port) if self.host == "::" else None
        site: web.BaseSite
        if sock is not None:
            site = web.SockSite(self._runner, sock)
        else:
            site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            if sock is not None:
                sock.close()
            raise
        self.port = int(self._runner.addresses[0][1])
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self._hosts = {f"{h}:{self.port}" for h in ("127.0.0.1", "localhost", "[::1]", shown.lower())}
        if self.everywhere:  # a URL that opens here; from elsewhere, the machine's address
            shown = "[::1]" if self.host == "::" and sock is None else "127.0.0.1"
        self.url = f"http://{shown}:{self.port}/" + (f"?token={self._token}" if self._token else "")
        self._ticker = asyncio.create_task(self._tick_loop(), name="dashboard-ticker")
        return self.url

    async def aclose(self) -> None:
        """A last point pushed, every page told "end", the site closed; bounded (≤ 2 s)."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + CLOSE_S
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._tick_once(0.0)
        for client in list(self._clients):
            self._push(client, None)
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=max(0.0, deadline - time.monotonic() - 0.7))
        for client in list(self._clients):
            self._cut(client)
        if self._runner is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._runner.cleanup(), max(0.1, deadline - time.monotonic()))

    async def __aenter__(self) -> Dashboard:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- the ticker ------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self.interval_s
        last_ping = loop.time()
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            lag_ms = max(0.0, (now - due) * 1000.0)
            due += self.interval_s
            if due < now:  # fell behind by more than a tick: skip the missed ones, no burst
                due = now + self.interval_s
            self._tick_once(lag_ms)
            if now - last_ping >= PING_S:
                last_ping = now
                for client in list(self._clients):
                    self._push(client, b": ping\n\n")

    def level_cost(self) -> str | None:
        """What the dashboard cost the measuring process since the last call (a level), as
        a reason for a client-bound verdict; None when it did no more than tick. The count
        starts again at every call."""
        pages, work_ms = self._pages, self._work_ns / 1e6
        elapsed_ms = max(1e-3, (time.monotonic() - self._since) * 1e3)
        self._pages, self._work_ns, self._since = 0, 0, time.monotonic()
        share = 100 * work_ms / elapsed_ms
        if pages == 0 and share < COST_NOTE_PERCENT:
            return None
        return (
            f"the live dashboard shares this process: {pages} page load{'s' if pages != 1 else ''}, "
            f"{len(self._clients)} open, and {work_ms:.0f} ms ({share:.1f}%) of its own work on the loop "
            "during the level (loadgen watch FOLDER serves it from another process)"
        )

    def _tick_once(self, lag_ms: float) -> None:
        start = time.perf_counter_ns()
        try:
            self._tick_work(lag_ms)
        finally:
            self._work_ns += time.perf_counter_ns() - start

    def _tick_work(self, lag_ms: float) -> None:
        try:
            self.feed.loop_lag_ms = round(lag_ms, 3)
            if self.before_tick is not None:
                self.before_tick()
            point = self._with_controls(self.feed.tick())
            self._snapshot = None
            frame = _sse("point", point)
        except Exception:  # a bug in the feed must not end the run it watches
            _log.exception("dashboard tick failed")
            return
        self.ticks += 1
        for client in list(self._clients):
            self._push(client, frame)

    def _with_controls(self, msg: dict[str, Any]) -> dict[str, Any]:
        run = dict(msg.get("run") or {})
        run["controls"] = {"stop": self.controls.stop is not None, "skip": self.controls.skip is not None}
        run["refused"] = self.refused
        return {**msg, "run": run}

    def _push(self, client: _Client, frame: bytes | None) -> None:
        try:
            client.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.dropped += 1
            self._cut(client)

    def _cut(self, client: _Client) -> None:
        self._clients.discard(client)
        transport = client.request.transport
        if transport is not None:
            transport.abort()  # wakes a write stuck on a full socket with an error

    # -- routes ----------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        host = request.headers.get("Host", "").lower()
        if host not in self._hosts and not (self.everywhere and host.rpartition(":")[2] == str(self.port)):
            return self._deny("this server is not that host")
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() != f"http://{host}":
            return self._deny("cross-origin request")
        if self._token is not None:
            given = request.query.get("token") or request.headers.get(TOKEN_HEADER) or ""
            if not hmac.compare_digest(given.encode(), self._token.encode()):
                return self._deny("a token is needed (the URL the run printed carries it)")
        if request.method == "POST":
            if not hmac.compare_digest(request.headers.get(CONTROL_HEADER, "").encode(), self._control.encode()):
                return self._deny("controls are for the dashboard page only")
        return await handler(request)

    def _deny(self, why: str) -> web.Response:
        self.refused += 1
        return web.json_response({"ok": False, "why": why}, status=403)

    async def _index(self, request: web.Request) -> web.StreamResponse:
        self._pages += 1
        gz = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
        return web.Response(
            body=self._page_gz if gz else self._page,
            content_type="text/html",
            charset="utf-8",
            headers={
                **({"Content-Encoding": "gzip"} if gz else {}),
                "Vary": "Accept-Encoding",
                "Cache-Control": "no-store",
                "Referrer-Policy": "no-referrer",
                "X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": page_csp() + "; frame-ancestors 'none'",  # a header only
            },
        )

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if len(self._clients) >= MAX_CLIENTS or self._closed:
            self.refused += 1
            return web.json_response({"ok": False, "why": f"at most {MAX_CLIENTS} pages at once"}, status=503)
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
                "X-Content-Type-Options": "nosniff",
            }
        )
        await resp.prepare(request)
        client = _Client(request)
        # the snapshot is taken and the client registered with no await between: no point is
        # lost nor sent twice (the one of this tick is shared: it holds the same points)
        if self._snapshot is None:
            start = time.perf_counter_ns()
            self._snapshot = _sse("snapshot", self._with_controls(self.feed.snapshot()))
            self._work_ns += time.perf_counter_ns() - start
        first = self._snapshot
        self._clients.add(client)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await resp.write(first)
            while True:
                frame = await client.queue.get()
                if frame is None:
                    await resp.write(b"event: end\ndata: {}\n\n")
                    break
                await resp.write(frame)
        except (ConnectionError, RuntimeError):
            pass  # gone, or cut off for not reading
        finally:
            self._clients.discard(client)
            if task is not None:
                self._handlers.discard(task)
        return resp

    async def _stop(self, request: web.Request) -> web.StreamResponse:
        if self.controls.stop is None:
            return web.json_response({"ok": False, "why": "this dashboard cannot stop the run"}, status=404)
        self.controls.stop()
        return web.json_response(
            {
                "ok": True,
                "why": "stopping: the requests in flight end as cancelled, the summary and the report are written",
            }
        )

    async def _skip(self, request: web.Request) -> web.StreamResponse:
        if self.controls.skip is None:
            return web.json_response({"ok": False, "why": "this dashboard cannot skip a level"}, status=404)
        if self.controls.skip():
            return web.json_response({"ok": True, "why": "skipping to the next level"})
        return web.json_response({"ok": False, "why": "no level to skip"})

    async def _report(self, request: web.Request) -> web.StreamResponse:
        path = self.report() if self.report is not None else None
        if path is None or not await asyncio.to_thread(Path(path).is_file):
            return web.json_response({"ok": False, "why": "no report yet"}, status=404)
        return web.FileResponse(path, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
