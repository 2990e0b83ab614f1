"""Open-loop arrival processes: an absolute, precomputed schedule of send offsets.

The whole schedule is computed before sending (so it cannot drift, and it can be split
across worker processes without coordination). Offsets are seconds from the level start.

- ``poisson``: exponential gaps with mean 1/rate (coefficient of variation 1).
- ``gamma``: gamma gaps with shape = burstiness and mean 1/rate; burstiness < 1 is
  burstier than Poisson, > 1 smoother (the convention of vLLM's benchmark).
- ``constant``: evenly spaced, 1/rate apart.

The schedule is bounded: a rate above ``MAX_RATE`` or a level of more than
``MAX_SCHEDULED`` arrivals (8 bytes each) is refused with a ConfigError, never allocated.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from loadgen.errors import ConfigError

__all__ = ["ARRIVALS", "MAX_RATE", "MAX_SCHEDULED", "arrival", "check_rate", "schedule"]

MAX_RATE = 1e6  # requests per second: far beyond what one client can send
MAX_SCHEDULED = 20_000_000  # arrivals in one level's schedule (160 MB of offsets)

_Sampler = Callable[[np.random.Generator, float, int, float], np.ndarray]
ARRIVALS: dict[str, _Sampler] = {}


def arrival(name: str) -> Callable[[_Sampler], _Sampler]:
    def register(fn: _Sampler) -> _Sampler:
        ARRIVALS[name] = fn
        return fn

    return register


@arrival("poisson")
def _poisson(rng: np.random.Generator, rate: float, n: int, burstiness: float) -> np.ndarray:
    return rng.exponential(1.0 / rate, n)


@arrival("gamma")
def _gamma(rng: np.random.Generator, rate: float, n: int, burstiness: float) -> np.ndarray:
    if burstiness <= 0:
        raise ConfigError(f"burstiness must be > 0, got {burstiness}", key="--burstiness")
    return rng.gamma(burstiness, 1.0 / (rate * burstiness), n)


@arrival("constant")
def _constant(rng: np.random.Generator, rate: float, n: int, burstiness: float) -> np.ndarray:
    return np.full(n, 1.0 / rate)


def check_rate(rate: float, n: int | None = None, duration_s: float | None = None, key: str = "--rate") -> None:
    """Refuse a rate that is not > 0, above MAX_RATE, or a level of over MAX_SCHEDULED arrivals."""
    if not 0 < rate <= MAX_RATE:
        raise ConfigError(f"request rate must be > 0 and at most {MAX_RATE:,.0f}/s, got {rate:g}", key=key)
    expected = min(n if n is not None else float("inf"), rate * duration_s if duration_s is not None else float("inf"))
    if expected > MAX_SCHEDULED:
        raise ConfigError(
            f"{expected:,.0f} arrivals in one level is more than {MAX_SCHEDULED:,}; lower the rate, --requests or --duration",
            key=key,
        )


def schedule(
    kind: str,
    rate: float,
    *,
    n: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    burstiness: float = 1.0,
) -> np.ndarray:
    """Send offsets (seconds, float64, non-decreasing) for ``n`` requests or ``duration_s``.

    The first request goes at 0. With both bounds, whichever ends first wins.
    """
    if kind not in ARRIVALS:
        raise ConfigError(f"unknown arrival process {kind!r}; choose one of: {', '.join(ARRIVALS)}", key="--arrival")
    if n is None and duration_s is None:
        raise ConfigError("an open-loop level needs --requests or --duration")
    check_rate(rate, n, duration_s)
    rng = np.random.default_rng(seed)
    sampler = ARRIVALS[kind]
    if n is not None and (duration_s is None or n <= rate * duration_s * 1.2 + 16):
        gaps = sampler(rng, rate, max(n - 1, 0), burstiness)
        offsets = np.concatenate(([0.0], np.cumsum(gaps)))[:n]
    else:
        offsets = np.zeros(1)
    if duration_s is not None:
        if n is None or offsets.size < n:  # grow until the duration is covered
            chunk = max(int(rate * duration_s * 1.2) + 16, 16)
            parts = [np.zeros(1)]
            last = 0.0
            while last < duration_s:
                gaps = sampler(rng, rate, chunk, burstiness)
                part = last + np.cumsum(gaps)
                parts.append(part)
                last = float(part[-1])
            offsets = np.concatenate(parts)
        offsets = offsets[offsets < duration_s][:n]
    return offsets
