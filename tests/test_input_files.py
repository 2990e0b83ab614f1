"""A user's input file that is not a regular file (a FIFO without a writer, a device) is
refused in one line before it is opened, so the run never blocks in a read that a signal
cannot reach: ``loadgen run`` exits 2 at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.errors import ConfigError, ProfileError, WorkloadError
from loadgen.inputs import input_problem, open_input
from loadgen.load.profiles import list_profiles, load_profile
from loadgen.orchestrate import load_matrix
from loadgen.workload.distributions import parse_distribution
from loadgen.workload.fit import fit_workload
from loadgen.workload.hf_cache import resolve_tokenizer
from loadgen.workload.spec import load_workload
from loadgen.workload.traces import TraceOptions, load_trace

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
ROOT = Path(__file__).resolve().parents[1]


def fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)  # nobody writes: an open() for reading would wait for ever
    return path


@pytest.mark.parametrize(("flag", "name"), [("--dataset", "d.jsonl"), ("--trace", "t.jsonl")])
def test_run_with_a_fifo_exits_2_in_one_line(tmp_path: Path, flag: str, name: str) -> None:
    path = fifo(tmp_path, name)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # (the timeout only keeps a regression from hanging the suite: before the fix, the read blocked)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen.cli",
            "run",
            "--url",
            "http://127.0.0.1:9",
            flag,
            str(path),
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2, lines
    assert len(lines) == 1 and "is a FIFO, not a regular file" in lines[0] and str(path) in lines[0], lines


def test_every_kind_of_input_file_refuses_a_fifo(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"t\.jsonl: is a FIFO, not a regular file"):
        load_trace(TraceOptions(str(fifo(tmp_path, "t.jsonl"))))
    with pytest.raises(WorkloadError, match=r"w\.toml: is a FIFO, not a regular file"):
        load_workload(str(fifo(tmp_path, "w.toml")), [])
    with pytest.raises(ProfileError, match=r"p\.toml is a FIFO, not a regular file"):
        load_profile(str(fifo(tmp_path, "p.toml")), [])
    with pytest.raises(ConfigError, match=r"^tokenizer: .*tokenizer\.json: is a FIFO, not a regular file"):
        resolve_tokenizer(str(fifo(tmp_path, "tokenizer.json")))
    fifo(tmp_path, "tools.json")
    (tmp_path / "tools.toml").write_text(
        'name = "t"\ntools = "tools.json"\n[[classes]]\nname = "a"\nweight = 1\n'
        'prompt_tokens = "8"\noutput_tokens = "4"\n'
    )
    with pytest.raises(WorkloadError, match=r"tools: cannot read .*tools\.json: is a FIFO, not a regular file"):
        load_workload(str(tmp_path / "tools.toml"), [])


def test_fit_matrix_config_empirical_and_profile_listing_refuse_a_fifo(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"f\.jsonl: is a FIFO, not a regular file"):
        fit_workload(str(fifo(tmp_path, "f.jsonl")), "fit")
    with pytest.raises(ConfigError, match=r"m\.toml: is a FIFO, not a regular file"):
        load_matrix(fifo(tmp_path, "m.toml"))
    with pytest.raises(WorkloadError, match=r"cannot read csv .*e\.csv: is a FIFO, not a regular file"):
        parse_distribution("empirical:csv=e.csv,column=a", base_dir=(fifo(tmp_path, "e.csv")).parent)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    fifo(profiles, "stuck.toml")
    assert ("stuck", "(unreadable)") in list_profiles([profiles])
    from typer.testing import CliRunner

    from loadgen.cli import app

    res = CliRunner().invoke(app, ["run", "--config", str(fifo(tmp_path, "c.toml")), "--url", "http://127.0.0.1:9"])
    squeezed = "".join(c for c in res.output if c not in "│ \n")  # (typer boxes and wraps the line)
    assert res.exit_code == 2 and "isaFIFO,notaregularfile" in squeezed, res.output


def test_open_input_refuses_what_input_problem_names(tmp_path: Path) -> None:
    path = fifo(tmp_path, "f")
    assert input_problem(path) == "is a FIFO, not a regular file"
    assert input_problem(tmp_path) == "is a folder, not a regular file"
    assert input_problem(tmp_path, folder_ok=True) is None
    assert input_problem(tmp_path / "none") == "no such file"
    for bad, why in ((path, "is a FIFO"), (tmp_path, "is a folder"), (tmp_path / "none", "No such file")):
        with pytest.raises(OSError, match=why):
            open_input(bad)
    (tmp_path / "ok").write_bytes(b"data")
    with open_input(tmp_path / "ok") as fh:
        assert fh.read() == b"data"
