"""`loadgen matrix`: a 2x2 grid of reference servers, a server that never starts, one that dies."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ConfigError
from loadgen.orchestrate import load_matrix

RUN = """
[run]
api = "completions"
prompt_tokens = "uniform:min=200,max=1500"
output_tokens = "16"
slos = ["ttft=2s"]

[run.profile]
mode = "concurrency"
levels = [3]
requests = 6
warmup_requests = 0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


def test_a_two_by_two_grid_runs_compares_and_stops_its_servers(tmp_path: Path) -> None:
    matrix = write(
        tmp_path,
        """
name = "grid"
baseline = "chunked=on,budget=2048"
[server]
command = "loadgen serve --engine sim --time-scale 0.1 --port {port} --max-model-len 2048 --max-num-batched-tokens {budget} {chunked}"
[grid]
chunked = { on = "--chunked-prefill", off = "--no-chunked-prefill" }
budget = [2048, 512]
"""
        + RUN,
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(matrix), "--out", str(out)])
    doc = json.loads((out / "matrix.json").read_text())
    names = [c["name"] for c in doc["configs"]]
    assert names == [
        "chunked=on,budget=2048",
        "chunked=on,budget=512",
        "chunked=off,budget=2048",
        "chunked=off,budget=512",
    ]
    ran = [c for c in doc["configs"] if c["status"] == "ok"]
    # as vLLM, the server refuses a budget below the context length without chunking
    status = {c["name"]: c["status"] for c in doc["configs"]}
    assert status == {**dict.fromkeys(names[:3], "ok"), names[3]: "failed_to_start"}, result.output
    refused = (out / doc["configs"][3]["folder"] / "server.log").read_text()
    assert "--max-num-batched-tokens" in refused and "Traceback" not in refused
    for c in doc["configs"]:
        assert c["server_exit_code"] is not None  # stopped, not left running
        if c["status"] == "ok":
            assert "loadgen serve: listening" in (out / c["folder"] / "server.log").read_text()
            records = (out / c["folder"] / "run" / "records.jsonl").read_text().splitlines()
            assert len(records) == 6 and c["summary"]["levels"][0]["ok"] == 6
            assert (out / c["folder"] / "run" / "server_metrics.jsonl").stat().st_size > 0
            assert f"--max-num-batched-tokens {c['params']['budget']}" in c["command"]
    html = (out / "matrix.html").read_text()
    assert all(c["name"] in html for c in ran)
    assert result.exit_code == 0, result.output


def test_a_server_that_never_starts_is_reported_and_the_matrix_goes_on(tmp_path: Path) -> None:
    matrix = write(
        tmp_path,
        """
name = "broken"
[server]
command = "loadgen serve --engine sim --time-scale 0.1 --port {port} {extra}"
health_timeout_s = 30
[[configs]]
name = "good"
params = { extra = "--max-num-seqs 64" }
[[configs]]
name = "bad flag"
params = { extra = "--max-num-seqs 0" }
[[configs]]
name = "also good"
params = { extra = "--max-num-seqs 128" }
"""
        + RUN,
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(matrix), "-o", str(out)])
    doc = json.loads((out / "matrix.json").read_text())
    status = {c["name"]: c["status"] for c in doc["configs"]}
    assert status == {"good": "ok", "bad flag": "failed_to_start", "also good": "ok"}, result.output
    bad = doc["configs"][1]
    assert "exited with code 2" in bad["error"]
    assert "--max-num-seqs" in (out / bad["folder"] / "server.log").read_text()
    assert (out / "matrix.html").exists() and result.exit_code == 0


def test_a_server_that_dies_mid_run_is_reported(tmp_path: Path) -> None:
    serve = f"{sys.executable} -m loadgen serve --engine sim --time-scale 1 --port {{port}}"
    matrix = write(
        tmp_path,
        f"""
name = "dies"
[server]
command = "sh -c '{serve} & pid=$!; sleep 4; kill -9 $pid; wait'"
[grid]
x = [1]
"""
        + RUN.replace("requests = 6", "duration_s = 8").replace('output_tokens = "16"', 'output_tokens = "400"'),
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(matrix), "-o", str(out)])
    (entry,) = json.loads((out / "matrix.json").read_text())["configs"]
    assert entry["status"] == "server_died", result.output
    lines = (out / entry["folder"] / "run" / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert any(r["status"] != "ok" for r in records)  # the cut requests are recorded, not lost


def test_a_duration_alone_bounds_each_level_by_time_as_run_does(tmp_path: Path) -> None:
    # a fast server and a 3 s level: far more than the 100 requests a profile counts by default
    matrix = write(
        tmp_path,
        """
name = "timed"
[server]
command = "loadgen serve --engine sim --time-scale 0.01 --port {port}"
"""
        + RUN.replace("levels = [3]", "levels = [8]")
        .replace("requests = 6", "duration_s = 3")
        .replace('prompt_tokens = "uniform:min=200,max=1500"', 'prompt_tokens = "64"')
        .replace('"16"', '"4"'),
    )
    spec = load_matrix(matrix)
    assert (spec.profile.requests, spec.profile.duration_s) == (None, 3)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(matrix), "-o", str(out)])
    (entry,) = json.loads((out / "matrix.json").read_text())["configs"]
    assert entry["status"] == "ok", result.output
    run = json.loads((out / entry["folder"] / "run" / "run.json").read_text())
    assert (run["profile"]["requests"], run["profile"]["duration_s"]) == (None, 3)
    (level,) = json.loads((out / entry["folder"] / "run" / "summary.json").read_text())["levels"]
    assert level["requests"]["ok"] > 100  # not stopped at the default count


def test_duration_sets_each_level_length_over_the_files_profile(tmp_path: Path) -> None:
    # the file counts 6 requests per level; --duration 2 replaces that with 2 s and no cap
    matrix = write(
        tmp_path,
        """
name = "short"
[server]
command = "loadgen serve --engine sim --time-scale 0.01 --port {port}"
"""
        + RUN.replace('prompt_tokens = "uniform:min=200,max=1500"', 'prompt_tokens = "64"').replace('"16"', '"4"'),
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(matrix), "--duration", "2", "-o", str(out)])
    (entry,) = json.loads((out / "matrix.json").read_text())["configs"]
    assert entry["status"] == "ok", result.output
    run = json.loads((out / entry["folder"] / "run" / "run.json").read_text())
    assert (run["profile"]["requests"], run["profile"]["duration_s"]) == (None, 2)
    (level,) = json.loads((out / entry["folder"] / "run" / "summary.json").read_text())["levels"]
    assert level["requests"]["ok"] > 6  # ran for its 2 s, not stopped at the file's 6 requests
    assert 1.9 < level["duration_s"] < 60  # its 2 s (the upper bound: only a hang passes it)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e12"])
def test_a_bad_duration_is_one_line_naming_the_flag(tmp_path: Path, value: str) -> None:
    matrix = write(tmp_path, '[server]\nurl = "http://127.0.0.1:1"\n' + RUN)
    result = CliRunner().invoke(app, ["matrix", str(matrix), "--duration", value, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "--duration" in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[server]\ncommand = "x {nope}"\n' + RUN, "{nope}"),
        ('[server]\ncommand = "x"\nurl = "http://127.0.0.1:1"\n' + RUN, "either command"),
        ('bogus = 1\n[server]\ncommand = "x"\n' + RUN, "bogus"),
        ('baseline = "z"\n[server]\ncommand = "x {a}"\n[grid]\na = [1, 2]\n' + RUN, "baseline"),
        ('[server]\ncommand = "x"\n[grid]\na = []\n' + RUN, "grid.a"),
        ('[server]\ncommand = "x"\n' + RUN.replace("[run.profile]", "[run.profilez]"), "run.profile"),
        # the [run] table goes through RunConfig's own checks, named by the file's keys
        (
            '[server]\ncommand = "x"\n' + RUN.replace("[run]", "[run]\ntrials = 0"),
            "run.trials: must be an integer in [1, 100]",
        ),
        (
            '[server]\ncommand = "x"\n' + RUN.replace('api = "completions"', 'api = "grpc"'),
            "run.api: unknown API 'grpc'",
        ),
        ('[server]\ncommand = "x"\n' + RUN.replace("[run]", "[run]\nseed = 1.5"), "run.seed: must be an integer"),
    ],
)
def test_bad_matrix_files_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    assert needle in str(info.value) and str(path) in str(info.value)
    result = CliRunner().invoke(app, ["matrix", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_the_shipped_matrix_files_load() -> None:
    assert len(load_matrix(Path(__file__).parent.parent / "profiles" / "matrix" / "disagg.toml").configs) == 3
    spec = load_matrix(Path(__file__).parent.parent / "profiles" / "matrix" / "chunking.toml")
    assert len(spec.configs) == 4 and spec.baseline == spec.configs[0].name == "chunked 2048"
    # duration_s = 15 and no request count: each level lasts 15 s, as `loadgen run --duration 15`
    assert (spec.profile.requests, spec.profile.duration_s, spec.profile.warmup_requests) == (None, 15, 4)


def test_with_a_dashboard_every_configuration_serves_it_at_one_address(tmp_path: Path) -> None:
    """--dashboard-port 0: one free port chosen for the whole matrix, so one open page
    follows each configuration's run in turn."""
    matrix = write(
        tmp_path,
        """
name = "watched"
[server]
command = "loadgen serve --engine sim --time-scale 0.1 --port {port} {chunked}"
[grid]
chunked = { on = "--chunked-prefill", off = "--no-chunked-prefill" }
"""
        + RUN.replace('prompt_tokens = "uniform:min=200,max=1500"', 'prompt_tokens = "64"'),
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(matrix), "-o", str(out), "--dashboard-port", "0"])
    assert result.exit_code == 0, result.output
    urls = [line.split(": ", 1)[1] for line in result.output.splitlines() if line.startswith("dashboard: ")]
    assert len(urls) == 2 and urls[0] == urls[1] and urls[0].startswith("http://127.0.0.1:"), result.output
    assert not urls[0].startswith("http://127.0.0.1:0/")
    doc = json.loads((out / "matrix.json").read_text())
    assert [c["status"] for c in doc["configs"]] == ["ok", "ok"]
