"""``--precision`` that ends: a level whose target is out of reach stops early and says why.

Hand-built levels in virtual time (a record every 10 ms, the watch's clock at the latest
finish) go through the real :class:`~loadgen.load.precision.LevelWatch` and its
:class:`~loadgen.metrics.sequential.PrecisionRule`: TTFT that wanders over thousands of
requests (correlation spanning the level) cannot give a 10% p99 within a 60 s level and
stops at an early look with the projection; independent TTFT meets a 10% p50 as before."""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from loadgen.load.precision import LevelWatch, parse_target
from loadgen.metrics.sequential import PrecisionRule, Target
from tests.metrics.helpers import rec

STEP_MS = 10.0  # one request every 10 ms: 100 requests/s, 6,000 in a 60 s level


def _feed(watch: LevelWatch, ttft_ms: npt.NDArray[np.float64], now: list[int]) -> int:
    """Hand ``watch`` one record at a time until it says stop; how many it took."""
    for i, t in enumerate(ttft_ms):
        r = rec(i, [(i * STEP_MS + t, 1)], sent=i * STEP_MS, done=i * STEP_MS + t + 1)
        now[0] = r.done_ns
        if watch.add((r,)):
            return i + 1
    return ttft_ms.size


def _watch(text: str, now: list[int], max_duration_s: float | None = None) -> LevelWatch:
    return LevelWatch([parse_target(text)], 0.95, clock=lambda: now[0], max_duration_s=max_duration_s)


def _wandering(n: int) -> npt.NDArray[np.float64]:
    """TTFT of a queue whose level drifts over thousands of requests (AR(1), φ = 0.999)."""
    rng = np.random.default_rng(7)
    z = np.empty(n)
    z[0] = 0.0
    e = rng.normal(0, 1, n)
    for i in range(1, n):
        z[i] = 0.999 * z[i - 1] + 0.05 * e[i]
    return np.asarray(50.0 * np.exp(z + rng.normal(0, 0.3, n)), dtype=np.float64)


def test_an_unreachable_target_stops_early_with_the_projection() -> None:
    now = [0]
    watch = _watch("ttft.p99=10%", now, max_duration_s=60.0)
    took = _feed(watch, _wandering(6000), now)
    reason = watch.reason("max-duration")
    assert watch.unreachable is not None and took < 6000 / 2, (took, reason)
    assert reason.startswith("precision not reachable: ttft.p99 ±10% needs "), reason
    m = re.search(
        r"needs (?:at least )?~([\d,]+) requests .*more than max-duration allows at the measured rate \(~([\d,]+)\)",
        reason,
    )
    assert m is not None, reason
    need, cap = (int(g.replace(",", "")) for g in m.groups())
    assert need > 2 * cap and 0.8 * 6000 <= cap <= 1.2 * 6000, reason
    assert "use --trials" in reason, reason
    assert watch.looks >= 3


def test_a_reachable_target_still_stops_as_precision_met() -> None:
    now = [0]
    watch = _watch("ttft.p50=10%", now, max_duration_s=60.0)
    x = np.random.default_rng(3).lognormal(np.log(50.0), 0.3, 6000)
    took = _feed(watch, x, now)
    assert watch.met and watch.unreachable is None and took < 6000
    assert watch.reason("max-duration").startswith("precision met: ttft.p50 ±")


def test_no_bound_no_early_stop() -> None:
    """Without a maximum duration or request count there is nothing to hold a projection against."""
    now = [0]
    watch = _watch("ttft.p99=10%", now)
    assert _feed(watch, _wandering(3000), now) == 3000 and watch.unreachable is None


def test_the_projection_widens_with_the_looks_still_to_come() -> None:
    """A bounded interval k× too wide needs at least k²× the ``n_eff``, more for the later looks' confidence."""
    rule = PrecisionRule((Target("ttft", 0.5, 0.02),))
    x = np.random.default_rng(0).lognormal(0, 0.3, 500)
    d = rule.check(4, {"ttft": x})
    iv = d.intervals[rule.targets[0].name]
    assert iv.half_width is not None
    (p,) = rule.project(d)
    rel = iv.half_width / iv.point
    assert not p.floor and not p.refused
    assert p.needed_n_eff > iv.n_eff * (rel / 0.02) ** 2
    assert abs(p.needed_n / p.needed_n_eff - iv.n / iv.n_eff) < 1e-9
