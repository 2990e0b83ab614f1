"""End to end in a real browser: ``loadgen run --dashboard`` against ``loadgen serve --engine
sim`` (each in its own process, on loopback), and ``loadgen watch`` on a folder another
``loadgen run`` is writing. The page's curves gain points, its level counter moves, Skip
level ends a level, Stop ends the run as Ctrl-C does (exit 130, an interrupted summary and
report), nothing leaves the page's origin. Every wait is on a count or a text, each with a
guard; every run is bounded in requests and time and ends by itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.server.process import ServerProcess
from tests.dashboard.conftest import Loadgen
from tests.dashboard.test_page_browser import NEGATIVE_TICKS, WAIT_TEXT, Watched, xs
from tests.report.test_browser import browser, pytestmark  # noqa: F401  (the fixture; skipped without a browser)


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with ServerProcess(["--engine", "sim"]) as url:
        yield url


def _run_args(url: str, out: Path, *more: str) -> list[str]:
    target = ["--url", url, "--api", "completions", "--prompt-tokens", "64", "--output-tokens", "16"]
    return ["run", *target, "--out", str(out), "--quiet", *more]


def _same_origin(w: Watched, origin: str) -> None:
    assert w.requests and all(u.startswith(origin) for u in w.requests), w.requests
    assert not w.errors and not w.dialogs, (w.errors, w.dialogs)


def test_a_run_with_its_dashboard_skip_and_stop(browser: Any, sim: str, tmp_path: Path) -> None:  # noqa: F811
    """Three levels of 2 minutes each: the page skips the first, stops the run in the second."""
    out = tmp_path / "run"
    run = Loadgen(_run_args(sim, out, "--levels", "1,2,4", "--duration", "120", "--dashboard-port", "0"))
    try:
        url = run.url("dashboard: ")
        origin = url.split("/", 3)[:3]
        w = Watched(browser, url)
        page = w.page
        w.wait("document.getElementById('lg-heading').textContent.startsWith('level 1 of 3')")
        w.wait(f"{xs('fig-ttft')} >= 2")
        n1 = page.evaluate(xs("fig-ttft"))
        w.wait(f"{xs('fig-ttft')} >= {n1 + 2}")  # points keep coming
        w.wait("document.getElementById('fig-ttft').data[0].y.some(v => v !== null && v > 0)")
        assert page.inner_text("#lg-target") == "1 users" or "1 user" in page.inner_text("#lg-target")
        page.click("#lg-skip")
        w.wait("document.getElementById('lg-heading').textContent.startsWith('level 2 of 3')")
        w.wait(f"{xs('fig-sweep-ttft', 1)} >= 1 || {xs('fig-sweep-ttft', 0)} >= 1")  # level 1 on the sweep curve
        w.wait("document.getElementById('lg-verdict').textContent.endsWith('(level 1)')")  # its client health
        w.wait(f"{xs('fig-tput')} >= {n1 + 4}")
        page_verdict = page.inner_text("#lg-verdict")
        w.shot("e2e-live")
        page.click("#lg-stop")
        w.wait("document.getElementById('lg-state').textContent === 'interrupted'")
        _same_origin(w, "/".join(origin))
        code = run.wait()
    finally:
        run.close()
    assert code == 130, run.text()[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and len(summary["levels"]) == 2
    first = summary["levels"][0]
    assert page_verdict == f"{first['client']['verdict']} (level 1)"  # the page showed the summary's verdict
    assert first["stopped"] == "skipped from the dashboard" and first["duration_s"] < 60  # of its 120 s
    assert first["requests"]["ok"] > 0
    report = (out / "report.html").read_text()
    assert "interrupted" in report.lower()
    assert "token" not in url  # on loopback: no token in the URL


def test_the_first_level_of_a_run_before_and_after_it_ends(browser: Any, sim: str, tmp_path: Path) -> None:  # noqa: F811
    """While the first level runs, the panels with nothing to draw say what they wait for
    (no axis from -1 to 6); once it ends (Skip), the sweep curves show it on real axes."""
    out = tmp_path / "run"
    run = Loadgen(_run_args(sim, out, "--levels", "1,2", "--duration", "120", "--dashboard-port", "0"))
    try:
        w = Watched(browser, run.url("dashboard: "))
        page = w.page
        w.wait("document.getElementById('lg-heading').textContent.startsWith('level 1 of 2')")
        w.wait(f"({WAIT_TEXT})('fig-errors').join() === 'no failures yet'")  # the sim fails none
        for fig in ("fig-sweep-ttft", "fig-sweep-tput"):
            assert page.evaluate(f"({WAIT_TEXT})('{fig}')") == ["no level finished yet"]
            assert page.evaluate(f"document.getElementById('{fig}')._fullLayout.xaxis.visible") is False
        w.wait(f"({WAIT_TEXT})('fig-ttft').length === 0")  # a request finished: TTFT drawn
        assert page.evaluate(NEGATIVE_TICKS) == []
        w.shot("e2e-first-level")
        page.click("#lg-skip")
        w.wait(f"{xs('fig-sweep-ttft', 1)} === 1")
        for fig in ("fig-sweep-ttft", "fig-sweep-tput"):
            w.wait(f"({WAIT_TEXT})('{fig}').length === 0")
            axis = page.evaluate(f"document.getElementById('{fig}')._fullLayout.xaxis")
            assert axis["visible"] and axis["title"]["text"] == "concurrency (users)"
            assert 0 <= axis["range"][0] < 1 < axis["range"][1], axis["range"]
        assert page.evaluate("document.getElementById('fig-sweep-tput').data[0].x") == [1]
        assert page.evaluate(NEGATIVE_TICKS) == []
        w.shot("e2e-first-level-done")
        page.click("#lg-skip")  # the last level: the run ends as finished, no request failed
        w.wait("document.getElementById('lg-state').textContent === 'finished'")
        w.wait(f"({WAIT_TEXT})('fig-errors').join() === 'no request failed'")
        assert w.errors == [] and w.dialogs == []
        code = run.wait()
    finally:
        run.close()
    assert code == 0, run.text()[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [lv["requests"]["failed"] for lv in summary["levels"]] == [0, 0]


def test_loadgen_watch_follows_a_folder_being_written(browser: Any, sim: str, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "watched"
    watch = Loadgen(["watch", str(out), "--port", "0", "--until-done"])  # before the run: an empty folder
    run = None
    try:
        url = watch.url("watching ")
        w = Watched(browser, url)
        page = w.page
        run = Loadgen(_run_args(sim, out, "--levels", "1,2", "--duration", "4", "--scrape-metrics"))
        w.wait("document.getElementById('lg-heading').textContent.startsWith('level 1 of 2')")
        w.wait(f"{xs('fig-ttft')} >= 2")
        w.wait("document.getElementById('lg-heading').textContent.startsWith('level 2 of 2')")
        assert page.locator("#lg-stop").is_hidden() and page.locator("#lg-skip").is_hidden()  # it runs no load
        assert run.wait() == 0, run.text()[-2000:]
        w.wait("document.getElementById('lg-state').textContent === 'finished'")
        w.wait(f"{xs('fig-sweep-tput')} === 2")  # both levels on the sweep curves
        w.wait("!document.getElementById('lg-report').hidden")
        w.shot("e2e-watch")
        href = page.get_attribute("#lg-report", "href")
        assert href is not None and href.startswith("/report")
        _same_origin(w, "/".join(url.split("/", 3)[:3]))
        assert watch.wait() == 0, watch.text()[-2000:]  # --until-done: it ends by itself
    finally:
        for p in (watch, run):
            if p is not None:
                p.close()
    assert "stopped watching" in watch.text()


def test_a_dashboard_port_in_use_or_out_of_range_is_one_line(sim: str, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = Loadgen(_run_args(sim, tmp_path / "a", "--requests", "2", "--dashboard-port", str(port)))
        code = run.wait()
    assert code == 2
    assert run.lines == [
        f"error: --dashboard-port: cannot serve the dashboard on 127.0.0.1:{port}: Address already in use"
    ]
    assert not (tmp_path / "a" / "records.jsonl").exists()  # nothing was sent
    run = Loadgen(_run_args(sim, tmp_path / "b", "--requests", "2", "--dashboard-port", "70000"))
    assert run.wait() == 2
    assert len(run.lines) == 1 and "--dashboard: port must be an integer in [0, 65535]" in run.lines[0], run.lines
