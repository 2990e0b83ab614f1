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


VLLM_SCRIPT = SCRIPT.with_name("vllm_cpu.sh")


def _option(run: list[str], name: str) -> str:
    return run[run.index(name) + 1]


def test_the_vllm_script_compares_the_same_requests_that_vllm_counts() -> None:
    """Its three clients at the same users, requests and lengths, and none of them sends a
    request of its own that vLLM's TTFT histogram would count beside the measured ones
    (issue 39 counted loadgen's two calibration requests: +32 ms at 16 users that were the
    comparison's, not the client's)."""
    assert '"${1:-}" = "--dry-run"' in VLLM_SCRIPT.read_text()  # else running it would build vLLM's venv
    env = {**os.environ, "PYTHON": sys.executable}
    res = subprocess.run(
        ["bash", str(VLLM_SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    loadgen, bench, guidellm = (shlex.split(line) for line in res.stdout.splitlines())
    assert loadgen[:5] == ["timeout", "300", sys.executable, "-m", "loadgen"], loadgen
    assert "--no-calibrate" in loadgen and _option(loadgen, "--transport") == DEFAULT_TRANSPORT
    assert bench[bench.index("bench") - 1].endswith("/vllm") and _option(bench, "--ready-check-timeout-sec") == "0"
    assert "--num-warmups" not in bench or _option(bench, "--num-warmups") == "0"
    assert guidellm[4].endswith("/guidellm") and "--warmup" not in " ".join(guidellm)
    users = [_option(loadgen, "--concurrency"), _option(bench, "--max-concurrency")]
    requests = [_option(loadgen, "--requests"), _option(bench, "--num-prompts")]
    assert _option(guidellm, "--profile") == f"kind=concurrent,streams={users[0]}"
    assert _option(guidellm, "--constraint") == f"kind=max_requests,count={requests[0]}"
    assert users[0] == users[1] and requests[0] == requests[1]
    lengths = {
        (_option(loadgen, "--prompt-tokens"), _option(loadgen, "--output-tokens")),
        (_option(bench, "--random-input-len"), _option(bench, "--random-output-len")),
    }
    assert lengths == {("128", "32")}
    assert _option(guidellm, "--data") == "kind=synthetic_text,prompt_tokens=128,output_tokens=32"
    assert _option(bench, "--endpoint") == "/v1/chat/completions"  # loadgen's and GuideLLM's default API
