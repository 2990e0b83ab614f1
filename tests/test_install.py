"""Installed, not only checked out: a wheel in a fresh virtualenv finds its named
workloads and profiles from an empty directory, and runs one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.scripted_server import Script, ScriptedServerProcess

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    """This environment without what would point Python at the checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the project's wheel (its dependencies come from this interpreter's
    site-packages, so nothing is downloaded); returns its ``bin`` folder.

    This interpreter may itself be a venv (the README's test command in one): its
    ``--system-site-packages`` would be the base interpreter's, so the new venv gets this
    one's package folders by a ``.pth`` file instead. Its lines are plain paths, so the
    ``.pth`` files there (this checkout's editable install) are not run: the wheel's
    ``loadgen`` is the one found."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            str(ROOT),
        ],
        check=True,
        cwd=tmp,
        env=_env(),
    )
    (wheel,) = (tmp / "dist").glob("loadgen-*.whl")
    venv.create(tmp / "venv", system_site_packages=False, with_pip=False)
    py = tmp / "venv" / "bin" / "python"
    inner = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=_env(),
    ).stdout.strip()
    outer = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(inner) / "_outer_site_packages.pth").write_text("".join(f"{p}\n" for p in outer))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        cwd=tmp,
        env=_env(),
    )
    return tmp / "venv" / "bin"


def _loadgen(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "loadgen"), *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )


def test_the_wheel_is_the_one_that_runs(installed: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [str(installed / "python"), "-c", "import loadgen; print(loadgen.__file__)"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(installed.parent) in out.stdout and str(ROOT) not in out.stdout


def test_named_workloads_and_profiles_ship_in_the_wheel(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    wl = _loadgen(installed, empty, "workloads")
    assert wl.returncode == 0, wl.stderr
    for name in ("chat", "rag", "code", "summarize", "mixed", "prefix", "demo"):
        assert name in wl.stdout
    prof = _loadgen(installed, empty, "profiles")
    assert prof.returncode == 0, prof.stderr
    for name in ("quick", "sweep-concurrency", "sweep-rate", "capacity", "soak", "ramp"):
        assert name in prof.stdout


def test_a_named_run_from_an_empty_directory(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.001)) as srv:
        res = _loadgen(
            installed,
            empty,
            "run",
            "--url",
            srv.url,
            "--workload",
            "chat",
            "--profile",
            "quick",
            "--requests",
            "6",
            "--levels",
            "1,2",
            "--out",
            "run",
            "--quiet",
        )
    assert res.returncode == 0, res.stdout + res.stderr
    summary = json.loads((empty / "run" / "summary.json").read_text())
    assert [lv["load"]["value"] for lv in summary["levels"]] == [1, 2]
    assert all(lv["requests"]["ok"] == 6 for lv in summary["levels"])
    run = json.loads((empty / "run" / "run.json").read_text())
    assert run["workload"]["name"] == "chat" and run["profile"]["name"] == "quick"


def test_the_readme_sample_files_and_matrices_ship_and_resolve_from_anywhere(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    check = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "from loadgen.paths import shipped\n"
            "for p in ('profiles/matrix/chunking.toml', 'profiles/matrix/disagg.toml', 'workloads/samples/sharegpt.json',"
            " 'workloads/samples/sharegpt.parquet', 'workloads/samples/mooncake.jsonl', 'workloads/samples/tokenizer.json',"
            " 'workloads/samples/burstgpt-fit.toml'):\n    print(p, shipped(p).is_file(), shipped(p).is_absolute())",
        ],
        cwd=empty,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.count("True True") == 7, check.stdout
    fit = _loadgen(installed, empty, "workload", "fit", "workloads/samples/burstgpt.csv", "-o", "mine.toml")
    assert fit.returncode == 0 and (empty / "mine.toml").is_file(), fit.stdout + fit.stderr
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.001)) as srv:
        res = _loadgen(
            installed,
            empty,
            "run",
            "--url",
            srv.url,
            "--dataset",
            "workloads/samples/prompts.jsonl",
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--out",
            "ds",
            "--quiet",
        )
    assert res.returncode == 0, res.stdout + res.stderr
    assert len((empty / "ds" / "records.jsonl").read_text().splitlines()) == 4
