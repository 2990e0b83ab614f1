"""What drives a level's requests sees of it: one :class:`LevelContext` per running level.

The runner makes the context when a level starts and hands it to the level's
:class:`Driver` — the closed loop's users and the open loop's sends
(:mod:`loadgen.load.runner`), or a level's sessions (:mod:`loadgen.load.sessions`). A
driver makes each request's record with :meth:`LevelContext.new_record`, sends it with
:meth:`~LevelContext.send` (which counts it in flight, hands the finished record to the
runner's ``on_record`` and keeps it in the level's result), and runs its concurrent parts
with :meth:`~LevelContext.spawn` or :meth:`~LevelContext.gather`, so that
:meth:`~LevelContext.stop` (the runner's ``interrupt()``) cancels every one of them.
:meth:`~LevelContext.end` ends the level as its duration would (a precision target met):
no new request goes out, those in flight finish; a driver waits for a send's time with
:meth:`~LevelContext.sleep_until`, which returns at once when the level ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from loadgen.load.credits import Credits, LocalCredits
from loadgen.load.plan import LevelPlan, LevelResult
from loadgen.load.transport import Transport
from loadgen.records import RequestRecord, RequestSpec

__all__ = ["Driver", "LevelContext"]


class Driver(Protocol):
    """A level's requests, prepared before it starts; :meth:`drive` sends them."""

    async def drive(self, ctx: LevelContext) -> None:
        """Send the level's requests through ``ctx`` until they are used up, the level's
        time is over or ``ctx.stopped``; return when every request sent has finished."""
        ...


class LevelContext:
    """One running level: its plan and result, and the means to send its requests.

    ``plan`` and ``result`` are the level's; ``start_ns`` is when it started (the monotonic
    clock); ``credits`` is the open loop's cap on requests in flight (None: no cap, or a
    closed loop); ``stopped`` turns true when :meth:`stop` is called and stays so;
    ``in_flight`` and ``sent`` count this level's requests in flight now and sent so far;
    ``ended`` turns true when :meth:`end` is called, and ``closed`` is either.
    """

    __slots__ = (
        "_clock",
        "_live",
        "_on_record",
        "_sleepers",
        "_tasks",
        "_transport",
        "credits",
        "ended",
        "in_flight",
        "plan",
        "result",
        "sent",
        "start_ns",
        "stopped",
    )

    def __init__(
        self,
        plan: LevelPlan,
        result: LevelResult,
        transport: Transport,
        on_record: Callable[[RequestRecord], None] | None = None,
        shared_credits: Credits | None = None,
        start_ns: int = 0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        """``shared_credits``: a cap shared with other processes, used in place of this
        process's own when the plan caps requests in flight; ``clock``: the monotonic
        clock in ns that :meth:`sleep_until` waits on."""
        self.plan = plan
        self.result = result
        self.start_ns = start_ns
        self.credits: Credits | None = None
        if plan.mode == "rate" and plan.max_in_flight:
            self.credits = shared_credits if shared_credits is not None else LocalCredits(plan.max_in_flight)
        self.stopped = False
        self.ended = False
        self.in_flight = 0
        self.sent = 0
        self._transport = transport
        self._on_record = on_record
        self._live: dict[int, RequestRecord] = {}  # by id(): the requests in flight
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sleepers: set[asyncio.Future[None]] = set()
        self._clock = clock

    @property
    def closed(self) -> bool:
        """No new request may go out: the level was stopped or ended."""
        return self.stopped or self.ended

    def new_record(self, spec: RequestSpec, worker: int, warmup: bool) -> RequestRecord:
        """A fresh record of ``spec`` in this level, sent by user (closed loop) or share
        (open loop) ``worker``; the caller sets its ``scheduled_ns``."""
        return RequestRecord(
            index=spec.index,
            level=self.plan.index,
            trial=self.plan.trial,
            worker=worker,
            request_class=spec.request_class,
            target_prompt_tokens=spec.prompt_tokens,
            target_output_tokens=spec.max_tokens,
            warmup=warmup,
            session=spec.session,
            turn=spec.turn,
            turns=spec.turns,
            source_row=spec.source_row,
            images=len(spec.images),
            image_bytes=sum(len(data) for _, data in spec.images),
            task=spec.task,
            step=spec.step,
            branch=spec.branch,
            steps=spec.steps,
        )

    async def send(self, spec: RequestSpec, rec: RequestRecord) -> None:
        """Send ``spec`` and stream its answer into ``rec``; however it ends (cancelled
        too), the finished record goes to ``on_record`` and into the level's result."""
        self.in_flight += 1
        self.sent += 1
        self._live[id(rec)] = rec
        try:
            await self._transport.send(spec, rec)
        finally:
            self.in_flight -= 1
            del self._live[id(rec)]
            if self._on_record is not None:
                self._on_record(rec)
            self.result.add(rec)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of this level (:meth:`stop` cancels it; :meth:`wait`
        waits for it)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def wait(self) -> None:
        """Wait until every task spawned so far has ended; their exceptions are not raised."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def gather(self, coros: list[Coroutine[Any, Any, Any]]) -> None:
        """Run ``coros`` as tasks of this level and wait for them all; the first
        exception other than a cancellation is raised once all have ended."""
        tasks = [self.spawn(c) for c in coros]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                raise r

    def stop(self) -> None:
        """Stop the level: ``stopped`` turns true and every task of the level is cancelled
        (the requests in flight end as ``cancelled``)."""
        self.stopped = True
        for t in list(self._tasks):
            t.cancel()
        self.end()

    def end(self) -> None:
        """End the level as its duration would: no new request goes out, those in flight
        finish, and every :meth:`sleep_until` returns now."""
        self.ended = True
        for fut in list(self._sleepers):
            if not fut.done():
                fut.set_result(None)

    async def sleep_until(self, t_ns: int) -> bool:
        """Sleep until ``t_ns`` on the monotonic clock (again, if a timer fires early);
        False, at once, when the level is closed before then."""
        loop = asyncio.get_running_loop()
        while not self.closed and (delay := t_ns - self._clock()) > 0:
            fut: asyncio.Future[None] = loop.create_future()
            self._sleepers.add(fut)
            timer = loop.call_later(delay / 1e9, _wake, fut)
            try:
                await fut
            finally:
                timer.cancel()
                self._sleepers.discard(fut)
        return not self.closed

    def in_flight_records(self) -> list[RequestRecord]:
        """Copies of the requests in flight now, without their events."""
        return [dataclasses.replace(rec, events=[]) for rec in self._live.values()]


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
