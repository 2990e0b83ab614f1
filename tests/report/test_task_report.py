"""The agentic-task section of the run report and console: a run folder written by the real
RunWriter (hand-built agent calls), rendered, and opened in Chromium."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.metrics.results import RunSummary
from loadgen.metrics.run import summarize_run
from loadgen.metrics.slo import parse_slo
from loadgen.metrics.summary import summarize_level
from loadgen.report.console import session_lines
from loadgen.report.files import RunWriter
from loadgen.report.html import render_run_report
from loadgen.report.task_figures import TIMELINE_TASKS
from tests.metrics.helpers import agent_level, fanned_tasks
from tests.report.conftest import figures
from tests.report.test_browser import Opened, browser  # noqa: F401 - the browser fixture
from tests.report.test_browser import pytestmark as needs_chromium

N_FANNED = 60  # more tasks than the timeline shows


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("agents") / "run"
    slos = [parse_slo("task=150ms")]
    levels = []
    with RunWriter(folder) as writer:
        for i, recs in enumerate((agent_level(), fanned_tasks(N_FANNED, level=1))):
            for r in recs:
                writer.append(r)
            levels.append(summarize_level(recs, load={"mode": "concurrency", "value": 2 + 2 * i}, slos=slos))
        writer.write_summary(summarize_run(levels, mode="concurrency").to_json())
    return folder


def test_console_lines_name_the_tasks(agent_run: Path) -> None:
    summary = RunSummary.from_json(json.loads((agent_run / "summary.json").read_text()))
    lines = session_lines(summary.levels)
    assert lines[0].startswith("2 users: tasks 6: 2 completed, 1 failed (http_error 1), 3 cut short by the load loop")
    assert "task=150ms met by 33.3%" in lines[0] and "time in LLM" in lines[0]
    assert lines[1].startswith("2 users: TTFT p50 by step 1: 5 ms · 2: 10 ms · 3: 15 ms; by context <2k")
    assert lines[2].startswith(f"4 users: tasks {N_FANNED}: {N_FANNED} completed, 0 failed, 0 cut")


def _bars(fig: dict[str, Any], level: int) -> dict[str, int]:
    return {t["meta"].split(".")[2]: len(t["x"]) for t in fig["data"] if t["meta"].split(".")[1] == str(level)}


def test_timeline_and_ttft_by_step_figures(agent_run: Path) -> None:
    figs = figures(render_run_report(agent_run).read_text())
    timeline = figs["fig-task-timeline"]
    assert _bars(timeline, 0) == {"LLM": 11, "failed": 2, "tool": 4}  # every call of the six tasks
    assert _bars(timeline, 1) == {"LLM": 4 * TIMELINE_TASKS, "failed": 0, "tool": 2 * TIMELINE_TASKS}
    assert len(timeline["layout"]["yaxis"]["tickvals"]) == TIMELINE_TASKS
    ttft = {t["meta"]: t for t in figs["fig-task-ttft"]["data"]}
    assert ttft["ttft-step.1.step.p50"]["x"] == ["1", "2", "3"]
    assert ttft["ttft-step.1.step.p50"]["y"] == [5.0, 10.0, 15.0]


@needs_chromium[0]
@needs_chromium[1]
def test_timeline_in_chromium(browser: Any, agent_run: Path, tmp_path: Path) -> None:  # noqa: F811
    opened = Opened(browser, render_run_report(agent_run))
    try:
        opened.check(tmp_path / "tasks.png")
        page = opened.page
        drawn = "() => document.querySelectorAll('#fig-task-timeline .barlayer .point').length"
        assert page.evaluate(drawn) == 6 * TIMELINE_TASKS  # the last level: 4 calls and 2 tools per task
        page.locator("#fig-task-timeline .updatemenu-header").click()
        page.locator("#fig-task-timeline .updatemenu-dropdown-button", has_text="level 2 users").click()
        page.wait_for_function(f"() => ({drawn})() === 17", timeout=10_000)
        assert page.locator("#fig-task-ttft .scatterlayer .trace").count() == 8  # 2 levels x 2 panels x p50, p90
        page.locator("section#tasks").screenshot(path=str(tmp_path / "tasks-section.png"))
        assert opened.errors == [] and opened.requests == [opened.url]
    finally:
        opened.page.close()
