"""A run owns its folder (a lock, a safe label, a full disk ends the run cleanly), and every
number from a file or the command line is bounded at the edge with one line.

The lock and the full disk are tested with real ``loadgen run`` subprocesses against the
scripted server on loopback; the full disk is a real tmpfs of 2 MiB (mounting needs root:
the test skips, saying so, where the mount is refused).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ConfigError, ProfileError, WorkloadError
from loadgen.load.profiles import MAX_USERS, Profile, check_limits, profile_from_dict
from loadgen.load.runner import PREPARE_TOTAL, LevelPlan, Runner
from loadgen.orchestrate import WRITE_FAILED, load_matrix
from loadgen.report.files import LOCK_FILE, default_run_dir, lock_run_folder, read_records, safe_label
from loadgen.workload.datasets import DatasetOptions, load_dataset
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.source import WorkloadSource
from loadgen.workload.spec import load_workload, workload_from_flags
from loadgen.workload.traces import TraceOptions, load_trace
from tests.scripted_server import Script, ScriptedServerProcess

runner = CliRunner()


def _loadgen(out: Path, url: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        "-m",
        "loadgen.cli",
        "run",
        "--url",
        url,
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "4",
        "--quiet",
        "--out",
        str(out),
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("label", ["../../../../../escaped_run", "a/b", "x\n\x1b[31my", "..", "", "a\u202eb"])
def test_a_label_is_one_path_component(tmp_path: Path, label: str) -> None:
    folder = default_run_dir(tmp_path / "reports", label)
    assert folder.parent == tmp_path / "reports"
    name = safe_label(label)
    assert name and "/" not in name and not name.startswith(".") and name.isprintable()
    assert all(ch.isalnum() or ch in "._+-" for ch in name), name


def test_a_label_keeps_readable_names() -> None:
    assert safe_label("chat-v1.2") == "chat-v1.2" and safe_label("ünï code") == "ünï_code"


def test_a_second_run_on_a_held_folder_is_refused_and_sends_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = tmp_path / "requests.jsonl"
    with ScriptedServerProcess(Script(log_path=str(log))) as srv, lock_run_folder(out):
        res = _loadgen(out, srv.url, "--requests", "2")
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "another loadgen run is writing" in lines[0] and f"pid {os.getpid()}" in lines[0]
    assert not log.exists()  # not even discovery's calibration was sent
    assert not out.exists()  # the lock holder made the folder and left nothing in it


def test_the_lock_goes_with_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedServerProcess(Script()) as srv:
        first = _loadgen(out, srv.url, "--requests", "2")
        second = _loadgen(out, srv.url, "--requests", "3")
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert not (out / LOCK_FILE).exists()
    assert len(list(read_records(str(out)))) == 3  # a str, as docs/guide.md shows it


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    disk = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_stops_the_run_like_sigterm(small_disk: Path) -> None:
    out = small_disk / "run"
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.002)) as srv:
        res = _loadgen(out, srv.url, "--concurrency", "16", "--requests", "50000", "--output-tokens", "16")
    output = res.stdout + res.stderr
    assert res.returncode == WRITE_FAILED, output
    assert "Traceback" not in output
    error = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "No space left on device" in error[0], res.stderr
    assert not list(out.glob("*.tmp")) and not list(out.glob(".loadgen.*"))
    records = list(read_records(out))
    statuses = [r.status.value for r in records]
    assert statuses.count("cancelled") >= 1 and statuses.count("ok") > 100, statuses[-20:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and "could not be written" in summary["stopped"]
    assert summary["levels"][0]["requests"]["total"] == len(records)
    # every line of records.jsonl is whole: the batch that did not fit was cut off again
    assert (out / "records.jsonl").read_bytes().endswith(b"\n")


def _trace(tmp_path: Path, text: str, name: str = "t.jsonl") -> TraceOptions:
    path = tmp_path / name
    path.write_text(text)
    return TraceOptions(str(path))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('{"timestamp": 1e300, "input_length": 8, "output_length": 4}', "30 days"),
        ('{"timestamp": 0, "input_length": 1000000000, "output_length": 4}', "at most 1,000,000 tokens"),
        ('{"timestamp": 0, "input_length": 8, "output_length": 1e9}', "at most 1,000,000 tokens"),
        ('{"timestamp": 0, "input_length": 8, "output_length": 4, "hash_ids": [100000000000000000000000]}', "hash_ids"),
    ],
)
def test_trace_numbers_are_bounded(tmp_path: Path, row: str, message: str) -> None:
    opts = _trace(tmp_path, '{"timestamp": 0, "input_length": 8, "output_length": 4}\n' + row + "\n")
    with pytest.raises(WorkloadError, match=message):
        load_trace(opts)


def test_csv_trace_lengths_share_the_cap(tmp_path: Path) -> None:
    opts = _trace(tmp_path, "Timestamp,Request tokens,Response tokens\n0,8,4\n1,2000000,4\n", "b.csv")
    with pytest.raises(WorkloadError, match=r"line 3.*at most 1,000,000"):
        load_trace(opts)


def test_a_slow_replay_is_refused(tmp_path: Path) -> None:
    opts = _trace(
        tmp_path,
        '{"timestamp": 0, "input_length": 8, "output_length": 4}\n'
        '{"timestamp": 1000, "input_length": 8, "output_length": 4}\n',
    )
    with pytest.raises(WorkloadError, match="30 days"):
        load_trace(TraceOptions(opts.path, speed=1e-9))


def test_dataset_lengths_share_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "hello", "output_tokens": 5000000}\n')
    with pytest.raises(WorkloadError, match="at most 1,000,000 tokens"):
        load_dataset(DatasetOptions(str(path)))
    with pytest.raises(WorkloadError, match="--output-tokens"):
        DatasetOptions(str(path), output_tokens=10**9)


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "1000000000"],
        ["--levels", "1,2,1e30"],
        ["--rate", "10", "--requests", "1000000000000", "--duration", "3"],
        ["--requests", "1000000000000", "--duration", "3"],
        ["--duration", "1e12"],
        ["--rate", "5", "--max-in-flight", "1000000000"],
    ],
)
def test_huge_load_numbers_are_one_line(tmp_path: Path, args: list[str]) -> None:
    res = runner.invoke(app, ["run", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "x"), *args])
    assert res.exit_code == 2, res.output
    assert "at most" in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_profile_files_are_bounded_too() -> None:
    with pytest.raises(ProfileError, match=r"levels.*at most 100,000 users"):
        profile_from_dict({"levels": [1, 1e30], "requests": 10}, "p.toml")
    with pytest.raises(ProfileError, match="requests"):
        profile_from_dict({"levels": [1], "requests": 10**12}, "p.toml")
    with pytest.raises(ProfileError, match="max_in_flight"):
        check_limits(Profile(levels=[1.0], max_in_flight=MAX_USERS + 1))


def test_users_build_a_bounded_number_of_requests_ahead() -> None:
    """A level of 10,000,000 requests over 8 users prepares at most PREPARE_TOTAL before it
    starts (before: 65,536 per user, eagerly, while SIGTERM waited)."""
    built = 0

    class Counting(WorkloadSource):
        def user(self, level: int, user: int, quota: int | None):  # type: ignore[no-untyped-def]
            nonlocal built
            for spec in WorkloadSource.user(self, level, user, quota):
                built += 1
                yield spec

    source = Counting(workload_from_flags("8", "4"), 0, PromptSynthesizer(seed=0))
    plan = LevelPlan(index=0, mode="concurrency", value=8.0, requests=10_000_000, duration_s=3.0)
    Runner(transport=None).prepare(plan, source)  # type: ignore[arg-type]
    assert 8 <= built <= PREPARE_TOTAL


def test_tools_from_a_device_or_a_huge_file_are_refused(tmp_path: Path) -> None:
    wl = tmp_path / "w.toml"
    body = '[[classes]]\nname = "a"\nweight = 1\nprompt_tokens = "8"\noutput_tokens = "4"\n'
    wl.write_text('name = "z"\ntools = "/dev/zero"\n' + body)
    with pytest.raises(WorkloadError, match="not a regular file"):
        load_workload(str(wl), [])
    (tmp_path / "big.json").write_bytes(b"[" + b" " * (17 << 20) + b"]")
    wl.write_text('name = "z"\ntools = "big.json"\n' + body)
    with pytest.raises(WorkloadError, match="over 16 MiB"):
        load_workload(str(wl), [])


def test_a_matrix_parameter_with_an_unbalanced_quote_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        'name = "q"\n[server]\ncommand = "loadgen serve --port {port} {extra}"\n[grid]\n'
        'extra = ["--x \'oops", "--y"]\n[run]\nprompt_tokens = "8"\noutput_tokens = "4"\n'
        "[run.profile]\nlevels = [1]\nrequests = 2\n"
    )
    with pytest.raises(ConfigError, match="No closing quotation"):
        load_matrix(path)
    res = runner.invoke(app, ["matrix", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
