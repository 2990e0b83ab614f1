"""`--trials N` end to end: each level N times, between-trial statistics, compare uses them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.report.compare import render_comparison
from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    with (
        ServerProcess(["--engine", "sim", "--time-scale", "0.2"]) as fast,
        ServerProcess(["--engine", "sim", "--time-scale", "0.2", "--gpu", "l40s"]) as slow,
    ):
        yield fast, slow


def run(url: str, out: Path, *args: str) -> dict:
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--url",
            url,
            "--api",
            "completions",
            "--prompt-tokens",
            "256",
            "--output-tokens",
            "32",
            "--concurrency",
            "4",
            "--requests",
            "8",
            "--quiet",
            "--out",
            str(out),
            *args,
        ],
    )
    assert res.exit_code == 0, res.output
    summary: dict = json.loads((out / "summary.json").read_text())
    return summary


def test_trials_repeat_each_level_with_their_own_requests(servers: tuple[str, str], tmp_path: Path) -> None:
    summary = run(servers[0], tmp_path / "a", "--trials", "3", "--levels", "2,4")
    records = list(read_records(tmp_path / "a"))
    for level in (0, 1):
        mine = [r for r in records if r.level == level]
        assert sorted({r.trial for r in mine}) == [0, 1, 2]
        assert all(sum(r.trial == t for r in mine) == 8 for t in range(3))
        assert len({r.index for r in mine}) == 24  # every trial its own requests
    for lv in summary["levels"]:
        assert lv["requests"]["total"] == 24  # pooled
        trials = lv["trials"]
        assert trials["n"] == 3
        ttft = trials["metrics"]["ttft_ms.p50"]
        assert len(ttft["values"]) == 3 and ttft["ci_low"] <= ttft["mean"] <= ttft["ci_high"]
    run_json = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run_json["config"]["trials"] == 3
    single = run(servers[0], tmp_path / "b", "--levels", "2,4")
    assert "trials" not in single["levels"][0]  # one trial: the contract as before


def test_compare_says_it_used_between_trial_variation(servers: tuple[str, str], tmp_path: Path) -> None:
    fast, slow = servers
    a = tmp_path / "h100"
    b = tmp_path / "l40s"
    run(fast, a, "--trials", "3")
    run(slow, b, "--trials", "3")
    page = render_comparison([a, b], tmp_path / "cmp.html", labels=["h100", "l40s"]).read_text()
    assert "Verdicts use between-trial variation (3 vs 3 trials per level)" in page
    assert "between trials: 3 vs 3" in page
    # an L40S has a quarter of an H100's bandwidth: decoding is slower in every trial
    assert "<b>TPOT p50</b>" in page and 'data-metric="tpot_ms"' in page


def test_bad_trials_are_one_line(servers: tuple[str, str], tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["run", "--url", servers[0], "--trials", "0", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--trials" in res.output and "Traceback" not in res.output
