"""The run report: sections, figures equal to the summary, self-containment, escaping."""

from __future__ import annotations

import importlib
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ConfigError
from loadgen.metrics import per_request_frame, summarize_level
from loadgen.records import ErrorKind, RequestRecord
from loadgen.report.files import RunWriter, read_records, read_summary
from loadgen.report.html import SECTIONS, render_run_report
from loadgen.report.page import plotly_js
from loadgen.report.request_figures import default_timeline_level
from loadgen.report.rundata import load_run
from tests.report.conftest import figures, trace
from tests.report.synth import EVIL, Spec, make_run
from tests.scripted_server import Script, ScriptedServerProcess


def test_every_section_is_there(report: Path) -> None:
    html = report.read_text(encoding="utf-8")
    assert report.name == "report.html"
    for sid in SECTIONS:
        assert html.count(f'<section id="{sid}">') == 1, sid
        assert f'href="#{sid}"' in html
    assert len(SECTIONS) == 11


def test_plotly_embedded_once_and_nothing_fetched(report: Path) -> None:
    html = report.read_text(encoding="utf-8")
    js = plotly_js()
    assert html.count(js[:300]) == 1  # the bundle's licence header: embedded exactly once
    assert "<script src" not in html and "<link" not in html and "@import" not in html
    assert "cdn.plot.ly" not in html.replace(js, "")
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp and "default-src 'none'" in csp.group(1) and "connect-src 'none'" in csp.group(1)
    # every figure div has its data block, and each is drawn by one Plotly.newPlot loop
    figs = figures(html)
    assert set(figs) == set(re.findall(r'<div id="([\w-]+)" class="lg-plot"', html))
    assert html.count("Plotly.newPlot(") == js.count("Plotly.newPlot(") + 1


def test_latency_figure_equals_the_summary(run_folder: Path, report: Path) -> None:
    summary = read_summary(run_folder)
    fig = figures(report.read_text(encoding="utf-8"))["fig-latency"]
    levels = sorted(summary["levels"], key=lambda lv: lv["load"]["value"])
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        for stat in ("p50", "p90", "p99"):
            t = trace(fig, f"{key}.{stat}")
            assert t["x"] == [lv["load"]["value"] for lv in levels]
            assert t["y"] == [lv[key][stat] for lv in levels], (key, stat)
    # the SLO limit is drawn on the TTFT panel
    assert any(s.get("y0") == 100.0 and s.get("yref") == "y" for s in fig["layout"]["shapes"])


def test_throughput_figure_equals_the_summary(run_folder: Path, report: Path) -> None:
    summary = read_summary(run_folder)
    fig = figures(report.read_text(encoding="utf-8"))["fig-throughput"]
    lv = summary["levels"]
    assert trace(fig, "throughput.output_tokens_per_s")["y"] == [x["throughput"]["output_tokens_per_s"] for x in lv]
    assert trace(fig, "goodput.requests_per_s")["y"] == [x["goodput"]["requests_per_s"] for x in lv]
    assert trace(fig, "goodput.slo_attainment")["y"] == [100 * x["goodput"]["slo_attainment"] for x in lv]
    cap, knee = summary["capacity"], summary["saturation"]
    assert cap["status"] == "ok" and knee["found"]
    lines_x = {s["x0"] for s in fig["layout"]["shapes"] if s.get("x0") == s.get("x1") and s["type"] == "line"}
    assert cap["value"] in lines_x and knee["load"] in lines_x
    assert any(s.get("y0") == 100 * cap["target"] for s in fig["layout"]["shapes"])
    # the loads span 16x: a log axis, where annotations sit at log10 of the load
    assert fig["layout"]["xaxis3"]["type"] == "log"
    notes = {a["text"]: a["x"] for a in fig["layout"]["annotations"] if a.get("xref") == "x3"}
    assert notes["knee 16"] == pytest.approx(math.log10(16))
    assert notes[f"capacity {cap['value']:.3g}"] == pytest.approx(math.log10(cap["value"]))


def test_cdfs_are_exact_ecdf_points(run_folder: Path, report: Path) -> None:
    summary = read_summary(run_folder)
    fig = figures(report.read_text(encoding="utf-8"))["fig-cdf"]
    for i, lv in enumerate(summary["levels"]):
        for key in ("ttft_ms", "itl_ms", "tpot_ms"):
            t = trace(fig, f"cdf.{i}.{key}")
            assert t["x"][0] == pytest.approx(lv[key]["min"], abs=1e-3)
            assert t["x"][-1] == pytest.approx(lv[key]["max"], abs=1e-3)
            assert t["y"][-1] == 1.0 and t["x"] == sorted(t["x"])
            # the ECDF at the median point is 50% (within one sample)
            k = int(np.searchsorted(t["x"], lv[key]["p50"], side="right")) - 1
            assert abs(t["y"][k] - 0.5) <= 2 / lv[key]["count"] + 0.02


def test_tokens_client_failures_and_server(run_folder: Path, report: Path) -> None:
    summary = read_summary(run_folder)
    figs = figures(report.read_text(encoding="utf-8"))
    lv = summary["levels"]
    assert trace(figs["fig-tokens"], "events.coalesced_events")["y"] == [x["events"]["coalesced_events"] for x in lv]
    assert trace(figs["fig-client"], "client.loop_lag_ms.p99")["y"] == [x["client"]["loop_lag_ms"]["p99"] for x in lv]
    assert trace(figs["fig-client"], "client.send_lateness_ms.p99")["y"] == [
        x["client"]["send_lateness_ms"]["p99"] for x in lv
    ]
    # tokens-per-event shares add up to 1 per level
    for i in range(len(lv)):
        assert sum(trace(figs["fig-tokens"], f"tokens_per_event.{i}")["y"]) == pytest.approx(1.0, abs=1e-3)
    # failures: the bars count every failed request, by kind
    by_kind: dict[str, int] = {}
    for x in lv:
        for kind, n in x["requests"]["by_error"].items():
            by_kind[kind] = by_kind.get(kind, 0) + n
    assert by_kind and all(sum(trace(figs["fig-failures"], f"failures.{k}")["y"]) == n for k, n in by_kind.items())
    # server metrics: one point per scraped line (the torn last line skipped)
    n_lines = len((run_folder / "server_metrics.jsonl").read_text().splitlines()) - 1
    assert len(trace(figs["fig-server"], "server.running")["y"]) == n_lines
    assert trace(figs["fig-server"], "server.prefix_hit_rate")["y"][1] == pytest.approx(45.0)


def test_itl_over_time_marks_long_prompts(run_folder: Path, report: Path) -> None:
    html = report.read_text(encoding="utf-8")
    fig = figures(html)["fig-itl-time"]
    frame = per_request_frame(read_records(run_folder))
    n_long = int((frame["prompt_tokens"].fillna(frame["target_prompt_tokens"]) >= 200).sum())
    assert len(trace(fig, "itl_time.long")["x"]) == n_long > 0
    assert f"{n_long} long prompts" in html
    assert max(v for v in trace(fig, "itl_time.max")["y"] if v is not None) == pytest.approx(
        max(lv["itl_ms"]["max"] for lv in read_summary(run_folder)["levels"]), abs=1e-3
    )


def test_timeline_opens_on_the_knee_and_is_downsampled(run_folder: Path, report: Path) -> None:
    fig = figures(report.read_text(encoding="utf-8"))["fig-timeline"]
    data = load_run(run_folder)
    chosen = default_timeline_level(data)
    assert data.summary.saturation is not None
    assert chosen == data.summary.saturation.index == 2
    visible = {t["meta"].split(".")[1] for t in fig["data"] if t["visible"]}
    assert visible == {str(chosen)}
    decode = trace(fig, f"timeline.{chosen}.decode")
    n_ok = data.levels[chosen].requests.ok
    assert len(decode["x"]) == 3 * n_ok  # start, end, gap per successful request
    assert len(fig["layout"]["updatemenus"][0]["buttons"]) == len(data.levels) == 4


def test_level_table_and_headline(run_folder: Path, report: Path) -> None:
    html = report.read_text(encoding="utf-8")
    table = html.split('id="level-table"')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + len(read_summary(run_folder)["levels"])
    assert 'id="answer-capacity"' in html and "between 1 and 4 users" in html
    assert 'id="answer-knee"' in html and "16 users" in html
    assert 'class="banner warn" id="client-verdict"' in html and "Client-bound" in html


def test_user_text_is_escaped(report: Path) -> None:
    html = report.read_text(encoding="utf-8")
    assert EVIL not in html
    assert "<img" not in html.replace(plotly_js(), "")
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 5  # model, label, workload, URL, error…


def test_without_server_metrics_or_failures(tmp_path: Path) -> None:
    folder = make_run(
        tmp_path / "plain", Spec(failures=False, server_metrics=False, per_level=20, client_bound_level=None)
    )
    html = render_run_report(folder, tmp_path / "out" / "r.html").read_text(encoding="utf-8")
    assert "Not scraped (server_metrics.jsonl absent)" in html and "No failed requests." in html
    assert 'id="fig-server"' not in html and 'id="fig-failures"' not in html


def test_rate_levels_and_soak_windows(tmp_path: Path) -> None:
    folder = make_run(tmp_path / "rate", Spec(mode="rate", loads=(5.0, 10.0), per_level=30, soak_windows_s=0.5))
    html = render_run_report(folder).read_text(encoding="utf-8")
    figs = figures(html)
    summary = read_summary(folder)
    assert trace(figs["fig-latency"], "ttft_queued_ms.p50")["y"] == [
        lv["ttft_queued_ms"]["p50"] for lv in summary["levels"]
    ]
    assert "late/dropped" in html
    w = summary["levels"][0]["windows"]
    assert trace(figs["fig-windows"], "windows.0.output_tokens_per_s")["y"] == [x["output_tokens_per_s"] for x in w]


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run folder"):
        render_run_report(tmp_path)
    with pytest.raises(ConfigError, match="not a folder"):
        render_run_report(tmp_path / "missing")
    (tmp_path / "summary.json").write_text('{"levels": []}')
    with pytest.raises(ConfigError, match=r"records.jsonl"):
        render_run_report(tmp_path)


def test_renders_a_summary_written_mid_run(run_folder: Path, tmp_path: Path) -> None:
    """An interrupted run's summary has levels only (no capacity yet): still a report."""
    folder = tmp_path / "partial"
    shutil.copytree(run_folder, folder)
    summary = read_summary(folder)
    (folder / "summary.json").write_text(json.dumps({"levels": summary["levels"][:2]}))
    (folder / "run.json").unlink()
    html = render_run_report(folder).read_text(encoding="utf-8")
    assert html.count("<section id=") == len(SECTIONS)


def test_empty_records_and_an_all_failed_level(tmp_path: Path) -> None:
    folder = make_run(tmp_path / "empty", Spec(per_level=5, server_metrics=False))
    (folder / "records.jsonl").write_text("")
    html = render_run_report(folder).read_text(encoding="utf-8")
    assert html.count("<section id=") == len(SECTIONS) and "No successful request to plot." in html

    failed = [
        RequestRecord(
            index=i,
            scheduled_ns=10**12 + i,
            sent_ns=10**12 + i,
            done_ns=10**12 + i + 10**6,
            status=ErrorKind.HTTP_ERROR,
            error="HTTP 503",
        )
        for i in range(5)
    ]
    with RunWriter(tmp_path / "failed") as w:
        for r in failed:
            w.append(r)
        w.write_summary({"levels": [summarize_level(failed, load={"mode": "rate", "value": 2.0}).to_json()]})
    html = render_run_report(tmp_path / "failed").read_text(encoding="utf-8")
    figs = figures(html)
    assert sum(trace(figs["fig-failures"], "failures.http_error")["y"]) == 5
    assert trace(figs["fig-latency"], "ttft_ms.p50")["y"] == [None]


def test_a_real_run_folder(tmp_path: Path) -> None:
    """A folder written by `loadgen run` against the scripted server renders, and its
    figures carry the run's summary."""
    out = tmp_path / "real"
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.001)) as srv:
        res = CliRunner().invoke(
            app,
            [
                "run",
                "--url",
                srv.url,
                "--levels",
                "1,2",
                "--requests",
                "6",
                "--prompt-tokens",
                "16",
                "--output-tokens",
                "8",
                "--slo",
                "ttft=1s",
                "--out",
                str(out),
                "--quiet",
            ],
        )
    assert res.exit_code == 0, res.output
    path = render_run_report(out, tmp_path / "r.html")
    fig = figures(path.read_text(encoding="utf-8"))["fig-latency"]
    levels = read_summary(out)["levels"]
    assert trace(fig, "ttft_ms.p50")["y"] == [lv["ttft_ms"]["p50"] for lv in levels]
    assert trace(fig, "ttft_ms.p50")["x"] == [1, 2]
    html = path.read_text(encoding="utf-8")
    assert (
        "<dt>prompt lengths</dt><dd>calibrated from the server&#x27;s streamed usage: 1.00 tokens per word + 3.00"
        in html
    )
    assert (
        '<p class="note" id="token-source">Output tokens counted one per event, scaled to the server&#x27;s '
        "final usage.completion_tokens.</p>"
    ) in html


@pytest.mark.parametrize(
    "module",
    [
        "html",
        "page",
        "figures",
        "request_figures",
        "time_figures",
        "server_figures",
        "compare",
        "compare_figures",
        "plotdata",
        "rundata",
        "files",
        "readers",
        "recordio",
    ],
)
def test_public_names(module: str) -> None:
    mod = importlib.import_module(f"loadgen.report.{module}")
    assert mod.__all__ and all(hasattr(mod, name) for name in mod.__all__)


def test_loop_lag_series_is_drawn_when_the_summary_has_one(run_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "lag"
    shutil.copytree(run_folder, folder)
    summary = read_summary(folder)
    summary["levels"][1]["client"]["loop_lag_over_time"] = {"t_s": [3.0, 4.0], "max_ms": [0.5, 12.0]}
    (folder / "summary.json").write_text(json.dumps(summary))
    html = render_run_report(folder).read_text(encoding="utf-8")
    lag = trace(figures(html)["fig-lateness"], "client.loop_lag.1")
    assert (lag["x"], lag["y"]) == ([3.0, 4.0], [0.5, 12.0])
    assert "holds no lag time series" not in html


def test_how_tokens_were_counted_and_prompts_calibrated(run_folder: Path, tmp_path: Path) -> None:
    """A run whose server streamed no usage for some requests, calibrated from non-streamed answers."""
    folder = tmp_path / "no-usage"
    shutil.copytree(run_folder, folder)
    summary = read_summary(folder)
    summary["levels"][0]["events"]["token_source"] = {"events": 30, "events_corrected": 10}
    (folder / "summary.json").write_text(json.dumps(summary))
    run = json.loads((folder / "run.json").read_text())
    run["calibration"] = {
        "calibrated": True,
        "method": "non-stream",
        "samples": [[32, 43], [256, 290]],
        "tokens_per_word": 1.1026785714285714,
        "overhead_tokens": 7.714285714285722,
    }
    (folder / "run.json").write_text(json.dumps(run))
    html = render_run_report(folder).read_text(encoding="utf-8")
    n = 40 + sum(sum(lv["events"]["token_source"].values()) for lv in summary["levels"][1:])
    note = html.split('id="token-source">')[1].split("</p>")[0]
    assert note == (
        f"Output tokens counted one per event, scaled to the server&#x27;s final usage.completion_tokens "
        f"for {n - 30} of {n} requests; counted one per event (the server streamed no usage; exact when "
        f"each event holds one token) for 30 of {n} requests."
    )
    assert html.index('id="token-source"') > html.index('<section id="tokens">')
    assert (
        "<dt>prompt lengths</dt><dd>calibrated from non-streamed answers&#x27; usage (the server streams none): "
        "1.10 tokens per word + 7.71 template tokens</dd>"
    ) in html
    run["calibration"] = {"calibrated": False, "method": None, "reason": "the server streams no usage.prompt_tokens"}
    (folder / "run.json").write_text(json.dumps(run))
    html = render_run_report(folder).read_text(encoding="utf-8")
    assert "<dd>not calibrated: the server streams no usage.prompt_tokens</dd>" in html
