"""Profiles and sweeps: the level sequence driven by made-up summaries, exact values."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.errors import ProfileError
from loadgen.load.profiles import Profile, StopRules, list_profiles, load_profile
from loadgen.load.runner import LevelPlan
from loadgen.load.sweeps import Sweep, stop_reason, sweep
from loadgen.metrics.capacity import slo_verdict
from loadgen.metrics.results import (
    ClientHealth,
    Distribution,
    Events,
    Goodput,
    Lengths,
    LevelSummary,
    Load,
    Requests,
    StatInterval,
    Throughput,
)
from loadgen.metrics.run import summarize_run
from loadgen.metrics.uncertainty import proportion_interval
from loadgen.metrics.verdicts import SteadyState, Trend
from loadgen.paths import search_dirs

HERE = Path(__file__).parent


def summary(
    load: float,
    *,
    mode: str = "concurrency",
    att: float = 1.0,
    failed: int = 0,
    total: int = 100,
    tok_s: float = 100.0,
    ttft_p99: float = 10.0,
    rps: float = 1.0,
    tok_se: float | None = None,
) -> LevelSummary:
    """A made-up level: only the numbers the sweeps read are set."""
    empty = Distribution()
    return LevelSummary(
        load=Load(mode, load),
        requests=Requests(total=total, ok=total - failed, failed=failed),
        duration_s=1.0,
        throughput=Throughput(requests_per_s=rps, output_tokens_per_s=tok_s, output_tokens_per_s_se=tok_se),
        goodput=Goodput(requests_per_s=rps * att, slo_attainment=att, slos=["ttft=1s"]),
        ttft_ms=Distribution(count=total, p99=ttft_p99),
        ttft_queued_ms=empty,
        itl_ms=empty,
        inter_chunk_ms=empty,
        tpot_ms=empty,
        e2e_ms=empty,
        e2e_queued_ms=empty,
        prompt_tokens=empty,
        output_tokens=empty,
        lengths=Lengths(),
        events=Events(),
        by_class={},
        client=ClientHealth(empty, empty),
    )


def drive(gen: Sweep, answer: Any) -> tuple[list[LevelPlan], str | None]:
    """Run a sweep with summaries made by ``answer(plan)``; return the plans and the stop reason."""
    plans = [next(gen)]
    while True:
        try:
            plans.append(gen.send(answer(plans[-1])))
        except StopIteration as stop:
            return plans, stop.value
        assert len(plans) < 100


def test_explicit_levels_run_in_order_with_seeds() -> None:
    prof = Profile(levels=[1, 2, 4], requests=50, warmup_requests=3)
    plans, reason = drive(sweep(prof, seed=7), lambda p: summary(p.value))
    assert [(p.mode, p.value, p.requests, p.warmup_requests, p.seed) for p in plans] == [
        ("concurrency", 1, 50, 3, 7),
        ("concurrency", 2, 50, 3, 8),
        ("concurrency", 4, 50, 3, 9),
    ]
    assert reason is None


def test_stop_on_error_rate() -> None:
    prof = Profile(levels=[1, 2, 4, 8], stop=StopRules(max_error_rate=0.1))
    plans, reason = drive(sweep(prof), lambda p: summary(p.value, failed=20 if p.value >= 4 else 0))
    assert [p.value for p in plans] == [1, 2, 4]
    assert reason == "error rate 20% > 10%"


def test_stop_when_attainment_is_low_for_two_levels() -> None:
    prof = Profile(levels=[1, 2, 4, 8, 16], stop=StopRules(min_attainment=0.5))
    att = {1: 1.0, 2: 0.4, 4: 0.6, 8: 0.3, 16: 0.2}
    plans, reason = drive(sweep(prof), lambda p: summary(p.value, att=att[int(p.value)]))
    assert [p.value for p in plans] == [1, 2, 4, 8, 16]  # 2 then 4 recovers: no stop
    att = {1: 1.0, 2: 0.4, 4: 0.3, 8: 0.3, 16: 0.2}
    plans, reason = drive(sweep(prof), lambda p: summary(p.value, att=att[int(p.value)]))
    assert [p.value for p in plans] == [1, 2, 4]
    assert reason == "SLO attainment below 50% for two levels (40%, 30%)"


def test_stop_at_saturation_knee() -> None:
    prof = Profile(levels=[1, 2, 4, 8, 16], stop=StopRules(on_saturation=True))
    tok = {1: 100, 2: 200, 4: 390, 8: 400, 16: 400}
    lat = {1: 10, 2: 10, 4: 11, 8: 20, 16: 40}
    plans, reason = drive(sweep(prof), lambda p: summary(p.value, tok_s=tok[int(p.value)], ttft_p99=lat[int(p.value)]))
    # the knee at 8 is confirmed by the next level (these summaries carry no noise)
    assert [p.value for p in plans] == [1, 2, 4, 8, 16]
    assert reason is not None and reason.startswith("saturated at 8 (throughput +3%")


def test_sweep_rate_spaces_rates_between_sync_and_max() -> None:
    prof = Profile(kind="sweep-rate", rate_levels=3, max_concurrency=64)

    def answer(p: LevelPlan) -> dict[str, Any]:
        if p.mode == "concurrency":
            return summary(p.value, rps=2.0 if p.value == 1 else 10.0)
        return summary(p.value, mode="rate", rps=p.value)

    plans, reason = drive(sweep(prof), answer)
    assert [(p.mode, p.value) for p in plans] == [
        ("concurrency", 1),
        ("concurrency", 64),
        ("rate", 4.0),
        ("rate", 6.0),
        ("rate", 8.0),
    ]
    assert reason is None


def test_capacity_bisection_brackets_the_true_rate() -> None:
    true_capacity = 13.0
    prof = Profile(kind="capacity", rate_low=1.0, max_levels=12, rel_width=0.1)
    plans, reason = drive(
        sweep(prof), lambda p: summary(p.value, mode="rate", att=1.0 if p.value <= true_capacity else 0.5)
    )
    rates = [p.value for p in plans]
    assert rates[:5] == [1, 2, 4, 8, 16]  # doubling until the first failure
    assert rates[5:] == [12, 14, 13]  # bisection: 8..16 -> 12 (pass) -> 14 (fail) -> 13 (pass)
    passing = max(r for r in rates if r <= true_capacity)
    failing = min(r for r in rates if r > true_capacity)
    assert (failing - passing) / passing <= 0.1 and reason is None


def test_capacity_search_explicit_outcomes() -> None:
    prof = Profile(kind="capacity", rate_low=4.0, max_levels=4)
    plans, reason = drive(sweep(prof), lambda p: summary(p.value, mode="rate", att=0.0))
    assert [p.value for p in plans] == [4, 2, 1, 0.5]
    assert reason == "capacity search: even the lowest probed rate misses the SLOs"
    plans, reason = drive(sweep(prof), lambda p: summary(p.value, mode="rate", att=1.0))
    assert [p.value for p in plans] == [4, 8, 16, 32]
    assert reason == "capacity search: out of levels before any rate failed"


def test_run_summary_capacity_and_knee_exact() -> None:
    levels = [
        summary(1, att=1.0, tok_s=100, ttft_p99=10, tok_se=1.0),
        summary(2, att=0.95, tok_s=200, ttft_p99=11, tok_se=2.0),
        summary(4, att=0.5, tok_s=202, ttft_p99=30, tok_se=2.0),  # +1% + 2 * 1.4% noise: under 5%
    ]
    out = summarize_run(levels)
    cap = out.capacity
    assert cap is not None and cap.status == "ok" and cap.between == [2.0, 4.0]
    assert cap.value == pytest.approx(2 + (0.95 - 0.9) / (0.95 - 0.5) * 2)
    assert cap.slos == ["ttft=1s"] and cap.mode == "concurrency"
    assert out.saturation is not None and out.saturation.found and out.saturation.load == 4.0
    noisy = [*levels[:2], summary(4, att=0.5, tok_s=202, ttft_p99=30, tok_se=8.0)]
    assert summarize_run(noisy).saturation == replace(
        out.saturation, found=False, index=None, load=None, throughput_gain=None, latency_growth=None
    )


def test_stop_reason_none_on_healthy_levels() -> None:
    prof = Profile(stop=StopRules(max_error_rate=0.5, min_attainment=0.5, on_saturation=True))
    assert stop_reason([summary(1), summary(2, tok_s=200)], prof) is None


def test_every_shipped_profile_loads() -> None:
    names = [n for n, _ in list_profiles(search_dirs("profiles"))]
    assert {"quick", "sweep-concurrency", "sweep-rate", "capacity", "soak", "ramp"} <= set(names)
    for n in names:
        prof = load_profile(n, search_dirs("profiles"))
        first = next(sweep(prof))
        assert first.requests or first.duration_s
    prof = load_profile("sweep-concurrency", search_dirs("profiles"))
    assert prof.levels == [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_a_shipped_profile_says_it_stops_at_the_knee_only_when_it_does() -> None:
    for name, description in list_profiles(search_dirs("profiles")):
        prof = load_profile(name, search_dirs("profiles"))
        assert ("stops at the knee" in description) == prof.stop.on_saturation, (name, description)


@pytest.mark.parametrize(
    "name, needles",
    [
        ("unknown_key", ["unknown_key.toml", "request", "allowed keys", "requests"]),
        ("bad_kind", ["bad_kind.toml", "kind", "sweep-rate", "capacity"]),
        ("bad_stop", ["bad_stop.toml", "stop.max_errors", "max_error_rate"]),
        ("bad_generator", ["bad_generator.toml", "generate.kind", "doubling, linear"]),
        ("negative_level", ["negative_level.toml", "levels", "positive"]),
        ("bad_toml", ["bad_toml.toml", "invalid TOML"]),
        ("bad_type", ["bad_type.toml", "requests", "number"]),
        ("bad_trim", ["bad_trim.toml", "trim", "sum to < 1"]),
        ("bad_mlperf", ["bad_mlperf.toml", "mlperf_percentile", "between 0 and 1", "0.99 for p99"]),
    ],
)
def test_bad_profile_files_name_the_key(name: str, needles: list[str]) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(str(HERE / "bad_profiles" / f"{name}.toml"), [])
    for n in needles:
        assert n in str(err.value), (n, str(err.value))


def test_unknown_profile_lists_the_names() -> None:
    with pytest.raises(ProfileError, match="available: capacity, quick, ramp"):
        load_profile("nope", search_dirs("profiles"))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b"[generate]\nstart = 1\nstop = inf\n", "finite"),  # doubling to inf never ended
        (b"[generate]\nstart = 1e-300\nstop = 1e300\n", "at most 1,000"),  # 1,994 levels
        (b'[generate]\nkind = "linear"\nstart = 1\nstop = 1e300\nstep = 1e-300\n', "at most 1,000"),
        (b'[generate]\nkind = "linear"\nstart = 1\nstop = inf\nstep = 1\n', "finite"),  # OverflowError
        (b'[generate]\nkind = "linear"\nstart = 1\nstop = 4\nstep = nan\n', "step"),  # ValueError
        (b"[generate]\nstart = " + b"9" * 400 + b"\nstop = 1\n", "finite"),  # OverflowError
        (b"levels = [" + b"9" * 4301 + b"]\n", "invalid TOML"),  # tomllib's ValueError escaped
        (b"\x80levels = [1]\n", "not UTF-8"),  # UnicodeDecodeError escaped
        (b"levels = [1e400]\n", "finite"),  # an infinite level was accepted
        (b"levels = [1]\nrequests = nan\n", "finite"),  # NaN requests per level were accepted
        (b"levels = [1]\nduration_s = inf\n", "finite"),
    ],
    ids=[
        "doubling-to-inf",
        "doubling-2000-levels",
        "linear-1e600-levels",
        "linear-to-inf",
        "nan-step",
        "start-of-400-digits",
        "int-of-4301-digits",
        "not-utf8",
        "inf-level",
        "nan-requests",
        "inf-duration",
    ],
)
def test_profiles_that_crashed_or_hung_are_one_line_errors(tmp_path: Path, text: bytes, needle: str) -> None:
    """Found by tests/fuzz: each of these hung, or raised a traceback, before."""
    path = tmp_path / "p.toml"
    path.write_bytes(text)
    with pytest.raises(ProfileError, match=needle) as err:
        load_profile(str(path), [])
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_generators_still_reach_their_stop() -> None:
    from loadgen.load.profiles import profile_from_dict

    assert profile_from_dict({"generate": {"start": 1, "stop": 256}}, "p").levels == [2.0**i for i in range(9)]
    assert profile_from_dict({"generate": {"start": 0.5, "stop": 4.0000001}}, "p").levels == [0.5, 1, 2, 4]
    linear = {"kind": "linear", "start": 1, "stop": 10, "step": 3}
    assert profile_from_dict({"generate": linear}, "p").levels == [1, 4, 7, 10]


def test_a_level_budget_is_one_rule_for_profile_files_and_run_flags() -> None:
    from loadgen.load.profiles import profile_from_dict, with_budget

    timed = profile_from_dict({"levels": [8], "duration_s": 15, "warmup_requests": 4}, "p")
    assert (timed.requests, timed.duration_s, timed.warmup_requests) == (None, 15, 4)  # no hidden 100-request cap
    counted = profile_from_dict({"levels": [8], "requests": 40}, "p")
    assert (counted.requests, counted.duration_s) == (40, None)
    both = profile_from_dict({"levels": [8], "requests": 40, "duration_s": 15}, "p")
    assert (both.requests, both.duration_s) == (40, 15)  # whichever comes first
    assert profile_from_dict({"levels": [8]}, "p").requests == Profile().requests == 100
    # --duration over a profile that counts requests: the duration alone, as in a file
    over = with_budget(counted, duration_s=5.0)
    assert (over.requests, over.duration_s, over.warmup_requests) == (None, 5.0, 0)
    assert with_budget(timed) == timed and with_budget(timed, warmup_requests=0).warmup_requests == 0
    plan = next(sweep(timed))
    assert (plan.requests, plan.duration_s, plan.warmup_requests) == (None, 15, 4)


def _with_interval(s: LevelSummary, met: int, n: int, seed: int = 0) -> LevelSummary:
    """``s`` with the attainment interval of ``met`` of ``n`` outcomes in a seeded order."""
    outcomes = np.random.default_rng(seed).permutation(np.arange(n) < met)
    iv = proportion_interval(outcomes)
    stat = StatInterval(iv.low, iv.high, iv.n_eff, iv.confidence)
    return replace(s, goodput=replace(s.goodput, slo_attainment=iv.point, intervals={"slo_attainment": stat}))


def test_capacity_search_decides_on_the_attainment_interval() -> None:
    """4 req/s: 100 of 100 met (interval above 90%: pass). 8 req/s: 92% met, an interval
    across 90% (undecided): run again with twice the requests, still undecided, so the
    point decides (pass). 16 req/s: 50% (fail). 12 req/s: 75% (fail). 10 req/s is a
    non-stationary level at 100% attainment: it fails."""
    prof = Profile(kind="capacity", rate_low=4.0, max_levels=6, requests=100)
    share = {4.0: 1.0, 8.0: 0.92, 16.0: 0.5, 12.0: 0.75, 10.0: 1.0}

    def answer(p: LevelPlan) -> LevelSummary:
        n = p.requests or 0
        s = _with_interval(summary(p.value, mode="rate"), round(share[p.value] * n), n, seed=p.index)
        if p.value == 10.0:
            trend = Trend("ttft_queued_ms", False, 0.8, 9.0, 3.36, 10, "batch medians rise by 80% across the level")
            steady = SteadyState(0, False, True, False, trend, trend, [f"ttft_queued_ms: {trend.reason}"])
            s = replace(s, steady_state=steady)
        return s

    plans, reason = drive(sweep(prof), answer)
    assert [(p.value, p.requests) for p in plans] == [(4, 100), (8, 100), (8, 200), (16, 100), (12, 100), (10, 100)]
    assert reason is None
    levels = [answer(p) for p in plans]
    assert [slo_verdict(lv, 0.9) for lv in levels] == ["pass", "undecided", "undecided", "fail", "fail", "fail"]
    cap = summarize_run(levels, mode="rate").capacity
    assert cap is not None and cap.interval == [4.0, 10.0]  # 8 req/s was never shown to pass
    assert cap.between == [8.0, 10.0]  # the point attainments: 8 passes (0.92), 10 fails (non-stationary)
