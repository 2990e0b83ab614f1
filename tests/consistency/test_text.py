"""Every statistic the console, summary.json's neighbours (``--save-result``, ``loadgen
export``) and matrix.json print equals the summary's own value to its printed precision:
a concurrency sweep, a rate sweep, a comparison, a matrix and the demo (issue 37)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from loadgen.api import read_summary
from loadgen.report.files import read_run_info
from tests.consistency.conftest import Ran, loadgen
from tests.consistency.console import check_one_level_console, check_run_console
from tests.consistency.files import check_levels_csv, check_matrix_entry, check_requests_csv, check_save_result
from tests.consistency.pages import check_comparison_console, comparison_rows

SWEEPS = ("concurrency", "rate")
RUNS = (*SWEEPS, "single")


@pytest.mark.parametrize("name", SWEEPS)
def test_the_console_prints_the_summarys_numbers(name: str, request: pytest.FixtureRequest) -> None:
    ran: Ran = request.getfixturevalue(name)
    assert check_run_console(read_summary(ran.path), ran.console) == []


def test_one_levels_table_and_lines_print_the_summarys_numbers(single: Ran) -> None:
    assert check_one_level_console(read_summary(single.path), single.console) == []


@pytest.mark.parametrize("name", RUNS)
def test_the_vllm_style_result_reads_the_summary(name: str, request: pytest.FixtureRequest) -> None:
    ran: Ran = request.getfixturevalue(name)
    result = json.loads(ran.path.with_suffix(".result.json").read_text())
    assert check_save_result(read_summary(ran.path), read_run_info(ran.path), result) == []


@pytest.mark.parametrize("name", RUNS)
def test_the_export_is_the_summary(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    ran: Ran = request.getfixturevalue(name)
    loadgen("export", str(ran.path), "--out", str(tmp_path))
    summary_json = json.loads((ran.path / "summary.json").read_text())
    assert check_levels_csv(summary_json, tmp_path / "levels.csv") == []
    assert check_requests_csv(read_summary(ran.path), tmp_path / "requests.csv") == []


def test_the_comparisons_console_reads_the_summaries_and_its_rows(
    comparison: Ran, concurrency: Ran, concurrency_again: Ran
) -> None:
    folders = [concurrency.path, concurrency_again.path]
    summaries = [read_summary(f) for f in folders]
    labels = ["conc", "conc2"]
    bad = check_comparison_console(summaries, labels, comparison_rows(folders), comparison.console)
    assert bad == []


def _matrix_runs(matrix: Ran) -> tuple[list[str], list[Path], dict[str, Any]]:
    doc = json.loads((matrix.path / "matrix.json").read_text())
    ran = [c for c in doc["configs"] if c["status"] == "ok"]
    assert [c["name"] for c in ran] == ["chunked=on", "chunked=off"], doc
    return [c["name"] for c in ran], [matrix.path / c["folder"] / "run" for c in ran], doc


def test_the_matrix_prints_each_runs_summary(matrix: Ran) -> None:
    names, folders, doc = _matrix_runs(matrix)
    sections = re.split(r"^\d+/\d+ (.+)$", matrix.console, flags=re.M)
    assert sections[1::2] == names
    summaries = [read_summary(f) for f in folders]
    bad = []
    for s, text, entry in zip(summaries, sections[2::2], doc["configs"]):
        run_part = text.partition("\nmatrix: ")[0]
        bad += check_run_console(s, run_part)
        bad += check_matrix_entry(s, entry)
    assert bad == []


def test_the_demo_prints_each_runs_summary_and_the_lesson(demo: Ran) -> None:
    parts = re.split(r"^─+ (\w+): .*─+$", demo.console, flags=re.M)
    assert parts[1::2] == ["chunked", "unchunked"]
    summaries = {name: read_summary(demo.path / name) for name in parts[1::2]}
    chunked, unchunked_and_lesson = parts[2], parts[4]
    unchunked, _, lesson = unchunked_and_lesson.partition("The lesson")
    bad = check_run_console(summaries["chunked"], chunked) + check_run_console(summaries["unchunked"], unchunked)
    from tests.consistency.demo import check_lesson

    bad += check_lesson(summaries, "The lesson" + lesson)
    assert bad == []


def test_a_level_with_several_trends_reads_as_its_summarys_words(concurrency: Ran) -> None:
    """A non-stationary level whose reasons are several trends (joined by "; ", as the demo's
    overloaded level prints them: its batch medians and its 10th percentiles) is mapped whole:
    the reasons are the summary's own words, a changed number in them is not."""
    import dataclasses
    import io

    from rich.console import Console

    from loadgen.report.console import level_line, show_summary

    summary = read_summary(concurrency.path)
    lv = summary.levels[-1]
    assert lv.steady_state is not None
    reasons = [
        "ttft_ms: batch medians rise by 5364% across the level (t = 6.0)",
        "batch 10th percentiles rise by 6825% across the level (t = 6.4)",
    ]
    steady = dataclasses.replace(lv.steady_state, stationary=False, reasons=reasons)
    levels = [*summary.levels[:-1], dataclasses.replace(lv, steady_state=steady)]
    summary = dataclasses.replace(summary, levels=levels, capacity=None)  # the capacity judged it stationary
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    for level in summary.levels:
        console.print(level_line(level), soft_wrap=True, highlight=False, markup=False)
    show_summary(summary, console, Path("run"))
    text = console.export_text()
    assert text.count("6825%") == 2  # the level line and the note under the table
    assert check_run_console(summary, text) == [], text
    bad = check_run_console(summary, text.replace("6825%", "6826%"))
    assert len(bad) == 2 and all("6826%" in x for x in bad), bad
