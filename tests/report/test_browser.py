"""The pages in a real browser: headless Chromium (Debian's ``chromium``) via Playwright.

Opened from disk (file://): no console error, no request but the file itself, every
plot drawn (an ``svg.main-svg`` in each figure div), hostile text shown as text (no
alert), and a PNG screenshot written under the test's tmp dir. Skipped, with the reason,
only where Playwright or a Chromium binary is missing. Set ``LOADGEN_CHROMIUM`` to use
another Chromium binary.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.report.synth import EVIL


def _chromium() -> str | None:
    for candidate in (
        os.environ.get("LOADGEN_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None  # type: ignore[assignment]

CHROMIUM = _chromium()
pytestmark = [
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip install playwright)"),
    pytest.mark.skipif(
        CHROMIUM is None, reason="no Chromium binary (apt-get install chromium, or set LOADGEN_CHROMIUM)"
    ),
]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ALL_DRAWN = "() => Array.from(document.querySelectorAll('div.lg-plot')).every(d => d.querySelector('svg.main-svg'))"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    profile = tmp_path_factory.mktemp("chromium-profile")  # a new, empty user-data-dir
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=ARGS, viewport={"width": 1400, "height": 900}
        )
        try:
            yield ctx
        finally:
            ctx.close()


class Opened:
    """A page opened from disk, with everything it logged and requested."""

    def __init__(self, ctx: Any, path: Path) -> None:
        self.url = path.resolve().as_uri()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = ctx.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", self._dialog)
        self.page.goto(self.url)
        self.page.wait_for_function(ALL_DRAWN, timeout=60_000)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def check(self, shot: Path) -> int:
        n_figs = self.page.locator("div.lg-plot").count()
        n_drawn = self.page.locator("div.lg-plot svg.main-svg").evaluate_all(
            "els => new Set(els.map(e => e.closest('div.lg-plot').id)).size"
        )
        assert n_figs > 0 and n_drawn == n_figs
        assert self.errors == []
        assert self.dialogs == []
        assert self.requests == [self.url]
        self.page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        return int(n_figs)


def test_run_report_in_chromium(browser: Any, report: Path, tmp_path: Path) -> None:
    opened = Opened(browser, report)
    try:
        assert opened.check(tmp_path / "report.png") == 10
        headline = opened.page.inner_text("section#headline")
        assert EVIL in headline  # shown as text, not an element
        assert opened.page.locator("section#headline img").count() == 0
        # the timeline's menu switches level: pick level 1
        page = opened.page
        visible = "() => document.getElementById('fig-timeline').data.filter(t => t.visible === true).map(t => t.meta)"
        assert {m.split(".")[1] for m in page.evaluate(visible)} == {"2"}
        page.locator("#fig-timeline .updatemenu-header").click()
        page.locator("#fig-timeline .updatemenu-dropdown-button", has_text="level 1: 1 user").click()
        page.wait_for_function(f"() => ({visible})().every(m => m.split('.')[1] === '0')", timeout=10_000)
        assert opened.errors == [] and opened.requests == [opened.url]
    finally:
        opened.page.close()


def test_comparison_in_chromium(browser: Any, comparison: Path, tmp_path: Path) -> None:
    opened = Opened(browser, comparison)
    try:
        assert opened.check(tmp_path / "comparison.png") == 3
        legend = opened.page.locator("#cmp-latency .legend").text_content()  # SVG: no inner_text
        assert EVIL in legend  # the label, as text
        assert "worse" in opened.page.inner_text("#comparison-table")
    finally:
        opened.page.close()
