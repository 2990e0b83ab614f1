"""The comparison page: overlaid curves, the verdict table, capacity side by side, refusals."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.metrics import compare as C
from loadgen.metrics.compare import BETTER, INCONCLUSIVE, NO_CHANGE, WORSE, by_verdict, common_levels, compare_level
from loadgen.metrics.results import RunSummary
from loadgen.report.compare import render_comparison, workload_differences
from loadgen.report.files import read_summary
from loadgen.report.rundata import load_run
from loadgen.runinfo import ClassInfo, RunInfo, WorkloadInfo
from tests.report.conftest import figures, trace
from tests.report.synth import EVIL, Spec, make_run


def _cells(html: str, level: int, metric: str, stat: str) -> list[str]:
    row = re.search(rf'<tr data-level="{level}" data-metric="{metric}" data-stat="{stat}">(.*?)</tr>', html, re.S)
    assert row, (level, metric, stat)
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)


def test_sections_and_overlays(comparison: Path, baseline_and_slower: tuple[Path, Path]) -> None:
    html = comparison.read_text(encoding="utf-8")
    for sid in ("summary", "capacity", "latency", "throughput", "distributions", "table"):
        assert html.count(f'<section id="{sid}">') == 1, sid
    figs = figures(html)
    a, b = (read_summary(p) for p in baseline_and_slower)
    lat = figs["cmp-latency"]
    for r, s in enumerate((a, b)):
        assert trace(lat, f"{r}.ttft_ms.p50")["y"] == [lv["ttft_ms"]["p50"] for lv in s["levels"]]
        assert trace(lat, f"{r}.ttft_ms.p99")["y"] == [lv["ttft_ms"]["p99"] for lv in s["levels"]]
        assert trace(figs["cmp-throughput"], f"{r}.goodput")["y"] == [
            lv["goodput"]["requests_per_s"] for lv in s["levels"]
        ]
    colours = {trace(lat, f"{r}.ttft_ms.p50")["line"]["color"] for r in (0, 1)}
    assert len(colours) == 2  # one colour per run
    names = [t["name"] for t in lat["data"] if t.get("showlegend")]
    assert names == ["base", "&lt;img src=x onerror=alert(1)&gt;"]  # legend = labels, escaped


def test_table_values_and_verdicts(comparison: Path, baseline_and_slower: tuple[Path, Path]) -> None:
    html = comparison.read_text(encoding="utf-8")
    a, b = (read_summary(p) for p in baseline_and_slower)
    for pos in range(3):
        cells = _cells(html, pos, "ttft_ms", "p50")
        # level, metric, stat, baseline, other, diff, CI, verdict
        assert cells[3] == f"{a['levels'][pos]['ttft_ms']['p50']:.3g}"
        assert cells[4] == f"{b['levels'][pos]['ttft_ms']['p50']:.3g}"
        assert WORSE in cells[7]  # 25 ms slower TTFT at every level
    # decode was not touched: ITL p50 within noise at every level
    assert all(NO_CHANGE in _cells(html, pos, "itl_ms", "p50")[7] for pos in range(3))
    # one order of names everywhere: the baseline first, in the title and in the verdict
    assert "<title>loadgen comparison — base (baseline) vs &lt;img src=x onerror=alert(1)&gt;</title>" in html
    assert re.search(r"<b>base</b> \(baseline\) → <b>&lt;img src=x onerror=alert\(1\)&gt;</b>", html)
    assert " vs <b>base</b>" not in html


def test_compare_level_intervals(baseline_and_slower: tuple[Path, Path]) -> None:
    a, b = (load_run(p) for p in baseline_and_slower)
    rows = {(r.metric, r.stat): r.diff for r in compare_level(a.level_samples(0), b.level_samples(0))}
    ttft = rows[("ttft_ms", "p50")]
    assert ttft.ci is not None and ttft.ci[0] < 25.0 < ttft.ci[1] and ttft.verdict == WORSE
    assert ttft.a == a.levels[0].ttft_ms.p50 and ttft.b == b.levels[0].ttft_ms.p50
    # rates: the block means are the summary's throughput and goodput
    assert rows[("output_tokens_per_s", "rate")].a == pytest.approx(a.levels[0].throughput.output_tokens_per_s)
    assert rows[("requests_per_s", "rate")].b == pytest.approx(b.levels[0].throughput.requests_per_s)
    assert rows[("goodput", "rate")].a == pytest.approx(a.levels[0].goodput.requests_per_s)
    assert rows[("slo_attainment", "value")].b == pytest.approx(100 * (b.levels[0].goodput.slo_attainment or 0))
    # the same run against itself: nothing changes
    same = compare_level(a.level_samples(1), a.level_samples(1))
    assert {r.diff.verdict for r in same} <= {NO_CHANGE, INCONCLUSIVE}
    # unsure only where the run cannot tell: thin tails, and rates whose blocks vary over 10%
    assert all(r.diff.verdict == NO_CHANGE or "too few" in r.diff.note or r.stat == "rate" for r in same)
    assert {r.diff.verdict for r in same if r.stat in ("p50", "value")} == {NO_CHANGE}
    # concurrency levels have no queue-inclusive row; the order is stable
    assert ("ttft_queued_ms", "p50") not in rows


def test_faster_run_is_better(baseline_and_slower: tuple[Path, Path]) -> None:
    slow, fast = (load_run(p) for p in baseline_and_slower[::-1])
    rows = {(r.metric, r.stat): r.diff for r in compare_level(slow.level_samples(2), fast.level_samples(2))}
    assert rows[("ttft_ms", "p50")].verdict == BETTER
    assert rows[("e2e_ms", "p50")].verdict == BETTER


def test_different_workloads_are_refused_unless_forced(tmp_path: Path) -> None:
    a = make_run(tmp_path / "chat", Spec(per_level=10, workload="chat", server_metrics=False))
    b = make_run(tmp_path / "rag", Spec(per_level=10, workload="rag", server_metrics=False))
    with pytest.raises(ConfigError) as err:
        render_comparison([a, b], tmp_path / "x.html")
    msg = str(err.value)
    assert "different workloads" in msg and "'chat' (chat) and 'rag' (rag) differ in" in msg and "--force" in msg
    assert not (tmp_path / "x.html").exists()
    out = render_comparison([a, b], tmp_path / "x.html", force=True)
    assert 'id="workload-warning"' in out.read_text(encoding="utf-8")


def test_workload_source_path_is_not_a_difference() -> None:
    wl = WorkloadInfo(name="chat", classes=[ClassInfo("c", 1.0, "100", "16")], source="/a/chat.toml")
    a, b = RunInfo(workload=wl), RunInfo(workload=dataclasses.replace(wl, source="/b/chat.toml"))
    assert workload_differences([a, b], ["a", "b"]) == []
    assert workload_differences([a, RunInfo()], ["a", "b"]) == ["'b' has no workload in run.json"]
    assert workload_differences([None, a], ["a", "b"]) == ["'a' has no workload in run.json"]
    other = RunInfo(workload=dataclasses.replace(wl, classes=[ClassInfo("c", 1.0, "200", "16")]))
    assert workload_differences([a, other], ["a", "b"]) == ["'a' (chat) and 'b' (chat) differ in classes"]


def test_argument_errors(baseline_and_slower: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = baseline_and_slower
    with pytest.raises(ConfigError, match="at least two"):
        render_comparison([a], tmp_path / "x.html")
    with pytest.raises(ConfigError, match="one label per run"):
        render_comparison([a, b], tmp_path / "x.html", labels=["only one"])
    with pytest.raises(ConfigError, match="not a folder"):
        render_comparison([a, tmp_path / "nope"], tmp_path / "x.html")


def test_common_levels_and_default_labels(tmp_path: Path) -> None:
    a = make_run(tmp_path / "one" / "run", Spec(loads=(1, 4, 16), per_level=10, server_metrics=False))
    b = make_run(tmp_path / "two" / "run", Spec(loads=(4, 16, 32), per_level=10, server_metrics=False))
    s = [RunSummary.from_json(read_summary(a)), RunSummary.from_json(read_summary(b))]
    assert common_levels(s) == [("concurrency", 4.0, [1, 0]), ("concurrency", 16.0, [2, 1])]
    html = render_comparison([a, b], tmp_path / "c.html").read_text(encoding="utf-8")
    assert "run (baseline) vs run (2)" in html  # same folder names made unique
    assert len(re.findall(r'<tr data-level="1" ', html)) == len(re.findall(r'<tr data-level="0" ', html)) > 0
    assert 'data-level="2"' not in html


def test_comparison_escapes_labels(comparison: Path) -> None:
    html = comparison.read_text(encoding="utf-8")
    from loadgen.report.page import plotly_js

    assert EVIL not in html and "<img" not in html.replace(plotly_js(), "")
    assert any("&lt;img" in json.dumps(f) for f in figures(html).values())


def test_the_verdict_lists_what_it_counts(comparison: Path, baseline_and_slower: tuple[Path, Path]) -> None:
    """The tally and the bullets are one list: each verdict's count is its bullets plus
    the "… and N more" line, the largest changes first."""
    html = comparison.read_text()
    verdict = html[html.index('id="summary"') : html.index('id="capacity"')]
    tally_p = re.search(r'<p class="tally">(.*?)</p>', verdict, re.S)
    assert tally_p
    tally = {v: int(n) for n, v in re.findall(r'<span class="\w+">(\d+) ([a-z /]+)</span>', tally_p.group(1))}
    runs = [load_run(p) for p in baseline_and_slower]
    rows = [
        r
        for i in range(len(runs[0].levels))
        for r in compare_level(runs[0].level_samples(i), runs[1].level_samples(i), i)
    ]
    groups = by_verdict(rows)
    assert tally == {v: len(groups[v]) for v in (WORSE, BETTER, INCONCLUSIVE, NO_CHANGE)}
    # the verdict leads with the largest significant changes, before the tally
    lead = re.search(r'<ul class="lead">(.*?)</ul>', verdict, re.S)
    assert lead and verdict.index('<ul class="lead">') < verdict.index('<p class="tally">')
    led = re.findall(r'<li class="(\w+)" data-metric="([\w_]+)" data-verdict="(\w+)"><b>([^<]+)</b>', lead.group(1))
    top = C.largest_changes(rows)[:5]
    assert [(m, v) for _, m, v, _ in led] == [(r.metric, r.diff.verdict) for r in top]
    assert {cls for cls, *_ in led} <= {"worse", "better"} and led
    assert tally[WORSE] > 0 and tally[BETTER] == 0  # 25 ms slower TTFT, nothing faster
    for v in (WORSE, INCONCLUSIVE):
        block = re.search(rf'<ul class="headline" data-verdict="{v}">(.*?)</ul>', verdict, re.S)
        assert block, v
        items = re.findall(rf'<li data-metric="[\w_]+" data-verdict="{v}">', block.group(1))
        more = re.search(r"… and (\d+) more", block.group(1))
        assert len(items) + (int(more.group(1)) if more else 0) == tally[v]
    assert '<ul class="headline" data-verdict="better">' not in verdict  # no bullet for a count of 0
    # every TTFT is 25 ms longer: the median TTFT of the lowest level grew most (+84%)
    first = re.search(
        r'<li data-metric="([\w_]+)" data-verdict="worse"><b>([^<]+)</b> at ([^:]+): ([^<]+)</li>', verdict
    )
    assert first and first.groups()[:3] == ("ttft_ms", "TTFT p50", "1 user") and "(+84%)" in first.group(4)
    assert all(
        abs(groups[WORSE][k].diff.rel or 0) >= abs(groups[WORSE][k + 1].diff.rel or 0)
        for k in range(len(groups[WORSE]) - 1)
    )


def test_differences_are_shown_to_the_values_precision(comparison: Path) -> None:
    from loadgen.report.compare import fmt_change, fmt_pct

    assert fmt_change(0.000172, 7.65, 7.65) == "±0" and fmt_pct(0.0000225) == "±0%"
    assert fmt_change(0.098, 8.83, 8.93) == "+0.10" and fmt_pct(0.011) == "+1.1%"
    assert fmt_change(235.0, 71.1, 303.0) == "+235" and fmt_pct(3.26) == "+326%"
    assert fmt_change(-1234.5, 2631.6, 1397.1) == "-1,234" and fmt_change(25.37, 30.4, 55.9) == "+25.4"
    html = comparison.read_text()
    table = html[html.index('id="comparison-table"') :]
    assert not re.search(r"[+-]0\.0000|\(\+0\.0%\)|\(-0\.0%\)", table)  # no digits below the values' own


def test_correlated_runs_of_one_process_show_no_change(tmp_path: Path) -> None:
    """Two runs of one configuration whose TTFT noise is AR(1) in send order (φ = 0.97):
    resampling each run on its n_eff finds nothing, the i.i.d. bootstrap on the same
    requests would have called the TTFT p50 different, and a real 25 ms shift is still worse.
    On the page the cell is grey, names its method and the section says which was used."""
    spec = Spec(loads=(4,), per_level=1500, failures=False, client_bound_level=None, ttft_ar=0.97)
    a = make_run(tmp_path / "a", dataclasses.replace(spec, seed=11, label="a"))
    b = make_run(tmp_path / "b", dataclasses.replace(spec, seed=14, label="b"))
    slow = make_run(tmp_path / "slow", dataclasses.replace(spec, seed=14, label="slow", ttft_shift_ms=25.0))
    la, lb, ls = (load_run(p).level_samples(0) for p in (a, b, slow))
    rows = {(r.metric, r.stat): r.diff for r in compare_level(la, lb)}
    d = rows[("ttft_ms", "p50")]
    assert d.method == C.METHOD_NEFF and d.ci is not None and d.ci[0] < 0 < d.ci[1]
    assert d.verdict not in (BETTER, WORSE)
    # the old method on the same requests: a difference that is not there
    xa, xb = (lv.frame["ttft_ms"].to_numpy()[lv.ok_rows] for lv in (la, lb))
    old = C.quantile_difference(xa, xb, 0.5, seed=101, independent=True, min_effect=C.MIN_EFFECT)
    assert old.diff == pytest.approx(d.diff) and old.verdict in (BETTER, WORSE)
    shifted = {(r.metric, r.stat): r.diff for r in compare_level(la, ls)}[("ttft_ms", "p50")]
    assert shifted.verdict == WORSE and shifted.ci is not None and shifted.ci[0] < 25.0 < shifted.ci[1]
    html = render_comparison([a, b], tmp_path / "cmp.html").read_text(encoding="utf-8")
    cell = re.search(r'<tr data-level="0" data-metric="ttft_ms" data-stat="p50">.*?</tr>', html, re.S)
    assert cell
    verdict_td = re.findall(r'<td class="l (\w+)" data-method="([^"]*)">', cell.group(0))
    assert verdict_td == [("same" if d.verdict == NO_CHANGE else "unsure", C.METHOD_NEFF)]
    method = re.search(r'<p class="note" id="method">(.*?)</p>', html, re.S)
    assert method and C.METHOD_NEFF in method.group(1) and C.METHOD_BLOCKS in method.group(1)


def test_the_compare_command_prints_the_verdict(baseline_and_slower: tuple[Path, Path], tmp_path: Path) -> None:
    """``loadgen compare`` (a real subprocess) prints the largest significant changes, each
    with its interval, and the tally, the same verdicts the page gives, then the page's path."""
    import os
    import subprocess
    import sys

    a, b = baseline_and_slower
    out = tmp_path / "ab.html"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen.cli",
            "compare",
            str(a),
            str(b),
            "-o",
            str(out),
            "--label",
            "base",
            "--label",
            "slow",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    runs = [load_run(p) for p in (a, b)]
    rows = [
        r
        for i in range(len(runs[0].levels))
        for r in compare_level(runs[0].level_samples(i), runs[1].level_samples(i), i)
    ]
    top = C.largest_changes(rows)
    assert lines[0] == f"base (baseline) → slow: {len(top)} significant change(s), the largest first"
    # every TTFT is 25 ms longer: the median TTFT of the lowest level grew most (+84%)
    assert lines[1].startswith("  worse: TTFT p50 at 1 user: ") and "(+84%), 95% CI of Δ [+" in lines[1]
    for line, r in zip(lines[1 : 1 + min(5, len(top))], top):
        stat = "" if r.stat in ("rate", "value") else f" {r.stat}"
        assert line.startswith(f"  {r.diff.verdict}: {r.label}{stat} at "), (line, r)
    groups = by_verdict(rows)
    tally = ", ".join(f"{len(groups[v])} {v}" for v in (WORSE, BETTER, INCONCLUSIVE, NO_CHANGE))
    assert f"cells across 3 common level(s): {tally}" in proc.stdout
    assert lines[-1] == f"comparison: {out}" and out.stat().st_size > 0
    html = out.read_text(encoding="utf-8")
    tally_p = re.search(r'<p class="tally">(.*?)</p>', html, re.S)
    assert tally_p and f"{len(groups[WORSE])} worse" in tally_p.group(1)
