"""GPU telemetry end to end: the sim's DCGM-named metrics, scraped, drawn, turned into J/token."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.client.scrape import MetricsScraper
from loadgen.metrics.energy import energy_j, energy_per_token
from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
from loadgen.server.process import ServerProcess
from loadgen.server.sim.build import sim_engine
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.telemetry import IDLE_SHARE
from tests.server.helpers import make_engine, parse_prometheus, serve


def test_energy_is_the_trapezoid_clipped_to_the_window() -> None:
    t = [0, 1_000_000_000, 2_000_000_000, 4_000_000_000]
    p = [100.0, 300.0, 300.0, 100.0]
    # 0-1 s: 200 J; 1-2 s: 300 J; 2-4 s: 400 J
    assert energy_j(t, p, 0, 4_000_000_000) == pytest.approx(900.0)
    # from 0.5 s (200 W) to 3 s (200 W): 0.5 s at a mean 250 W + 300 + 1 s at a mean 250 W
    assert energy_j(t, p, 500_000_000, 3_000_000_000) == pytest.approx(125 + 300 + 250)
    assert energy_j(t, p, 0, 5_000_000_000) is None  # not covered
    assert energy_per_token(t, p, 0, 4_000_000_000, 450) == pytest.approx(2.0)
    assert energy_per_token(t, p, 0, 4_000_000_000, 0) is None


async def test_sim_metrics_carry_dcgm_names_per_gpu() -> None:
    engine = make_engine(time_scale=1.0)
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/metrics") as resp:
            samples, types = parse_prometheus(await resp.text())  # strict exposition format
        body = {"model": "test-model", "prompt": [5] * 20, "max_tokens": 40, "ignore_eos": True}
        async with session.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
        async with session.get(url + "/metrics") as resp:
            after, _ = parse_prometheus(await resp.text())
    key = ("DCGM_FI_DEV_GPU_UTIL", frozenset({("gpu", "0"), ("modelName", "loadgen sim")}))
    assert types["DCGM_FI_DEV_POWER_USAGE"] == "gauge" and key in samples
    assert samples[key] == 0.0  # idle before any request
    util = after[key]  # 40 decode steps of ~6 ms inside the scrape interval: mostly busy
    assert 0.0 < util <= 100.0
    power = after[("DCGM_FI_DEV_POWER_USAGE", key[1])]
    tdp = get_gpu("h100").board_power_w
    assert power == pytest.approx(IDLE_SHARE * tdp + (1 - IDLE_SHARE) * tdp * util / 100, rel=1e-3)


async def test_the_sim_reports_each_gpus_own_board_power() -> None:
    """Idle power is 10% of the preset's board power on every preset; an A100 40GB drawing
    work climbs towards its 400 W, not a default's."""
    tdp = {"a100-80gb": 400, "a100-40gb": 400, "h100": 700, "h200": 700, "b200": 1000, "l40s": 350, "mi300x": 750}
    labels = frozenset({("gpu", "0"), ("modelName", "loadgen sim")})
    for name, watts in tdp.items():
        config = ServeConfig(
            scheduler=SchedulerLimits(max_model_len=4096),
            sim=SimOptions(gpu=name, time_scale=1.0 if name == "a100-40gb" else 0.01),
        )
        async with serve(sim_engine(config)) as url, aiohttp.ClientSession() as session:
            async with session.get(url + "/metrics") as resp:
                idle, _ = parse_prometheus(await resp.text())
            assert idle[("DCGM_FI_DEV_POWER_USAGE", labels)] == pytest.approx(IDLE_SHARE * watts), name
            if name != "a100-40gb":
                continue
            body = {"model": "test-model", "prompt": [5] * 20, "max_tokens": 40, "ignore_eos": True}
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
            async with session.get(url + "/metrics") as resp:
                after, _ = parse_prometheus(await resp.text())
        util = after[("DCGM_FI_DEV_GPU_UTIL", labels)]
        assert 0.0 < util <= 100.0
        power = after[("DCGM_FI_DEV_POWER_USAGE", labels)]
        assert power == pytest.approx(40.0 + 360.0 * util / 100, rel=1e-3)  # 400 W at full use


async def test_extra_urls_join_the_line_and_get_no_secrets(tmp_path: Path) -> None:
    seen: list[str | None] = []

    async def dcgm(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(
            text='DCGM_FI_DEV_POWER_USAGE{gpu="0"} 250.5\nDCGM_FI_DEV_POWER_USAGE{gpu="1"} 249.5\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 40\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 60\n'
        )

    app_ = web.Application()
    app_.router.add_get("/metrics", dcgm)
    runner = web.AppRunner(app_)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    engine = make_engine()
    try:
        async with serve(engine) as url:
            scraper = MetricsScraper(
                url,
                tmp_path / "m.jsonl",
                headers={"Authorization": "Bearer SECRET"},
                extra_urls=[f"http://127.0.0.1:{port}/metrics"],
            )
            async with scraper:
                await asyncio.sleep(0.3)
    finally:
        await runner.cleanup()
    line = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[0])
    # the sim's own GPU (idle: 70 W) plus the exporter's two GPUs; utilisation averaged
    assert line["power_w"] == pytest.approx(250.5 + 249.5 + IDLE_SHARE * get_gpu("h100").board_power_w)
    assert line["gpu_util"] == pytest.approx((0 + 40 + 60) / 3 / 100)
    assert seen and all(h is None for h in seen)  # the target's key stayed with the target


def test_a_run_reports_gpu_power_and_energy_per_token(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ServerProcess(["--engine", "sim"]) as url:
        res = CliRunner().invoke(
            app,
            [
                "run",
                "--url",
                url,
                "--api",
                "completions",
                "--prompt-tokens",
                "128",
                "--output-tokens",
                "200",
                "--concurrency",
                "8",
                "--duration",
                "4",
                "--scrape-metrics",
                "--quiet",
                "--out",
                str(out),
            ],
        )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in (out / "server_metrics.jsonl").read_text().splitlines()]
    busy = [ln for ln in lines if ln["running"]]
    assert len(busy) >= 2
    assert max(ln["gpu_util"] for ln in busy) > 0.5  # eight decoding streams keep it busy
    assert all(70.0 <= ln["power_w"] <= 700.0 for ln in lines)
    html = (out / "report.html").read_text()
    assert 'id="fig-gpu"' in html and 'id="energy"' in html
    from loadgen.report.rundata import load_run
    from loadgen.report.server_figures import level_energy

    ((label, watts, joules),) = level_energy(load_run(out))
    assert label == "8 users" and watts is not None and joules is not None
    assert 70.0 < watts <= 700.0 and joules > 0
    # the summary holds the level's energy, and the report prints that value (one number)
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    energy = level["energy"]
    assert energy["mean_power_w"] == watts and energy["joules_per_output_token"] == joules
    assert 0 < energy["window_s"] <= level["duration_s"] + 1e-9
    from loadgen.report.page import fmt

    assert f"<td>{fmt(watts)}</td><td>{fmt(joules)}</td>" in html


def test_a_level_the_power_samples_do_not_cover_has_no_energy() -> None:
    from loadgen.metrics.energy import level_energy

    t = np.array([0, 1_000_000_000, 2_000_000_000], dtype=np.int64)
    p = np.array([100.0, 300.0, 100.0])
    chunk_t = np.array([500_000_000, 1_500_000_000, 5_000_000_000], dtype=np.int64)
    chunk_n = np.array([10, 30, 99])
    e = level_energy(t, p, (0, 4_000_000_000), chunk_t, chunk_n)  # covered up to 2 s: 400 J, 40 tokens
    assert e is not None and e.window_s == 2.0 and e.mean_power_w == pytest.approx(200.0)
    assert e.joules_per_output_token == pytest.approx(10.0)
    assert level_energy(t, p, (3_000_000_000, 4_000_000_000), chunk_t, chunk_n) is None
