"""A worker's share of a level, whatever hosts it: a process (:mod:`loadgen.load.workers`)
or a Ray actor (:mod:`loadgen.load.ray_pool`).

The worker side runs its share with :func:`run_share` and reports, besides its finished
records, the requests it has in flight (:meth:`Runner.in_flight_records`). The
coordinator side collects one level with :class:`LevelCollector`: records as they
arrive, each worker's end, and each lost worker, whose last-reported in-flight requests
become ``worker_lost`` records — load is never silently re-run, and what was sent is
never silently dropped. Requests a lost worker sent after its last report are unknown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.load.agent import TaskSource
from loadgen.load.context import Driver
from loadgen.load.plan import LevelPlan, LevelResult
from loadgen.load.precision import LevelWatch
from loadgen.load.runner import Runner
from loadgen.load.sessions import SessionSource
from loadgen.load.source import SpecSource
from loadgen.load.transport import Transport
from loadgen.metrics.client import WorkerStats
from loadgen.records import ErrorKind, RequestRecord

__all__ = ["START_LEAD_NS", "LevelCollector", "ShareDone", "WorkerSetup", "run_share"]

_now = time.perf_counter_ns
START_LEAD_NS = 50_000_000  # the coordinator picks a level's start this far ahead


@dataclass(frozen=True, slots=True)
class WorkerSetup:
    """What a worker needs, as picklable factories (module-level functions or
    ``functools.partial`` of them): the transport, the request source, the record codec."""

    make_transport: Callable[[], Transport]
    make_source: Callable[[], SpecSource | SessionSource | TaskSource]
    encode: Callable[[Sequence[RequestRecord]], bytes]
    decode: Callable[[bytes], list[RequestRecord]]
    flush_s: float = 0.5


@dataclass(frozen=True, slots=True)
class ShareDone:
    """A worker's end of a level: its own health and its part of the schedule."""

    stats: WorkerStats
    scheduled: int  # the schedule's first position not sent (its length when the level ran out)
    dropped: int
    interrupted: bool
    own: int = -1  # how many positions before ``scheduled`` were this worker's (-1: not told)


def _runqueue_ns() -> int | None:
    """Time this process's main thread spent runnable but waiting for a CPU (Linux)."""
    try:
        with open("/proc/self/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


async def run_share(runner: Runner, plan: LevelPlan, prepared: Driver, worker: int) -> ShareDone:
    """Run a prepared share of a level and measure the worker's own health meanwhile."""
    res, stats = await measure_share(runner, plan, prepared, worker)
    own = len(range(plan.worker, res.scheduled, plan.n_workers))  # the positions are dealt out in turn
    return ShareDone(stats, res.scheduled, res.dropped, res.interrupted, own)


async def measure_share(
    runner: Runner, plan: LevelPlan, prepared: Driver, worker: int
) -> tuple[LevelResult, WorkerStats]:
    """Run a prepared share of a level; its result and this process's own health (CPU,
    run-queue wait, loop lag) meanwhile."""
    cpu0, wall0, rq0 = time.process_time(), _now(), _runqueue_ns()
    res = await runner.run_prepared(plan, prepared)
    rq1 = _runqueue_ns()
    stats = WorkerStats(
        worker=worker,
        share=plan.worker,
        n_shares=plan.n_workers,
        loop_lag_ms=list(res.loop_lag_ms),
        loop_lag_t_ns=list(res.loop_lag_t_ns),
        cpu_s=time.process_time() - cpu0,
        wall_s=(_now() - wall0) / 1e9,
        runqueue_s=None if rq0 is None or rq1 is None else (rq1 - rq0) / 1e9,
    )
    return res, stats


class LevelCollector:
    """The coordinator's side of one level: ``on_records`` gets every record once, a
    batch at a time, as it arrives (the run folder, the live display)."""

    def __init__(
        self,
        plan: LevelPlan,
        on_records: Callable[[Sequence[RequestRecord]], None] | None,
        watch: LevelWatch | None = None,
        end: Callable[[], None] = lambda: None,
    ) -> None:
        """``watch``: the level's precision targets, fed every record; ``end`` is called
        when it says they are met (the pool ends its workers' level)."""
        self.result = LevelResult(plan, keep="compact")  # read once, by the level's summary
        self.on_records = on_records
        self.watch = watch
        self._end = end
        self.lost: list[int] = []
        self.silent: dict[int, float] = {}
        self._stats: dict[int, WorkerStats] = {}
        self._own: dict[int, int] = {}

    def add(self, records: Sequence[RequestRecord]) -> None:
        if self.on_records is not None and records:
            self.on_records(records)
        for rec in records:
            self.result.add(rec)
        if self.watch is not None and self.watch.add(records):
            self._end()

    def done(self, worker: int, end: ShareDone) -> None:
        self._stats[worker] = end.stats
        self._own[worker] = end.own
        self.result.scheduled = max(self.result.scheduled, end.scheduled)
        self.result.dropped += end.dropped

    def lose(self, worker: int, in_flight: Sequence[RequestRecord], why: str) -> None:
        """Worker ``worker`` is gone: its last-reported ``in_flight`` requests become
        ``worker_lost`` records (their outcome is unknown) and the level names it."""
        if worker in self.lost:
            return
        self.lost.append(worker)
        now = _now()
        for r in in_flight:
            r.fail(ErrorKind.WORKER_LOST, f"worker {worker} was lost with this request in flight ({why})", now)
        self.add(in_flight)

    def silence(self, worker: int, seconds: float) -> None:
        """Worker ``worker`` sent nothing for ``seconds`` during the level (stopped, or
        starved of CPU): the level's client health names it."""
        self.silent[worker] = max(self.silent.get(worker, 0.0), seconds)

    def finish(self, interrupted: bool) -> LevelResult:
        res = self.result
        res.end_ns = _now()
        res.interrupted = interrupted
        res.lost_workers = sorted(self.lost)
        res.silent_workers = dict(sorted(self.silent.items()))
        res.worker_stats = [self._stats[w] for w in sorted(self._stats)]
        if self._own and not self.lost and min(self._own.values()) >= 0:
            # workers that ended early stop at slightly different positions: the schedule
            # asked for each one's own sends, not for every position before the last of them
            res.scheduled = sum(self._own.values())
        for ws in res.worker_stats:
            res.loop_lag_ms.extend(ws.loop_lag_ms)
            res.loop_lag_t_ns.extend(ws.loop_lag_t_ns)
        return res
