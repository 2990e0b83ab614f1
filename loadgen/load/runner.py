"""The async load runner: closed loop (N users) and open loop (precomputed arrivals).

One :class:`Runner` drives one level at a time through a :class:`Transport`. Requests come
from a :class:`~loadgen.load.source.SpecSource`, a session source
(:mod:`loadgen.load.sessions`), both split over workers by user and schedule position, or
one plain iterator shared by every user (benchmarks and tests). Every request gets a
:class:`RequestRecord` with ``scheduled_ns`` and ``sent_ns``, and every finished record is
handed to ``on_record`` at once, so an interrupted run loses nothing that finished.
:meth:`Runner.prepare` makes a :class:`~loadgen.load.context.Driver`;
:meth:`Runner.run_prepared` starts the level and hands it a
:class:`~loadgen.load.context.LevelContext`.

docs/architecture.md, "How a level is sent" → "The runner", has the split over workers,
connection warming, the event-loop lag monitor and the frozen garbage collector.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import time
from collections.abc import Callable, Iterator

import numpy as np

from loadgen.load.agent import AgentTasks, TaskSource
from loadgen.load.context import Driver, LevelContext
from loadgen.load.credits import Credits
from loadgen.load.plan import TRIAL_LEVELS, Keep, LevelPlan, LevelResult, level_schedule
from loadgen.load.sessions import SessionSource, SessionSpecs
from loadgen.load.source import KnowsUsers, SpecSource, user_quota
from loadgen.load.transport import Transport, Warms
from loadgen.records import RequestRecord, RequestSpec

__all__ = ["TRIAL_LEVELS", "Keep", "LevelPlan", "LevelResult", "Runner"]

_now = time.perf_counter_ns
_schedule = level_schedule  # the name tests and benchmarks know
LAG_INTERVAL_S = 0.010
OPEN_WARM_LATENCY_S = 2.0  # open loop, before any request finished: the latency the warm-up pool is sized by


class Runner:
    """Runs levels against a transport; ``interrupt()`` stops the current level."""

    def __init__(
        self,
        transport: Transport,
        on_record: Callable[[RequestRecord], None] | None = None,
        credits: Credits | None = None,
        keep: Keep = "all",
    ) -> None:
        self.transport = transport
        self.keep: Keep = keep  # what each level's result keeps of its records (see LevelResult)
        self.on_record = on_record
        self.credits = credits  # the in-flight cap shared with other processes (None: this process's own)
        self._level: LevelContext | None = None  # the level running now
        self._sent_before = 0  # requests sent by the levels before it
        self._stop = False
        self._end_next = False  # end_level() came before the level's start
        self._e2e_ns = 0  # ok requests' latency summed, and their count: the open loop's warm-up size
        self._e2e_n = 0

    def end_level(self) -> None:
        """End the current level as its duration would: no new request goes out, those in
        flight finish (a level not started yet ends as soon as it starts)."""
        if self._level is not None:
            self._level.end()
        else:
            self._end_next = True

    def interrupt(self) -> None:
        """Stop sending and cancel everything in flight (their records say ``cancelled``)."""
        self._stop = True
        if self._level is not None:
            self._level.stop()

    @property
    def interrupted(self) -> bool:
        return self._stop

    @property
    def in_flight(self) -> int:
        """Requests in flight now."""
        return 0 if self._level is None else self._level.in_flight

    @property
    def sent(self) -> int:
        """Requests sent so far, over all levels."""
        return self._sent_before + (0 if self._level is None else self._level.sent)

    def in_flight_records(self) -> list[RequestRecord]:
        """Copies of the requests in flight now, without their events: what a coordinator
        keeps of them in case this process is lost."""
        return [] if self._level is None else self._level.in_flight_records()

    async def run_level(
        self, plan: LevelPlan, specs: Iterator[RequestSpec] | SpecSource | SessionSource | TaskSource
    ) -> LevelResult:
        """Run this process's share of ``plan``: requests from a source (prepared before
        the start), or from one iterator shared by all users."""
        return await self.run_prepared(plan, self.prepare(plan, specs))

    @staticmethod
    def prepare(plan: LevelPlan, specs: Iterator[RequestSpec] | SpecSource | SessionSource | TaskSource) -> Driver:
        """Build the level's requests ahead of its start (a source's prompts are made here).

        The one place that tells the kinds of request source apart: the sources live in
        :mod:`loadgen.workload`, which knows nothing of drivers, so each kind gets its own
        here; from then on the driver alone decides how the level is sent."""
        if isinstance(specs, Iterator):
            return _Shared(specs, plan)
        if isinstance(specs, TaskSource):
            return AgentTasks(specs, plan)
        if isinstance(specs, SessionSource):
            return SessionSpecs(specs, plan)
        return _Positional(specs, plan)

    async def run_prepared(self, plan: LevelPlan, driver: Driver) -> LevelResult:
        """Run a level whose requests :meth:`prepare` built."""
        res = LevelResult(plan, keep=self.keep)
        if plan.warm_connections and isinstance(self.transport, Warms) and not self._stop:
            await self.transport.warm(self.connections_for(plan))
        monitor_stop = asyncio.Event()
        monitor = asyncio.ensure_future(self._monitor(res, monitor_stop))
        gc.collect()
        gc.freeze()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        if plan.start_ns:  # a share of a level: every worker starts at the same instant
            await _sleep_until(plan.start_ns)
        res.start_ns = plan.start_ns or _now()
        ctx = self._level = LevelContext(plan, res, self.transport, self._finished, self.credits, res.start_ns, _now)
        ctx.stopped = self._stop
        if self._end_next:
            ctx.end()
        try:
            await driver.drive(ctx)
        finally:
            res.end_ns = _now()
            monitor_stop.set()
            await monitor
            if gc_was_enabled:
                gc.enable()
            gc.unfreeze()
            res.interrupted = self._stop
            self._sent_before += ctx.sent
            self._level = None
            self._end_next = False
        return res

    def connections_for(self, plan: LevelPlan) -> int:
        """The connections this process's share of ``plan`` will hold open: one per user
        (closed loop), or the rate times the mean latency measured so far (open loop; 2 s
        before any request finished), at most ``max_in_flight``."""
        if plan.mode == "concurrency":
            return len(range(plan.worker, max(int(plan.value), 1), plan.n_workers))
        rate = float(plan.value)
        if plan.offsets is not None and len(plan.offsets) > 1:
            rate = len(plan.offsets) / max(float(plan.offsets[-1] - plan.offsets[0]), 1e-3)
        latency_s = self._e2e_ns / self._e2e_n / 1e9 if self._e2e_n else OPEN_WARM_LATENCY_S
        n = math.ceil(rate / plan.n_workers * latency_s)
        return min(n, plan.max_in_flight) if plan.max_in_flight else n

    def _finished(self, rec: RequestRecord) -> None:
        if rec.ok and rec.sent_ns and rec.done_ns > rec.sent_ns:
            self._e2e_ns += rec.done_ns - rec.sent_ns
            self._e2e_n += 1
        if self.on_record is not None:
            self.on_record(rec)

    async def _monitor(self, res: LevelResult, stop: asyncio.Event) -> None:
        interval_ns = int(LAG_INTERVAL_S * 1e9)
        while not stop.is_set():
            t0 = _now()
            await asyncio.sleep(LAG_INTERVAL_S)
            t1 = _now()
            res.loop_lag_t_ns.append(t1)
            res.loop_lag_ms.append(max(t1 - t0 - interval_ns, 0) / 1e6)


_LEAD_NS = 5_000_000  # open loop in one process: a small lead so the first send is not already late


async def _sleep_until(t_ns: int) -> None:
    delay = t_ns - _now()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)


async def _closed_loop(ctx: LevelContext, specs: _Specs) -> None:
    plan = ctx.plan
    users = max(int(plan.value), 1)
    deadline: int | None = None  # --duration: set when the first measured request goes out
    warm_until = plan.warm_until_ns(ctx.start_ns)

    async def user(u: int) -> None:
        nonlocal deadline
        if u:
            await ctx.sleep_until(plan.user_start_ns(ctx.start_ns, u, users))
        while not ctx.closed:
            now = _now()
            if deadline is not None and now >= deadline:
                return
            nxt = specs.for_user(u)
            if nxt is None:
                return
            spec, warm = nxt
            warm = warm or now < warm_until
            if not warm and deadline is None:
                deadline = plan.measured_deadline_ns(now)
            rec = ctx.new_record(spec, u, warm)
            rec.scheduled_ns = now
            await ctx.send(spec, rec)

    await ctx.gather([user(u) for u in range(plan.worker, users, plan.n_workers)])


async def _open_loop(ctx: LevelContext, specs: _Specs) -> None:
    plan, res = ctx.plan, ctx.result
    offsets = level_schedule(plan)
    res.scheduled = len(offsets)
    positions = range(plan.worker, len(offsets), plan.n_workers)
    base = plan.start_ns or ctx.start_ns + _LEAD_NS
    due_ns = base + np.round(offsets[plan.worker :: plan.n_workers] * 1e9).astype(np.int64)
    cap = ctx.credits
    max_late = int(plan.max_lateness_s * 1e9)

    async def one(i: int, spec: RequestSpec, due: int) -> None:
        rec = ctx.new_record(spec, plan.worker, i < plan.warmup_requests)
        rec.scheduled_ns = due
        if cap is None:
            await ctx.send(spec, rec)
            return
        if not await cap.acquire(max(due + max_late - _now(), 0) / 1e9):
            res.dropped += 1
            return
        rec.credit_ns = _now()
        try:
            await ctx.send(spec, rec)
        finally:
            cap.release()

    for i, due in zip(positions, due_ns.tolist()):
        if not await ctx.sleep_until(due):
            if ctx.ended and not ctx.stopped:  # ended early: the schedule asked for the sends before this one
                res.scheduled = i
            break
        spec = specs.at(i)
        if spec is None:
            break
        ctx.spawn(one(i, spec, due))
    await ctx.wait()


class _Specs:
    """Single requests from an iterator or a :class:`SpecSource` (see :meth:`Runner.run_level`)."""

    def for_user(self, user: int) -> tuple[RequestSpec, bool] | None:
        """User ``user``'s next request and whether it is warm-up; None: the user is done."""
        raise NotImplementedError

    def at(self, position: int) -> RequestSpec | None:
        """The request of schedule position ``position`` (asked in ascending order)."""
        raise NotImplementedError

    async def drive(self, ctx: LevelContext) -> None:
        """Send the level as its plan's mode says: users (closed loop) or a schedule (open)."""
        if ctx.plan.mode == "concurrency":
            await _closed_loop(ctx, self)
        elif ctx.plan.mode == "rate":
            await _open_loop(ctx, self)
        else:
            raise ValueError(f"unknown load mode {ctx.plan.mode!r}")


class _Shared(_Specs):
    """One iterator for all users, in the order they ask; the first ``warmup_requests``
    handed out are warm-up, and the level ends after ``requests + warmup_requests``."""

    def __init__(self, specs: Iterator[RequestSpec], plan: LevelPlan) -> None:
        self._specs = specs
        self._warmup = plan.warmup_requests
        self._budget = None if plan.requests is None else plan.requests + plan.warmup_requests
        self._issued = 0

    def for_user(self, user: int) -> tuple[RequestSpec, bool] | None:
        if self._budget is not None and self._issued >= self._budget:
            return None
        spec = next(self._specs, None)
        if spec is None:
            return None
        self._issued += 1
        return spec, self._issued <= self._warmup

    def at(self, position: int) -> RequestSpec | None:
        return next(self._specs, None)


class _Positional(_Specs):
    """Requests by user and schedule position from a :class:`SpecSource`, built before
    the level starts (duration-bound users: a first chunk, the rest as they go)."""

    def __init__(self, source: SpecSource, plan: LevelPlan) -> None:
        self._plan = plan
        total = None if plan.requests is None else plan.requests + plan.warmup_requests
        self._users: dict[int, Iterator[RequestSpec]] = {}
        self._sent: dict[int, int] = {}
        self._sends: dict[int, RequestSpec] = {}
        if plan.mode == "concurrency":
            users = max(int(plan.value), 1)
            if isinstance(source, KnowsUsers):
                source.set_users(plan.spec_level, users)
            mine = range(plan.worker, users, plan.n_workers)
            ahead = 8 if total is None else max(1, min(USER_PREPARE, PREPARE_TOTAL // max(len(mine), 1)))
            for u in mine:
                it = source.user(plan.spec_level, u, user_quota(u, users, total))
                head = list(itertools.islice(it, ahead))
                self._users[u] = itertools.chain(head, it)
                self._sent[u] = 0
        else:
            self._source = source
            self._positions = range(plan.worker, len(level_schedule(plan)), plan.n_workers)
            self._built = 0  # positions[:_built] have their specs
            self._build(OPEN_PREPARE)

    def for_user(self, user: int) -> tuple[RequestSpec, bool] | None:
        spec = next(self._users[user], None)
        if spec is None:
            return None
        k = self._sent[user]
        self._sent[user] = k + 1
        users = max(int(self._plan.value), 1)
        return spec, k * users + user < self._plan.warmup_requests

    def _build(self, n: int) -> None:
        chunk = self._positions[self._built : self._built + n]
        self._sends.update(zip(chunk, self._source.sends(self._plan.spec_level, list(chunk))))
        self._built += len(chunk)

    def at(self, position: int) -> RequestSpec | None:
        if position not in self._sends and self._built < len(self._positions):
            self._build(OPEN_CHUNK)  # a long level: the next block, as it comes (its cost shows as loop lag)
        return self._sends.pop(position, None)


USER_PREPARE = 1 << 16  # requests-bound: a user's whole quota up to this many is built ahead
PREPARE_TOTAL = 1 << 16  # ... and all users' together up to this many (the rest as they go: a second or so of work)
OPEN_PREPARE = 20_000  # open loop: sends built before the start (a long level builds the rest in chunks)
OPEN_CHUNK = 1024
