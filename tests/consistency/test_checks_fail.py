"""The checks can fail: a printed number one unit off in its last digit, a file value off by a
part in a million, an unmapped column, key or line — each is reported (on a real run's output)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from loadgen.api import read_summary
from loadgen.report.files import read_run_info
from tests.consistency.conftest import Ran
from tests.consistency.console import check_one_level_console, check_run_console
from tests.consistency.files import check_save_result
from tests.consistency.parse import cell, number


@pytest.mark.parametrize(
    ("text", "value", "tol"),
    [
        ("1,321", 1321, 0.5),
        ("1.32e+03", 1320, 5),
        ("6.8", 6.8, 0.05),
        ("0.0675", 0.0675, 5e-5),
        ("±0", 0, 0.5),
        ("-0.67", -0.67, 0.005),
        ("+1,825", 1825, 0.5),
    ],
)
def test_a_number_is_read_with_its_precision(text: str, value: float, tol: float) -> None:
    shown = number(text)
    assert shown.value == pytest.approx(value) and shown.tol == pytest.approx(tol)
    assert shown.agrees(value + 0.99 * tol) and not shown.agrees(value + 1.01 * tol)


def test_a_cell_splits_its_interval() -> None:
    assert cell("2.74 ±39%").pm == number("39") and cell("3.72 ±—").unbounded
    c = cell("24.9 [0.51, 413]")
    assert c.value == number("24.9") and c.bounds == (number("0.51"), number("413"))
    assert cell("±5%").value is None and cell("±5%").pm == number("5")
    assert cell("–").value is None and cell("—").unbounded


def _bump_last_digit(text: str) -> str:
    digits = re.sub(r"\d(?=\D*$)", lambda m: str((int(m.group(0)) + 2) % 10), text)
    return digits


def test_a_console_cell_off_in_its_last_digit_is_found(concurrency: Ran) -> None:
    summary = read_summary(concurrency.path)
    table = concurrency.console[concurrency.console.index("Results per load level") :]
    row = next(line for line in table.splitlines() if line.startswith("│"))
    cells = row.split("│")
    cells[5] = _bump_last_digit(cells[5].split("±")[0]) + ("±" + cells[5].split("±")[1] if "±" in cells[5] else "")
    broken = concurrency.console.replace(row, "│".join(cells))
    assert any("TTFT p50" in x for x in check_run_console(summary, broken)), cells
    assert check_run_console(summary, concurrency.console + "\na line with 12.5 in it\n") != []


def test_a_result_value_off_by_a_millionth_is_found(concurrency: Ran) -> None:
    result = json.loads(concurrency.path.with_suffix(".result.json").read_text())
    result[0]["p99_ttft_ms"] *= 1 + 1e-6
    result[1]["extra_number"] = 1.0
    bad = check_save_result(read_summary(concurrency.path), read_run_info(concurrency.path), result)
    assert len(bad) == 2 and "p99_ttft_ms" in bad[0] and "extra_number" in bad[1]


def _bump(m: re.Match[str]) -> str:
    """The match with its first group's last digit changed (``459`` → ``451``)."""
    return m[0].replace(m[1], _bump_last_digit(m[1]), 1)


def _swap_verdict(m: re.Match[str]) -> str:
    word = {"pass": "fail", "fail": "pass", "undecided": "pass"}[m[1]]
    return m[0].replace(m[1], word.rjust(len(m[1])), 1)


@pytest.mark.parametrize(
    ("pattern", "change", "found"),
    [
        (r"│ *\(?(pass|fail|undecided)\)? *│", _swap_verdict, "SLO verdict"),  # the first level's verdict
        (r"n_eff (\S+) of \d+ \(TTFT mean\)", _bump, "n_eff"),  # a level line's one n_eff
        (r"judged: (\d+)", _bump, "judged"),  # the capacity's level count
        (r"judged: \d+ concurrency levels, (1 user)", lambda m: m[0].replace(m[1], "4 users"), "judged"),
        (r"undecided \(.*\): (1 user, 4 users)", lambda m: m[0].replace(m[1], "4 users"), "undecided"),
        (r"needs ≥ (\d+) queries", _bump, "fewest queries"),  # MLPerf's undecided line
        (r"TTFT p99 at (1 user, 4 users)", lambda m: m[0].replace(m[1], "4 users"), "TTFT p99 is unbounded"),
        (r"its n_eff (\S+)\)", _bump, "its n_eff"),  # the unbounded line's example
    ],
)
def test_a_verdict_word_or_label_off_is_found(concurrency: Ran, pattern: str, change: Any, found: str) -> None:
    """The SLO verdict column, the n_eff, the capacity's words and the ±— and MLPerf lines:
    a wrong verdict, count or level named is reported."""
    summary = read_summary(concurrency.path)
    assert check_run_console(summary, concurrency.console) == []
    broken, n = re.subn(pattern, change, concurrency.console, count=1)
    assert n == 1 and broken != concurrency.console, pattern
    bad = check_run_console(summary, broken)
    assert bad and all(found in x for x in bad), bad


def test_a_window_bound_off_is_found(single: Ran) -> None:
    """The held-window line: its bounds and the whole window's rates are the summary's."""
    summary = read_summary(single.path)
    assert check_one_level_console(summary, single.console) == []
    for pattern in (r"rates over \S+–(\S+) s", r"whole window (\S+) req/s", r"whole window \S+ req/s, (\S+) out tok/s"):
        broken, n = re.subn(pattern, _bump, single.console, count=1)
        assert n == 1
        bad = check_one_level_console(summary, broken)
        assert len(bad) == 1 and "rates over" in bad[0], bad
