"""A closed-loop level with a drain tail, run by ``loadgen run`` against a real scripted server
on loopback: summary.json's headline is the held window's (recomputed here from the records),
the whole window's is kept beside it, and the console, the HTML report and the Python API
print the headline (docs/metrics.md, "Throughput windows"). No wall-clock threshold: the
checks compare numbers of the same run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.api import read_summary
from loadgen.cli import app
from loadgen.report.page import fmt
from loadgen.report.readers import read_records
from tests.scripted_server import Script, ScriptedServerProcess

USERS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """Four users with ten requests each, their output lengths long-tailed and seeded (the
    users' output tokens add up to 208, 405, 407 and 912): the users run out of work at
    different times, so the level ends in a long drain tail."""
    out = tmp_path_factory.mktemp("held") / "run"
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.002)) as srv:
        res = CliRunner().invoke(
            app,
            [
                "run",
                "--url",
                srv.url,
                "--api",
                "completions",
                "--concurrency",
                str(USERS),
                "--requests",
                "40",
                "--prompt-tokens",
                "16",
                "--output-tokens",
                "lognormal:median=20,sigma=1.5,max=1000",
                "--seed",
                "4",
                "--out",
                str(out),
                "--quiet",
            ],
            terminal_width=200,
        )
    assert res.exit_code == 0, res.output
    yield out, res.output


def _level(folder: Path) -> dict[str, Any]:
    level: dict[str, Any] = json.loads((folder / "summary.json").read_text())["levels"][0]
    return level


def test_the_headline_is_completions_in_the_held_window_over_its_length(run: tuple[Path, str]) -> None:
    folder, _ = run
    recs = [r for r in read_records(folder) if not r.warmup]
    sent = np.sort([r.sent_ns for r in recs])
    done = np.array([r.done_ns for r in recs])
    start = int(sent[USERS - 1])  # every user busy
    last = {u: max(r.done_ns for r in recs if r.worker == u) for u in {r.worker for r in recs}}
    end = min(int(done[done > sent[-1]].min()), min(last.values()))  # the first user out of work
    inside = sum(1 for r in recs if r.ok and start < r.done_ns <= end)
    tp = _level(folder)["throughput"]
    first = int(sent[0])
    assert tp["window"] == {"rule": "held", "start_s": (start - first) / 1e9, "end_s": (end - first) / 1e9}
    assert tp["requests_per_s"] == pytest.approx(inside / ((end - start) / 1e9), rel=1e-9)
    whole = tp["whole"]
    assert whole["window_s"] == (int(done.max()) - first) / 1e9
    assert whole["requests_per_s"] == pytest.approx(len(recs) / whole["window_s"], rel=1e-9)
    per_user = [sum(r.completion_tokens or 0 for r in recs if r.worker == u) for u in sorted(last)]
    assert sorted(per_user) == [208, 405, 407, 912]  # the seeded work: one user has twice the others'
    assert whole["requests_per_s"] < 0.8 * tp["requests_per_s"]  # the drain tail the headline leaves out
    low, high = tp["intervals"]["requests_per_s"]["low"], tp["intervals"]["requests_per_s"]["high"]
    assert low <= tp["requests_per_s"] <= high


def test_the_console_prints_the_headline(run: tuple[Path, str]) -> None:
    folder, output = run
    tp = _level(folder)["throughput"]
    line = re.search(r"level 4 users: 40 ok / 0 failed, ([\d.,]+) req/s, ([\d.,]+) out tok/s", output)
    assert line is not None, output
    assert line[1] == fmt(tp["requests_per_s"]) != fmt(tp["whole"]["requests_per_s"])
    assert line[2] == fmt(tp["output_tokens_per_s"])
    win = tp["window"]
    assert f"rates over {fmt(win['start_s'])}–{fmt(win['end_s'])} s of " in output
    assert f"whole window {fmt(tp['whole']['requests_per_s'])} req/s" in output


def test_the_report_and_the_api_give_the_headline(run: tuple[Path, str]) -> None:
    folder, _ = run
    level = _level(folder)
    tp = level["throughput"]
    html = (folder / "report.html").read_text()
    card = html.split('id="answer-throughput"')[1].split("</div></div>")[0]
    assert f"{fmt(tp['output_tokens_per_s'])} tok/s" in card and "over its held window" in card
    assert fmt(tp["output_tokens_per_s"]) != fmt(tp["whole"]["output_tokens_per_s"])
    good = html.split('id="answer-goodput"')[1].split("</div></div>")[0]
    assert f"{fmt(level['goodput']['requests_per_s'])} req/s" in good
    table = html.split('id="level-table"')[1].split("</table>")[0]
    assert f"<td>{fmt(tp['requests_per_s'])}</td>" in table
    assert f"<td>{fmt(tp['whole']['requests_per_s'])}</td>" not in table
    assert "held window" in html.split('id="level-table"')[1].split("</p>")[0]
    typed = read_summary(folder).levels[0].throughput
    assert typed.requests_per_s == tp["requests_per_s"] and typed.window is not None and typed.window.rule == "held"
