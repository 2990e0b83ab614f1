"""The dashboard page in a real browser (Debian's Chromium via Playwright), served by a real
Dashboard over a test feed: figures fill as points arrive, the counters follow the feed, Stop
reaches the run's control, nothing leaves the origin, hostile text stays text. Skipped only
where Playwright or Chromium is missing (as the report's browser tests are)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loadgen.dashboard.feed import Feed
from loadgen.records import ErrorKind, RequestRecord
from tests.dashboard.conftest import EVIL, MS, Controls, RecordFeed, ThreadedDashboard, level_summary
from tests.report.test_browser import browser, pytestmark  # noqa: F401  (the fixture; skipped without a browser)

SHOTS = Path(os.environ.get("LOADGEN_SHOTS") or tempfile.gettempdir()) / "loadgen-shots"  # PNGs for a human
WAIT_MS = 60_000  # a guard against a hang; every wait below is on a count or a text


def xs(fig: str, i: int = 0) -> str:
    return (
        f"(() => {{ const d = document.getElementById('{fig}').data; return d && d[{i}] ? d[{i}].x.length : -1; }})()"
    )


class Watched:
    """A page opened on a dashboard, with what it logged, requested and tried to alert."""

    def __init__(self, ctx: Any, url: str) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = ctx.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", self._dialog)
        self.response = self.page.goto(url)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def wait(self, js: str) -> None:
        self.page.wait_for_function(f"() => ({js})", timeout=WAIT_MS)

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"dashboard-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000
        return path


def test_the_page_follows_the_feed_and_stops_the_run(
    browser: Any,  # noqa: F811 - the fixture imported above
    threaded: Callable[..., ThreadedDashboard],
    tmp_path: Path,
) -> None:
    feed = RecordFeed(model=EVIL, points=10)
    feed.run["url"] = f"http://127.0.0.1:9/{EVIL}"
    stops: list[int] = []

    def stop() -> None:
        stops.append(1)
        feed.end("interrupted", report=str(tmp_path / "report.html"))

    d = threaded(feed, interval_s=0.2, controls=Controls(stop=stop, skip=lambda: True))
    origin = d.url.rstrip("/")
    w = Watched(browser, d.url)
    page = w.page
    try:
        csp = w.response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "script-src 'sha256-" in csp
        meta = page.evaluate("document.querySelector('meta[http-equiv=Content-Security-Policy]').content")
        assert csp == meta + "; frame-ancestors 'none'"
        # the snapshot drawn, then points appended: more x values at each of two reads
        w.wait(f"{xs('fig-ttft')} >= 10")
        n1 = page.evaluate(xs("fig-ttft"))
        w.wait(f"{xs('fig-ttft')} >= {n1 + 3}")
        n2 = page.evaluate(xs("fig-ttft"))
        w.wait(f"{xs('fig-tput', 1)} >= {n2}")  # every trace of every figure grows
        assert page.evaluate(xs("fig-itl", 1)) >= n2
        assert page.evaluate("document.getElementById('fig-ttft').data.map(t => t.meta)") == [
            "ttft_p50",
            "ttft_p90",
            "ttft_p99",
        ]
        # the level counter follows the feed's level
        assert page.inner_text("#lg-heading").startswith("level 1 of 4")
        d.call(lambda: feed.set_level(1))
        w.wait("document.getElementById('lg-heading').textContent.startsWith('level 2 of 4')")
        assert page.inner_text("#lg-target") == "2 users"
        # the level just finished appears on the sweep curves, error bars and all
        w.wait(f"{xs('fig-sweep-ttft', 1)} === 1")
        done = d.call(lambda: dict(feed.levels[0]))
        bars = page.evaluate("document.getElementById('fig-sweep-ttft').data[1].error_y")
        assert bars["array"] == [pytest.approx(done["ttft_p99_hi"] - done["ttft_p99_ms"])]
        assert bars["arrayminus"] == [pytest.approx(done["ttft_p99_ms"] - done["ttft_p99_lo"])]
        tput = page.evaluate("document.getElementById('fig-sweep-tput').data[0]")
        assert tput["y"] == [done["out_tok_s"]] and tput["x"] == [done["x"]]
        # server values are there, so their figure shows; failures by kind are drawn
        assert page.locator("#fig-server").is_visible()
        w.wait("document.getElementById('fig-errors').data.some(t => t.meta === 'errors.http_error')")
        # hostile text shows as typed, as text
        assert EVIL in page.inner_text("#lg-meta")
        assert page.locator("header img, main img").count() == 0
        w.shot("live")
        # Stop: the control runs, and the page shows the state the feed reports next
        assert page.locator("#lg-stop").is_visible() and page.locator("#lg-skip").is_visible()
        page.click("#lg-stop")
        w.wait("document.getElementById('lg-state').textContent === 'interrupted'")
        assert stops == [1]
        assert page.inner_text("#lg-answer").startswith("stopping")
        assert page.locator("#lg-banner").is_visible() and page.inner_text("#lg-banner-text") == "run interrupted"
        assert page.locator("#lg-report").get_attribute("href") == "/report"
        assert not page.locator("#lg-stop").is_visible()  # no Stop once the run has ended
        w.shot("ended")
        assert w.dialogs == []
        assert w.errors == []
        assert w.requests and all(u.startswith(origin + "/") for u in w.requests), w.requests
    finally:
        page.close()


def test_off_loopback_the_page_carries_the_token(
    browser: Any,  # noqa: F811 - the fixture imported above
    threaded: Callable[..., ThreadedDashboard],
) -> None:
    skips: list[int] = []

    def skip() -> bool:
        skips.append(1)
        return True

    feed = RecordFeed(server=False)
    d = threaded(feed, host="0.0.0.0", interval_s=0.2, controls=Controls(skip=skip))
    token = d.url.split("?token=")[1]
    origin = d.url.split("/?")[0].replace("0.0.0.0", "127.0.0.1")
    w = Watched(browser, f"{origin}/?token={token}")
    page = w.page
    try:
        w.wait(f"{xs('fig-ttft')} >= 2")
        assert not page.locator("#lg-stop").is_visible()  # no stop control given
        assert not page.locator("#fig-server").is_visible()  # no server values: no server figure
        page.click("#lg-skip")
        w.wait("document.getElementById('lg-answer').textContent === 'skipping to the next level'")
        assert skips == [1]
        assert w.errors == [] and w.dialogs == []
        assert all(u.startswith(origin + "/") and f"token={token}" in u for u in w.requests), w.requests
    finally:
        page.close()


def test_the_csp_blocks_an_injected_script(
    browser: Any,  # noqa: F811 - the fixture imported above
    threaded: Callable[..., ThreadedDashboard],
) -> None:
    d = threaded(RecordFeed(), interval_s=0.5)
    w = Watched(browser, d.url)
    try:
        w.wait(f"{xs('fig-ttft')} >= 0")
        w.page.evaluate(
            "() => { const s = document.createElement('script'); s.textContent = 'window.__ran = 1';"
            " document.body.appendChild(s); }"
        )
        assert w.page.evaluate("window.__ran === undefined")
        assert any("Content Security Policy" in e for e in w.errors), w.errors
    finally:
        w.page.close()


def test_the_pages_numbers_follow_the_one_rule(browser: Any) -> None:  # noqa: F811
    """The page formats its counters in the browser; its ``num`` writes what
    :func:`loadgen.numfmt.fmt` writes (issue 37 item 7: ``1000`` for 999.6, ``1.23e-7``)."""
    from loadgen.dashboard.page import _JS
    from loadgen.numfmt import fmt

    start = _JS.index("function num(v){")
    source = _JS[start : _JS.index("function put(", start)]
    values = [0, 0.8424, 7.5, 7.4849, 12.8241, 152.4, 999.4, 999.6, 9.996, 1450.2, 12345.6, 1.234e-7, -0.0001, -1234.5]
    page = browser.new_page()
    try:
        shown = page.evaluate(f"(vals) => {{ {source} return vals.map(num); }}", values)
    finally:
        page.close()
    assert shown == [fmt(v) for v in values]


WAIT_TEXT = "(id) => Array.from(document.querySelectorAll('#' + id + ' .annotation-text')).map(e => e.textContent)"
TICKS = "(id) => Array.from(document.querySelectorAll('#' + id + ' .xtick text, #' + id + ' .ytick text'))"
NEGATIVE_TICKS = f"""() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(d =>
    ({TICKS})(d.id).map(e => e.textContent).filter(t => /^[-\\u2212]/.test(t)).map(t => d.id + ': ' + t))"""


def _waits(page: Any, fig: str) -> list[str]:
    return list(page.evaluate(WAIT_TEXT, fig))


def test_each_panel_says_what_it_waits_for_until_its_data_comes(
    browser: Any,  # noqa: F811 - the fixture imported above
    threaded: Callable[..., ThreadedDashboard],
) -> None:
    """A run's first level, nothing finished yet: each panel says so, with no axes drawn
    (none from -1 to 6); a finished request fills the live panels, a failed one the
    failures, the level's summary the sweep curves, on real axes from 0."""
    now = [1000.0]
    feed = Feed(clock=lambda: now[0])
    feed.plan(
        title="t", api="chat", model="m", url="http://127.0.0.1:9/v1", out="o", levels_planned=2, levels_exact=True
    )
    feed.start_level(
        index=0, trial=0, heading="level 1 of 2", target="1 user", requests=None, warmup=0, duration_s=60.0
    )
    d = threaded(feed, interval_s=0.2)  # the clock stands still: one point, at t=0, and no more
    w = Watched(browser, d.url)
    page = w.page
    try:
        w.wait(f"{xs('fig-lag')} === 1")
        assert _waits(page, "fig-ttft") == ["no request has finished yet"]
        assert _waits(page, "fig-itl") == ["no request with two or more chunks has finished yet"]
        assert _waits(page, "fig-tput") == ["no request has finished yet"]
        assert _waits(page, "fig-flight") == ["no count of requests in flight yet"]
        assert _waits(page, "fig-errors") == ["no failures yet"]
        assert _waits(page, "fig-sweep-ttft") == _waits(page, "fig-sweep-tput") == ["no level finished yet"]
        assert _waits(page, "fig-lag") == []  # its one value is there
        for fig in ("fig-ttft", "fig-errors", "fig-sweep-ttft", "fig-sweep-tput"):
            assert page.evaluate(f"({TICKS})('{fig}').length") == 0, fig
        assert page.evaluate(NEGATIVE_TICKS) == []
        w.shot("waiting")

        def finish_two() -> None:  # one request answered, one failed, in the second second
            now[0] += 1.0
            done = int(now[0] * 1e9)
            sent = done - 300 * MS
            events = [[sent + 50 * MS, 1], [sent + 70 * MS, 1], [sent + 90 * MS, 1]]
            feed.add(RequestRecord(index=0, sent_ns=sent, done_ns=done, events=events))
            failed = RequestRecord(index=1, sent_ns=sent, done_ns=done)
            failed.fail(ErrorKind.HTTP_ERROR, "HTTP 500", done, 500)
            feed.add(failed)

        d.call(finish_two)
        w.wait(f"{xs('fig-lag')} === 2")
        w.wait("document.getElementById('fig-errors').data.some(t => t.meta === 'errors.http_error')")
        for fig in ("fig-ttft", "fig-itl", "fig-tput", "fig-errors"):
            w.wait(f"({WAIT_TEXT})('{fig}').length === 0")
            assert page.evaluate(f"({TICKS})('{fig}').length") > 0, fig
        assert page.evaluate("document.getElementById('fig-ttft').data[0].y[1]") == pytest.approx(50.0)
        assert _waits(page, "fig-sweep-ttft") == ["no level finished yet"]

        def level_ends() -> None:
            feed.level_done(level_summary(0))  # concurrency 1
            now[0] += 1.0

        d.call(level_ends)
        w.wait(f"{xs('fig-sweep-ttft', 1)} === 1")
        for fig in ("fig-sweep-ttft", "fig-sweep-tput"):
            w.wait(f"({WAIT_TEXT})('{fig}').length === 0")
            axis = page.evaluate(f"document.getElementById('{fig}')._fullLayout.xaxis")
            assert axis["visible"] and axis["title"]["text"] == "concurrency (users)"
            assert axis["range"][0] >= 0 and axis["range"][0] < 1 < axis["range"][1], axis["range"]
        assert page.evaluate("document.getElementById('fig-sweep-tput').data[0].x") == [1]
        assert page.evaluate(NEGATIVE_TICKS) == []
        w.shot("first-level")
        assert w.errors == [] and w.dialogs == []
    finally:
        page.close()
