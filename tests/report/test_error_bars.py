"""The summary's intervals in the run report, in a real browser (headless Chromium via
Playwright): each level curve's error bars are the summary's bounds, a point that cannot
be bounded has no bar and says why on hover, the level table carries the ± columns and
the n_eff line; a summary without intervals draws as before. Skipped like
``test_browser.py`` where Playwright or Chromium is missing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from loadgen.metrics.results import LevelSummary, StatInterval
from loadgen.numfmt import fmt_n_eff, fmt_rel
from loadgen.report.console import unbounded_reason
from loadgen.report.error_bars import NO_BAR
from loadgen.report.files import read_summary
from loadgen.report.html import render_run_report
from loadgen.report.live import fmt_ms
from loadgen.report.page import esc
from tests.report.synth import Spec, make_run
from tests.report.test_browser import Opened, browser, pytestmark  # noqa: F401 (the fixture and the skips)

# per figure div: each trace's meta, its error_y as plotly kept it, and the bars it drew
_BARS = """(id) => {
  const d = document.getElementById(id);
  const drawn = Array.from(d.querySelectorAll('g.trace.scatter')).map(
    g => g.querySelectorAll('g.errorbar path.yerror').length);
  return d._fullData.map((t, k) => ({meta: t.meta, error_y: t.error_y || null, text: t.text || null,
                                     drawn: drawn[k]}));
}"""

# the pixel of point i of trace meta in figure id, in the page
_POINT = """([id, meta, i]) => {
  const d = document.getElementById(id);
  d.scrollIntoView();
  const t = d._fullData.find(t => t.meta === meta);
  const xa = d._fullLayout[t.xaxis.replace('x', 'xaxis')], ya = d._fullLayout[t.yaxis.replace('y', 'yaxis')];
  const r = d.querySelector('svg.main-svg').getBoundingClientRect();
  return [r.left + xa._offset + xa.l2p(xa.d2l(t.x[i])), r.top + ya._offset + ya.l2p(ya.d2l(t.y[i]))];
}"""


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four levels of 60 requests: p50 bounded everywhere, p99 nowhere (it needs more)."""
    return make_run(tmp_path_factory.mktemp("bars") / "a", Spec(loads=(1, 4, 16, 32)))


@pytest.fixture(scope="module")
def opened(browser: Any, mixed: Path) -> Any:  # noqa: F811
    page = Opened(browser, render_run_report(mixed))
    yield page
    page.page.close()


def _levels(folder: Path) -> list[LevelSummary]:
    return [LevelSummary.from_json(lv) for lv in read_summary(folder)["levels"]]


def _expected(point: float | None, iv: StatInterval | None, scale: float = 1.0) -> tuple[Any, Any]:
    if iv is None or point is None or iv.low is None or iv.high is None:
        return None, None
    return pytest.approx((iv.high - point) * scale), pytest.approx((point - iv.low) * scale)


def _check(trace: dict[str, Any], points: list[Any], ivs: list[StatInterval | None], scale: float = 1.0) -> int:
    """The trace's bars are the summary's bounds, and the browser drew one per bounded point."""
    bar = trace["error_y"]
    assert bar["visible"] and not bar["symmetric"]
    bounded = 0
    for k, (point, iv) in enumerate(zip(points, ivs)):
        plus, minus = _expected(point, iv, scale)
        assert iv is not None
        if plus is None:
            assert bar["array"][k] == bar["arrayminus"][k] == NO_BAR
            assert trace["text"][k].startswith("cannot bound: ") and esc(unbounded_reason(iv)) in trace["text"][k]
        else:
            bounded += 1
            assert (bar["array"][k], bar["arrayminus"][k]) == (plus, minus)
            assert f"{100 * iv.confidence:g}% interval" in trace["text"][k]
    assert trace["drawn"] == bounded, trace["meta"]
    return bounded


def test_latency_bars_are_the_summary_intervals(opened: Any, mixed: Path) -> None:
    levels = _levels(mixed)
    traces = {t["meta"]: t for t in opened.page.evaluate(_BARS, "fig-latency")}
    counts = {}
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        for stat in ("p50", "p90", "p99"):
            ivs = [(lv.dist(key).intervals or {}).get(stat) for lv in levels]
            counts[key, stat] = _check(traces[f"{key}.{stat}"], [lv.dist(key).stat(stat) for lv in levels], ivs)
    assert counts["ttft_ms", "p50"] == len(levels)  # every level bounds its median…
    assert counts["ttft_ms", "p99"] == 0  # …and none its p99 with 60 requests
    assert not opened.errors and opened.requests == [opened.url]


def test_throughput_goodput_and_attainment_bars(opened: Any, mixed: Path) -> None:
    levels = _levels(mixed)
    traces = {t["meta"]: t for t in opened.page.evaluate(_BARS, "fig-throughput")}
    for meta, scale in (
        ("throughput.output_tokens_per_s", 1.0),
        ("throughput.requests_per_s", 1.0),
        ("goodput.requests_per_s", 1.0),
        ("goodput.slo_attainment", 100.0),
    ):
        where, what = meta.split(".")
        ivs = [(getattr(lv, where).intervals or {}).get(what) for lv in levels]
        assert _check(traces[meta], [lv.metric(meta) for lv in levels], ivs, scale) == len(levels)
    steady = traces["throughput.steady.output_tokens_per_s"]
    assert not steady["error_y"].get("visible") and steady["drawn"] == 0  # no interval: no bar


def test_unbounded_point_says_why_on_hover(opened: Any, mixed: Path) -> None:
    page = opened.page
    x, y = page.evaluate(_POINT, ["fig-latency", "ttft_ms.p99", 1])
    page.mouse.move(x - 30, y)
    page.mouse.move(x, y, steps=3)
    page.wait_for_selector("#fig-latency g.hoverlayer g.hovertext", timeout=10_000)
    shown = page.eval_on_selector("#fig-latency g.hoverlayer", "g => g.textContent")
    iv = _levels(mixed)[1].ttft_ms.intervals["p99"]  # type: ignore[index]
    # the reason, its n_eff named as this statistic's ("its n_eff 41", not a bare "(n_eff = 41)")
    assert "p99" in shown and "cannot bound: " in shown and unbounded_reason(iv) in shown
    assert "its n_eff" in shown and "(n_eff = " not in shown


def test_level_table_column_and_n_eff_line(opened: Any, mixed: Path) -> None:
    levels = _levels(mixed)
    page = opened.page
    head = page.eval_on_selector_all("#level-table thead th", "els => els.map(e => e.textContent)")
    rows = page.eval_on_selector_all(
        "#level-table tbody tr", "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    col, tok = head.index("TTFT p99 ±"), head.index("out tok/s ±")
    assert head[col - 1] == "TTFT p99" and head[tok - 1] == "out tok/s"
    for row, lv in zip(rows, levels):
        assert row[col] == "±—"  # p99 of 60 requests: unbounded
        iv = (lv.throughput.intervals or {})["output_tokens_per_s"]
        rel = iv.relative_half_width(lv.throughput.output_tokens_per_s)
        assert rel is not None and row[tok] == f"±{fmt_rel(rel)}"
    note = page.inner_text("#interval-note")
    assert "95% intervals" in note
    for i, lv in enumerate(levels):
        n_eff = (lv.ttft_ms.intervals or {})["mean"].n_eff
        assert f"{i + 1}: {fmt_n_eff(n_eff)} of {lv.ttft_ms.count}" in note
    assert "±— not bounded: TTFT p99 at levels 1, 2, 3, 4" in note


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k != "intervals"}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def test_summary_without_intervals_draws_as_before(browser: Any, mixed: Path, tmp_path: Path) -> None:  # noqa: F811
    old = tmp_path / "old"
    old.mkdir()
    for f in mixed.iterdir():
        if f.is_file():
            (old / f.name).write_bytes(f.read_bytes())
    summary = json.loads((mixed / "summary.json").read_text(encoding="utf-8"))
    (old / "summary.json").write_text(json.dumps(_strip(summary)), encoding="utf-8")
    html = render_run_report(old).read_text(encoding="utf-8")
    assert "±" not in html.split('id="level-table"')[1].split("</table>")[0]
    assert 'id="interval-note"' not in html and "%{text}" not in html and "cannot bound" not in html
    page = Opened(browser, old / "report.html")
    try:
        for fig in ("fig-latency", "fig-throughput"):
            for t in page.page.evaluate(_BARS, fig):
                assert not (t["error_y"] or {}).get("visible") and t["drawn"] == 0 and t["text"] is None, t["meta"]
        assert not page.errors
    finally:
        page.page.close()
    assert re.search(r'"error_y"', html) is None


def test_a_value_whose_interval_is_not_bounded_is_shown_and_the_reason_once(opened: Any, mixed: Path) -> None:
    """Issue 37 items 3 and 4: TTFT p99 of 60 requests cannot be bounded; the report prints
    its value with ``±—`` beside it, says why once for the table (not once per level), and
    the caption's n_eff values are each level's one (TTFT mean), none a second unlabelled one."""
    levels = _levels(mixed)
    page = opened.page
    head = page.eval_on_selector_all("#level-table thead th", "els => els.map(e => e.textContent)")
    rows = page.eval_on_selector_all(
        "#level-table tbody tr", "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText))"
    )
    col = head.index("TTFT p99")
    for row, lv in zip(rows, levels):
        assert row[col] == fmt_ms(lv.ttft_ms.p99) and re.fullmatch(r"[\d.,]+", row[col])  # the value, shown
        assert row[col + 1] == "±—"
    section = page.eval_on_selector("#level-table", "t => t.closest('section').innerText")
    assert section.count("not bounded") == 1 and section.count("too few effective values") == 1
    note = page.inner_text("#unbounded-note")
    assert note.startswith("±— not bounded: TTFT p99 at levels 1, 2, 3, 4 (")
    iv = (levels[0].ttft_ms.intervals or {})["p99"]
    assert "TTFT p99 at level 1: p99 needs n_eff ≥" in note and f"its n_eff {fmt_n_eff(iv.n_eff)})" in note
    caption = page.inner_text("#interval-note")
    assert "(n_eff = " not in caption and "n_eff of each level's TTFT mean" in caption
