"""Intervals between ``--trials`` (issue 38): hand-worked numbers, where they are refused,
and a real three-trial run whose summary, console, report and ``--precision`` verdict use
them."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.metrics._dist import t_ppf
from loadgen.metrics.results import LevelSummary, RunSummary, StatInterval
from loadgen.metrics.trials import between_trials, trial_interval
from tests.scripted_server import Script, ScriptedServerProcess

GOLDEN = Path(__file__).parent / "golden" / "summary_concurrency.json"
runner = CliRunner()


def level() -> LevelSummary:
    return RunSummary.from_json(json.loads(GOLDEN.read_text())).levels[0]


def test_the_pooled_value_plus_minus_t_on_the_trials_spread() -> None:
    # 10, 12, 14: sd 2; t(2) at 95% = 4.3027; half = 4.3027 * 2 / sqrt(3) = 4.9683, around the pooled 11.5
    iv = trial_interval(11.5, [10.0, 12.0, 14.0], 0.95, None)
    assert iv is not None and iv.trials == 3 and iv.n_eff == 3
    half = t_ppf(0.975, 2) * 2 / math.sqrt(3)
    assert half == pytest.approx(4.9683, abs=1e-3)
    assert (iv.low, iv.high) == pytest.approx((11.5 - half, 11.5 + half))
    # at 90% the t quantile is t(2) at 0.95 = 2.92
    iv90 = trial_interval(11.5, [10.0, 12.0, 14.0], 0.9, None)
    assert iv90 is not None and iv90.high == pytest.approx(11.5 + 2.91999 * 2 / math.sqrt(3), abs=1e-3)


def test_a_wider_pooled_interval_widens_it_and_keeps_its_n_eff() -> None:
    within = StatInterval(3.0, 13.0, 250.0, 0.95)
    iv = trial_interval(11.5, [10.0, 12.0, 14.0], 0.95, within)
    assert iv is not None and iv.low == 3.0 and iv.high == pytest.approx(11.5 + 4.9683, abs=1e-3)
    assert iv.n_eff == 250.0 and iv.trials == 3


@pytest.mark.parametrize(
    ("values", "why"),
    [([10.0, 12.0], "two trials"), ([10.0, 12.0, None], "a trial without a value"), ([1.0, 1.0, 1.0], "no spread")],
)
def test_left_to_the_pooled_level_where_trials_cannot_judge(values: list[float | None], why: str) -> None:
    assert trial_interval(11.5, values, 0.95, None) is None, why


def test_a_tail_a_trial_cannot_reach_is_refused_with_its_reason() -> None:
    within = StatInterval(9.0, 13.0, 250.0, 0.95)
    few = trial_interval(11.5, [10.0, 12.0, 14.0], 0.95, within, beyond=[60.0, 49.0, 80.0], label="p99")
    assert few is not None and few.low is None and few.high is None and few.trials == 3 and few.n_eff == 250.0
    assert few.reason == "p99 between 3 trials needs 50 values past it in each trial (fewest 49): run longer trials"
    alone = [within, StatInterval(None, 20.0, 30.0, 0.95, "p99 needs n_eff >= 460"), within]
    clustered = trial_interval(11.5, [10.0, 12.0, 14.0], 0.95, within, beyond=[60.0] * 3, own=alone, label="p99")
    assert clustered is not None and not clustered.bounded
    assert clustered.reason is not None and "needs each trial to bound it on its own (1 of 3 cannot" in clustered.reason
    ok = trial_interval(11.5, [10.0, 12.0, 14.0], 0.95, within, beyond=[60.0] * 3, own=[within] * 3, label="p99")
    assert ok is not None and ok.bounded and ok.trials == 3


def test_a_level_with_three_trials_carries_them_where_each_trial_has_the_values() -> None:
    base = level()
    trials = [
        dataclasses.replace(
            base,
            ttft_ms=dataclasses.replace(base.ttft_ms, p50=base.ttft_ms.p50 * f, count=1000),
            goodput=dataclasses.replace(base.goodput, slo_attainment=a),
        )
        for f, a in ((0.9, 0.8), (1.0, 0.9), (1.1, 0.85))
    ]
    pooled = between_trials(base, trials, 0.95)
    before, ivs = base.ttft_ms.intervals or {}, pooled.ttft_ms.intervals or {}
    p50 = ivs["p50"]
    assert p50.trials == 3 and p50.low is not None and p50.high is not None
    spread = t_ppf(0.975, 2) * 0.1 * base.ttft_ms.p50 / math.sqrt(3)
    assert p50.low <= base.ttft_ms.p50 - spread + 1e-9 and p50.high >= base.ttft_ms.p50 + spread - 1e-9
    # a trial of 1,000 has 1 value past its p99.9: that tail is refused between trials, saying why
    assert before["p99.9"] is not None and ivs["p99.9"].trials == 3 and not ivs["p99.9"].bounded
    assert (
        ivs["p99.9"].reason
        == "p99.9 between 3 trials needs 50 values past it in each trial (fewest 1): run longer trials"
    )
    att = (pooled.goodput.intervals or {})["slo_attainment"]
    assert att.trials == 3 and att.low is not None and att.low <= 0.85 - t_ppf(0.975, 2) * 0.05 / math.sqrt(3) + 1e-9
    assert between_trials(base, trials[:2], 0.95) is base  # two trials: as it was


def test_a_real_three_trial_level_prints_intervals_between_trials(tmp_path: Path) -> None:
    out = tmp_path / "t"
    with ScriptedServerProcess(Script(ttft_s=0.02, jitter_s=0.02, itl_s=0.001, seed=5)) as srv:
        res = runner.invoke(
            app,
            [
                "run",
                "--url",
                srv.url,
                "--api",
                "completions",
                "--no-calibrate",
                "--prompt-tokens",
                "16",
                "--output-tokens",
                "2",
                "--concurrency",
                "4",
                "--trials",
                "3",
                "--precision",
                "ttft.p50=50%",
                "--max-duration",
                "20",
                "--requests",
                "400",
                "--out",
                str(out),
            ],
        )
    assert res.exit_code == 0, res.output
    (lv,) = json.loads((out / "summary.json").read_text())["levels"]
    assert lv["trials"]["n"] == 3
    p50 = lv["ttft_ms"]["intervals"]["p50"]
    assert p50["trials"] == 3 and p50["low"] <= lv["ttft_ms"]["p50"] <= p50["high"]
    # the pooled p50 ± t(2) times the trials' standard error lies inside the printed interval
    vals = lv["trials"]["metrics"]["ttft_ms.p50"]["values"]
    mean = sum(vals) / 3
    half = t_ppf(0.975, 2) * math.sqrt(sum((v - mean) ** 2 for v in vals) / 2) / math.sqrt(3)
    assert p50["low"] <= lv["ttft_ms"]["p50"] - half + 1e-6 and p50["high"] >= lv["ttft_ms"]["p50"] + half - 1e-6
    assert "between 3 trials: ttft.p50 ±" in lv["stopped"], lv["stopped"]
    assert "intervals between 3 trials" in res.output
    html = (out / "report.html").read_text()
    assert 'id="trials-note"' in html and "intervals between 3 trials" in html
