"""Which request each user, or each scheduled send, of a level gets.

A :class:`SpecSource` names requests by position, never by arrival order, so a run's
requests are the same whatever the number of worker processes that send them:

- closed loop: user ``u`` of ``U`` sends its ``k``-th request as the level's request
  number ``k * U + u`` (the first ``warmup_requests`` numbers are warm-up; a level of
  ``R`` requests ends when those numbers are used up), and what that request is
  depends on the seed, the level and ``(u, k)`` only;
- open loop: the ``i``-th send of the level's schedule (drawn from the level's seed)
  is request ``i``.

The source lives in :mod:`loadgen.workload.source`; this Protocol is the runner's seam.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from loadgen.records import RequestSpec

__all__ = ["KnowsUsers", "SpecSource", "user_quota"]


class SpecSource(Protocol):
    def user(self, level: int, user: int, quota: int | None) -> Iterator[RequestSpec]:
        """User ``user``'s requests in level ``level`` in order (``quota`` of them, or
        endless when None)."""
        ...

    def sends(self, level: int, positions: Sequence[int]) -> list[RequestSpec]:
        """The requests of the given schedule positions (ascending) of level ``level``."""
        ...


@runtime_checkable
class KnowsUsers(Protocol):
    """A source that numbers closed-loop requests across users (sampling a dataset without
    replacement): told each level's user count before the level's requests are built."""

    def set_users(self, level: int, users: int) -> None: ...


def user_quota(user: int, users: int, total: int | None) -> int | None:
    """How many requests user ``user`` of ``users`` sends when the level has ``total``:
    the count of ``k >= 0`` with ``k * users + user < total``."""
    if total is None:
        return None
    return max(0, math.ceil((total - user) / users))
