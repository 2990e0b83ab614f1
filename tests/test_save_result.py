"""``--save-result`` never takes a run's files: a path inside this run's folder or any run
folder (symlinks followed), a device, or a place that cannot be written is refused in one
line before anything is sent (before: the result replaced records.jsonl, run.json or
summary.json, exit 0, and ``/dev/full`` failed only after the whole run).

Real ``loadgen run`` invocations against a loopback server that counts every request it gets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.report.files import LOCK_FILE
from tests.hostile_server import HostileServer

runner = CliRunner()


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as srv:
        yield srv


def _run(url: str, out: Path, *args: str) -> tuple[int, str]:
    """``loadgen run`` of two requests into ``out``."""
    argv = ["run", "--url", url, "--api", "completions", "--requests", "2", "--out", str(out), "--quiet", *args]
    res = runner.invoke(app, argv)
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def earlier(server: HostileServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run's folder."""
    out = tmp_path_factory.mktemp("earlier") / "run"
    code, output = _run(server.url, out, "--no-calibrate")
    assert code == 0, output
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# (the --out folder, the --save-result path, the words of the refusal); E: the earlier run's folder
CASES = {
    "its own records": ("E", "E/records.jsonl", "inside this run's folder"),
    "its own summary": ("E", "E/summary.json", "inside this run's folder"),
    "a new run's own folder": ("new", "new/run.json", "inside this run's folder"),
    "the folder itself": ("new", "new", "inside this run's folder"),
    "another run's run.json": ("new", "E/run.json", "inside the run folder"),
    "another run's, by a symlink": ("new", "link.json", "(it leads to "),
    "a new file in another run": ("new", "E/result.json", "inside the run folder"),
    "a device": ("new", "/dev/full", "not a regular file"),
    "a folder nothing can be written in": ("new", "/sys/result.json", "cannot write in /sys"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_result_path_that_would_hurt_a_run_is_refused_before_anything_is_sent(
    server: HostileServer, earlier: Path, tmp_path: Path, case: str
) -> None:
    out, result, words = CASES[case]
    (tmp_path / "link.json").symlink_to(earlier / "summary.json")
    before = _files(earlier)
    sent = (server.model_requests, server.handled)
    given = result.replace("E/", f"{earlier}/") if result.startswith("E/") else result
    path = given if given.startswith("/") else str(tmp_path / given)
    code, output = _run(server.url, earlier if out == "E" else tmp_path / out, "--save-result", path)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1 and "--save-result: " in output and words in output, output
    assert (server.model_requests, server.handled) == sent  # nothing was sent
    assert _files(earlier) == before  # not one byte of the earlier run changed, no lock left
    assert not (tmp_path / "new").exists()


def test_a_result_through_a_symlink_replaces_its_target_whole(server: HostileServer, tmp_path: Path) -> None:
    """Outside any run folder a symlink is followed: the file it leads to gets the result,
    the link stays, and no temporary file is left."""
    real = tmp_path / "results" / "real.json"
    real.parent.mkdir()
    real.write_text("an earlier result\n")
    (tmp_path / "link.json").symlink_to(real)
    code, output = _run(server.url, tmp_path / "run", "--no-calibrate", "--save-result", str(tmp_path / "link.json"))
    assert code == 0, output
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads(real.read_text())["completed"] == 2
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.json"]
    assert not (tmp_path / "run" / LOCK_FILE).exists()
