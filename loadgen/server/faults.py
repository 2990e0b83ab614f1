"""Seeded fault injection, so clients can be tested against a misbehaving server.

Three faults, each drawn per request from its own ``random.Random`` seeded with
``(seed, n)`` where ``n`` counts the requests that passed validation (0, 1, 2, ...). The
same seed and the same arrival order therefore give the same faults, whatever the
concurrency or timing.

- ``fail_rate``: probability that a request is answered ``500`` with a JSON error before
  anything is streamed (and before the engine sees it).
- ``stall_ms`` / ``stall_rate``: before each output event, with probability
  ``stall_rate``, the server pauses ``stall_ms`` milliseconds.
- ``disconnect_rate``: probability that the server cuts the connection mid-stream: after
  ``k`` output events with ``k`` uniform in ``1..max_tokens`` (or at the end of the
  stream if it finishes first), without a final event or ``[DONE]``. A non-streaming
  request is cut instead of answered.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from loadgen.errors import ConfigError

__all__ = ["FaultConfig", "FaultInjector", "FaultPlan"]


@dataclass(slots=True, frozen=True)
class FaultConfig:
    """Fault rates (probabilities in ``[0, 1]``) and the seed; all zero means no faults."""

    fail_rate: float = 0.0
    stall_ms: float = 0.0
    stall_rate: float = 0.0
    disconnect_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("fail_rate", "stall_rate", "disconnect_rate"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"must be a probability in [0, 1], got {value!r}", key=key)
        if not self.stall_ms >= 0.0:
            raise ConfigError(f"must be >= 0, got {self.stall_ms!r}", key="stall_ms")

    @property
    def active(self) -> bool:
        """True when any fault can happen."""
        stalls = self.stall_rate > 0.0 and self.stall_ms > 0.0
        return self.fail_rate > 0.0 or stalls or self.disconnect_rate > 0.0


class FaultPlan:
    """The faults of one request: ``fail``, ``disconnect_after`` and per-event stalls."""

    __slots__ = ("_rng", "_stall_rate", "disconnect_after", "fail", "stall_s")

    def __init__(self, config: FaultConfig, index: int, max_tokens: int) -> None:
        rng = random.Random(config.seed * 1_000_003 + index)
        self._rng = rng
        self.fail = rng.random() < config.fail_rate
        self.disconnect_after: int | None = None
        if rng.random() < config.disconnect_rate:
            self.disconnect_after = rng.randint(1, max(1, max_tokens))
        self._stall_rate = config.stall_rate if config.stall_ms > 0.0 else 0.0
        self.stall_s = config.stall_ms / 1000.0

    def stall(self) -> bool:
        """Whether to pause before the next output event (one draw per call)."""
        return self._stall_rate > 0.0 and self._rng.random() < self._stall_rate


class FaultInjector:
    """Hands out :class:`FaultPlan` objects in request order."""

    __slots__ = ("_next", "config")

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._next = 0

    def plan(self, max_tokens: int) -> FaultPlan:
        """The plan of the next request (call once per request that passed validation)."""
        index = self._next
        self._next += 1
        return FaultPlan(self.config, index, max_tokens)
