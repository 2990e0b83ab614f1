"""Open-loop arrival processes: an absolute, precomputed schedule of send offsets.

The whole schedule is computed before sending (so it cannot drift, and it can be split
across worker processes without coordination). Offsets are seconds from the level start.

- ``poisson``: exponential gaps with mean 1/rate (coefficient of variation 1).
- ``gamma``: gamma gaps with shape = burstiness and mean 1/rate; burstiness < 1 is
  burstier than Poisson, > 1 smoother (the convention of vLLM's benchmark).
- ``constant``: evenly spaced, 1/rate apart.

Each process declares its parameters (:class:`ArrivalParam`: name, bound, default), as the
length distributions do; :func:`schedule` and a profile file's validation
(:mod:`loadgen.load.profiles`) check a value against its declaration, and
:func:`arrival_help` lists them. Only ``gamma`` declares one, ``burstiness``.

The schedule is bounded: a rate above ``MAX_RATE`` or a level of more than
``MAX_SCHEDULED`` arrivals (8 bytes each) is refused with a ConfigError, never allocated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from loadgen.errors import ConfigError

__all__ = [
    "ARRIVALS",
    "MAX_RATE",
    "MAX_SCHEDULED",
    "ArrivalParam",
    "ArrivalProcess",
    "arrival",
    "arrival_help",
    "check_rate",
    "schedule",
]

MAX_RATE = 1e6  # requests per second: far beyond what one client can send
MAX_SCHEDULED = 20_000_000  # arrivals in one level's schedule (160 MB of offsets)


@dataclass(frozen=True, slots=True)
class ArrivalParam:
    """A parameter an arrival process declares: ``name`` is the profile key, the
    ``Profile``/``LevelPlan`` field and (as ``--name``) the flag; values must be finite and
    greater than ``above``; ``default`` is what a profile that omits it gets."""

    name: str
    help: str
    default: float
    above: float

    def problem(self, value: float) -> str | None:
        """Why ``value`` is refused (``must be > 0, got -1``), or None."""
        if not value > self.above:  # NaN too
            return f"must be > {self.above:g}, got {value}"
        return None if value < float("inf") else f"must be finite, got {value}"


_Sampler = Callable[[np.random.Generator, float, int, Mapping[str, float]], np.ndarray]


@dataclass(frozen=True, slots=True)
class ArrivalProcess:
    """A registered arrival process: ``sample(rng, rate, n, params)`` draws ``n`` gaps
    (seconds) for the declared ``params``."""

    name: str
    params: tuple[ArrivalParam, ...]
    sample: _Sampler


ARRIVALS: dict[str, ArrivalProcess] = {}


def arrival(name: str, *params: ArrivalParam) -> Callable[[_Sampler], _Sampler]:
    """Register the decorated sampler as arrival process ``name`` taking ``params``."""

    def register(fn: _Sampler) -> _Sampler:
        ARRIVALS[name] = ArrivalProcess(name, params, fn)
        return fn

    return register


BURSTINESS = ArrivalParam("burstiness", "the gamma shape; 1 is Poisson, below 1 burstier, above 1 smoother", 1.0, 0.0)


@arrival("poisson")
def _poisson(rng: np.random.Generator, rate: float, n: int, params: Mapping[str, float]) -> np.ndarray:
    return rng.exponential(1.0 / rate, n)


@arrival("gamma", BURSTINESS)
def _gamma(rng: np.random.Generator, rate: float, n: int, params: Mapping[str, float]) -> np.ndarray:
    shape = params["burstiness"]
    return rng.gamma(shape, 1.0 / (rate * shape), n)


@arrival("constant")
def _constant(rng: np.random.Generator, rate: float, n: int, params: Mapping[str, float]) -> np.ndarray:
    return np.full(n, 1.0 / rate)


def arrival_help() -> str:
    """The arrival processes and the parameters each declares, in one line (for help texts),
    e.g. ``poisson, gamma (--burstiness > 0, default 1: the gamma shape; ...), constant``."""
    parts = []
    for proc in ARRIVALS.values():
        declared = "; ".join(f"--{p.name} > {p.above:g}, default {p.default:g}: {p.help}" for p in proc.params)
        parts.append(f"{proc.name} ({declared})" if declared else proc.name)
    return ", ".join(parts)


def check_rate(rate: float, n: int | None = None, duration_s: float | None = None) -> None:
    """Refuse a rate that is not > 0, above MAX_RATE, or a level of over MAX_SCHEDULED arrivals
    (a :class:`ConfigError` on the field ``rate``)."""
    if not 0 < rate <= MAX_RATE:
        raise ConfigError(f"request rate must be > 0 and at most {MAX_RATE:,.0f}/s, got {rate:g}", field="rate")
    expected = min(n if n is not None else float("inf"), rate * duration_s if duration_s is not None else float("inf"))
    if expected > MAX_SCHEDULED:
        raise ConfigError(
            f"{expected:,.0f} arrivals in one level is more than {MAX_SCHEDULED:,}; lower the rate, --requests or --duration",
            field="rate",
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
        raise ConfigError(f"unknown arrival process {kind!r}; choose one of: {', '.join(ARRIVALS)}", field="arrival")
    if n is None and duration_s is None:
        raise ConfigError("an open-loop level needs --requests or --duration")
    check_rate(rate, n, duration_s)
    proc = ARRIVALS[kind]
    given = {"burstiness": burstiness}  # this function's keyword for each parameter a process may declare
    params = {p.name: given[p.name] for p in proc.params}
    for p in proc.params:
        why = p.problem(params[p.name])
        if why is not None:
            raise ConfigError(f"{p.name} {why}", field=p.name)
    rng = np.random.default_rng(seed)
    if n is not None and (duration_s is None or n <= rate * duration_s * 1.2 + 16):
        gaps = proc.sample(rng, rate, max(n - 1, 0), params)
        offsets = np.concatenate(([0.0], np.cumsum(gaps)))[:n]
    else:
        offsets = np.zeros(1)
    if duration_s is not None:
        if n is None or offsets.size < n:  # grow until the duration is covered
            chunk = max(int(rate * duration_s * 1.2) + 16, 16)
            parts = [np.zeros(1)]
            last = 0.0
            while last < duration_s:
                gaps = proc.sample(rng, rate, chunk, params)
                part = last + np.cumsum(gaps)
                parts.append(part)
                last = float(part[-1])
            offsets = np.concatenate(parts)
        offsets = offsets[offsets < duration_s][:n]
    return offsets
