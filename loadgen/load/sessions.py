"""Multi-turn sessions on the runner: each turn resends the history and the real answer.

A session (:class:`~loadgen.records.SessionPlan`) is held by one task from its first turn
to its last, so it stays on the worker process that starts it; the closed and open loops
around it are :mod:`loadgen.load.conversations`'s. Turn ``t``'s prompt is the chat history
with the answers the server streamed, plus the new user message; its ``scheduled_ns`` is
the previous turn's end plus the think time, so a client that sends late shows it. A turn
that fails ends its session: without the answer there is nothing true to resend.

docs/architecture.md, "How a level is sent" → "Sessions and agentic tasks", has how the
budget, credits and ``--duration`` count and end sessions, and the completions API's prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from loadgen.load.context import LevelContext
from loadgen.load.conversations import Conversations, NextCall, send_capped
from loadgen.load.credits import Credits
from loadgen.load.plan import LevelPlan
from loadgen.records import ChatMessage, RequestSpec, SessionPlan

__all__ = ["SessionSource", "SessionSpecs"]


@runtime_checkable
class SessionSource(Protocol):
    """Where sessions come from (:class:`loadgen.workload.sessions.SessionSource`)."""

    def user_sessions(self, level: int, user: int) -> Iterator[SessionPlan]:
        """Closed loop: user ``user``'s sessions in order (endless)."""
        ...

    def session(self, level: int, position: int) -> SessionPlan:
        """Open loop: the session of schedule position ``position``."""
        ...


class SessionSpecs(Conversations[SessionPlan]):
    """A level's sessions, prepared before it starts; :meth:`drive` runs them (a
    :class:`~loadgen.load.context.Driver`)."""

    prepare = 2_000  # open loop: sessions built before the level starts (the rest as they arrive)

    def __init__(self, source: SessionSource, plan: LevelPlan) -> None:
        self.source = source
        super().__init__(plan)

    def _user(self, user: int) -> Iterator[SessionPlan]:
        it = self.source.user_sessions(self.plan.spec_level, user)
        first = next(it)
        return _chain(first, it)

    def _item(self, position: int) -> SessionPlan:
        return self.source.session(self.plan.spec_level, position)

    async def _hold(
        self,
        ctx: LevelContext,
        session: SessionPlan,
        due: int,
        next_turn: NextCall,
        worker: int,
        cap: Credits | None,
        max_late: int,
        deadline: int | None,
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
            if not await send_capped(ctx, spec, rec, cap, due, max_late) or not rec.ok:
                return True
            last_done = rec.done_ns
            assert spec.answer is not None
            history.append({"role": "assistant", "content": "".join(spec.answer)})
            # the history's length: as the server counted it when it did (chat templates add tokens per message)
            prompt = rec.prompt_tokens if rec.prompt_tokens is not None else spec.prompt_tokens
            context = prompt + (rec.completion_tokens if rec.completion_tokens is not None else rec.output_tokens)
        return True


def _chain(first: SessionPlan, rest: Iterator[SessionPlan]) -> Iterator[SessionPlan]:
    yield first
    yield from rest
