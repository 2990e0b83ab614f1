"""The alpha-spending precision rule: its schedule, its spending, and that it stops."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.metrics.sequential import PrecisionRule, Target


def test_spending_sums_to_alpha() -> None:
    rule = PrecisionRule((Target("ttft", 0.99, 0.05),))
    assert sum(rule.spent(k) for k in range(1, 100_000)) == pytest.approx(0.05, rel=1e-4)
    assert rule.spent(1) == pytest.approx(0.025)


def test_looks_grow_and_end_at_the_cap() -> None:
    looks = list(PrecisionRule((Target("e2e", None, 0.1),)).looks(1000))
    assert looks == [200, 300, 450, 675, 1000]


def test_quiet_process_stops_before_noisy_one() -> None:
    rng = np.random.default_rng(0)
    rule = PrecisionRule((Target("ttft", 0.5, 0.05),))
    quiet = rng.lognormal(0, 0.5, 50_000)
    d = rule.run(lambda n: {"ttft": quiet[:n]}, 50_000)
    assert d.stop and d.n < 10_000  # t on 9 degrees of freedom at look 10's 99.95%: about twice the i.i.d. count
    iv = d.intervals["ttft.p50 within 5%"]
    assert iv.half_width is not None and iv.half_width / iv.point <= 0.05 and d.confidence > 0.95
    e = rng.standard_normal(50_000) * 0.5 * np.sqrt(1 - 0.95**2)
    y = np.empty(50_000)
    y[0] = 0.0
    for t in range(1, y.size):
        y[t] = 0.95 * y[t - 1] + e[t]
    noisy = np.exp(y)
    d2 = rule.run(lambda n: {"ttft": noisy[:n]}, 50_000)
    assert d2.n > 3 * d.n


def test_rule_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        PrecisionRule(())
    with pytest.raises(ValueError):
        PrecisionRule((Target("ttft", 0.5, 0.05),), growth=1.0)
