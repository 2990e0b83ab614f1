"""A KV link shared fairly by the transfers on it (processor sharing), in virtual time.

Each transfer brings its *work*: the seconds it would take alone on the link. While ``n``
transfers are on the link each progresses at ``1/n`` of the link's speed (each gets the
bandwidth over ``n``), re-planned whenever a transfer starts, finishes or is cancelled.
The link is work-conserving: busy from ``t`` with work ``w1 .. wk`` and nothing new, it
empties at ``t + w1 + .. + wk``; two equal transfers started together both take twice
the time of one.
"""

from __future__ import annotations

import math

__all__ = ["SharedLink"]

_EPS = 1e-12  # work (seconds) below which a transfer counts as done (float residue)


class SharedLink:
    """Transfers sharing one link's bandwidth equally (see the module docstring)."""

    def __init__(self) -> None:
        self._left: dict[str, float] = {}  # transfer id -> work left (alone-on-the-link seconds)
        self._at = -math.inf  # the time ``_left`` is accurate at

    def __len__(self) -> int:
        return len(self._left)

    def __contains__(self, key: object) -> bool:
        return key in self._left

    def _advance(self, t: float) -> None:
        if self._left and t > self._at:
            share = (t - self._at) / len(self._left)
            for key in self._left:
                self._left[key] -= share
        self._at = max(self._at, t)

    def start(self, key: str, work_s: float, at: float) -> None:
        """Put a transfer of ``work_s`` seconds (alone) on the link at ``at``."""
        self._advance(at)
        self._left[key] = max(0.0, work_s)

    def cancel(self, key: str, at: float) -> bool:
        """Take a transfer off the link at ``at`` (its share goes to the others)."""
        if key not in self._left:
            return False
        self._advance(at)
        del self._left[key]
        return True

    def next_done(self) -> float | None:
        """When the next transfer finishes if nothing else starts (None: link idle)."""
        if not self._left:
            return None
        return self._at + min(self._left.values()) * len(self._left)

    def pop_done(self, at: float) -> list[str]:
        """Advance to ``at`` and remove and return the transfers finished by then."""
        self._advance(at)
        n = len(self._left)
        # done: float residue only, or so little left that it would end at ``at`` itself
        done = [key for key, left in self._left.items() if left <= _EPS or at + left * n == at]
        for key in done:
            del self._left[key]
        return done
