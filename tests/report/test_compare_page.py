"""The comparison page: overlaid curves, the verdict table, capacity side by side, refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.metrics.compare import BETTER, NO_CHANGE, WORSE
from loadgen.metrics.compare import common_levels, compare_level, headline
from loadgen.metrics.results import RunSummary
from loadgen.report.compare import render_comparison, workload_differences
from loadgen.report.files import read_summary
from loadgen.report.rundata import load_run
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
        assert trace(figs["cmp-throughput"], f"{r}.goodput")["y"] == [lv["goodput"]["requests_per_s"] for lv in s["levels"]]
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
    assert re.search(r"<b>&lt;img src=x onerror=alert\(1\)&gt;</b> vs <b>base</b>", html)


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
    assert {r.diff.verdict for r in same} == {NO_CHANGE}
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
    wl = {"name": "chat", "classes": [1], "source": "/a/chat.toml"}
    assert workload_differences([{"workload": wl}, {"workload": {**wl, "source": "/b/chat.toml"}}], ["a", "b"]) == []
    assert workload_differences([{"workload": wl}, {}], ["a", "b"]) == ["'b' has no workload in run.json"]


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
    assert "run vs run" in html and "run (2)" in html  # same folder names made unique
    assert len(re.findall(r'<tr data-level="1" ', html)) == len(re.findall(r'<tr data-level="0" ', html)) > 0
    assert 'data-level="2"' not in html


def test_comparison_escapes_labels(comparison: Path) -> None:
    html = comparison.read_text(encoding="utf-8")
    from loadgen.report.page import plotly_js

    assert EVIL not in html and "<img" not in html.replace(plotly_js(), "")
    assert any("&lt;img" in json.dumps(f) for f in figures(html).values())


def test_the_verdict_leads_with_what_changed_where_it_matters(comparison: Path,
                                                              baseline_and_slower: tuple[Path, Path]) -> None:
    html = comparison.read_text()
    verdict = html[html.index('id="summary"'):html.index('id="capacity"')]
    items = re.findall(r'<li data-metric="([\w_]+)"><b>([^<]+)</b> at ([^:]+): ([^<]+)<span class="(\w+)">', verdict)
    # every TTFT is 25 ms longer: the median TTFT of the lowest level grew most (+84%),
    # SLO attainment and goodput fell with it; ITL, TPOT and throughput did not move
    assert items and items[0][:3] == ("ttft_ms", "TTFT p50", "1 user")
    assert items[0][4] == "worse" and "→" in items[0][3]
    assert {i[0] for i in items} == {"ttft_ms", "slo_attainment", "goodput", "e2e_ms"}
    assert "no significant change in ITL, output tokens/s, TPOT" in verdict
    first_li = verdict.index("<li")
    assert first_li < verdict.index("better</span>, <span class=\"worse\">")  # the headline comes before the tally
    runs = [load_run(p) for p in baseline_and_slower]
    rows = [r for i in range(len(runs[0].levels))
            for r in compare_level(runs[0].level_samples(i), runs[1].level_samples(i), i, resamples=300)]
    picked, unchanged = headline(rows)
    assert picked[0].metric == "ttft_ms" and picked[0].stat == "p50"
    assert all(abs(picked[k].diff.rel or 0) >= abs(picked[k + 1].diff.rel or 0) for k in range(len(picked) - 1))
    assert unchanged == ["ITL", "output tokens/s", "TPOT"]
