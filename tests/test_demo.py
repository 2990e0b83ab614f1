"""`loadgen demo` (the README's main command) and `loadgen serve` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from loadgen.cli import app


def _chat_itl_max(summary: dict) -> float:
    return max(lv["by_class"]["chat"]["itl_ms"]["max"] for lv in summary["levels"])


def test_demo_runs_both_configurations(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "demo", "--out", str(out), "--seconds", "2.5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "The lesson" in proc.stdout and "worst chat ITL" in proc.stdout
    summaries = {}
    for name in ("chunked", "unchunked"):
        folder = out / name
        assert {"run.json", "records.jsonl", "summary.json"} <= {p.name for p in folder.iterdir()}
        summaries[name] = json.loads((folder / "summary.json").read_text())
        assert [lv["load"]["value"] for lv in summaries[name]["levels"]] == [4, 8, 16, 32]
        assert all(lv["requests"]["failed"] == 0 for lv in summaries[name]["levels"])
    # the lesson: without chunking, a 10k-token prefill stalls running decodes for its whole
    # length (~0.3 s on the simulated H100); with chunking a stall is one 2048-token step
    assert _chat_itl_max(summaries["unchunked"]) > 2 * _chat_itl_max(summaries["chunked"])
    # the batch limit (8 sequences) is crossed inside the levels: the SLOs fail past it, so
    # the capacity lies between two measured levels, not beyond the last
    for name in ("chunked", "unchunked"):
        cap = summaries[name]["capacity"]
        assert cap["status"] == "ok" and 4 <= cap["value"] < 32, cap
    assert "capacity" in proc.stdout
    # the comparison leads with its verdict: the tally, the baseline named first, each count's cells
    page = (out / "comparison.html").read_text()
    assert 'class="tally"' in page and "<b>chunked</b> (baseline) → <b>unchunked</b>" in page
    # the demo scrapes its own server's /metrics: the queue and the KV cache over the run, in each report
    for name in ("chunked", "unchunked"):
        lines = [json.loads(x) for x in (out / name / "server_metrics.jsonl").read_text().splitlines()]
        assert len(lines) >= 2 and max(ln["running"] for ln in lines) > 0, lines[:3]
        assert max(ln["kv_usage"] for ln in lines) > 0
        report = (out / name / "report.html").read_text()
        assert 'id="fig-server"' in report and "Not scraped" not in report


def test_serve_rejects_bad_flags_in_one_line() -> None:
    res = CliRunner().invoke(app, ["serve", "--gpu", "h1000"])
    assert res.exit_code == 2 and "h100" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["serve", "--fail-rate", "2"])
    assert res.exit_code == 2 and "fail_rate" in res.output


def test_serve_rejects_bad_sim_precision_and_speculation_flags_in_one_line() -> None:
    for flags, key in (
        (["--dtype", "int4"], "--dtype"),
        (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype"),
        (["--speculative-tokens", "99"], "--speculative-tokens"),
        (["--speculative-tokens", "3", "--draft-model", "gpt-9"], "--draft-model"),
    ):
        res = CliRunner().invoke(app, ["serve", *flags])
        assert res.exit_code == 2 and key in res.output and "Traceback" not in res.output, res.output
