"""The async load runner: closed loop (N users) and open loop (precomputed arrivals).

One :class:`Runner` drives one level at a time through a :class:`Transport`. Every
request gets a :class:`RequestRecord` with ``scheduled_ns`` (when it should have gone)
and ``sent_ns`` (when it went); every finished record — ok, failed or cancelled — is
handed to ``on_record`` at once (the CLI appends it to ``records.jsonl``), so an
interrupted run loses nothing that finished.

While a level runs, a monitor task measures event-loop lag every 10 ms, and the
garbage collector is frozen and disabled (a collection pause would show up as latency).
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from loadgen.load.arrivals import schedule
from loadgen.load.transport import Transport
from loadgen.metrics.results import Load
from loadgen.records import RequestRecord, RequestSpec

__all__ = ["LevelPlan", "LevelResult", "Runner"]

_now = time.perf_counter_ns
LAG_INTERVAL_S = 0.010


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

    @property
    def load(self) -> Load:
        """The offered load: whole users in closed loop, a rate in open loop."""
        return Load(self.mode, int(self.value) if self.mode == "concurrency" else float(self.value))


@dataclass(slots=True)
class LevelResult:
    plan: LevelPlan
    records: list[RequestRecord] = field(default_factory=list)
    loop_lag_ms: list[float] = field(default_factory=list)
    loop_lag_t_ns: list[int] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0
    scheduled: int = 0  # requests the schedule asked for (open loop)
    dropped: int = 0  # open loop: never sent, the cap stayed full past max_lateness_s
    interrupted: bool = False


class Runner:
    """Runs levels against a transport; ``interrupt()`` stops the current level."""

    def __init__(self, transport: Transport, on_record: Callable[[RequestRecord], None] | None = None) -> None:
        self.transport = transport
        self.on_record = on_record
        self.in_flight = 0
        self.sent = 0
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

    async def run_level(self, plan: LevelPlan, specs: Iterator[RequestSpec]) -> LevelResult:
        res = LevelResult(plan)
        monitor_stop = asyncio.Event()
        monitor = asyncio.ensure_future(self._monitor(res, monitor_stop))
        gc.collect()
        gc.freeze()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        res.start_ns = _now()
        try:
            if plan.mode == "concurrency":
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
            worker=worker,
            request_class=spec.request_class,
            target_prompt_tokens=spec.prompt_tokens,
            target_output_tokens=spec.max_tokens,
            warmup=warmup,
        )

    async def _send(self, spec: RequestSpec, rec: RequestRecord, res: LevelResult) -> None:
        self.in_flight += 1
        self.sent += 1
        try:
            await self.transport.send(spec, rec)
        finally:
            self.in_flight -= 1
            res.records.append(rec)
            if self.on_record is not None:
                self.on_record(rec)

    async def _closed_loop(self, plan: LevelPlan, specs: Iterator[RequestSpec], res: LevelResult) -> None:
        users = max(int(plan.value), 1)
        budget = None if plan.requests is None else plan.requests + plan.warmup_requests
        deadline = None if plan.duration_s is None else res.start_ns + int(plan.duration_s * 1e9)
        issued = 0

        async def user(wid: int) -> None:
            nonlocal issued
            if plan.ramp_s > 0 and wid:
                await asyncio.sleep(plan.ramp_s * wid / users)
            while not self._stop:
                if budget is not None and issued >= budget:
                    return
                now = _now()
                if deadline is not None and now >= deadline:
                    return
                warm = issued < plan.warmup_requests
                spec = next(specs, None)
                if spec is None:
                    return
                issued += 1
                rec = self._new_record(spec, plan, wid, warm)
                rec.scheduled_ns = now
                await self._send(spec, rec, res)

        await self._gather([user(w) for w in range(users)])

    async def _open_loop(self, plan: LevelPlan, specs: Iterator[RequestSpec], res: LevelResult) -> None:
        n = None if plan.requests is None else plan.requests + plan.warmup_requests
        offsets = schedule(
            plan.arrival, plan.value, n=n, duration_s=plan.duration_s, seed=plan.seed, burstiness=plan.burstiness
        )
        res.scheduled = len(offsets)
        start = _now() + 5_000_000  # a small lead so the first send is not already late
        due_ns = start + np.round(offsets * 1e9).astype(np.int64)
        cap = asyncio.Semaphore(plan.max_in_flight) if plan.max_in_flight else None
        max_late = int(plan.max_lateness_s * 1e9)
        loop = asyncio.get_running_loop()

        async def one(i: int, spec: RequestSpec, due: int) -> None:
            rec = self._new_record(spec, plan, 0, i < plan.warmup_requests)
            rec.scheduled_ns = due
            if cap is None:
                await self._send(spec, rec, res)
                return
            try:
                await asyncio.wait_for(cap.acquire(), timeout=max(due + max_late - _now(), 0) / 1e9)
            except asyncio.TimeoutError:
                res.dropped += 1
                return
            try:
                await self._send(spec, rec, res)
            finally:
                cap.release()

        for i, due in enumerate(due_ns.tolist()):
            if self._stop:
                break
            delay = due - _now()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            spec = next(specs, None)
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
