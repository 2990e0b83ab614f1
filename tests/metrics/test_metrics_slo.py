"""--slo parsing, per-request SLOs, attainment and level-wide checks."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.errors import ConfigError
from loadgen.metrics.per_request import per_request_frame
from loadgen.metrics.slo import SLO, level_checks, parse_slo, request_meets, slo_attainment, slo_scores
from loadgen.records import ErrorKind
from tests.metrics.helpers import rec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ttft=500ms", SLO("ttft", 500.0, None)),
        ("tpot=50ms", SLO("tpot", 50.0, None)),
        ("itl=80ms", SLO("itl", 80.0, None)),
        ("e2e=10s", SLO("e2e", 10_000.0, None)),
        ("ttft:p90=300ms", SLO("ttft", 300.0, "p90")),
        ("ttft=250", SLO("ttft", 250.0, None)),
        ("itl=500us", SLO("itl", 0.5, None)),
        ("ttft_queued=1.5s", SLO("ttft_queued", 1500.0, None)),
        ("e2e_queued:p99.9=2s", SLO("e2e_queued", 2000.0, "p99.9")),
        ("tpot:mean=40ms", SLO("tpot", 40.0, "mean")),
        ("itl:max=0.2s", SLO("itl", 200.0, "max")),
        ("e2e:p50=.5s", SLO("e2e", 500.0, "p50")),
        (" TTFT : P99 = 1e3 MS ", SLO("ttft", 1000.0, "p99")),
    ],
)
def test_parse_forms(text, expected):
    assert parse_slo(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("ttfx=500ms", "unknown metric 'ttfx'"),
        ("ttft", "missing '='"),
        ("", "missing '='"),
        ("ttft=", "is not a positive number"),
        ("ttft=abc", "is not a positive number"),
        ("ttft=-5ms", "is not a positive number"),
        ("ttft=0ms", "positive, finite"),
        ("ttft=5min", "unknown unit 'min'"),
        ("ttft:p42=1s", "unknown statistic 'p42'"),
        ("ttft:=1s", "unknown statistic ''"),
        ("ttft=5ms=6ms", "is not a positive number"),
    ],
)
def test_parse_errors_name_the_flag_and_the_allowed_values(text, why):
    with pytest.raises(ConfigError) as info:
        parse_slo(text)
    msg = str(info.value)
    assert info.value.source == "--slo"
    assert msg.startswith("--slo: ")
    assert why in msg
    assert "ttft, ttft_queued, tpot, itl, e2e, e2e_queued" in msg
    assert "p50, p90, p95, p99, p99.9, mean, max" in msg
    assert "ms, s or us" in msg


def test_canonical_text():
    assert str(parse_slo("e2e=10s")) == "e2e=10000ms"
    assert str(parse_slo("ttft:p90=300ms")) == "ttft:p90=300ms"
    assert str(parse_slo("itl=500us")) == "itl=0.5ms"
    assert parse_slo("ttft=1s").per_request and not parse_slo("ttft:p99=1s").per_request


@pytest.fixture
def frame():
    return per_request_frame(
        [
            rec(0, [(100, 1), (120, 1), (160, 2)], done=170),  # ttft 100, itl max 20, tpot 20
            rec(1, [(300, 1), (310, 1), (400, 1)], done=400),  # ttft 300, itl max 90, tpot 50
            rec(2, [(50, 1)], done=60),  # 1 token: no tpot/itl
            rec(3, [], done=80),  # 0 tokens: no ttft
            rec(4, [(10, 1), (20, 1)], done=30, status=ErrorKind.TIMEOUT),  # fast, but failed
        ]
    )


def test_request_meets_per_metric(frame):
    def meets(text):
        return request_meets(frame, parse_slo(text)).tolist()

    assert meets("ttft=100ms") == [True, False, True, False, False]  # limit inclusive
    assert meets("ttft=99.9ms") == [False, False, True, False, False]
    assert meets("itl=20ms") == [True, False, True, True, False]  # <2 tokens meet itl
    assert meets("itl=19ms") == [False, False, True, True, False]
    assert meets("tpot=20ms") == [True, False, True, True, False]
    assert meets("e2e=170ms") == [True, False, True, True, False]
    assert meets("e2e=1s") == [True, True, True, True, False]  # failed never meets


def test_queued_variants_measure_from_the_schedule():
    frame = per_request_frame([rec(0, [(100, 1)], sent=50, scheduled=0, done=120)])
    assert request_meets(frame, parse_slo("ttft=50ms")).tolist() == [True]
    assert request_meets(frame, parse_slo("ttft_queued=50ms")).tolist() == [False]
    assert request_meets(frame, parse_slo("e2e=70ms")).tolist() == [True]
    assert request_meets(frame, parse_slo("e2e_queued=70ms")).tolist() == [False]


def test_attainment(frame):
    mask, att = slo_attainment(frame, [parse_slo("ttft=200ms"), parse_slo("tpot=30ms")])
    assert mask.tolist() == [True, False, True, False, False]
    assert att == 0.4
    # level-wide checks do not take part in attainment
    mask2, att2 = slo_attainment(frame, [parse_slo("ttft:p50=1ms")])
    assert att2 == 0.8 and mask2.tolist() == [True, True, True, True, False]


@pytest.mark.parametrize(
    "slos", [["ttft=200ms", "tpot=30ms"], ["ttft=200ms"], ["tpot=30ms", "itl=40ms"], ["e2e=1s"], [], ["ttft:p50=1ms"]]
)
def test_scores_order_requests_as_the_attainment_mask(frame, slos):
    """A request attains exactly when its score (largest value/limit) is at most 1; failed: inf."""
    parsed = [parse_slo(s) for s in slos]
    mask, _ = slo_attainment(frame, parsed)
    score = slo_scores(frame, parsed)
    assert ((score <= 1.0) == mask).all()
    assert np.isinf(score[~frame["ok"].to_numpy(dtype=bool)]).all()
    per_request = [s for s in parsed if s.stat is None]
    if per_request:  # the score is the worst ratio: tighten every limit by half and it doubles
        halved = [type(s)(s.metric, s.limit_ms / 2, s.stat) for s in per_request]
        finite = np.isfinite(score)
        np.testing.assert_allclose(slo_scores(frame, halved)[finite], 2 * score[finite])


def test_attainment_without_slos_is_the_ok_fraction(frame):
    mask, att = slo_attainment(frame, [])
    assert mask.tolist() == [True, True, True, True, False] and att == 0.8
    assert slo_attainment(per_request_frame([]), [parse_slo("ttft=1s")])[1] is None


def test_request_meets_rejects_level_checks(frame):
    with pytest.raises(ValueError, match="level-wide"):
        request_meets(frame, parse_slo("ttft:p90=1s"))


def test_level_checks():
    samples = {"ttft": np.array([100.0, 200.0, 300.0, 400.0]), "itl": np.array([])}
    slos = [
        parse_slo("ttft=1s"),
        parse_slo("ttft:p50=250ms"),
        parse_slo("ttft:p90=350ms"),
        parse_slo("itl:p99=1s"),
        parse_slo("tpot:mean=1s"),
    ]
    assert [c.to_json() for c in level_checks(samples, slos)] == [
        {"slo": "ttft:p50=250ms", "value_ms": 250.0, "pass": True},
        {"slo": "ttft:p90=350ms", "value_ms": pytest.approx(370.0), "pass": False},
        {"slo": "itl:p99=1000ms", "value_ms": None, "pass": False},
        {"slo": "tpot:mean=1000ms", "value_ms": None, "pass": False},
    ]
