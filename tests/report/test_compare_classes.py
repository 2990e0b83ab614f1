"""``loadgen compare`` class by class (issue 39, defect 4): two real runs of a two-class
workload against scripted servers on loopback, the second serving the long prompts 150 ms
later; the comparison's per-class rows (console and page) call the long class's TTFT and
E2E worse and leave the short chats alone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.api import read_summary
from loadgen.cli import app
from loadgen.metrics.compare import BETTER, WORSE, common_levels, compare_classes
from loadgen.report.compare import compare_runs
from loadgen.report.rundata import load_run
from tests.consistency.pages import check_comparison_console, class_rows, comparison_rows
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()

WORKLOAD = """
name = "two-classes"
description = "short chats and long prompts, half each"

[[classes]]
name = "chat"
weight = 50
prompt_tokens = "16"
output_tokens = "8"

[[classes]]
name = "long"
weight = 50
prompt_tokens = "400"
output_tokens = "8"
"""
BASE = Script(ttft_s=0.1, itl_s=0.02)
SLOW_LONG = Script(ttft_s=0.1, itl_s=0.02, slow_from_tokens=200, slow_ttft_s=0.15)


def _run(script: Script, folder: Path, workload: Path) -> Path:
    with ScriptedServerProcess(script) as srv:
        res = runner.invoke(
            app,
            [
                "run",
                "--url",
                srv.url,
                "--api",
                "completions",
                "--workload",
                str(workload),
                "--concurrency",
                "4",
                "--requests",
                "48",
                "--warmup",
                "0",
                "--out",
                str(folder),
                "--label",
                folder.name,
                "--quiet",
            ],
        )
    assert res.exit_code == 0, res.output
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("classes")
    workload = root / "two.toml"
    workload.write_text(WORKLOAD)
    yield _run(BASE, root / "base", workload), _run(SLOW_LONG, root / "slow", workload)


def test_the_per_class_rows_find_the_slower_class(runs: tuple[Path, Path]) -> None:
    a, b = (load_run(p) for p in runs)
    assert set(a.levels[0].by_class) == set(b.levels[0].by_class) == {"chat", "long"}
    ((_, _, idx),) = common_levels([a.summary, b.summary])
    found = compare_classes(a.level_samples(idx[0]), b.level_samples(idx[1]))
    assert found.only_a == found.only_b == []
    rows = {(r.request_class, r.row.metric, r.row.stat): r.row.diff for r in found.rows}
    assert {k[1:] for k in rows} == {(m, s) for m in ("ttft_ms", "itl_ms", "e2e_ms") for s in ("p50", "p99")}
    for name in ("chat", "long"):  # the values are the class summaries' own
        for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
            for stat in ("p50", "p99"):
                d = rows[(name, metric, stat)]
                assert d.a == pytest.approx(getattr(a.levels[0].by_class[name], metric).stat(stat))
                assert d.b == pytest.approx(getattr(b.levels[0].by_class[name], metric).stat(stat))
    for metric in ("ttft_ms", "e2e_ms"):  # 150 ms more before the long prompts' first token
        d = rows[("long", metric, "p50")]
        assert d.verdict == WORSE and d.ci is not None and d.ci[0] > 100
    # the chats and every class's token gaps were not touched: no significant change in their
    # medians (a tail of 24 requests is the machine's scheduling noise, which differs between runs)
    for key in [
        ("chat", "ttft_ms", "p50"),
        ("chat", "e2e_ms", "p50"),
        ("chat", "itl_ms", "p50"),
        ("long", "itl_ms", "p50"),
    ]:
        assert rows[key].verdict not in (BETTER, WORSE), (key, rows[key])


def _class_cells(html: str, name: str, metric: str, stat: str) -> list[str]:
    row = re.search(
        rf'<tr data-level="0" data-class="{name}" data-metric="{metric}" data-stat="{stat}">(.*?)</tr>', html, re.S
    )
    assert row, (name, metric, stat)
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)


def test_the_compare_command_shows_each_class(runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.html"
    res = runner.invoke(app, ["compare", str(runs[0]), str(runs[1]), "-o", str(out)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    head = lines.index("by class, base (baseline) against slow: chat, long in both")
    chat = next(line for line in lines[head:] if line.startswith("  chat: "))
    long = next(line for line in lines[head:] if line.startswith("  long: "))
    assert re.match(r"  chat: .*; all 6 cells across 1 common level\(s\): ", chat)
    assert re.match(r"  long: [2-6] significant change\(s\), the largest first; all 6 cells .*: [2-6] worse, ", long)
    chats = lines[lines.index(chat) + 1 : lines.index(long)]
    after = lines[lines.index(long) + 1 :]
    assert any(re.match(r"    worse: TTFT p50 at 4 users: \S+ → \S+ ms \(\+\d+%\), 95% CI of Δ", x) for x in after)
    assert not [x for x in chats if re.match(r"    \w+: (TTFT|E2E latency|ITL) p50 ", x)]  # the chats' medians held
    # every number of the per-class lines is the class summaries' or the comparison's own
    summaries = [read_summary(p) for p in runs]
    rows, classes = comparison_rows(runs), class_rows(runs)
    assert check_comparison_console(summaries, ["base", "slow"], rows, res.output, classes) == []
    bullet = next(x for x in after if x.startswith("    worse: TTFT p50"))
    for broken in (
        res.output.replace(bullet, re.sub(r": (\d+) →", lambda m: f": {int(m.group(1)) + 9} →", bullet, count=1)),
        res.output.replace(chat, chat.replace("0 better", "1 better")),
    ):
        assert check_comparison_console(summaries, ["base", "slow"], rows, broken, classes) != []
    assert check_comparison_console(summaries, ["base", "slow"], rows, res.output) != []  # lines not in the map
    html = out.read_text(encoding="utf-8")
    assert html.count('<section id="classes">') == 1 and 'id="class-comparison-table"' in html
    long_ttft = _class_cells(html, "long", "ttft_ms", "p50")
    # level, class, metric, stat, baseline, other, diff, CI, verdict
    assert long_ttft[:4] == ["4 users", "long", "TTFT (ms)", "p50"] and long_ttft[8].startswith(WORSE)
    assert _class_cells(html, "long", "e2e_ms", "p50")[8].startswith(WORSE)
    for metric in ("ttft_ms", "e2e_ms", "itl_ms"):
        assert _class_cells(html, "chat", metric, "p99")[8]  # every statistic has its row
        verdict = _class_cells(html, "chat", metric, "p50")[8]
        assert not verdict.startswith((WORSE, BETTER)), (metric, verdict)


def test_a_class_of_one_run_only_is_listed_as_such(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """A run of the chats alone against the two-class run (``force``: the workloads differ):
    the chats are compared, the long prompts listed as the baseline's only."""
    workload = tmp_path / "chat.toml"
    workload.write_text(WORKLOAD.split('[[classes]]\nname = "long"')[0])
    chats = _run(BASE, tmp_path / "chats", workload)
    result = compare_runs([runs[0], chats], tmp_path / "c.html", force=True, resamples=200)
    assert "  only in base (not compared): long" in result.lines
    assert any(line.startswith("  chat: ") for line in result.lines)
    assert not any(line.startswith("  long: ") for line in result.lines)
    html = result.path.read_text(encoding="utf-8")
    assert "Only in base (not compared): long." in html
    assert 'data-class="chat"' in html and 'data-class="long"' not in html
