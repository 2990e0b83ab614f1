"""One level over several worker processes: a coordinator without HTTP, N senders.

Each worker is a process with its own event loop, transport and
:class:`~loadgen.load.runner.Runner`, running its share of each level (users and sends
``w, w + n, …``, see :mod:`loadgen.load.source`) from one start instant on the shared
monotonic clock. A level goes ``prepare``, ``start``, records in batches (with the
requests in flight, or a heartbeat), ``done``. A worker that dies leaves its last-listed
in-flight requests as ``worker_lost`` records; one silent for :data:`SILENT_S` is named in
the level's client health. Workers ignore SIGINT/SIGTERM and stop on the coordinator's
``interrupt`` (killed after :data:`STOP_WAIT_S`), so nothing is lost. The transport, the
request source and the record codec come as picklable factories: ``load/`` knows neither
the client nor the run folder.

docs/architecture.md, "How a level is sent" → "Worker processes", has each step in full.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from typing import Any

from loadgen.aio import new_event_loop
from loadgen.errors import TargetError
from loadgen.load.credits import SharedCredits
from loadgen.load.precision import LevelWatch
from loadgen.load.runner import LevelPlan, LevelResult, Runner
from loadgen.load.share import START_LEAD_NS, LevelCollector, ShareDone, WorkerSetup, run_share
from loadgen.records import RequestRecord
from loadgen.signals import STOP_SIGNALS, ignore_stop_signals

__all__ = ["SILENT_S", "STOP_WAIT_S", "STREAMS_PER_WORKER", "WorkerPool", "WorkerSetup", "auto_workers"]

_now = time.perf_counter_ns
STREAMS_PER_WORKER = 128  # measured: one event loop keeps p99 gap error < 2 ms up to ~100-128 streams
STOP_WAIT_S = 5.0  # after an interrupt, how long a worker has to answer before it is killed
SILENT_S = 2.0  # a worker silent this long during a level (4 missed reports at 0.5 s) is flagged


def auto_workers(streams: int, cpus: int | None = None, cpus_of: str = "the") -> tuple[int, str]:
    """How many workers ``--workers auto`` starts for ``streams`` concurrent requests, and
    why (``cpus``: this machine's unless given; ``cpus_of`` says whose they are)."""
    cpus = cpus or os.cpu_count() or 1
    want = max(1, -(-streams // STREAMS_PER_WORKER))
    n = max(1, min(want, cpus))
    why = f"{streams} concurrent streams at up to {STREAMS_PER_WORKER} per worker" + (
        f", capped at {cpus_of} {cpus} CPUs" if want > cpus else ""
    )
    return n, why


def _read_in_thread(conn: Connection, deliver: Callable[[Any], object], at_end: Any) -> threading.Thread:
    """Receive ``conn``'s messages in a thread (blocking reads: an event loop's reader
    would make the pipe non-blocking, and a message half-written would fail to read)
    and ``deliver`` each one, then ``at_end`` when the other side is gone."""

    def run() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                deliver(at_end)
                return
            deliver(msg)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _worker_main(cmd: Connection, out: Connection, setup: WorkerSetup, worker: int, credits: Any) -> None:
    ignore_stop_signals()  # the coordinator says when to stop
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the parent while it started us
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(cmd, out, setup, worker, None if credits is None else SharedCredits(credits)))
    finally:
        loop.close()


async def _serve(
    cmd: Connection, out: Connection, setup: WorkerSetup, worker: int, credits: SharedCredits | None
) -> None:
    outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def sender() -> None:  # sends from a thread: a full pipe never blocks the event loop
        while (msg := outbox.get()) is not None:
            try:
                out.send(msg)
            except OSError:
                return

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    _read_in_thread(cmd, lambda msg: loop.call_soon_threadsafe(inbox.put_nowait, msg), ("close",))
    transport = setup.make_transport()
    source = setup.make_source()
    runner = Runner(transport, credits=credits, keep="none")  # the coordinator keeps the records
    pending: list[RequestRecord] = []
    runner.on_record = pending.append
    reported = -1  # runner.sent at the last batch: a new send changes the in-flight list

    def flush() -> bool:
        nonlocal reported
        if pending or runner.sent != reported:
            live = runner.in_flight_records()
            outbox.put(("records", setup.encode(pending), setup.encode(live), len(live)))
            pending.clear()
            reported = runner.sent
            return True
        return False

    async def flusher() -> None:
        while True:
            await asyncio.sleep(setup.flush_s)
            if not flush():
                outbox.put(("beat",))  # nothing new: the coordinator still hears from this loop

    outbox.put(("ready", worker, os.getpid()))
    flushing = asyncio.ensure_future(flusher())
    plan: LevelPlan | None = None
    prepared: Any = None
    level: asyncio.Future[None] | None = None
    try:
        while True:
            msg = await inbox.get()
            if msg[0] == "prepare":
                plan = msg[1]
                prepared = runner.prepare(plan, source)  # the prompts, before anyone starts
                outbox.put(("prepared", worker))
            elif msg[0] == "start" and plan is not None:
                level = asyncio.ensure_future(
                    _level(runner, dataclasses.replace(plan, start_ns=msg[1]), prepared, flush, outbox, worker)
                )
                plan = prepared = None
            elif msg[0] == "interrupt":
                runner.interrupt()
            elif msg[0] == "end" and level is not None and not level.done():
                runner.end_level()
            elif msg[0] == "close":
                break
    finally:
        flushing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flushing
        if level is not None and not level.done():
            runner.interrupt()
            with contextlib.suppress(BaseException):
                await level
        flush()
        await transport.aclose()
        outbox.put(None)
        thread.join(5)


async def _level(
    runner: Runner,
    plan: LevelPlan,
    prepared: Any,
    flush: Callable[[], bool],
    outbox: queue.SimpleQueue[Any],
    worker: int,
) -> None:
    end = await run_share(runner, plan, prepared, worker)
    flush()  # every record of the level before "done"
    outbox.put(("done", worker, end))


@dataclass(slots=True)
class _Worker:
    index: int
    process: Any
    cmd: Connection
    out: Connection
    alive: bool = True
    in_flight: int = 0
    live: bytes = b""  # the requests in flight at the last batch, encoded
    done: bool = False
    prepared: bool = False
    abandoned: bool = False  # killed for not answering a stop: what it still sent is ignored
    heard_ns: int = 0  # during a level: when it last sent anything
    silent_ns: int = 0  # during a level: its longest silence


class WorkerPool:
    """``n`` worker processes that run levels together; the coordinator's side.

    ``on_records`` receives each batch of records as it arrives (the run folder writer, the
    live display). Use as an async context manager; :meth:`interrupt` stops the level
    (Ctrl-C). A worker that dies is left out of the rest of the run: its last-listed
    in-flight requests become ``worker_lost`` records, its finished but unsent ones are
    lost, and :attr:`LevelResult.lost_workers` names it. So is a worker that has not
    answered ``stop_wait_s`` after :meth:`interrupt` (it is killed); a worker silent for
    ``silent_s`` during a level is named in :attr:`LevelResult.silent_workers`.
    """

    def __init__(
        self,
        setup: WorkerSetup,
        n: int,
        on_records: Callable[[Sequence[RequestRecord]], None] | None = None,
        start_timeout_s: float = 120.0,
        max_in_flight: int | None = None,
        stop_wait_s: float = STOP_WAIT_S,
        silent_s: float = SILENT_S,
    ) -> None:
        if n < 1:
            raise ValueError(f"workers must be >= 1, got {n}")
        self.setup = setup
        self.n = n
        self.on_records = on_records
        self.start_timeout_s = start_timeout_s
        self.max_in_flight = max_in_flight  # open loop: one cap over all workers (shared credits)
        self.stop_wait_s = stop_wait_s
        self.silent_s = silent_s
        self._workers: list[_Worker] = []
        self._level: LevelCollector | None = None
        self._waiting: set[int] = set()
        self._stop = False
        self._stop_ns: int | None = None  # when interrupt() was first called
        self._event = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return sum(w.in_flight for w in self._workers if w.alive)

    @property
    def interrupted(self) -> bool:
        return self._stop

    @property
    def pids(self) -> list[int]:
        return [int(w.process.pid) for w in self._workers]

    def clock_report(self) -> None:
        """None: the workers share this machine's monotonic clock."""
        return None

    async def __aenter__(self) -> WorkerPool:
        ctx = mp.get_context("spawn")
        # the first start would spawn it, and unblock SIGINT and SIGTERM in this thread on
        # the way, before the worker inherits the mask blocked below
        resource_tracker.ensure_running()
        loop = asyncio.get_running_loop()
        credits = ctx.BoundedSemaphore(self.max_in_flight) if self.max_in_flight else None
        for i in range(self.n):
            cmd_r, cmd_w = ctx.Pipe(duplex=False)
            out_r, out_w = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_worker_main,
                args=(cmd_r, out_w, self.setup, i, credits),
                name=f"loadgen-worker-{i}",
                daemon=True,
            )
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # the child inherits the mask
            try:
                proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a signal that came meanwhile arrives now
            cmd_r.close()
            out_w.close()
            w = _Worker(i, proc, cmd_w, out_r)
            self._workers.append(w)
            _read_in_thread(out_r, functools.partial(self._deliver, loop, w), ("eof",))
        ready: set[int] = set()
        deadline = time.monotonic() + self.start_timeout_s
        while len(ready) < self.n:
            self._event.clear()
            for w in self._workers:
                if w.done:
                    ready.add(w.index)
            self._abandon_overdue([w for w in self._workers if not w.done])  # a stop while they start
            if any(w.abandoned for w in self._workers):
                break  # the level stops at once, over the workers that did start
            if not all(w.alive for w in self._workers):
                await self.__aexit__(None, None, None)
                raise TargetError("a worker process died while starting")
            if len(ready) == self.n:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                await self.__aexit__(None, None, None)
                raise TargetError(f"worker processes did not start within {self.start_timeout_s:g} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout=min(left, 1.0))
        for w in self._workers:
            w.done = False
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self._workers:
            if w.alive:
                with contextlib.suppress(OSError, ValueError):
                    w.cmd.send(("close",))
        deadline = time.monotonic() + (self.stop_wait_s if self._stop else 10.0)
        for w in self._workers:
            while w.process.is_alive() and time.monotonic() < deadline:  # noqa: ASYNC110 - a process exits; no event
                await asyncio.sleep(0.02)
            if w.process.is_alive():
                w.process.kill()
            w.process.join(1)
            w.cmd.close()
            w.out.close()

    def _deliver(self, loop: asyncio.AbstractEventLoop, w: _Worker, msg: Any) -> None:
        """From a reader thread: hand ``msg`` to the event loop, with when it came (a busy
        loop does not make a worker look silent)."""
        with contextlib.suppress(RuntimeError):  # the loop closed after the run
            loop.call_soon_threadsafe(self._on_message, w, msg, _now())

    def _on_message(self, w: _Worker, msg: Any, at_ns: int = 0) -> None:
        kind = msg[0]
        if w.abandoned:  # its in-flight requests are worker_lost records already
            return
        if w.index in self._waiting and w.heard_ns and at_ns > w.heard_ns:
            w.silent_ns, w.heard_ns = max(w.silent_ns, at_ns - w.heard_ns), at_ns
        if kind == "eof":
            self._lose(w)
        elif kind == "records":
            _, blob, w.live, w.in_flight = msg
            recs = self.setup.decode(blob)
            if self._level is not None:
                self._level.add(recs)
            elif self.on_records is not None:
                self.on_records(recs)
        elif kind == "ready":
            w.done = True
        elif kind == "prepared":
            w.prepared = True
        elif kind == "done":
            end: ShareDone = msg[2]
            w.done, w.in_flight, w.live = True, 0, b""
            if self._level is not None:
                self._level.done(w.index, end)
                self._waiting.discard(w.index)
        self._event.set()

    def _lose(self, w: _Worker, why: str | None = None) -> None:
        if not w.alive:
            return
        w.alive = False
        if self._level is not None:
            self._note_silence(w)
            code = w.process.exitcode
            if why is None:
                why = "its process died" if code is None else f"its process exited with code {code}"
            in_flight = self.setup.decode(w.live) if w.live and w.index in self._waiting else []
            self._level.lose(w.index, in_flight, why)
            self._waiting.discard(w.index)
        w.in_flight, w.live = 0, b""
        self._event.set()

    def _note_silence(self, w: _Worker) -> None:
        """At the end of ``w``'s level: its longest silence, when over ``silent_s``."""
        if self._level is not None and w.heard_ns:
            silent = max(w.silent_ns, _now() - w.heard_ns) if w.index in self._waiting else w.silent_ns
            if silent > self.silent_s * 1e9:
                self._level.silence(w.index, silent / 1e9)
        w.heard_ns = w.silent_ns = 0

    def _abandon_overdue(self, pending: Sequence[_Worker]) -> None:
        """After an interrupt, kill each of ``pending`` that has not answered within
        ``stop_wait_s``: a stopped or hung process never holds up the end of a run."""
        if self._stop_ns is None or _now() - self._stop_ns < self.stop_wait_s * 1e9:
            return
        for w in pending:
            if w.alive:
                w.abandoned = True
                with contextlib.suppress(OSError):
                    w.process.kill()  # SIGKILL: it also ends a stopped (SIGSTOP) process
                self._lose(w, f"it did not answer the stop within {self.stop_wait_s:g} s and was killed")

    def interrupt(self) -> None:
        """Stop the level: every worker cancels what it has in flight; one that has not
        answered within ``stop_wait_s`` is killed (its in-flight requests ``worker_lost``)."""
        self._stop = True
        if self._stop_ns is None:
            self._stop_ns = _now()
        for w in self._workers:
            if w.alive:
                with contextlib.suppress(OSError, ValueError):
                    w.cmd.send(("interrupt",))

    def end_level(self) -> bool:
        """End the running level's shares as at their duration (Skip level); False between levels."""
        if self._level is None or self._stop:
            return False
        self._end_level(self._workers)
        return True

    def _end_level(self, live: Sequence[_Worker]) -> None:
        """End the level's shares as at their duration: what is in flight finishes."""
        for w in live:
            if w.alive:
                with contextlib.suppress(OSError, ValueError):
                    w.cmd.send(("end",))

    async def _wait(self, pending: set[int], timeout_s: float | None = None) -> None:
        """Until every worker in ``pending`` has answered (each answer removes it) or died."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pending:
            self._event.clear()
            for w in self._workers:
                if w.alive and not w.process.is_alive():
                    self._lose(w)
            self._abandon_overdue([w for w in self._workers if w.index in pending])
            pending.intersection_update(w.index for w in self._workers if w.alive)
            if not pending:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TargetError(f"worker processes {sorted(pending)} did not answer within {timeout_s:g} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout=0.5 if left is None else min(left, 0.5))

    async def run_level(self, plan: LevelPlan, watch: LevelWatch | None = None) -> LevelResult:
        """Run ``plan`` over the live workers: each builds its share, then all start at
        one instant on the shared clock. The records arrive through ``on_records`` (and
        in the result, and ``watch``: when it says the level is precise, every worker
        ends its share as at the level's duration); ``worker_stats`` holds each worker's health."""
        if self._stop:  # stopped before the level (while the workers started): nothing to send
            return LevelCollector(plan, self.on_records).finish(True)
        live = [w for w in self._workers if w.alive]
        if not live:
            raise TargetError("every worker process has died")
        level = self._level = LevelCollector(plan, self.on_records, watch, functools.partial(self._end_level, live))
        self._waiting = {w.index for w in live}
        try:
            for k, w in enumerate(live):
                w.done = w.prepared = False
                w.live = b""
                self._send(w, ("prepare", plan.share(k, len(live), 0)))
            await self._wait_prepared(live)
            if self._stop:  # stopped while they prepared: nothing was sent, none is started
                return level.finish(True)
            start_ns = _now() + START_LEAD_NS
            level.result.start_ns = start_ns
            for w in live:
                w.heard_ns, w.silent_ns = _now(), 0  # silence counts from the start
                self._send(w, ("start", start_ns))
            await self._wait(self._waiting)
        finally:
            for w in live:
                if w.alive:
                    self._note_silence(w)
            self._level = None
        return level.finish(self._stop)

    async def _wait_prepared(self, live: Sequence[_Worker]) -> None:
        while True:
            self._event.clear()
            for w in live:
                if w.alive and not w.process.is_alive():
                    self._lose(w)
            if all(w.prepared or not w.alive for w in live):
                return
            self._abandon_overdue([w for w in live if not w.prepared])
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout=0.5)

    def _send(self, w: _Worker, msg: Any) -> None:
        try:
            w.cmd.send(msg)
        except (OSError, ValueError):
            self._lose(w)
