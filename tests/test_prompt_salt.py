"""Each run salts its prompts: a rerun of the same command sends other text, so a server's
prefix cache holds nothing of it (issue 39); ``--repeat-prompts`` sends the same text every
run, and ``--config run.json`` repeats the run's own salt.

The prompts are read back from the scripted server (``/scripted/served``); the cache from
``loadgen serve --engine sim`` (prefix caching on), whose answers say ``cached_tokens``.
Every run is a handful of requests on loopback, in a real ``loadgen`` process (run.json
keeps its command line: ``sys.argv``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess
from loadgen.workload.prompts import PromptSynthesizer
from tests.scripted_server import Script, ScriptedServerProcess

FLAGS = ["--api", "completions", "--prompt-tokens", "64", "--output-tokens", "2", "--concurrency", "1"]


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.001, itl_s=0.001)) as srv:
        yield srv


def loadgen(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout + res.stderr


def sent(srv: ScriptedServerProcess, *args: str) -> tuple[list[str], str]:
    """The prompts one run sent (calibration's included), in order, and its console."""
    before = len(asyncio.run(srv.fetch_served()))
    out = loadgen("--url", srv.url, *args)
    return [s.prompt for s in asyncio.run(srv.fetch_served())[before:]], out


def test_a_rerun_sends_other_prompts(scripted: ScriptedServerProcess, tmp_path: Path) -> None:
    a, out = sent(scripted, *FLAGS, "--requests", "4", "--out", str(tmp_path / "a"))
    b, _ = sent(scripted, *FLAGS, "--requests", "4", "--out", str(tmp_path / "b"))
    assert len(a) == len(b) == 6  # 2 calibration requests + 4
    assert not set(a) & set(b)
    assert all(x.split()[:3] != y.split()[:3] for x in a for y in b)  # within the first KV block
    assert [len(p.split()) for p in a] == [len(p.split()) for p in b]  # the same lengths
    salts = [json.loads((tmp_path / x / "run.json").read_text())["config"]["prompt_salt"] for x in "ab"]
    assert salts[0] != salts[1] and all(len(s) == 16 for s in salts)
    assert f"prompts salted per run (salt {salts[0]}" in out
    # the text is the seed's synthesiser keyed by the salt run.json keeps (the scripted server
    # counts one token per word and adds none: the calibration fits 1 and 0)
    assert a[2:] == [PromptSynthesizer(0, salt=int(salts[0], 16)).text(64, i) for i in range(4)]


def test_repeat_prompts_sends_the_same_text_every_run(scripted: ScriptedServerProcess, tmp_path: Path) -> None:
    a, out = sent(scripted, *FLAGS, "--requests", "3", "--repeat-prompts", "--out", str(tmp_path / "a"))
    b, _ = sent(scripted, *FLAGS, "--requests", "3", "--repeat-prompts", "--out", str(tmp_path / "b"))
    assert a == b and len(a) == 5
    assert "prompts repeated across runs" in out
    assert "prompt_salt" not in json.loads((tmp_path / "a" / "run.json").read_text())["config"]
    unsalted = PromptSynthesizer(0)  # the seed's text, as before salts
    assert a[2] == unsalted.text(64, 0)


def test_config_run_json_repeats_the_runs_prompts(scripted: ScriptedServerProcess, tmp_path: Path) -> None:
    args = [*FLAGS, "--requests", "6", "--seed", "3", "--concurrency", "2", "--workers", "2"]  # the salt reaches
    first, out = sent(scripted, *args, "--out", str(tmp_path / "first"))  # every worker process
    assert "workers: 2 processes" in out
    again, _ = sent(scripted, "--config", str(tmp_path / "first" / "run.json"), "--out", str(tmp_path / "again"))
    assert sorted(again) == sorted(first) and len(set(first)) == 8
    runs = [json.loads((tmp_path / x / "run.json").read_text())["config"] for x in ("first", "again")]
    assert runs[0]["prompt_salt"] == runs[1]["prompt_salt"]
    # and a repeated run's run.json repeats it unsalted
    rep, _ = sent(scripted, *FLAGS, "--requests", "2", "--repeat-prompts", "--out", str(tmp_path / "rep"))
    rep2, _ = sent(scripted, "--config", str(tmp_path / "rep" / "run.json"), "--out", str(tmp_path / "rep2"))
    assert rep2 == rep


def test_a_bad_salt_is_one_line(scripted: ScriptedServerProcess) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "--url", scripted.url, *FLAGS, "--prompt-salt", "xyz"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "prompt salt is 1 to 16 hex digits" in " ".join((res.stdout + res.stderr).replace("│", " ").split())


# ---------------------------------------------------------------- a prefix cache


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with ServerProcess(["--engine", "sim", "--prefix-caching", "--time-scale", "0.05"]) as url:
        yield url


def cached(folder: Path) -> list[int]:
    return [int((r.server or {})["cached_tokens"]) for r in sorted(read_records(folder), key=lambda r: r.index)]


def test_a_rerun_finds_nothing_in_the_prefix_cache(sim: str, tmp_path: Path) -> None:
    args = ["--url", sim, "--api", "completions", "--prompt-tokens", "200", "--output-tokens", "2"]
    args += ["--concurrency", "1", "--requests", "4"]
    loadgen(*args, "--out", str(tmp_path / "a"))
    loadgen(*args, "--out", str(tmp_path / "b"))
    assert cached(tmp_path / "b") == [0, 0, 0, 0]
    loadgen(*args, "--repeat-prompts", "--out", str(tmp_path / "c"))  # the seed's own text, twice:
    loadgen(*args, "--repeat-prompts", "--out", str(tmp_path / "d"))  # the second finds it cached
    assert all(c >= 200 - 16 for c in cached(tmp_path / "d")), cached(tmp_path / "d")


def test_shared_prefixes_still_share_within_a_run(sim: str, tmp_path: Path) -> None:
    wl = tmp_path / "p.toml"
    wl.write_text('name = "p"\nprompt_tokens = "48"\noutput_tokens = "2"\n[shared_prefix]\ngroups = 1\ntokens = 160\n')
    args = ["--url", sim, "--api", "completions", "--workload", str(wl), "--concurrency", "1", "--requests", "4"]
    loadgen(*args, "--out", str(tmp_path / "a"))
    loadgen(*args, "--out", str(tmp_path / "b"))
    for run in ("a", "b"):  # the first request of each run pays for the prefix, the others find it
        c = cached(tmp_path / run)
        assert c[0] == 0 and all(160 - 16 <= x <= 160 + 16 for x in c[1:]), (run, c)
