"""The async load runner: closed loop (N users) and open loop (precomputed arrivals).

One :class:`Runner` drives one level at a time through a :class:`Transport`. Requests
come from a :class:`~loadgen.load.source.SpecSource`, from a session source (multi-turn
conversations, :mod:`loadgen.load.sessions`) (by user and by schedule position,
so a level can be split over worker processes: worker ``w`` of ``n`` runs the users
``u ≡ w (mod n)`` and the sends ``i ≡ w (mod n)``, from the shared ``start_ns``), or from
one plain iterator shared by every user (benchmarks and tests). Every
request gets a :class:`RequestRecord` with ``scheduled_ns`` (when it should have gone)
and ``sent_ns`` (when it went); every finished record — ok, failed or cancelled — is
handed to ``on_record`` at once (the CLI appends it to ``records.jsonl``), so an
interrupted run loses nothing that finished.

While a level runs, a monitor task measures event-loop lag every 10 ms, and the
garbage collector is frozen and disabled (a collection pause would show up as latency).
"""

from __future__ import annotations

import asyncio
from array import array
import dataclasses
import gc
import time
from dataclasses import dataclass, field
import itertools
from typing import Callable, Iterator, Literal

import numpy as np
import numpy.typing as npt

from loadgen.load.arrivals import schedule
from loadgen.load.credits import Credits, LocalCredits
from loadgen.load.sessions import SessionSource, SessionSpecs
from loadgen.load.source import KnowsUsers, SpecSource, user_quota
from loadgen.load.store import RecordStore
from loadgen.load.transport import Transport
from loadgen.metrics.client import WorkerStats
from loadgen.metrics.results import Load
from loadgen.records import RequestRecord, RequestSpec

__all__ = ["Keep", "LevelPlan", "LevelResult", "Runner"]

_now = time.perf_counter_ns
I64 = npt.NDArray[np.int64]
LAG_INTERVAL_S = 0.010


TRIAL_LEVELS = 4096  # levels a run can have before trials' request indices would overlap


@dataclass(slots=True)
class LevelPlan:
    """One load level. ``requests`` excludes the ``warmup_requests`` sent first."""

    index: int
    mode: str  # "concurrency" | "rate"
    value: float
    requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_in_flight: int | None = None  # open loop only
    max_lateness_s: float = 10.0  # open loop: later than this (waiting for the cap) -> dropped
    seed: int = 0
    ramp_s: float = 0.0  # closed loop: users join one by one, evenly over this many seconds
    worker: int = 0  # this process's share of the level: users and sends w, w + n, w + 2n, ...
    n_workers: int = 1
    start_ns: int = 0  # the level's start on the shared monotonic clock (0: a few ms from now)
    offsets: np.ndarray | None = None  # trace replay: the send offsets (s, ascending) instead of arrival/value
    trial: int = 0  # --trials: which repetition of the level this is (its own requests)

    @property
    def spec_level(self) -> int:
        """Where the level's requests come from in the workload's index space: trial ``t``
        of level ``i`` draws those of ``i + t * TRIAL_LEVELS`` (new requests, same law)."""
        return self.index + self.trial * TRIAL_LEVELS

    def share(self, worker: int, n_workers: int, start_ns: int) -> "LevelPlan":
        """This level as worker ``worker`` of ``n_workers`` runs it (``max_in_flight`` stays
        the level's: the workers draw on shared credits, see :mod:`loadgen.load.credits`)."""
        return dataclasses.replace(self, worker=worker, n_workers=n_workers, start_ns=start_ns)

    def split_share(self, worker: int, n_workers: int, start_ns: int) -> "LevelPlan":
        """:meth:`share` for senders that share no credits (Ray actors on other machines):
        ``max_in_flight`` is split so that the shares add up to the cap."""
        cap = self.max_in_flight
        if cap is not None:
            cap = max(cap // n_workers + (1 if worker < cap % n_workers else 0), 1)
        return dataclasses.replace(self.share(worker, n_workers, start_ns), max_in_flight=cap)

    @property
    def load(self) -> Load:
        """The offered load: whole users in closed loop, a rate in open loop."""
        return Load(self.mode, int(self.value) if self.mode == "concurrency" else float(self.value))

    def last_send_s(self) -> float | None:
        """Open loop: when the level's last request is due, in seconds from its start (None:
        a closed loop, whose pace the server sets)."""
        if self.mode != "rate":
            return None
        offsets = _schedule(self)
        return float(offsets[-1]) if len(offsets) else 0.0


Keep = Literal["all", "compact", "none"]


@dataclass(slots=True)
class LevelResult:
    """One level's outcome. Its finished records are in ``records`` as they came, or —
    a result made with ``keep="compact"`` — in ``store`` (:meth:`add` decides), or
    nowhere (``keep="none"``: a worker, whose coordinator keeps them)."""

    plan: LevelPlan
    records: list[RequestRecord] = field(default_factory=list)
    store: RecordStore | None = None
    loop_lag_ms: array[float] = field(default_factory=lambda: array("d"))  # every 10 ms: compact
    loop_lag_t_ns: array[int] = field(default_factory=lambda: array("q"))
    start_ns: int = 0
    end_ns: int = 0
    scheduled: int = 0  # requests the schedule asked for (open loop)
    dropped: int = 0  # open loop: never sent, the cap stayed full past max_lateness_s
    interrupted: bool = False
    worker_stats: list[WorkerStats] = field(default_factory=list)  # worker processes: each one's health
    lost_workers: list[int] = field(default_factory=list)  # workers lost during the level (it is partial)
    silent_workers: dict[int, float] = field(default_factory=dict)  # worker: its longest silence (s), when flagged
    clock_uncertainty_ns: int | None = None  # workers on other clocks: the worst offset uncertainty
    keep: Keep = "all"
    events: tuple[I64, I64, I64] | None = None  # pooled trials of compact results: their events apart

    def __post_init__(self) -> None:
        if self.keep == "compact" and self.store is None:
            self.store = RecordStore()

    def add(self, rec: RequestRecord) -> None:
        """Keep a finished record as ``keep`` says (compact: its events and vendor
        timings are not referenced afterwards)."""
        if self.store is not None:
            self.store.add(rec)
        elif self.keep == "all":
            self.records.append(rec)

    def for_summary(self) -> tuple[list[RequestRecord], tuple[I64, I64, I64] | None]:
        """The records and, when compact, their events apart (as ``summarize_level`` takes them)."""
        if self.store is None:
            return self.records, self.events
        return self.store.records(), self.store.events()


class Runner:
    """Runs levels against a transport; ``interrupt()`` stops the current level."""

    def __init__(self, transport: Transport, on_record: Callable[[RequestRecord], None] | None = None,
                 credits: Credits | None = None, keep: Keep = "all") -> None:  # fmt: skip
        self.transport = transport
        self.keep: Keep = keep  # what each level's result keeps of its records (see LevelResult)
        self.on_record = on_record
        self.credits = credits  # the in-flight cap shared with other processes (None: this process's own)
        self.in_flight = 0
        self.sent = 0
        self._live: dict[int, RequestRecord] = {}  # by id(): the requests in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = False

    def interrupt(self) -> None:
        """Stop sending and cancel everything in flight (their records say ``cancelled``)."""
        self._stop = True
        for t in list(self._tasks):
            t.cancel()

    @property
    def interrupted(self) -> bool:
        return self._stop

    def in_flight_records(self) -> list[RequestRecord]:
        """Copies of the requests in flight now, without their events: what a coordinator
        keeps of them in case this process is lost."""
        return [dataclasses.replace(r, events=[]) for r in self._live.values()]

    async def run_level(self, plan: LevelPlan, specs: Iterator[RequestSpec] | SpecSource | SessionSource) -> LevelResult:
        """Run this process's share of ``plan``: requests from a source (prepared before
        the start), or from one iterator shared by all users."""
        return await self.run_prepared(plan, self.prepare(plan, specs))

    @staticmethod
    def prepare(plan: LevelPlan, specs: Iterator[RequestSpec] | SpecSource | SessionSource) -> "_Specs | SessionSpecs":
        """Build the level's requests ahead of its start (a source's prompts are made here)."""
        if isinstance(specs, Iterator):
            return _Shared(specs, plan)
        if isinstance(specs, SessionSource):
            return SessionSpecs(specs, plan)
        return _Positional(specs, plan)

    async def run_prepared(self, plan: LevelPlan, specs: "_Specs | SessionSpecs") -> LevelResult:
        """Run a level whose requests :meth:`prepare` built."""
        res = LevelResult(plan, keep=self.keep)
        monitor_stop = asyncio.Event()
        monitor = asyncio.ensure_future(self._monitor(res, monitor_stop))
        gc.collect()
        gc.freeze()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        if plan.start_ns:  # a share of a level: every worker starts at the same instant
            await _sleep_until(plan.start_ns)
        res.start_ns = plan.start_ns or _now()
        try:
            if isinstance(specs, SessionSpecs):
                await specs.drive(self, plan, res)
            elif plan.mode == "concurrency":
                await self._closed_loop(plan, specs, res)
            elif plan.mode == "rate":
                await self._open_loop(plan, specs, res)
            else:
                raise ValueError(f"unknown load mode {plan.mode!r}")
        finally:
            res.end_ns = _now()
            monitor_stop.set()
            await monitor
            if gc_was_enabled:
                gc.enable()
            gc.unfreeze()
            res.interrupted = self._stop
        return res

    def _new_record(self, spec: RequestSpec, plan: LevelPlan, worker: int, warmup: bool) -> RequestRecord:
        return RequestRecord(
            index=spec.index,
            level=plan.index,
            trial=plan.trial,
            worker=worker,
            request_class=spec.request_class,
            target_prompt_tokens=spec.prompt_tokens,
            target_output_tokens=spec.max_tokens,
            warmup=warmup,
            session=spec.session,
            turn=spec.turn,
            turns=spec.turns,
            source_row=spec.source_row,
        )

    async def _send(self, spec: RequestSpec, rec: RequestRecord, res: LevelResult) -> None:
        self.in_flight += 1
        self.sent += 1
        self._live[id(rec)] = rec
        try:
            await self.transport.send(spec, rec)
        finally:
            self.in_flight -= 1
            del self._live[id(rec)]
            if self.on_record is not None:
                self.on_record(rec)
            res.add(rec)

    async def _closed_loop(self, plan: LevelPlan, specs: "_Specs", res: LevelResult) -> None:
        users = max(int(plan.value), 1)
        deadline = None if plan.duration_s is None else res.start_ns + int(plan.duration_s * 1e9)

        async def user(u: int) -> None:
            if plan.ramp_s > 0 and u:
                await _sleep_until(res.start_ns + int(plan.ramp_s * 1e9 * u / users))
            while not self._stop:
                now = _now()
                if deadline is not None and now >= deadline:
                    return
                nxt = specs.for_user(u)
                if nxt is None:
                    return
                spec, warm = nxt
                rec = self._new_record(spec, plan, u, warm)
                rec.scheduled_ns = now
                await self._send(spec, rec, res)

        await self._gather([user(u) for u in range(plan.worker, users, plan.n_workers)])

    async def _open_loop(self, plan: LevelPlan, specs: "_Specs", res: LevelResult) -> None:
        offsets = _schedule(plan)
        res.scheduled = len(offsets)
        positions = range(plan.worker, len(offsets), plan.n_workers)
        base = plan.start_ns or res.start_ns + _LEAD_NS
        due_ns = base + np.round(offsets[plan.worker :: plan.n_workers] * 1e9).astype(np.int64)
        cap: Credits | None = None
        if plan.max_in_flight:
            cap = self.credits if self.credits is not None else LocalCredits(plan.max_in_flight)
        max_late = int(plan.max_lateness_s * 1e9)
        loop = asyncio.get_running_loop()

        async def one(i: int, spec: RequestSpec, due: int) -> None:
            rec = self._new_record(spec, plan, plan.worker, i < plan.warmup_requests)
            rec.scheduled_ns = due
            if cap is None:
                await self._send(spec, rec, res)
                return
            if not await cap.acquire(max(due + max_late - _now(), 0) / 1e9):
                res.dropped += 1
                return
            rec.credit_ns = _now()
            try:
                await self._send(spec, rec, res)
            finally:
                cap.release()

        for i, due in zip(positions, due_ns.tolist()):
            if self._stop:
                break
            delay = due - _now()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            spec = specs.at(i)
            if self._stop or spec is None:
                break
            task = loop.create_task(one(i, spec, due))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _gather(self, coros: list) -> None:  # type: ignore[type-arg]
        tasks = [asyncio.ensure_future(c) for c in coros]
        for t in tasks:
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                raise r

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


def _schedule(plan: LevelPlan) -> np.ndarray:
    """The level's whole open-loop schedule (offsets in s), the same in every worker."""
    n = None if plan.requests is None else plan.requests + plan.warmup_requests
    if plan.offsets is not None:  # a trace's recorded times, cut to the level's bounds
        cut = plan.offsets[:n]
        return cut if plan.duration_s is None else cut[cut < plan.duration_s]
    return schedule(plan.arrival, plan.value, n=n, duration_s=plan.duration_s, seed=plan.seed,
                    burstiness=plan.burstiness)  # fmt: skip


class _Specs:
    """Where the runner's requests come from (see :meth:`Runner.run_level`)."""

    def for_user(self, user: int) -> tuple[RequestSpec, bool] | None:
        """User ``user``'s next request and whether it is warm-up; None: the user is done."""
        raise NotImplementedError

    def at(self, position: int) -> RequestSpec | None:
        """The request of schedule position ``position`` (asked in ascending order)."""
        raise NotImplementedError


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
            self._positions = range(plan.worker, len(_schedule(plan)), plan.n_workers)
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
