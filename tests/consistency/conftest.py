"""Real runs for the consistency tests, made once per session: ``loadgen`` as a user runs it
(a subprocess, a 200-column terminal) against the reference server (``serve --engine sim``,
ten times faster than real time) on loopback. Each load is bounded in requests or seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadgen.server.process import ServerProcess

ENV = {**os.environ, "COLUMNS": "200", "LINES": "50", "NO_COLOR": "1", "TERM": "dumb"}
WORKLOAD = ["--api", "completions", "--prompt-tokens", "uniform:min=128,max=512", "--output-tokens", "16"]


@dataclass(frozen=True)
class Ran:
    """A command's folder (or file) and what it printed."""

    path: Path
    console: str


def loadgen(*args: str, timeout: float = 240) -> str:
    """``python -m loadgen ARGS`` as a user types it; its stdout (stderr must be empty of tracebacks)."""
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="session")
def sim() -> Iterator[str]:
    with ServerProcess(["--engine", "sim", "--time-scale", "0.1"]) as url:
        yield url


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("consistency")


def _sweep(url: str, out: Path, *args: str) -> Ran:
    text = loadgen(
        "run",
        "--url",
        url,
        *WORKLOAD,
        "--warmup",
        "0",
        "--quiet",
        "--out",
        str(out),
        "--save-result",
        str(out.with_suffix(".result.json")),
        *args,
    )
    return Ran(out, text)


@pytest.fixture(scope="session")
def concurrency(sim: str, root: Path) -> Ran:
    """Two closed-loop levels of 12 requests, with an SLO (attainment, goodput, capacity)."""
    return _sweep(sim, root / "conc", "--levels", "1,4", "--requests", "12", "--slo", "ttft=50ms")


@pytest.fixture(scope="session")
def concurrency_again(sim: str, root: Path) -> Ran:
    """The same workload and levels with other arrivals' seed: the comparison's second run."""
    return _sweep(
        sim,
        root / "conc2",
        "--levels",
        "1,4",
        "--requests",
        "12",
        "--slo",
        "ttft=50ms",
        "--seed",
        "3",
        "--label",
        "again",
    )


@pytest.fixture(scope="session")
def rate(root: Path) -> Iterator[Ran]:
    """Two open-loop levels of 1 s each with two SLOs (capacity in req/s, late sends), against
    a server that fails one request in ten (failed requests count as SLO misses)."""
    with ServerProcess(["--engine", "sim", "--time-scale", "0.1", "--fail-rate", "0.1"]) as url:
        yield _sweep(
            url,
            root / "rate",
            "--rate",
            "1",
            "--levels",
            "10,40",
            "--duration",
            "1",
            "--slo",
            "ttft=20ms",
            "--slo",
            "tpot=2ms",
        )


@pytest.fixture(scope="session")
def single(sim: str, root: Path) -> Ran:
    """One level (its own table: every statistic of every latency) with a percentile check."""
    return _sweep(
        sim, root / "one", "--concurrency", "2", "--requests", "12", "--slo", "ttft=8ms", "--slo", "ttft:p90=6ms"
    )


@pytest.fixture(scope="session")
def comparison(concurrency: Ran, concurrency_again: Ran, root: Path) -> Ran:
    out = root / "comparison.html"
    return Ran(out, loadgen("compare", str(concurrency.path), str(concurrency_again.path), "--out", str(out)))


MATRIX = """
name = "consistency"
baseline = "chunked=on"
[server]
command = "loadgen serve --engine sim --time-scale 0.1 --port {port} --max-model-len 2048 {chunked}"
[grid]
chunked = { on = "--chunked-prefill", off = "--no-chunked-prefill" }
[run]
api = "completions"
prompt_tokens = "uniform:min=128,max=1024"
output_tokens = "16"
slos = ["ttft=30ms"]
[run.profile]
mode = "rate"
levels = [10, 30]
warmup_requests = 0
"""


@pytest.fixture(scope="session")
def matrix(root: Path) -> Ran:
    """Chunked prefill on and off, two open-loop levels of 1 s each (``matrix --duration``)."""
    spec = root / "matrix.toml"
    spec.write_text(MATRIX)
    out = root / "matrix"
    return Ran(out, loadgen("matrix", str(spec), "--out", str(out), "--duration", "1"))


@pytest.fixture(scope="session")
def demo(root: Path) -> Ran:
    """``loadgen demo`` with 1 s levels (its two runs, the lesson and the comparison)."""
    out = root / "demo"
    return Ran(out, loadgen("demo", "--out", str(out), "--seconds", "1", "--quiet", timeout=300))
