"""The capacity interval in the run report, in a real browser (headless Chromium via
Playwright): the capacity card says it under the capacity, the attainment-vs-load figure
shades it as a band in each panel (the interval's ends as plotly drew them), an open side
says "≥"/"≤" and its band reaches the last level; a summary without an interval has neither.
The summaries are the real ones of synthetic runs (``tests/report/synth.py``). Skipped like
``test_browser.py`` where Playwright or Chromium is missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from loadgen.report.files import read_summary
from loadgen.report.html import render_run_report
from tests.report.conftest import figures
from tests.report.synth import Spec, make_run
from tests.report.test_browser import Opened, browser, pytestmark  # noqa: F401 (the fixture and the skips)

# the shapes of a figure as plotly laid them out, and which of them the browser drew
_SHAPES = """(id) => {
  const d = document.getElementById(id);
  return {shapes: d._fullLayout.shapes.map(s => ({type: s.type, name: s.name, x0: s.x0, x1: s.x1, xref: s.xref,
                                                  yref: s.yref, fill: s.fillcolor, showlegend: s.showlegend})),
          drawn: d.querySelectorAll('.shapelayer path, .layer-below .shapelayer path').length,
          legend: Array.from(d.querySelectorAll('g.legend text.legendtext')).map(t => t.textContent)};
}"""

BAND = "rgba(185,28,28,0.12)"


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 requests at each of six levels: 8 users pass the 90% target, 16 fail it."""
    spec = Spec(loads=(1, 2, 4, 8, 16, 32), per_level=400, failures=False, slos=("ttft=140ms",))
    return make_run(tmp_path_factory.mktemp("capiv") / "a", spec)


@pytest.fixture(scope="module")
def opened(browser: Any, decided: Path) -> Any:  # noqa: F811
    page = Opened(browser, render_run_report(decided))
    yield page
    page.page.close()


def _bands(shapes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in shapes if s["type"] == "rect" and s["fill"] == BAND]


def test_card_says_the_interval(opened: Any, decided: Path) -> None:
    cap = read_summary(decided)["capacity"]
    assert cap["interval"] == [8.0, 16.0] and cap["status"] == "ok"  # what the levels decided
    card = opened.page.inner_text("#answer-capacity")
    assert f"{cap['value']:.3g} users" in card
    line = opened.page.inner_text("#capacity-interval")
    assert line == "95% interval 8–16 users"
    assert not opened.errors


def test_band_spans_the_interval_in_every_panel(opened: Any, decided: Path) -> None:
    low, high = read_summary(decided)["capacity"]["interval"]
    got = opened.page.evaluate(_SHAPES, "fig-throughput")
    bands = _bands(got["shapes"])
    assert [(b["xref"], b["yref"]) for b in bands] == [("x", "y domain"), ("x2", "y2 domain"), ("x3", "y3 domain")]
    for b in bands:
        # a log axis: plotly keeps x0/x1 through log10 and back
        assert (b["x0"], b["x1"]) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
        assert b["name"] == "capacity interval (95%): 8–16 users"
    assert [b["showlegend"] for b in bands] == [True, False, False]  # one legend entry for the three
    assert "capacity interval (95%): 8–16 users" in got["legend"]
    # the band lies between the capacity line's levels: the capacity itself falls inside
    value = read_summary(decided)["capacity"]["value"]
    assert low <= value <= high
    # the figure as written in the page carries the summary's ends exactly
    fig = figures((decided / "report.html").read_text(encoding="utf-8"))["fig-throughput"]
    assert {(s["x0"], s["x1"]) for s in fig["layout"]["shapes"] if s.get("fillcolor") == BAND} == {(low, high)}


def test_band_hides_from_the_legend(opened: Any) -> None:
    page = opened.page
    page.locator("#fig-throughput g.legend g.traces", has_text="capacity interval").click()
    page.wait_for_function(
        "() => document.getElementById('fig-throughput')._fullLayout.shapes.filter("
        f"s => s.fillcolor === '{BAND}').every(s => s.visible === 'legendonly' || s.visible === false)",
        timeout=10_000,
    )
    page.locator("#fig-throughput g.legend g.traces", has_text="capacity interval").click()


def test_open_side_reaches_the_last_level(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """60 requests a level: nothing is shown to pass, the last level (32 users) to fail."""
    folder = make_run(tmp_path / "a", Spec(loads=(1, 4, 16, 32)))
    assert read_summary(folder)["capacity"]["interval"] == [None, 32.0]
    page = Opened(browser, render_run_report(folder))
    try:
        assert page.page.inner_text("#capacity-interval") == "95% interval ≤ 32 users"
        bands = _bands(page.page.evaluate(_SHAPES, "fig-throughput")["shapes"])
        ends = (pytest.approx(1.0, rel=1e-12), pytest.approx(32.0, rel=1e-12))
        assert len(bands) == 3 and all((b["x0"], b["x1"]) == ends for b in bands)
        assert not page.errors
    finally:
        page.page.close()


def _rewrite(src: Path, dst: Path, interval: Any) -> Path:
    """A copy of run folder ``src`` whose summary's capacity has ``interval`` (dropped when
    ``...``: a summary written before capacity intervals existed)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.name != "report.html":
            shutil.copy(f, dst / f.name)
    summary = json.loads((src / "summary.json").read_text(encoding="utf-8"))
    if interval is ...:
        del summary["capacity"]["interval"]
    else:
        summary["capacity"]["interval"] = interval
    (dst / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return dst


def test_without_interval_no_band_no_line(browser: Any, decided: Path, tmp_path: Path) -> None:  # noqa: F811
    old = _rewrite(decided, tmp_path / "old", ...)
    html = render_run_report(old).read_text(encoding="utf-8")
    assert 'id="capacity-interval"' not in html and "capacity interval" not in html
    page = Opened(browser, old / "report.html")
    try:
        got = page.page.evaluate(_SHAPES, "fig-throughput")
        assert _bands(got["shapes"]) == [] and not any("capacity interval" in t for t in got["legend"])
        card = page.page.inner_text("#answer-capacity").split("\n")
        # key, value, sub, then the verdict and which levels it judged: no interval line
        assert len(card) == 5 and card[4].startswith("judged: 6 concurrency levels"), card
        assert not any("interval" in line for line in card)
        assert not page.errors
    finally:
        page.page.close()


def test_undecided_interval_says_so_without_band(browser: Any, decided: Path, tmp_path: Path) -> None:  # noqa: F811
    folder = _rewrite(decided, tmp_path / "undecided", [None, None])
    page = Opened(browser, render_run_report(folder))
    try:
        assert page.page.inner_text("#capacity-interval") == "95% interval: no level decided either side"
        assert _bands(page.page.evaluate(_SHAPES, "fig-throughput")["shapes"]) == []
    finally:
        page.page.close()


def test_the_console_line_names_the_levels_confidence(decided: Path) -> None:
    from loadgen.metrics import RunSummary
    from loadgen.report.console import answer_lines
    from loadgen.report.verdict_lines import attainment_confidence, capacity_interval_line

    summary = RunSummary.from_json(read_summary(decided))
    assert summary.capacity is not None and summary.capacity.interval is not None
    assert attainment_confidence(summary.levels) == 0.95
    assert any(line.startswith("capacity interval (95% attainment intervals;") for line in answer_lines(summary))
    assert capacity_interval_line(summary.capacity, 0.9).startswith("capacity interval (90% attainment intervals;")
