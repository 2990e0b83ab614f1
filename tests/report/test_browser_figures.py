"""What the figures show in a real browser (headless Chromium via Playwright): labels that
never overprint, log axes that tick at 1-2-5, long prompts marked by the workload's own
class, no empty panel, p90 and p99 told apart. Skipped like ``test_browser.py`` where
Playwright or Chromium is missing."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from loadgen.metrics import per_request_frame
from loadgen.report.files import read_records
from tests.report.test_browser import Opened, browser, pytestmark  # noqa: F401 (the fixture and the skips)

# every annotation's box, per figure (the "text" of each and its client rectangle)
_BOXES = """() => Array.from(document.querySelectorAll('div.lg-plot')).map(d => ({
  id: d.id,
  boxes: Array.from(d.querySelectorAll('g.annotation')).map(a => {
    const r = a.getBoundingClientRect();
    return {text: a.textContent, x0: r.left, x1: r.right, y0: r.top, y1: r.bottom};
  }).filter(b => b.x1 > b.x0 && b.y1 > b.y0)
}))"""

# the tick labels of every log axis: [figure id, axis name, [labels]]
_LOG_TICKS = """() => Array.from(document.querySelectorAll('div.lg-plot')).flatMap(d => {
  const fl = d._fullLayout;
  return Object.keys(fl).filter(k => /^[xy]axis\\d*$/.test(k) && fl[k].type === 'log' && fl[k].visible)
    .map(k => {
      const cls = k[0] + k.slice(5) + 'tick';  // xaxis2 -> x2tick
      const labels = Array.from(d.querySelectorAll('g.' + cls + ' text')).map(t => t.textContent);
      return [d.id, k, labels];
    });
})"""

# visible cartesian axes that no trace is drawn on: [figure id, axis name]
_EMPTY_AXES = """() => Array.from(document.querySelectorAll('div.lg-plot')).flatMap(d => {
  const fl = d._fullLayout;
  const used = new Set(d._fullData.filter(t => t.visible !== false).flatMap(t => [
    t.xaxis ? 'xaxis' + t.xaxis.slice(1) : null, t.yaxis ? 'yaxis' + t.yaxis.slice(1) : null]));
  return Object.keys(fl).filter(k => /^[xy]axis\\d*$/.test(k) && fl[k].visible && !used.has(k))
    .filter(k => !fl[k].overlaying).map(k => [d.id, k]);
})"""


def _overlaps(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if (
                a["x0"] < b["x1"] - 0.5
                and b["x0"] < a["x1"] - 0.5
                and a["y0"] < b["y1"] - 0.5
                and b["y0"] < a["y1"] - 0.5
            ):
                out.append((a["text"], b["text"]))
    return out


@pytest.fixture(scope="module")
def crowded(browser: Any, crowded_report: Path) -> Any:  # noqa: F811
    opened = Opened(browser, crowded_report)
    yield opened
    opened.page.close()


@pytest.fixture(scope="module")
def opened_report(browser: Any, report: Path) -> Any:  # noqa: F811
    opened = Opened(browser, report)
    yield opened
    opened.page.close()


def test_knee_and_capacity_labels_never_overprint(crowded: Any, opened_report: Any) -> None:
    """The knee at 16 users and the capacity at 20: two labels, two rows, no shared pixel."""
    for opened in (crowded, opened_report):
        figs = opened.page.evaluate(_BOXES)
        texts = [b["text"] for f in figs for b in f["boxes"]]
        for fig in figs:
            assert _overlaps(fig["boxes"]) == [], fig["id"]
    crowded_texts = [
        b["text"] for f in crowded.page.evaluate(_BOXES) if f["id"] == "fig-throughput" for b in f["boxes"]
    ]
    # the knee at 16 users, the capacity just above it (the demo's "knee 16" and "capacity 18.2")
    assert "knee 16" in crowded_texts and any(t.startswith("capacity 2") for t in crowded_texts), crowded_texts
    assert texts  # the report's own figures have annotations too (titles, SLO limits)


def test_log_axes_label_1_2_5_ticks_as_numbers(crowded: Any) -> None:
    axes = crowded.page.evaluate(_LOG_TICKS)
    assert {fig for fig, _, _ in axes} >= {"fig-cdf", "fig-itl-time", "fig-lateness", "fig-client"}
    for fig, axis, labels in axes:
        assert len(labels) >= 2, (fig, axis, labels)
        if fig in ("fig-latency", "fig-throughput") and axis.startswith("x"):
            assert labels == ["1", "4", "16", "32"]  # a load axis ticks at the levels run
            continue
        values = [float(text.replace(",", "").replace("\u2212", "-")) for text in labels]
        # plotly's own log ticks label minor ticks by their digit: "6 7 8 9 10 2 3 4 5"
        assert values == sorted(values) and len(set(values)) == len(values), (fig, axis, labels)
        if values[-1] >= 10 * values[0]:  # a decade or more: 1, 2, 5 times powers of ten
            for value in values:
                mantissa = value / 10 ** math.floor(math.log10(value))
                assert round(mantissa, 6) in (1.0, 2.0, 5.0), (fig, axis, labels)


def test_long_prompts_are_the_workloads_long_class(crowded: Any, crowded_report: Path) -> None:
    frame = per_request_frame(read_records(crowded_report.parent))
    n_long = int(((frame["request_class"] == "long") & (frame["sent_ns"] != 0)).sum())
    n_twice_median = int((frame["prompt_tokens"].fillna(frame["target_prompt_tokens"]) >= 200).sum())
    page = crowded.page
    drawn = page.evaluate("""() => { const d = document.getElementById('fig-itl-time');
        const i = d._fullData.findIndex(t => t.meta === 'itl_time.long');
        return d.querySelectorAll('.scatterlayer .trace')[i].querySelectorAll('path.point').length; }""")
    assert drawn == n_long > 0
    note = page.inner_text("section#itl-time")
    assert f"{n_long} long prompts (class 'long'" in note
    assert n_twice_median >= n_long  # the class, not a length rule, decides


def test_no_empty_panel(crowded: Any, opened_report: Any) -> None:
    """The crowded run has no coalesced event: the panel says so instead of drawing an
    empty axis from -1 to 1; the other run has some and draws them."""
    assert crowded.page.evaluate(_EMPTY_AXES) == []
    assert "no coalesced events" in crowded.page.locator("#fig-tokens").text_content()
    assert opened_report.page.evaluate(_EMPTY_AXES) == []
    assert "no coalesced events" not in opened_report.page.locator("#fig-tokens").text_content()


def test_p90_and_p99_are_drawn_differently(crowded: Any) -> None:
    styles = crowded.page.evaluate("""() => { const d = document.getElementById('fig-latency');
        const traces = d.querySelectorAll('.scatterlayer .trace');
        const out = {};
        d._fullData.forEach((t, i) => { if (t.meta && t.meta.startsWith('ttft_ms.')) {
            const line = traces[i].querySelector('path.js-line');
            const point = traces[i].querySelector('path.point');
            out[t.meta] = [line.style.strokeDasharray, point.getAttribute('d')];
        }});
        return out; }""")
    p50, p90, p99 = styles["ttft_ms.p50"], styles["ttft_ms.p90"], styles["ttft_ms.p99"]
    assert p90[0] != p99[0] and p50[0] not in (p90[0], p99[0])  # dash patterns
    assert p90[1] != p99[1]  # marker shapes
