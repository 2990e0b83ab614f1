"""The pages in Chromium (what a reader sees: innerText): the run report's level table and
answer cards, the comparison's table, tally, bullets and cards, matrix.html and the demo's
pages — every number equals its summary's (or its comparison row's) to its printed precision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.api import read_summary
from tests.consistency.conftest import Ran, loadgen
from tests.consistency.pages import (
    PAGE_TEXT,
    check_comparison_page,
    check_energy,
    check_report,
    class_rows,
    comparison_rows,
)
from tests.report.test_browser import Opened, browser, pytestmark  # noqa: F401 - the fixture and skips


def shown(browser: Any, path: Path) -> dict[str, Any]:  # noqa: F811
    opened = Opened(browser, path)
    try:
        page: dict[str, Any] = opened.page.evaluate(PAGE_TEXT)
        assert opened.errors == []
        return page
    finally:
        opened.page.close()


@pytest.mark.parametrize("name", ["concurrency", "rate", "single"])
def test_the_report_shows_the_summarys_numbers(browser: Any, name: str, request: pytest.FixtureRequest) -> None:  # noqa: F811
    ran: Ran = request.getfixturevalue(name)
    assert check_report(read_summary(ran.path), shown(browser, ran.path / "report.html")) == []


def test_the_comparison_shows_the_summaries_and_its_rows(
    browser: Any,  # noqa: F811 - the fixture imported above
    comparison: Ran,
    concurrency: Ran,
    concurrency_again: Ran,
) -> None:
    folders = [concurrency.path, concurrency_again.path]
    summaries = [read_summary(f) for f in folders]
    page = shown(browser, comparison.path)
    bad = check_comparison_page(summaries, ["conc", "conc2"], comparison_rows(folders), page)
    assert bad == []


def test_the_matrix_page_shows_each_configurations_summary(browser: Any, matrix: Ran) -> None:  # noqa: F811
    doc = json.loads((matrix.path / "matrix.json").read_text())
    ran = [c for c in doc["configs"] if c["status"] == "ok"]
    folders = [matrix.path / c["folder"] / "run" for c in ran]
    summaries = [read_summary(f) for f in folders]
    page = shown(browser, matrix.path / "matrix.html")
    bad = check_comparison_page(summaries, [c["name"] for c in ran], comparison_rows(folders), page)
    for f, s in zip(folders, summaries):
        loadgen("report", str(f))  # a matrix's runs have no report until asked for
        bad += check_report(s, shown(browser, f / "report.html"))
    assert bad == []


def test_the_demos_pages_show_its_summaries(browser: Any, demo: Ran) -> None:  # noqa: F811
    folders = [demo.path / "chunked", demo.path / "unchunked"]
    summaries = [read_summary(f) for f in folders]
    page = shown(browser, demo.path / "comparison.html")
    classes = class_rows(folders)  # chat and long prompts: the page compares them class by class
    assert any(classes)
    bad = check_comparison_page(summaries, ["chunked", "unchunked"], comparison_rows(folders), page, classes)
    for f, s in zip(folders, summaries):
        bad += check_report(s, shown(browser, f / "report.html"))
    assert bad == []


def test_the_energy_table_reads_the_summary(browser: Any, demo: Ran) -> None:  # noqa: F811
    folder = demo.path / "chunked"
    tables = {t["id"]: t["rows"] for t in shown(browser, folder / "report.html")["tables"]}
    assert "energy" in tables  # the demo scrapes its server's simulated GPU power
    assert check_energy(read_summary(folder), tables["energy"]) == []


def test_a_page_number_off_in_its_last_digit_is_found(browser: Any, concurrency: Ran) -> None:  # noqa: F811
    page = shown(browser, concurrency.path / "report.html")
    summary = read_summary(concurrency.path)
    assert check_report(summary, page) == []
    rows = next(t for t in page["tables"] if t["id"] == "level-table")["rows"]
    col = rows[0]["cells"].index("TTFT p99")
    text = rows[1]["cells"][col]
    rows[1]["cells"][col] = text[:-1] + str((int(text[-1]) + 2) % 10)
    page["cards"][-1]["value"] = "1 tok/s"
    bad = check_report(summary, page)
    assert len(bad) == 2 and "TTFT p99" in bad[0] and "answer-throughput" in bad[1], bad


def test_a_page_verdict_word_or_window_off_is_found(browser: Any, concurrency: Ran) -> None:  # noqa: F811
    """The report's SLO verdict column, the capacity card's words, a headline card's window and
    the interval note's unbounded levels: each changed is reported."""
    page = shown(browser, concurrency.path / "report.html")
    summary = read_summary(concurrency.path)
    assert check_report(summary, page) == []
    rows = next(t for t in page["tables"] if t["id"] == "level-table")["rows"]
    col = rows[0]["cells"].index("SLO verdict")
    rows[1]["cells"][col] = "fail" if "pass" in rows[1]["cells"][col] else "pass"
    card = next(c for c in page["cards"] if c["id"] == "answer-capacity")
    card["subs"] = [s.replace("judged: 2 ", "judged: 3 ") for s in card["subs"]]
    card = next(c for c in page["cards"] if c["id"] == "answer-throughput")
    card["subs"] = [s.replace("held window", "arrival window") for s in card["subs"]]
    page["notes"]["interval-note"] = page["notes"]["interval-note"].replace("at levels 1, 2", "at level 2", 1)
    bad = check_report(summary, page)
    for found in ("SLO verdict: ", "judged 2 levels", "not 'at 4 users, over its held window'", "unbounded at"):
        assert any(found in x for x in bad), (found, bad)
