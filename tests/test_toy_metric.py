"""Adding a metric is one catalogue entry plus its computation: a toy metric, registered
here only, is an SLO, a precision target, a comparison row, a trial statistic and a console
row on real runs (``loadgen run`` against a scripted server on loopback, then
``render_comparison`` of the run folders).

The toy is the decode time, ``e2e_ms - ttft_ms``: the time from a request's first token to
its last. Nothing of loadgen names it: the SLO parser, the precision targets, the
comparison, the trials and the console find it in :mod:`loadgen.metrics.catalog`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ConfigError
from loadgen.load.precision import parse_target
from loadgen.metrics.catalog import METRICS, Metric, register, unregister
from loadgen.metrics.per_request import per_request_frame
from loadgen.metrics.slo import parse_slo
from loadgen.report.compare import render_comparison
from loadgen.report.files import read_records
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()
TOKENS = 8  # output tokens a request: seven gaps of ITL_S after the first token


def decode_ms(frame: pd.DataFrame) -> npt.NDArray[np.float64]:
    """The toy metric's computation: first token to last, per request (NaN without a token)."""
    return np.asarray(frame["e2e_ms"].to_numpy(np.float64) - frame["ttft_ms"].to_numpy(np.float64))


TOY = Metric(
    "decode_ms",
    "decode time",
    "ms",
    compute=decode_ms,
    slo="decode",
    precision="decode",
    console="Decode",
    compared=True,
    trials=("p50",),
    streamed_only=True,
)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.004, itl_s=0.002)) as srv:
        yield srv


@pytest.fixture
def toy() -> Iterator[Metric]:
    before = dict(METRICS)
    metric = register(TOY)
    try:
        yield metric
    finally:
        unregister(TOY.name)
    assert dict(METRICS) == before  # the registry as it was, in its order


def _run(url: str, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            url,
            "--api",
            "completions",
            "--no-calibrate",
            "--quiet",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            str(TOKENS),
            "--concurrency",
            "4",
            "--out",
            str(out),
            *args,
        ],
    )
    assert res.exit_code == 0, res.output
    level: dict[str, Any] = json.loads((out / "summary.json").read_text())["levels"][0]
    return level, res.output


def test_the_toy_is_an_slo_a_precision_target_and_a_console_row(
    toy: Metric, server: ScriptedServerProcess, tmp_path: Path
) -> None:
    assert str(parse_slo("decode:p90=1s")) == "decode:p90=1000ms"
    assert parse_target("decode.p50=5%").label == "decode.p50"
    with pytest.raises(ConfigError, match=r"METRIC one of ttft, .*, task, decode; STAT"):
        parse_slo("latency=1s")
    with pytest.raises(ValueError, match=r"choose one of: ttft, .*, ttfa, decode$"):
        parse_target("latency.p50=5%")

    level, output = _run(
        server.url,
        tmp_path / "a",
        "--requests",
        "600",
        "--precision",
        "decode.p50=30%",
        "--max-duration",
        "120",
        "--slo",
        "decode=0.5ms",  # below seven gaps of 2 ms: missed, unless the client read them at once
        "--slo",
        "decode:p90=10s",
    )
    frame = per_request_frame([r for r in read_records(tmp_path / "a") if not r.warmup])
    ok = frame["ok"].to_numpy(bool)
    values = decode_ms(frame)[ok]
    extra = level["extra"]["decode_ms"]  # summarised by the catalogue's entry, with intervals
    assert extra["count"] == int(ok.sum()) > 0
    assert extra["p50"] == pytest.approx(float(np.percentile(values, 50)), rel=1e-6)
    assert set(extra["intervals"]) >= {"mean", "p50", "p99"}
    assert level["stopped"].startswith("precision met: decode.p50 ±"), level["stopped"]
    assert level["goodput"]["slos"] == ["decode=0.5ms"]
    attained = ok & (decode_ms(frame) <= 0.5)  # the SLO judged each request by the toy's own values
    assert level["goodput"]["slo_attainment"] == pytest.approx(attained.mean()) and attained.mean() < 0.5
    (check,) = level["goodput"]["checks"]
    assert check["slo"] == "decode:p90=10000ms" and check["pass"] is True
    assert check["value_ms"] == pytest.approx(extra["p90"])
    assert [m["metric"] for m in level["mlperf"]] == ["decode_ms"]
    assert re.search(r"^│ Decode\s*│\s*[\d.]+ ms", output, re.MULTILINE), output  # its row in the level's table
    # more than half over the bound: MLPerf's early stopping shows p99 above it, and says so
    (m,) = level["mlperf"]
    failed = f"MLPerf early stopping (99% confidence): Decode p99 ≤ 0.5 ms: failed ({m['overlatency']:,} of {m['n']:,}"
    assert failed in output, output
    assert "MLPerf early stopping: undecided" not in output


def test_the_toy_is_compared_and_kept_between_trials(
    toy: Metric, server: ScriptedServerProcess, tmp_path: Path
) -> None:
    plain = [_run(server.url, tmp_path / name, "--requests", "40")[0] for name in ("p", "q")]
    assert all("decode_ms" in lv["extra"] for lv in plain)
    page = render_comparison([tmp_path / "p", tmp_path / "q"], tmp_path / "pq.html", resamples=200)
    cells = re.findall(r'data-metric="decode_ms"', page.read_text())
    assert cells, "no comparison row of the toy metric"

    trials = [_run(server.url, tmp_path / name, "--requests", "12", "--trials", "2")[0] for name in ("t", "u")]
    for lv in trials:
        stat = lv["trials"]["metrics"]["decode_ms.p50"]
        assert len(stat["values"]) == 2 and stat["mean"] is not None
    page = render_comparison([tmp_path / "t", tmp_path / "u"], tmp_path / "tu.html", resamples=200)
    text = page.read_text()
    assert 'data-metric="decode_ms"' in text and "Welch over trials" in text


def test_unregistered_is_gone() -> None:
    """Run after the fixture's cleanup: the toy left nothing behind."""
    assert "decode_ms" not in METRICS
    with pytest.raises(ConfigError, match="unknown metric 'decode'"):
        parse_slo("decode=1s")
    with pytest.raises(ValueError, match="unknown metric 'decode'"):
        parse_target("decode.p50=5%")
    with pytest.raises(ConfigError, match="registered already"):
        register(Metric("ttft_ms", "TTFT again", "ms", column="ttft_ms"))
