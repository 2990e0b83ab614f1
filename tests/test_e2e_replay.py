"""Real traffic end to end: datasets, traces and a tokenizer against `loadgen serve --engine
sim` (prefix caching on) in its own process on loopback. Every run is a few dozen requests.

The reference server counts one token per word and its chat template adds two tokens per
message, so the calibrated lengths loadgen targets can be checked against the server's
own ``usage.prompt_tokens``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute
from loadgen.records import LEVEL_STRIDE, RequestRecord
from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess
from loadgen.workload.datasets import DatasetOptions
from loadgen.workload.prompts import default_corpus
from loadgen.workload.spec import Workload, workload_from_flags
from loadgen.workload.traces import TraceOptions, load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "workloads" / "samples"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with ServerProcess(["--engine", "sim", "--prefix-caching", "--max-num-seqs", "64"]) as u:
        yield u


def run(cfg: RunConfig) -> list[RequestRecord]:
    execute(cfg, Console(file=io.StringIO()))
    return list(read_records(cfg.out))


@pytest.mark.parametrize("name", ["sharegpt.json", "chat.jsonl", "prompts.jsonl", "prompts.csv", "sharegpt.parquet"])
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_each_dataset_format_runs_with_the_files_lengths(url: str, tmp_path: Path, name: str, api: str) -> None:
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (loadgen[datasets])")
    opts = DatasetOptions(str(SAMPLES / name))
    wl = Workload(name="ds", description="", classes=[], source=opts.path, dataset=opts)
    recs = run(
        RunConfig(
            url=url, api=api, workload=wl, profile=Profile(levels=[4], requests=16), out=tmp_path / "r", live=False
        )
    )
    assert len(recs) == 16 and all(r.ok for r in recs)
    rows = [r.source_row for r in recs]
    assert len(set(rows)) == 16 and all(0 <= (x or 0) < 48 for x in rows)  # without replacement
    target = np.array([r.target_prompt_tokens for r in recs])
    server = np.array([r.prompt_tokens for r in recs])
    assert (np.abs(server - target) <= 0.01 * server).all(), list(zip(rows, target, server))  # within 1%
    # output: the recorded answer's length, and the server generated that many
    answers = {
        i: len(e["conversations"][1]["value"].split())
        for i, e in enumerate(json.loads((SAMPLES / "sharegpt.json").read_text()))
    }
    assert all(r.target_output_tokens == answers[r.source_row] == r.completion_tokens for r in recs)  # type: ignore[index]
    run_json = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run_json["workload"]["dataset"]["path"] == opts.path
    assert (
        run_json["workload"]["dataset"]["entries"] == 48 and run_json["workload"]["dataset"]["lengths"] == "calibrated"
    )


def trace_rows(name: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (SAMPLES / name).read_text().splitlines()]


@pytest.mark.parametrize("name", ["mooncake.jsonl", "azure.csv", "burstgpt.csv"])
def test_each_trace_format_replays_at_its_recorded_times(url: str, tmp_path: Path, name: str) -> None:
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--url",
            url,
            "--api",
            "completions",
            "--trace",
            str(SAMPLES / name),
            "--window",
            "0:20",
            "--speed",
            "10",
            "--requests",
            "60",
            "--quiet",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 0, res.output
    recs = sorted(read_records(tmp_path / "r"), key=lambda r: r.index)
    tr = load_trace(TraceOptions(str(SAMPLES / name), window=(0.0, 20.0), speed=10.0))
    n = min(60, len(tr))
    assert len(recs) == n and all(r.ok for r in recs)
    pos = [r.index % LEVEL_STRIDE for r in recs]
    assert pos == list(range(n)) and [r.source_row for r in recs] == tr.rows[:n].tolist()
    # the schedule is the trace's: each send's scheduled time, to the nanosecond
    sched = np.array([r.scheduled_ns for r in recs]) - recs[0].scheduled_ns
    assert sched.tolist() == np.round(tr.offsets[:n] * 1e9).astype(np.int64).tolist()
    # the lengths are the trace's (completions: no template; the word tokenizer counts exactly)
    assert [r.prompt_tokens for r in recs] == [r.target_prompt_tokens for r in recs] == tr.input_tokens[:n].tolist()
    assert [r.completion_tokens for r in recs] == tr.output_tokens[:n].tolist()
    run_json = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run_json["trace"]["rows"] == len(tr) and run_json["profile"]["arrival"] == "trace"


def test_mooncake_hash_ids_reach_the_servers_prefix_cache(url: str, tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"  # every request waits for the last: the cache is warm when it comes
    rows = [
        (0, 1000, [11, 12]),
        (400, 1100, [11, 12, 13]),
        (800, 600, [14, 15]),
        (1200, 1024, [11, 16]),
        (1600, 700, [17, 18]),
    ]
    path.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": n, "output_length": 4, "hash_ids": h}) + "\n"
            for t, n, h in rows
        )
    )
    before = httpx.get(url + "/metrics").text
    res = CliRunner().invoke(
        app,
        ["run", "--url", url, "--api", "completions", "--trace", str(path), "--quiet", "--out", str(tmp_path / "r")],
    )
    assert res.exit_code == 0, res.output
    recs = sorted(read_records(tmp_path / "r"), key=lambda r: r.index)
    cached = [int((r.server or {})["cached_tokens"]) for r in recs]
    # shared, to the server's 16-token blocks: row 1 all of row 0 (id 11 and the 488 tokens
    # of id 12 that row 0 holds: 1,000), row 3 id 11 (512); rows 0, 2 and 4 nothing
    assert cached[0] == cached[2] == cached[4] == 0
    assert 1000 - 16 < cached[1] <= 1000 and 512 - 16 < cached[3] <= 512, cached
    assert _hits(httpx.get(url + "/metrics").text) - _hits(before) >= sum(cached)


def _hits(metrics: str) -> float:
    return sum(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("vllm:prefix_cache_hits_total")
    )


def test_a_tokenizer_makes_synthetic_prompts_exact(url: str, tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="optional extra loadgen[tokenizer] is not installed")
    # the reference server counts words: a word-level tokenizer over the prompt words agrees with it
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(default_corpus())}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    cfg = RunConfig(
        url=url,
        api="chat",
        workload=workload_from_flags("uniform:min=20,max=900", "4"),
        profile=Profile(levels=[4], requests=12),
        out=tmp_path / "r",
        live=False,
        tokenizer=tmp_path / "tokenizer.json",
        workers=2,
    )  # the counter goes to the workers
    recs = run(cfg)
    assert len(recs) == 12 and all(r.prompt_tokens == r.target_prompt_tokens for r in recs)
    assert {r.worker for r in recs} == {0, 1, 2, 3}
    assert json.loads((tmp_path / "r" / "run.json").read_text())["tokenizer"] == str(tmp_path / "tokenizer.json")


def test_worker_processes_read_the_datasets_prompts_back_from_the_file(url: str, tmp_path: Path) -> None:
    path = tmp_path / "d.json"  # a JSON array, streamed: each worker reads its prompts back by span
    path.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": " ".join(["w"] * (10 + i))},
                        {"from": "gpt", "value": "a b c"},
                    ]
                }
                for i in range(40)
            ]
        )
    )
    opts = DatasetOptions(str(path))
    wl = Workload(name="ds", description="", classes=[], source=opts.path, dataset=opts)
    recs = run(
        RunConfig(
            url=url,
            api="completions",
            workload=wl,
            profile=Profile(levels=[4], requests=20),
            out=tmp_path / "r",
            live=False,
            workers=2,
        )
    )
    assert len(recs) == 20 and all(r.ok for r in recs) and {r.worker for r in recs} == {0, 1, 2, 3}
    assert len({r.source_row for r in recs}) == 20  # one permutation over the processes
    # the server counts the words it was sent: each request carried its own row's prompt
    assert all(r.prompt_tokens == 10 + (r.source_row or 0) and r.completion_tokens == 3 for r in recs)


def test_cli_dataset_flags(url: str, tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--url",
            url,
            "--dataset",
            str(SAMPLES / "prompts.csv"),
            "--output-tokens",
            "3",
            "--min-prompt-tokens",
            "80",
            "--replacement",
            "--concurrency",
            "2",
            "--requests",
            "10",
            "--quiet",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "dataset: " in res.output and "prompt lengths estimated from the calibration" in res.output
    recs = list(read_records(tmp_path / "r"))
    assert len(recs) == 10 and all(r.ok and r.completion_tokens == 3 and (r.prompt_tokens or 0) >= 80 for r in recs)


def test_a_workload_file_with_a_dataset_table(url: str, tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text((SAMPLES / "prompts.jsonl").read_text())
    (tmp_path / "real.toml").write_text(
        'name = "real"\n[dataset]\npath = "data.jsonl"\nmax_prompt_tokens = 60\noutput_tokens = 2\n'
    )
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--url",
            url,
            "--api",
            "completions",
            "--workload",
            str(tmp_path / "real.toml"),
            "--rate",
            "50",
            "--requests",
            "12",
            "--quiet",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 0, res.output
    recs = list(read_records(tmp_path / "r"))
    lengths = [len(json.loads(line)["prompt"].split()) for line in (SAMPLES / "prompts.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and len({r.source_row for r in recs}) == 12
    assert all(r.prompt_tokens == lengths[r.source_row] <= 60 and r.completion_tokens == 2 for r in recs)  # type: ignore[index]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "X", "--concurrency", "4"], "--concurrency: a trace replays as one open-loop level"),
        (["--dataset", "X", "--workload", "chat"], "give one of --dataset, --trace, --workload or --prompt-tokens"),
        (["--speed", "2"], "--speed: only goes with --trace"),
        (["--min-prompt-tokens", "5"], "--min-prompt-tokens: only goes with --dataset"),
        (
            ["--dataset", "X", "--output-tokens", "lognormal:median=5,sigma=1"],
            "--output-tokens: with --dataset, a whole",
        ),
        (["--trace", "X", "--window", "5"], "--window: expected START:END"),
        (["--trace", "X", "--arrival", "gamma"], "--arrival/--burstiness: a trace replays at its recorded times"),
        (["--dataset", "X"], "X: no such dataset file"),
    ],
)
def test_cli_replay_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    sample = {"X": str(SAMPLES / "mooncake.jsonl") if "--trace" in args else str(tmp_path / "X")}
    res = CliRunner().invoke(
        app, ["run", "--url", "http://127.0.0.1:9", *[sample.get(a, a) for a in args], "--out", str(tmp_path / "r")]
    )
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
