"""Multi-turn sessions on the runner: each turn resends the history and the real answer.

A session (:class:`~loadgen.records.SessionPlan`) is held by one task from its first turn
to its last, so it stays on the worker process that starts it:

- closed loop: each user holds one session at a time and starts the next when it ends;
  user ``u``'s sessions and their requests are the same whatever the number of workers
  (the level's request budget, its warm-up and ``--duration`` count turns, as without
  sessions: a user stops mid-session when its share of the budget is used up);
- open loop: *sessions* arrive on the level's schedule (the rate is of sessions, and
  ``requests``/``warmup_requests`` count sessions); each later turn follows the previous
  one's end by its think time. With a cap on requests in flight every turn waits for a
  credit like any send; a turn dropped there ends its session.

Turn ``t``'s prompt is the chat history — the system prompt if any, then every earlier
user message and the answer text the server streamed for it — plus the new user message
(the completions API gets the contents joined by newlines). A turn's ``scheduled_ns`` is
when it was due (the previous turn's end plus the think time), so a client that sends
late shows it. A turn that fails ends its session: without the answer there is nothing
true to resend.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import numpy as np

from loadgen.load.context import LevelContext
from loadgen.load.credits import Credits
from loadgen.load.plan import LevelPlan, level_schedule
from loadgen.load.source import user_quota
from loadgen.records import ChatMessage, RequestSpec, SessionPlan

__all__ = ["SessionSource", "SessionSpecs"]

_now = time.perf_counter_ns
_PREPARE = 2_000  # open loop: sessions built before the level starts (the rest as they arrive)


@runtime_checkable
class SessionSource(Protocol):
    """Where sessions come from (:class:`loadgen.workload.sessions.SessionSource`)."""

    def user_sessions(self, level: int, user: int) -> Iterator[SessionPlan]:
        """Closed loop: user ``user``'s sessions in order (endless)."""
        ...

    def session(self, level: int, position: int) -> SessionPlan:
        """Open loop: the session of schedule position ``position``."""
        ...


class SessionSpecs:
    """A level's sessions, prepared before it starts; :meth:`drive` runs them (a
    :class:`~loadgen.load.context.Driver`)."""

    def __init__(self, source: SessionSource, plan: LevelPlan) -> None:
        self.source = source
        self.plan = plan
        self.users: dict[int, Iterator[SessionPlan]] = {}
        self.sessions: dict[int, SessionPlan] = {}
        self.offsets = np.zeros(0)
        if plan.mode == "concurrency":
            for u in range(plan.worker, max(int(plan.value), 1), plan.n_workers):
                it = source.user_sessions(plan.spec_level, u)
                first = next(it)
                self.users[u] = _chain(first, it)
        else:
            self.offsets = level_schedule(plan)
            self.positions = range(plan.worker, len(self.offsets), plan.n_workers)
            for p in self.positions[:_PREPARE]:
                self.sessions[p] = source.session(plan.spec_level, p)

    def at(self, position: int) -> SessionPlan:
        got = self.sessions.pop(position, None)
        return got if got is not None else self.source.session(self.plan.spec_level, position)

    async def drive(self, ctx: LevelContext) -> None:
        """Run the level's sessions: one per user at a time (closed loop), or as they
        arrive on the level's schedule (open loop)."""
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

            def next_turn() -> bool | None:  # None: the user is done; else whether it is warm-up
                nonlocal sent
                if ctx.closed or (quota is not None and sent >= quota):
                    return None
                if deadline is not None and _now() >= deadline:
                    return None
                sent += 1
                return (sent - 1) * users + u < plan.warmup_requests or _now() < warm_until

            for session in self.users[u]:
                if not await _hold(ctx, session, _now(), next_turn, u, None, 0, deadline):
                    return

        await ctx.gather([user(u) for u in self.users])

    async def _open(self, ctx: LevelContext) -> None:
        plan = ctx.plan
        ctx.result.scheduled = len(self.offsets)  # sessions
        base = plan.start_ns or ctx.start_ns + 5_000_000
        due_ns = base + np.round(self.offsets[plan.worker :: plan.n_workers] * 1e9).astype(np.int64)
        max_late = int(plan.max_lateness_s * 1e9)
        for i, due in zip(self.positions, due_ns.tolist()):
            if not await ctx.sleep_until(due):
                if ctx.ended and not ctx.stopped:  # ended early: sessions scheduled before this one
                    ctx.result.scheduled = i
                break
            session = self.at(i)
            warm = i < plan.warmup_requests

            def next_turn(warm: bool = warm) -> bool | None:
                return None if ctx.closed else warm

            ctx.spawn(_hold(ctx, session, due, next_turn, plan.worker, ctx.credits, max_late))
        await ctx.wait()


def _chain(first: SessionPlan, rest: Iterator[SessionPlan]) -> Iterator[SessionPlan]:
    yield first
    yield from rest


async def _hold(
    ctx: LevelContext,
    session: SessionPlan,
    due: int,
    next_turn: _NextTurn,
    worker: int,
    cap: Credits | None,
    max_late: int,
    deadline: int | None = None,
) -> bool:
    """Run one session's turns from ``due`` on; False when the user should stop (the next
    turn is not due before ``deadline``, or ``next_turn`` says so)."""
    history: list[ChatMessage] = []
    if session.system is not None:
        history.append({"role": "system", "content": session.system})
    context = session.system_tokens  # tokens of the history so far
    n = len(session.turns)
    last_done = due
    for t, msg in enumerate(session.turns, 1):
        if t > 1:
            due = last_done + int(session.think_s[t - 2] * 1e9)
            if deadline is not None and due >= deadline:
                return False
            if not await ctx.sleep_until(due):
                return False
        warm = next_turn()
        if warm is None:
            return False
        content = msg.prompt if isinstance(msg.prompt, str) else "\n".join(m.get("content", "") for m in msg.prompt)
        history.append({"role": "user", "content": content})
        spec = RequestSpec(
            index=msg.index,
            prompt=list(history),
            prompt_tokens=context + msg.prompt_tokens,
            max_tokens=msg.max_tokens,
            request_class=msg.request_class,
            group=session.group,
            session=session.session,
            turn=t,
            turns=n,
            answer=[],
            images=msg.images,  # the turn's own images go with its message (earlier ones are not resent)
        )
        rec = ctx.new_record(spec, worker, warm)
        rec.scheduled_ns = due
        if cap is not None:
            if not await cap.acquire(max(due + max_late - _now(), 0) / 1e9):
                ctx.result.dropped += 1
                return True
            rec.credit_ns = _now()
            try:
                await ctx.send(spec, rec)
            finally:
                cap.release()
        else:
            await ctx.send(spec, rec)
        if not rec.ok:
            return True
        last_done = rec.done_ns
        assert spec.answer is not None
        history.append({"role": "assistant", "content": "".join(spec.answer)})
        # the history's length: as the server counted it when it did (chat templates add tokens per message)
        prompt = rec.prompt_tokens if rec.prompt_tokens is not None else spec.prompt_tokens
        context = prompt + (rec.completion_tokens if rec.completion_tokens is not None else rec.output_tokens)
    return True


class _NextTurn(Protocol):
    def __call__(self) -> bool | None: ...
