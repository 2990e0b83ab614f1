"""benchmarks/compat/llamacpp.sh runs loadgen once per transport the registry holds (its
--dry-run prints the commands; the run itself needs llama.cpp's server, built by hand)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from loadgen.client.transports import transport_names
from loadgen.orchestrate.config import DEFAULT_TRANSPORT

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compat" / "llamacpp.sh"


def test_the_llamacpp_script_runs_every_transport_the_default_first() -> None:
    # issue 39, defect 7: it ran aiohttp and httpx, never the default (fast)
    assert '"${1:-}" = "--dry-run"' in SCRIPT.read_text()  # else running it would build llama.cpp
    env = {**os.environ, "PYTHON": sys.executable}
    res = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    runs = [shlex.split(line) for line in res.stdout.splitlines()]
    assert all(run[:4] == ["timeout", "300", "loadgen", "run"] for run in runs), res.stdout
    transports = [run[run.index("--transport") + 1] for run in runs]
    assert transports == [DEFAULT_TRANSPORT, *(t for t in transport_names() if t != DEFAULT_TRANSPORT)]
    assert set(transports) == {"fast", "aiohttp", "httpx"}
