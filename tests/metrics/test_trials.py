"""Between-trial statistics and the Welch comparison, against hand-worked numbers."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from loadgen.metrics.compare import BETTER, NO_CHANGE, WORSE, trial_rows
from loadgen.metrics.results import LevelSummary, RunSummary, Trials
from loadgen.metrics.trials import t_quantile, trial_stat, trial_summary, welch_interval

GOLDEN = Path(__file__).parent / "golden" / "summary_concurrency.json"


def level() -> LevelSummary:
    return RunSummary.from_json(json.loads(GOLDEN.read_text())).levels[0]


def test_t_quantiles() -> None:
    assert t_quantile(1) == pytest.approx(12.706)
    assert t_quantile(4) == pytest.approx(2.776)
    assert t_quantile(4.5) == pytest.approx((2.776 + 2.571) / 2)
    assert t_quantile(1000) == pytest.approx(1.96, abs=0.01)
    with pytest.raises(ValueError):
        t_quantile(0.5)


def test_trial_stat_is_mean_and_t_interval() -> None:
    # 10, 12, 14: mean 12, sd 2, half-width t(2) * 2 / sqrt(3) = 4.303 * 1.1547 = 4.9687
    st = trial_stat([10.0, 12.0, None, 14.0])
    assert st.mean == pytest.approx(12.0)
    assert (st.ci_low, st.ci_high) == pytest.approx((12 - 4.9687, 12 + 4.9687), abs=1e-3)
    assert st.values == [10.0, 12.0, None, 14.0]
    assert trial_stat([5.0]).ci_low is None and trial_stat([None]).mean is None


def test_welch_interval_hand_worked() -> None:
    # a: 10, 12, 14 (var 4); b: 20, 21, 22 (var 1): diff 9, se = sqrt(4/3 + 1/3) = 1.2910
    # df = (5/3)^2 / ((4/3)^2/2 + (1/3)^2/2) = 2.7778 / 0.9444 = 2.941; t between t(2) and t(3)
    t = 4.303 + (2.941176 - 2) * (3.182 - 4.303)
    lo, hi = welch_interval([10, 12, 14], [20, 21, 22]) or (0, 0)
    assert (lo, hi) == pytest.approx((9 - t * math.sqrt(5 / 3), 9 + t * math.sqrt(5 / 3)), abs=1e-3)
    assert welch_interval([1.0], [2.0, 3.0]) is None
    assert welch_interval([1.0, 1.0], [2.0, 2.0]) == (1.0, 1.0)


def test_trial_summary_and_rows_use_between_trial_variation() -> None:
    base = level()
    slow = [dataclasses.replace(base, ttft_ms=dataclasses.replace(base.ttft_ms, p99=v)) for v in (100.0, 104.0, 98.0)]
    fast = [dataclasses.replace(base, ttft_ms=dataclasses.replace(base.ttft_ms, p99=v)) for v in (60.0, 63.0, 58.0)]
    ts = trial_summary(slow)
    assert ts.n == 3 and ts.metrics["ttft_ms.p99"].mean == pytest.approx(302 / 3)
    assert ts.metrics["goodput.slo_attainment"].values[0] == pytest.approx(100 * (base.goodput.slo_attainment or 0))
    a = dataclasses.replace(base, trials=ts)
    b = dataclasses.replace(base, trials=trial_summary(fast))
    rows = {(r.metric, r.stat): r for r in trial_rows(a, b)}
    ttft = rows[("ttft_ms", "p99")].diff
    assert ttft.verdict == BETTER and ttft.note == "between trials: 3 vs 3"
    assert ttft.diff == pytest.approx(181 / 3 - 302 / 3)
    assert rows[("itl_ms", "p99")].diff.verdict == NO_CHANGE  # identical in every trial: a zero-width interval of 0
    worse = trial_rows(b, a)
    assert {(r.metric, r.stat): r for r in worse}[("ttft_ms", "p99")].diff.verdict == WORSE
    # the typed result round-trips through JSON (summary.json)
    back = LevelSummary.from_json(json.loads(json.dumps(a.to_json())))
    assert isinstance(back.trials, Trials) and back.trials.metrics["ttft_ms.p99"].values == [100.0, 104.0, 98.0]
