"""Capacity interpolation, the saturation knee and time windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.metrics.capacity import capacity as typed_capacity
from loadgen.metrics.capacity import knee as typed_knee
from loadgen.metrics.capacity import windows as typed_windows
from loadgen.records import ErrorKind
from tests.metrics.helpers import rec


def capacity(*a, **kw):
    return typed_capacity(*a, **kw).to_json()


def knee(*a, **kw):
    return typed_knee(*a, **kw).to_json()


def windows(*a, **kw):
    return [w.to_json() for w in typed_windows(*a, **kw)]


def test_capacity_interpolates_between_last_pass_and_first_fail():
    out = capacity([(1, 1.0), (2, 0.95), (4, 0.5)], target=0.9)
    assert out["status"] == "ok"
    assert out["between"] == [2.0, 4.0]
    assert out["value"] == pytest.approx(2 + (0.95 - 0.9) / (0.95 - 0.5) * 2)
    assert out["target"] == 0.9


def test_capacity_sorts_by_load_and_uses_the_default_target():
    assert capacity([(4, 0.5), (1, 1.0), (2, 0.95)]) == capacity([(1, 1.0), (2, 0.95), (4, 0.5)], 0.9)


def test_capacity_at_exactly_the_target_passes():
    out = capacity([(10, 0.9), (20, 0.7)], target=0.9)
    assert out["value"] == 10.0 and out["between"] == [10.0, 20.0]


def test_capacity_not_reached():
    assert capacity([(1, 1.0), (2, 0.99), (4, 0.91)]) == {
        "status": "not_reached",
        "value": 4.0,
        "between": None,
        "target": 0.9,
        "mode": None,
        "slos": [],
    }


def test_capacity_never_met():
    assert capacity([(1, 0.8), (2, 0.5)], target=0.9) == {
        "status": "never_met",
        "value": None,
        "between": None,
        "target": 0.9,
        "mode": None,
        "slos": [],
    }


def test_capacity_non_monotone_stops_at_the_first_miss():
    # 4 meets the target again above 2, which missed it: the capacity never lies above a miss
    out = capacity([(1, 1.0), (2, 0.5), (4, 0.95), (8, 0.2)], target=0.9)
    assert out["between"] == [1.0, 2.0]
    assert out["value"] == pytest.approx(1 + 0.1 / 0.5 * 1)
    again = capacity([(1, 1.0), (2, 0.5), (4, 0.95)])
    assert again["status"] == "ok" and again["between"] == [1.0, 2.0]
    assert capacity([(1, 0.5), (2, 0.95)])["status"] == "never_met"


def test_capacity_level_without_attainment_fails():
    out = capacity([(1, 1.0), (2, None)], target=0.9)
    assert out["status"] == "ok" and out["value"] == pytest.approx(1.1)


def test_capacity_needs_levels():
    with pytest.raises(ValueError, match="at least one level"):
        capacity([])


def test_knee_found():
    levels = [(1, 100.0, 10.0), (2, 190.0, 11.0), (4, 370.0, 12.0), (8, 380.0, 20.0), (16, 381.0, 60.0)]
    out = knee(levels)
    assert out["found"] and out["index"] == 3 and out["load"] == 8.0
    assert out["throughput_gain"] == pytest.approx(10 / 370)
    assert out["latency_growth"] == pytest.approx(8 / 12)


def test_knee_needs_both_conditions():
    # throughput flat but latency only +10%; then latency +50% while throughput still +50%
    levels = [(1, 100.0, 10.0), (2, 101.0, 11.0), (4, 151.5, 16.5), (8, 152.0, 17.0), (16, 152.2, 17.5)]
    assert knee(levels) == {
        "found": False,
        "index": None,
        "load": None,
        "throughput_gain": None,
        "latency_growth": None,
        "mode": None,
        "metric": None,
    }
    # level 2 stalls with +10% latency, but level 4 grows 50% past it: no knee before it
    assert knee(levels, min_latency_growth=0.02)["index"] == 3
    assert knee(levels, min_throughput_gain=0.6, min_latency_growth=0.4)["index"] == 2


def test_no_knee_on_a_dip_before_a_level_with_higher_throughput():
    """The demo's case: a dip at 16 users (-8%) while TTFT climbs, then 32 users with the
    run's highest throughput: throughput had not saturated at 16."""
    levels = [(4, 440.0, 36.0), (8, 593.0, 531.0), (16, 543.0, 1800.0), (32, 814.0, 3165.0)]
    assert knee(levels)["found"] is False
    # the same dip with the last level back on the plateau (within 5% of the peak): a knee
    flat = [*levels[:3], (32, 610.0, 3165.0)]
    assert knee(flat)["index"] == 2


def test_a_knee_at_the_last_level_must_hold_against_the_noise():
    levels = [(1, 100.0, 10.0), (2, 190.0, 11.0), (4, 370.0, 12.0), (8, 372.0, 20.0)]
    assert knee(levels)["found"] is False  # nothing after it confirms it, no noise given
    quiet = [1.0, 2.0, 2.0, 2.0]  # standard errors: +0.5% + 2 * 0.76% stays under 5%
    assert knee(levels, noise=quiet)["index"] == 3
    noisy = [5.0, 10.0, 20.0, 20.0]  # +0.5% + 2 * 7.6% does not
    assert knee(levels, noise=noisy)["found"] is False
    assert knee(levels, noise=[1.0, 2.0, 2.0, None])["found"] is False


def test_knee_skips_levels_that_cannot_be_judged():
    levels = [(1, 0.0, 0.0), (2, 0.0, 50.0), (4, 0.5, None), (8, 0.5, 80.0), (16, 0.5, 100.0), (32, 0.5, 100.0)]
    out = knee(levels)
    assert out["index"] == 4 and out["latency_growth"] == pytest.approx(0.25)
    json.dumps(out, allow_nan=False)
    assert knee([])["found"] is False and knee([(1, 1.0, 1.0)])["found"] is False


def soak():
    return [
        rec(0, [(100, 1), (200, 1), (1200, 1)], sent=0, done=1500),
        rec(1, [(600, 1), (1100, 2)], sent=500, done=2000),
        rec(2, [(1300, 1)], sent=1200, done=1400, status=ErrorKind.TIMEOUT),
        rec(3, [(5000, 9)], sent=-3000, done=6000, warmup=True),
    ]


def test_windows_exact_values():
    w0, w1 = windows(soak(), 1.0)
    assert w0 == {
        "t_start_s": 0.0,
        "t_end_s": 1.0,
        "requests": 0,
        "ok": 0,
        "output_tokens_per_s": 3.0,
        "ttft_ms_p50": 100.0,
        "ttft_ms_p99": 100.0,
        "itl_ms_p50": 100.0,
        "itl_ms_p99": 100.0,
        "in_flight_mean": pytest.approx(1.5),
    }
    assert w1 == {
        "t_start_s": 1.0,
        "t_end_s": 2.0,
        "requests": 3,
        "ok": 2,
        "output_tokens_per_s": 3.0,
        "ttft_ms_p50": None,
        "ttft_ms_p99": None,
        "itl_ms_p50": 250.0,
        "itl_ms_p99": pytest.approx(np.percentile([250, 250, 1000], 99)),
        "in_flight_mean": pytest.approx(1.7),
    }


def test_windows_last_window_is_partial():
    out = windows(soak(), 0.6)
    assert [(w["t_start_s"], w["t_end_s"]) for w in out] == [
        (0.0, 0.6),
        (0.6, 1.2),
        (1.2, pytest.approx(1.8)),
        (pytest.approx(1.8), 2.0),
    ]
    assert sum(w["requests"] for w in out) == 3
    total_tokens = sum(w["output_tokens_per_s"] * (w["t_end_s"] - w["t_start_s"]) for w in out)
    assert total_tokens == pytest.approx(6)  # ok requests' tokens: 3 + 3
    assert out[-1]["in_flight_mean"] == pytest.approx(1.0)  # only request 1, until 2.0 s
    json.dumps(out, allow_nan=False)


def test_windows_edge_cases():
    assert windows([], 1.0) == []
    assert windows([rec(0, [], warmup=True)], 1.0) == []
    with pytest.raises(ValueError, match="window_s"):
        windows(soak(), 0)
