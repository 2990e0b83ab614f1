"""A damaged line in the middle of ``records.jsonl`` is blamed on itself, not on
``events.bin`` (whose bytes for the later lines can no longer be placed); a torn last line
is still skipped with a note. A real run folder written by a run against the scripted
server on loopback, then damaged."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute
from loadgen.report.files import read_records, read_records_columnar, read_records_pieces, records_before_level
from loadgen.workload.spec import workload_from_flags
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()
N = 8


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("damaged") / "run"
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.002)) as srv:
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("8", "uniform:min=3,max=9"),
            profile=Profile(mode="concurrency", levels=[2], requests=N),
            out=out,
            live=False,
            seed=3,
            calibrate=False,
        )
        execute(cfg, Console(file=io.StringIO()))
    assert len(list(read_records(out))) == N
    return out


def _copy(run_folder: Path, tmp_path: Path) -> tuple[Path, list[bytes]]:
    folder = tmp_path / "copy"
    shutil.copytree(run_folder, folder)
    return folder, (folder / "records.jsonl").read_bytes().splitlines(keepends=True)


def _damage(line: bytes) -> bytes:
    """The same length, the newline kept, the JSON broken in the middle (a bad sector, an editor)."""
    mid = len(line) // 2
    return line[:mid] + b"\x00#garbage#" + line[mid + 10 :]


def test_a_damaged_middle_line_is_named_as_the_culprit(run_folder: Path, tmp_path: Path) -> None:
    folder, lines = _copy(run_folder, tmp_path)
    assert b'"events":{"n":' in lines[2]  # its events are in events.bin
    lines[2] = _damage(lines[2])
    (folder / "records.jsonl").write_bytes(b"".join(lines))
    culprit = r"records\.jsonl line 3 is not a record \(a damaged line\)"
    for read in (lambda f: list(read_records(f)), read_records_columnar, read_records_pieces):
        with pytest.raises(ConfigError, match=culprit) as err:
            read(folder)
        assert "do not decode" not in str(err.value) and "cut short" not in str(err.value)
    with pytest.raises(ConfigError, match=culprit):  # --resume refuses it too, rather than cutting there
        records_before_level(folder, 1)
    assert records_before_level(folder, 0)[2] == 0  # resumed before it: the cut drops it anyway
    res = runner.invoke(app, ["report", str(folder)])
    assert res.exit_code == 2 and re.search(culprit, res.output) and "Traceback" not in res.output, res.output
    (folder / "summary.json").unlink()  # the rebuild reads the same lines
    res = runner.invoke(app, ["report", str(folder)])
    assert res.exit_code == 2 and re.search(culprit, res.output), res.output


def test_a_torn_last_line_is_still_skipped_with_a_note(run_folder: Path, tmp_path: Path) -> None:
    folder, lines = _copy(run_folder, tmp_path)
    lines[-1] = lines[-1][: len(lines[-1]) // 2]  # a killed run: cut mid-write, no newline
    (folder / "records.jsonl").write_bytes(b"".join(lines))
    assert len(list(read_records(folder))) == N - 1
    assert records_before_level(folder, 1)[2] == N - 1
    (folder / "summary.json").unlink()
    res = runner.invoke(app, ["report", str(folder)])
    assert res.exit_code == 0, res.output
    assert "cut off mid-write" in res.output and "skipped" in res.output


def test_a_damaged_last_whole_line_is_skipped(run_folder: Path, tmp_path: Path) -> None:
    """Nothing after it refers to events.bin: the other records read as they were."""
    folder, lines = _copy(run_folder, tmp_path)
    want = [r.index for r in read_records(folder)][:-1]
    lines[-1] = _damage(lines[-1])
    (folder / "records.jsonl").write_bytes(b"".join(lines))
    assert [r.index for r in read_records(folder)] == want
