"""How load rises: each profile kind is a generator of levels.

A sweep yields the next :class:`LevelPlan` and receives that level's
:class:`~loadgen.metrics.results.LevelSummary`::

    gen = sweep(profile, seed=0)
    plan = next(gen)
    while True:
        summary = run(plan)
        try:
            plan = gen.send(summary)
        except StopIteration as stop:
            reason = stop.value  # why it ended early, or None
            break

so sweeps are tested with made-up summaries, no server needed. Stop rules (error rate,
SLO attainment below a floor for two levels, saturation) are checked after each level.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from loadgen.load.profiles import Profile, ProfileKind
from loadgen.load.runner import LevelPlan
from loadgen.metrics.answers import knee_latency, knee_throughput
from loadgen.metrics.capacity import knee, slo_verdict
from loadgen.metrics.results import LevelSummary, LoadMode

__all__ = ["Sweep", "planned_levels", "stop_reason", "sweep"]

Summary = LevelSummary
Sweep = Generator[LevelPlan, Summary, "str | None"]


def _attainment(s: Summary) -> float:
    att = s.goodput.slo_attainment
    return 0.0 if att is None else float(att)


def _throughput(s: Summary) -> float:
    return knee_throughput(s)


def stop_reason(history: list[Summary], profile: Profile) -> str | None:
    """Why the sweep should stop after the last level of ``history`` (None: go on)."""
    rules = profile.stop
    last = history[-1]
    error_rate = last.requests.error_rate
    if rules.max_error_rate is not None and error_rate > rules.max_error_rate:
        return f"error rate {error_rate:.0%} > {rules.max_error_rate:.0%}"
    if rules.min_attainment is not None and len(history) >= 2:
        a, b = _attainment(history[-2]), _attainment(history[-1])
        if a < rules.min_attainment and b < rules.min_attainment:
            return f"SLO attainment below {rules.min_attainment:.0%} for two levels ({a:.0%}, {b:.0%})"
    if rules.on_saturation and len(history) >= 2:
        k = knee(
            [(float(s.load.value), _throughput(s), knee_latency(s, profile.knee_metric)) for s in history],
            profile.knee_throughput_gain,
            profile.knee_latency_growth,
            noise=[s.throughput.output_tokens_per_s_se for s in history],
        )
        # a knee is confirmed by the level after it (or, at the last level, beyond its noise)
        if k.found and k.index is not None and k.index >= len(history) - 2:
            return (
                f"saturated at {k.load:g} (throughput {k.throughput_gain or 0:+.0%}, "
                f"latency {k.latency_growth or 0:+.0%})"
            )
    return None


def _plan(profile: Profile, index: int, mode: LoadMode, value: float, seed: int, **kw: Any) -> LevelPlan:
    return LevelPlan(
        index=index,
        mode=mode,
        value=value,
        requests=kw.get("requests", profile.requests),
        duration_s=kw.get("duration_s", profile.level_duration_s),
        warmup_requests=profile.warmup_requests,
        arrival=profile.arrival,
        burstiness=profile.burstiness,
        max_in_flight=profile.max_in_flight,
        max_lateness_s=profile.max_lateness_s,
        seed=seed + index,
        ramp_s=kw.get("ramp_s", 0.0),
    )


def _levels(profile: Profile, seed: int) -> Sweep:
    history: list[Summary] = []
    for i, v in enumerate(profile.levels):
        history.append((yield _plan(profile, i, profile.mode, v, seed)))
        reason = stop_reason(history, profile)
        if reason:
            return reason
    return None


def _sweep_rate(profile: Profile, seed: int) -> Sweep:
    sync = yield _plan(profile, 0, "concurrency", 1, seed)
    peak = yield _plan(profile, 1, "concurrency", profile.max_concurrency, seed)
    lo = float(sync.throughput.requests_per_s or 0.0)
    hi = float(peak.throughput.requests_per_s or 0.0)
    if hi <= 0:
        return "the max-throughput level completed no request"
    lo = min(lo, hi)
    rates = (
        np.linspace(lo, hi, profile.rate_levels + 2)[1:-1]
        if lo > 0
        else np.linspace(0, hi, profile.rate_levels + 1)[1:]
    )
    history: list[Summary] = []
    for i, r in enumerate(rates.tolist()):
        history.append((yield _plan(profile, 2 + i, "rate", round(r, 4), seed)))
        reason = stop_reason(history, profile)
        if reason:
            return reason
    return None


def _capacity(profile: Profile, seed: int) -> Sweep:
    """Bracket a passing and a failing rate, then bisect until narrow or out of budget.

    A level passes when its SLO attainment's interval lies at or above the target, fails
    when it lies below or its latencies kept rising (an overloaded level's attainment only
    depends on how long it ran), and is undecided otherwise
    (:func:`~loadgen.metrics.capacity.slo_verdict`). An undecided rate is run once more
    with twice the requests; still undecided, its point attainment decides."""
    target = profile.attainment_target
    lo: float | None = None  # highest passing rate
    hi: float | None = None  # lowest failing rate
    probes = 0

    def probe(rate: float) -> Generator[LevelPlan, Summary, bool]:
        nonlocal probes
        s = yield _plan(profile, probes, "rate", round(rate, 4), seed)
        probes += 1
        verdict = slo_verdict(s, target)
        if verdict == "undecided" and probes < profile.max_levels and profile.requests is not None:
            s = yield _plan(profile, probes, "rate", round(rate, 4), seed, requests=2 * profile.requests)
            probes += 1
            verdict = slo_verdict(s, target)
        return verdict == "pass" or (verdict == "undecided" and _attainment(s) >= target)

    r, first = profile.rate_low, True
    while probes < profile.max_levels and (lo is None or hi is None):
        if (yield from probe(r)):
            lo = r if lo is None else max(lo, r)
            if hi is None:
                r = profile.rate_high if (profile.rate_high and first and profile.rate_high > r) else r * 2
        else:
            hi = r if hi is None else min(hi, r)
            if lo is None:
                r = r / 2
        first = False
    if lo is None:
        return "capacity search: even the lowest probed rate misses the SLOs"
    if hi is None:
        return "capacity search: out of levels before any rate failed"
    while probes < profile.max_levels and (hi - lo) / lo > profile.rel_width:
        mid = (lo + hi) / 2
        if (yield from probe(mid)):
            lo = mid
        else:
            hi = mid
    return None


def _soak(profile: Profile, seed: int) -> Sweep:
    value = profile.levels[0] if profile.levels else 16
    yield _plan(profile, 0, profile.mode, value, seed)
    return None


def _ramp(profile: Profile, seed: int) -> Sweep:
    users = profile.levels[-1] if profile.levels else 64
    duration = profile.duration_s or 60.0
    yield _plan(profile, 0, "concurrency", users, seed, requests=None, duration_s=duration, ramp_s=duration)
    return None


_KINDS: dict[ProfileKind, Callable[[Profile, int], Sweep]] = {
    "levels": _levels,
    "sweep-rate": _sweep_rate,
    "capacity": _capacity,
    "soak": _soak,
    "ramp": _ramp,
}


def sweep(profile: Profile, seed: int = 0) -> Sweep:
    """The level generator for ``profile.kind``."""
    return _KINDS[profile.kind](profile, seed)


def planned_levels(profile: Profile) -> tuple[int, bool]:
    """How many levels the profile's sweep runs, and whether that is exact (a capacity
    search runs at most that many); a stop rule may end any sweep sooner."""
    if profile.kind == "levels":
        return len(profile.levels), True
    if profile.kind == "sweep-rate":
        return 2 + profile.rate_levels, True
    if profile.kind == "capacity":
        return profile.max_levels, False
    return 1, True
