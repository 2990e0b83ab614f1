"""Multi-turn sessions: a workload's ``[sessions]`` table and the sessions it draws.

A session is a conversation: ``turns`` (a length distribution) user messages, each drawn
like one request of the workload (its class, its ``prompt_tokens`` as the new message's
length, its ``output_tokens`` as the answer's), with a think time before every turn after
the first. Each turn resends the whole history — an optional system prompt, every earlier
user message and the answer the server actually streamed back — plus the new message;
the runner builds those prompts as the answers arrive (:mod:`loadgen.load.sessions`).

The system prompt is one of ``groups`` texts of ``system_prompt_tokens`` tokens, the
group drawn with Zipf popularity (group ``g`` with weight ``(g + 1) ** -zipf``), so a few
system prompts are shared by most sessions, as with real tenants and assistants.

What a session is depends only on the seed, the level and its position (closed loop:
the user and that user's session number; open loop: its arrival), never on the number of
worker processes; a session's turns all run on the worker that starts it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from loadgen.records import LEVEL_STRIDE, USER_STRIDE, SessionPlan
from loadgen.workload.generate import generate_specs, specs_at
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import Workload

__all__ = ["MAX_TURNS", "SessionSource", "zipf_weights"]

MAX_TURNS = 1 << 12  # turns of one session at most (open loop: a session's request indices)
SESSION_STRIDE = 1 << 20  # closed loop: session ids of one user
_M64 = (1 << 64) - 1
_SYSTEM_INDEX = -(1 << 40)  # the system prompts' text keys: far from every request's index


def zipf_weights(groups: int, exponent: float) -> np.ndarray:
    """Probabilities of groups ``0..groups-1``: ``(g + 1) ** -exponent``, normalised."""
    w = np.arange(1, groups + 1, dtype=float) ** -float(exponent)
    out: np.ndarray = w / w.sum()
    return out


@dataclass(slots=True)
class SessionSource:
    """Sessions of a workload with a ``[sessions]`` table (the runner's session source)."""

    workload: Workload
    seed: int
    synth: PromptSynthesizer

    def __post_init__(self) -> None:
        if self.workload.sessions is None:
            raise ValueError(f"workload {self.workload.name!r} has no [sessions] table")

    def _shape(self, key: list[int]) -> tuple[int, list[float], int | None]:
        """Turns, think times (s) and system-prompt group of the session ``key`` names."""
        ss = self.workload.sessions
        assert ss is not None
        rng = np.random.default_rng([self.seed & _M64, 0x5E55, *key])
        turns = int(min(ss.turns.sample(rng, 1)[0], MAX_TURNS))
        think: list[float] = [0.0] * (turns - 1)
        if ss.think_time_ms is not None and turns > 1:
            think = (ss.think_time_ms.sample(rng, turns - 1) / 1e3).tolist()
        group = None
        if ss.system_prompt_tokens > 0:
            group = int(rng.choice(ss.groups, p=zipf_weights(ss.groups, ss.zipf)))
        return turns, think, group

    def _plan(self, session: int, specs: list, think: list[float], group: int | None) -> SessionPlan:  # type: ignore[type-arg]
        ss = self.workload.sessions
        assert ss is not None
        system = None
        if group is not None:
            system = self.synth.text(ss.system_prompt_tokens, _SYSTEM_INDEX - group)
        return SessionPlan(
            session=session,
            turns=specs,
            think_s=think,
            system=system,
            system_tokens=ss.system_prompt_tokens if group is not None else 0,
            group=group,
        )

    def user_sessions(self, level: int, user: int) -> Iterator[SessionPlan]:
        """Closed loop: user ``user``'s sessions of level ``level``, one after another
        (its requests take the user's indices in order, as without sessions)."""
        start = level * LEVEL_STRIDE + user * USER_STRIDE
        used = 0
        for k in range(SESSION_STRIDE):
            turns, think, group = self._shape([level, 0, user, k])
            turns = min(turns, USER_STRIDE - used)
            if turns <= 0:
                return
            specs = generate_specs(self.workload, turns, seed=self.seed, synth=self.synth, start_index=start + used)
            used += turns
            yield self._plan(user * SESSION_STRIDE + k, specs, think[: turns - 1], group)

    def session(self, level: int, position: int) -> SessionPlan:
        """Open loop: the session arriving at schedule position ``position``."""
        turns, think, group = self._shape([level, 1, position])
        base = level * LEVEL_STRIDE + position * MAX_TURNS
        specs = specs_at(self.workload, range(base, base + turns), seed=self.seed, synth=self.synth)
        return self._plan(position, specs, think, group)
