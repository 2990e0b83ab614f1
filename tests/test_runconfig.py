"""One client configuration: ``RunConfig`` checks itself for every builder, and a flag given
on the command line always wins (``None`` means not given)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ConfigError, ProfileError
from loadgen.load.profiles import Profile
from loadgen.orchestrate import Origin, RunConfig, RunFlags, build_run_config
from loadgen.workload.spec import workload_from_flags
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.001)) as srv:
        yield srv


def _config(tmp_path: Path, **changes: Any) -> RunConfig:
    base: dict[str, Any] = {
        "url": "http://127.0.0.1:8000",
        "api": "completions",
        "workload": workload_from_flags("16", "4"),
        "profile": Profile(levels=[2.0], requests=4),
        "out": tmp_path / "run",
    }
    return RunConfig(**{**base, **changes})


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"url": "ftp://127.0.0.1"}, "url: expected an http(s) URL"),
        ({"api": "grpc"}, "api: unknown API 'grpc'"),
        ({"transport": "curl"}, "transport: unknown transport 'curl'"),
        ({"http2": True}, "http2: HTTP/2 needs the httpx transport"),
        ({"read_timeout_s": 0.0}, "read_timeout_s: must be a number of seconds > 0"),
        ({"request_timeout_s": float("nan")}, "request_timeout_s: must be a number of seconds > 0"),
        ({"trials": 0}, "trials: must be an integer in [1, 100], got 0"),
        ({"workers": -3}, "workers: must be a whole number in [1, 1024] or 'auto', got -3"),
        ({"workers": "many"}, "workers: must be a whole number in [1, 1024] or 'auto'"),
        ({"ray": " "}, "ray: give auto or a Ray cluster's address"),
        ({"scrape_urls": ["nope"]}, "scrape_urls: expected an http(s) URL"),
        ({"headers": {"X-Bad": "a\r\nb"}}, "headers: invalid header 'X-Bad'"),
        ({"seed": 1.5}, "seed: must be an integer"),
    ],
)
def test_a_config_built_in_python_names_the_field(tmp_path: Path, changes: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, **changes)
    assert needle in str(err.value)


def test_the_profile_is_checked_with_the_config(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="requests: must be >= 1, got 0"):
        _config(tmp_path, profile=Profile(levels=[2.0], requests=0))
    with pytest.raises(ProfileError, match=r"burstiness: must be > 0, got 0.0"):
        _config(tmp_path, profile=Profile(mode="rate", levels=[2.0], arrival="gamma", burstiness=0.0))
    with pytest.raises(ProfileError, match="max_in_flight: caps the requests in flight of an open loop"):
        _config(tmp_path, profile=Profile(levels=[2.0], max_in_flight=4))


def test_replace_checks_again_and_origin_names_the_file_key(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    with pytest.raises(ConfigError, match="trials: must be an integer"):
        dataclasses.replace(cfg, trials=1000)
    origin = Origin(source="m.toml", keys={"trials": "run.trials", "profile.requests": "run.profile.requests"})
    with pytest.raises(ConfigError, match=r"^m\.toml: run\.trials: must be an integer"):
        dataclasses.replace(cfg, trials=0, origin=origin)
    with pytest.raises(ConfigError, match=r"^run\.profile\.requests: must be >= 1"):
        dataclasses.replace(cfg, profile=Profile(levels=[2.0], requests=0), origin=origin)


def test_tools_need_the_chat_api_before_anything_is_sent(tmp_path: Path) -> None:
    wl = dataclasses.replace(workload_from_flags("16", "4"), tools=[{"type": "function"}])
    with pytest.raises(ConfigError, match="sends tools: they need the chat, responses or messages API"):
        _config(tmp_path, workload=wl, api="completions")


def _profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "bursty.toml"
    path.write_text('mode = "rate"\nlevels = [20]\nrequests = 4\narrival = "gamma"\nburstiness = 0.25\n')
    return path


def test_an_explicit_arrival_wins_over_the_profile_file(tmp_path: Path) -> None:
    """``--arrival poisson`` (the old default) was silently dropped when the file said gamma."""
    path = _profile_file(tmp_path)
    base = RunFlags(url="http://127.0.0.1:8000", profile=str(path), out=str(tmp_path / "o"))
    assert build_run_config(base, [], live=False).profile.arrival == "gamma"
    cfg = build_run_config(dataclasses.replace(base, arrival="poisson"), [], live=False)
    assert (cfg.profile.arrival, cfg.profile.burstiness) == ("poisson", 0.25)
    cfg = build_run_config(dataclasses.replace(base, burstiness=1.0), [], live=False)
    assert (cfg.profile.arrival, cfg.profile.burstiness) == ("gamma", 1.0)


def test_an_explicit_arrival_wins_over_a_fitted_workloads_arrivals(tmp_path: Path) -> None:
    wl = tmp_path / "fitted.toml"
    wl.write_text(
        'name = "fitted"\nprompt_tokens = 16\noutput_tokens = 4\n\n[arrivals]\nrate = 3.5\nburstiness = 0.4\n'
    )
    base = RunFlags(url="http://127.0.0.1:8000", workload=str(wl), requests=4, out=str(tmp_path / "o"))
    cfg = build_run_config(base, [], live=False)
    assert (cfg.profile.mode, cfg.profile.levels, cfg.profile.arrival, cfg.profile.burstiness) == (
        "rate",
        [3.5],
        "gamma",
        0.4,
    )
    cfg = build_run_config(dataclasses.replace(base, arrival="poisson"), [], live=False)
    assert (cfg.profile.levels, cfg.profile.arrival, cfg.profile.burstiness) == ([3.5], "poisson", 1.0)


def test_the_run_json_keeps_the_explicit_arrival(server: ScriptedServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        [
            "run",
            "--url",
            server.url,
            "--profile",
            str(_profile_file(tmp_path)),
            "--arrival",
            "poisson",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "2",
            "--out",
            str(out),
            "--quiet",
            "--no-calibrate",
        ],
    )
    assert res.exit_code == 0, res.output
    prof = json.loads((out / "run.json").read_text())["profile"]
    assert (prof["arrival"], prof["burstiness"]) == ("poisson", 0.25)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workers", "0"], "--workers: must be a whole number in [1, 1024]"),
        (["--trials", "101"], "--trials: must be an integer in [1, 100], got 101"),
        (["--transport", "curl"], "--transport: unknown transport 'curl'"),
        (["--http2", "--transport", "fast"], "--http2: HTTP/2 needs the httpx transport"),
        (["--concurrency", "0"], "--concurrency: must be >= 1"),
        (["--rate", "2", "--arrival", "gamma", "--burstiness", "0"], "--burstiness: must be > 0, got 0"),
        (["--rate", "2", "--arrival", "zipf"], "--arrival: unknown arrival process 'zipf'"),
        (["--max-error-rate", "1.5"], "--max-error-rate: must be a share in [0, 1)"),
        (["--scrape-url", "nope"], "--scrape-url: expected an http(s) URL"),
    ],
)
def test_a_flag_error_names_the_flag_before_anything_is_sent(tmp_path: Path, args: list[str], needle: str) -> None:
    res = runner.invoke(
        app, ["run", "--url", "http://127.0.0.1:9", "--requests", "1", "--out", str(tmp_path / "x"), *args]
    )
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x").exists()


def test_the_transport_is_fast_unless_http2_or_named(tmp_path: Path) -> None:
    base = RunFlags(url="http://127.0.0.1:8000", out=str(tmp_path / "o"))
    assert build_run_config(base, [], live=False).transport == "fast"
    assert build_run_config(dataclasses.replace(base, http2=True), [], live=False).transport == "httpx"
    named = build_run_config(dataclasses.replace(base, transport="aiohttp"), [], live=False)
    assert named.transport == "aiohttp" and not named.http2
