"""The comparison table with many configurations (``loadgen matrix``'s page) in Chromium:
it scrolls inside its own box, not the page, and the level/metric/stat columns stay put."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from loadgen.report.compare import render_comparison
from tests.report.synth import Spec, make_run
from tests.report.test_browser import Opened, browser, pytestmark  # noqa: F401 - the fixture and skips

NAMES = ["chunked 2048", "chunked 512", "chunked 8192 (vllm default)", "unchunked", "chunked 1024", "chunked 4096"]

# the box, and the cells of its fifth row (in view below the header), as the browser lays them out
_GEOMETRY = """() => {
  const box = document.querySelector('#comparison-table').closest('.table-box');
  const row = document.querySelectorAll('#comparison-table tbody tr')[4];
  const rect = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top,
                                                                    bottom: r.bottom}; };
  const cells = Array.from(row.children).map(rect);
  const k0 = cells[0];
  const hit = document.elementFromPoint((k0.left + k0.right) / 2, (k0.top + k0.bottom) / 2);
  return {box: rect(box), inner: box.clientLeft, scrollWidth: box.scrollWidth, clientWidth: box.clientWidth,
          scrollLeft: box.scrollLeft, page: [document.documentElement.scrollWidth,
          document.documentElement.clientWidth, window.scrollX], cells: cells,
          hit: hit === null ? null : hit.closest('td') === row.children[0],
          head: Array.from(document.querySelectorAll('#comparison-table thead th')).map(e => e.textContent)};
}"""


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six configurations of one workload, each a little slower than the one before."""
    root = tmp_path_factory.mktemp("matrix")
    runs = [make_run(root / f"c{i}", Spec(seed=i, ttft_shift_ms=4.0 * i, label=name)) for i, name in enumerate(NAMES)]
    return render_comparison(runs, root / "matrix.html", labels=NAMES, resamples=200)


def test_many_configurations_scroll_in_the_table_box_with_the_row_names_fixed(
    browser: Any,  # noqa: F811 - the fixture imported above
    many: Path,
    tmp_path: Path,
) -> None:
    opened = Opened(browser, many)
    page = opened.page
    try:
        page.evaluate("() => document.querySelector('.table-box').scrollIntoView({block: 'start'})")
        before = page.evaluate(_GEOMETRY)
        assert before["scrollWidth"] > before["clientWidth"]  # too wide for the page: the box scrolls
        assert before["page"][0] <= before["page"][1] and before["page"][2] == 0  # the page does not
        assert NAMES[-1] in before["head"]
        page.evaluate("() => { const b = document.querySelector('.table-box'); b.scrollLeft = b.scrollWidth; }")
        page.wait_for_function("() => document.querySelector('.table-box').scrollLeft > 0")
        after = page.evaluate(_GEOMETRY)
        assert after["scrollLeft"] > 0 and after["page"][2] == 0
        box, cells = after["box"], after["cells"]
        left = box["left"] + after["inner"]
        # level, metric, stat: where they were, side by side, and on top of what scrolled under them
        for k in range(3):
            assert cells[k]["left"] == pytest.approx(before["cells"][k]["left"], abs=1)
        assert cells[0]["left"] == pytest.approx(left, abs=1)
        assert cells[1]["left"] == pytest.approx(cells[0]["right"], abs=1)
        assert cells[2]["left"] == pytest.approx(cells[1]["right"], abs=1)
        assert after["hit"] is True
        # the baseline's value scrolled away; the last configuration's verdict is in view
        assert cells[3]["right"] < before["cells"][3]["right"]
        assert box["left"] <= cells[-1]["left"] and cells[-1]["right"] <= box["right"] + 1
        assert opened.errors == [] and opened.requests == [opened.url]
        shot = Path(os.environ.get("LOADGEN_SHOT_DIR", tmp_path)) / "matrix-table-scrolled.png"
        page.locator(".table-box").screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        page.close()
