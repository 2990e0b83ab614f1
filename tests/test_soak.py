"""The soak benchmark, two minutes of it: ``loadgen run`` at a fixed rate against
``loadgen serve`` (both real subprocesses on 127.0.0.1) loses no record, leaks no
descriptor and grows in memory by less than twice the target per request on each side.

Memory, not time, is judged: the slope of resident memory over requests after a
minute of warm-up (interpreter, pools and memos settle), in MB per 100,000 requests,
against 2 x the 50 MB target of ``benchmarks/soak.py`` (RSS moves in whole pages and
arenas, so two minutes of samples are noisy). The server runs with
``--request-log 0`` and ``--no-prefix-caching``: its request log (10,000 entries, about
12 MB) and its prefix cache's block index (one entry per KV block: 26,674 blocks for
Llama-3.1-8B on an H100, a few MB) are bounded by design but take longer than this
test to fill with random prompts; the soak benchmark keeps both.
Descriptors may grow with the connection pool when a busy machine stretches latencies
(a few), never with the number of requests (thousands).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "soak.py"
BOUND_MB_PER_100K = 2 * 50.0
FD_SLACK = 32


def _soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loadgen_soak_benchmark", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_growth_fit_is_a_slope_per_100k_requests() -> None:
    soak = _soak_module()
    requests = [0, 1000, 2000, 3000, 4000]
    assert soak.mb_per_100k(requests, [100.0, 100.5, 101.0, 101.5, 102.0]) == pytest.approx(50.0)
    assert soak.mb_per_100k(requests, [100.0] * 5) == pytest.approx(0.0, abs=1e-9)
    assert soak.mb_per_100k([0, 10, 20], [1.0, 2.0, 3.0]) is None  # too few requests to judge


@pytest.mark.slow
def test_two_minutes_at_a_fixed_rate_lose_nothing_and_leak_nothing(tmp_path: Path) -> None:
    soak = _soak_module()
    v = soak.soak(
        2.0,
        40.0,
        prompt_tokens=128,
        output_tokens=32,
        interval_s=5.0,
        warmup_s=60.0,
        out=tmp_path / "run",
        server_args=["--request-log", "0", "--no-prefix-caching"],
    )
    table = "\n".join([soak.HEADER, *map(soak.row, v.samples), *soak.verdict_lines(v)])
    assert v.client_exit == 0, table
    assert v.sent > 3000 and v.records == v.sent == v.server_finished, table  # every request sent is one record
    assert v.client_fd_drift <= FD_SLACK and v.server_fd_drift <= FD_SLACK, table
    # descriptors other than the pool's connections: none may be left behind
    assert v.client_fd_drift - v.client_socket_drift <= 1 and v.server_fd_drift - v.server_socket_drift <= 1, table
    assert v.client_mb_per_100k is not None and v.server_mb_per_100k is not None, table
    assert v.client_mb_per_100k < BOUND_MB_PER_100K, table
    assert v.server_mb_per_100k < BOUND_MB_PER_100K, table
