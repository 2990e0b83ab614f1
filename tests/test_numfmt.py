"""The one rule by which loadgen writes a number (loadgen/numfmt.py), and the surfaces that
used to write their own (issue 37 item 7: ``1.45e+03 ms``, ``12.8241 req/s``, ``±1088%``)."""

from __future__ import annotations

import math

import pytest

from loadgen.metrics.results import Load
from loadgen.numfmt import fmt, fmt_latency, fmt_ms, fmt_n_eff, fmt_rel, fmt_share
from loadgen.report import page


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (0.8424, "0.842"),
        (7.5, "7.5"),
        (7.4849, "7.48"),
        (12.8241, "12.8"),
        (152.4, "152"),
        (999.4, "999"),
        (999.6, "1,000"),  # rounds up a decade: written there, not "1e+03"
        (9.996, "10"),
        (0.09996, "0.1"),
        (1450.2, "1,450"),
        (12345.6, "12,346"),  # from 1,000 up: every whole digit
        (1_000_000, "1,000,000"),
        (0.000_000_123_4, "0.000000123"),  # never an exponent
        (-0.0001, "-0.0001"),
        (-1234.5, "-1,234"),
        (-0.0000001, "-0.0000001"),
        (16, "16"),
    ],
)
def test_three_significant_digits_thousands_separated_never_an_exponent(value: float, text: str) -> None:
    assert fmt(value) == text
    assert page.fmt(value) == text  # the pages' name for it is the same function


@pytest.mark.parametrize("value", [None, float("nan"), float("inf"), "12", True])
def test_no_number_is_a_dash(value: object) -> None:
    assert fmt(value) == "–" and fmt_latency(value) == "–" and fmt_share(value) == "–"  # type: ignore[arg-type]


def test_no_exponent_anywhere_on_a_grid() -> None:
    for e in range(-9, 10):
        for m in (1.0, 1.2345, 4.9999, 9.9951, 9.9999):
            for v in (m * 10.0**e, -m * 10.0**e):
                text = fmt(v)
                assert "e" not in text and "E" not in text, (v, text)
                back = float(text.replace(",", ""))
                assert math.isclose(back, v, rel_tol=0.006), (v, text)  # 3 significant digits at least


def test_relative_widths_and_changes_have_two_significant_digits() -> None:
    assert [fmt_rel(r) for r in (0.0623, 0.076, 0.12, 0.0048, 3.26)] == ["6.2%", "7.6%", "12%", "0.48%", "326%"]
    assert [fmt_rel(r, signed=True) for r in (0.011, -0.12, 0.0000225, 3.26)] == ["+1.1%", "-12%", "±0%", "+326%"]


def test_a_share_short_of_all_is_never_100_percent() -> None:
    assert [fmt_share(s) for s in (0.985, 1.0, 0.5, 0.0)] == ["98.5%", "100%", "50%", "0%"]
    assert fmt_share(0.9996) == "99.96%" and fmt_share(0.99996) == "99.996%"
    assert fmt_share(0.00001) == "0.001%"


def test_latencies_one_unit_style() -> None:
    assert [fmt_ms(v) for v in (0.8424, 12.34, 152.4, 10_840.0)] == ["0.842", "12.3", "152", "10.8 s"]
    assert fmt_latency(1450.3) == "1,450 ms" and fmt_latency(30.0) == "30 ms" and fmt_latency(123_456) == "123 s"
    assert fmt_n_eff(40.8) == "41" and fmt_n_eff(265.4) == "265" and fmt_n_eff(1.34) == "1.3"


def test_load_labels_follow_the_rule() -> None:
    """A rate sweep's levels (3.6336, 12.8241 req/s) had labels long enough to wrap a table."""
    assert Load("rate", 12.8241).label() == "12.8 req/s"
    assert Load("rate", 3.6336).label() == "3.63 req/s"
    assert Load("concurrency", 1).label() == "1 user" and Load("concurrency", 1024).label() == "1,024 users"
