"""`loadgen run --config`: options from a TOML file, or a finished run's run.json to repeat it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with ServerProcess(["--engine", "sim", "--time-scale", "0.05"]) as url:
        yield url


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["run", "--quiet", *args])
    return res.exit_code, res.output


def loadgen(*args: str) -> tuple[int, str]:
    """A real process (run.json keeps its command line: sys.argv)."""
    res = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "--quiet", *args], capture_output=True, text=True, timeout=300
    )
    return res.returncode, res.stdout + res.stderr


def flat(text: str) -> str:
    """The error box's text on one line (its borders and wrapping removed)."""
    return " ".join(text.replace("│", " ").split())


def specs(folder: Path) -> list[tuple[int, int, int, int | None]]:
    return sorted(
        (r.index, r.target_prompt_tokens, r.target_output_tokens, r.prompt_tokens) for r in read_records(folder)
    )


def test_run_json_repeats_the_run_request_for_request(server: str, tmp_path: Path) -> None:
    first, again = tmp_path / "first", tmp_path / "again"
    code, out = loadgen(
        "--url",
        server,
        "--api",
        "completions",
        "--prompt-tokens",
        "uniform:min=50,max=400",
        "--output-tokens",
        "uniform:min=2,max=9",
        "--concurrency",
        "2",
        "--requests",
        "12",
        "--seed",
        "7",
        "--header",
        "X-Secret: CANARY-5150",
        "--out",
        str(first),
    )
    assert code == 0, out
    code, out = loadgen("--config", str(first / "run.json"), "--out", str(again))
    assert code == 0, out
    a, b = specs(first), specs(again)
    assert len(a) == 12 and a == b  # same indices, targets, and the server counted the same prompts
    run = json.loads((again / "run.json").read_text())
    assert run["config"]["seed"] == 7 and run["target"]["api"] == "completions"
    for path in again.iterdir():  # the header value was never stored, so never replayed
        assert b"CANARY-5150" not in path.read_bytes()
    assert run["config"]["header_names"] == []
    code, out = invoke("--config", str(first / "run.json"), "--seed", "8", "--out", str(tmp_path / "other"))
    assert code == 0 and specs(tmp_path / "other") != a  # a flag given here wins


def test_a_toml_file_gives_every_option_and_flags_win(server: str, tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'url = "{server}"\napi = "completions"\nprompt-tokens = "64"\noutput_tokens = "4"\n'
        f'concurrency = 1\nrequests = 3\nslo = ["ttft=5s"]\n'
    )
    code, out = invoke("--config", str(cfg), "--out", str(tmp_path / "a"))
    assert code == 0, out
    assert len(specs(tmp_path / "a")) == 3
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["levels"][0]["goodput"]["slos"] == ["ttft=5000ms"]
    code, out = invoke("--config", str(cfg), "--requests", "5", "--out", str(tmp_path / "b"))
    assert code == 0 and len(specs(tmp_path / "b")) == 5


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('url = "http://127.0.0.1:9"\nbogus = 1\n', "unknown option 'bogus'"),
        ("url = [", "not valid TOML"),
    ],
)
def test_bad_config_files_are_refused_before_sending(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    code, out = invoke("--config", str(cfg))
    assert code == 2 and needle in flat(out) and "Traceback" not in out
    (tmp_path / "x.json").write_text("{}")
    code, out = invoke("--config", str(tmp_path / "x.json"))
    assert code == 2 and "is not a loadgen run.json" in flat(out)
