"""What the runners of many requests per item share: multi-turn sessions
(:mod:`loadgen.load.sessions`) and agentic tasks (:mod:`loadgen.load.agent`).

An item (a session or a task) is held by one asyncio task from its first request to its
last. :class:`Conversations` prepares a level's items and drives them:

- closed loop: each user holds one item at a time and starts the next when it ends; the
  level's request budget, warm-up and ``--duration`` count requests, asked of a
  :class:`NextCall` before each one (a user stops mid-item when its share is used up);
- open loop: *items* arrive on the level's schedule (the rate is of items, and
  ``requests``/``warmup_requests`` count items; so does ``result.scheduled``).

Either way ``--duration`` ends the level on time: a think time or a tool's run that would
last past the level's end (the closed loop's deadline, the open loop's schedule's end) is
not waited for; the item sends nothing more, so it ends cut short (its requests in flight
finish, as every level's do at its end).

A subclass says where its items come from (:meth:`Conversations._user`,
:meth:`Conversations._item`) and how one is held (:meth:`Conversations._hold`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

import numpy as np

from loadgen.load.context import LevelContext
from loadgen.load.credits import Credits
from loadgen.load.plan import LevelPlan, level_schedule
from loadgen.load.source import user_quota
from loadgen.records import RequestRecord, RequestSpec

__all__ = ["Conversations", "NextCall", "send_capped"]

_now = time.perf_counter_ns
_LEAD_NS = 5_000_000  # open loop in one process: a small lead so the first item is not already late

T = TypeVar("T")


class NextCall(Protocol):
    """Asked before each request: None when the user (or the level) is done, else whether
    the request is warm-up."""

    def __call__(self) -> bool | None: ...


class Conversations(Generic[T]):
    """A level's items, prepared before it starts; :meth:`drive` runs them (a
    :class:`~loadgen.load.context.Driver`).

    Closed loop: ``users`` holds each of this worker's users' items (from :meth:`_user`).
    Open loop: ``offsets`` is the level's schedule, ``positions`` this worker's share of
    it, and the first ``prepare`` of those are built now (the rest as they arrive)."""

    prepare = 256

    def __init__(self, plan: LevelPlan) -> None:
        self.plan = plan
        self.users: dict[int, Iterator[T]] = {}
        self.items: dict[int, T] = {}
        self.offsets = np.zeros(0)
        if plan.mode == "concurrency":
            for u in range(plan.worker, max(int(plan.value), 1), plan.n_workers):
                self.users[u] = self._user(u)
        else:
            self.offsets = level_schedule(plan)
            self.positions = range(plan.worker, len(self.offsets), plan.n_workers)
            for p in self.positions[: self.prepare]:
                self.items[p] = self._item(p)

    def _user(self, user: int) -> Iterator[T]:
        """Closed loop: user ``user``'s items in order."""
        raise NotImplementedError

    def _item(self, position: int) -> T:
        """Open loop: the item of schedule position ``position``."""
        raise NotImplementedError

    async def _hold(
        self,
        ctx: LevelContext,
        item: T,
        due: int,
        next_call: NextCall,
        worker: int,
        cap: Credits | None,
        max_late: int,
        deadline: int | None,
    ) -> bool:
        """Run one item from ``due`` on (each request waits for a credit of ``cap``, if
        any, at most ``max_late`` past its due time); False when the user should stop.
        ``deadline`` is the level's end by its duration (None: bound by requests only): a
        wait (think time, tool) that would end there or later is cut at once, and no later
        request of the item is sent (those in flight finish, as at any level's end)."""
        raise NotImplementedError

    def at(self, position: int) -> T:
        """The item of schedule position ``position`` (prepared or built now)."""
        got = self.items.pop(position, None)
        return got if got is not None else self._item(position)

    async def drive(self, ctx: LevelContext) -> None:
        """Run the level's items: one per user at a time (closed loop), or as they arrive
        on the level's schedule (open loop)."""
        if ctx.plan.mode == "concurrency":
            await self._closed(ctx)
        else:
            await self._open(ctx)

    async def _closed(self, ctx: LevelContext) -> None:
        plan = ctx.plan
        users = max(int(plan.value), 1)
        total = None if plan.requests is None else plan.requests + plan.warmup_requests
        deadline = plan.deadline_ns(ctx.start_ns)
        warm_until = plan.warm_until_ns(ctx.start_ns)

        async def user(u: int) -> None:
            if u:
                await ctx.sleep_until(plan.user_start_ns(ctx.start_ns, u, users))
            quota = user_quota(u, users, total)
            sent = 0

            def next_call() -> bool | None:
                nonlocal sent
                if ctx.closed or (quota is not None and sent >= quota):
                    return None
                if deadline is not None and _now() >= deadline:
                    return None
                sent += 1
                return (sent - 1) * users + u < plan.warmup_requests or _now() < warm_until

            for item in self.users[u]:
                if not await self._hold(ctx, item, _now(), next_call, u, None, 0, deadline) or ctx.closed:
                    return

        await ctx.gather([user(u) for u in self.users])

    async def _open(self, ctx: LevelContext) -> None:
        plan = ctx.plan
        ctx.result.scheduled = len(self.offsets)  # items
        base = plan.start_ns or ctx.start_ns + _LEAD_NS
        due_ns = base + np.round(self.offsets[plan.worker :: plan.n_workers] * 1e9).astype(np.int64)
        max_late = int(plan.max_lateness_s * 1e9)
        deadline = None if plan.duration_s is None else base + int(plan.duration_s * 1e9)  # the schedule's end
        for i, due in zip(self.positions, due_ns.tolist()):
            if not await ctx.sleep_until(due):
                if ctx.ended and not ctx.stopped:  # ended early: items scheduled before this one
                    ctx.result.scheduled = i
                break
            warm = i < plan.warmup_requests

            def next_call(warm: bool = warm) -> bool | None:
                return None if ctx.closed else warm

            ctx.spawn(self._hold(ctx, self.at(i), due, next_call, plan.worker, ctx.credits, max_late, deadline))
        await ctx.wait()


async def send_capped(
    ctx: LevelContext, spec: RequestSpec, rec: RequestRecord, cap: Credits | None, due: int, max_late: int
) -> bool:
    """Send ``spec`` as ``rec``; with a cap, first wait for a credit until ``max_late`` past
    ``due``. False when none came: the request is dropped (counted) and not sent."""
    if cap is None:
        await ctx.send(spec, rec)
        return True
    if not await cap.acquire(max(due + max_late - _now(), 0) / 1e9):
        ctx.result.dropped += 1
        return False
    rec.credit_ns = _now()
    try:
        await ctx.send(spec, rec)
    finally:
        cap.release()
    return True
