"""Traces: the three formats read to the same schedule, time is windowed and rescaled,
Mooncake hash ids become shared text blocks, and bad rows fail in one line."""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import ConfigError, WorkloadError
from loadgen.load.runner import LevelPlan, _schedule
from loadgen.workload.prompts import PromptSynthesizer, TokenizerCounter
from loadgen.workload.traces import (
    BLOCK_TOKENS,
    TraceOptions,
    TraceSource,
    load_trace,
    parse_window,
)
from tests.workload.test_datasets import bpe

SAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "samples"


def recorded(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seconds from the first row, prompt and output lengths, parsed here independently."""
    path = SAMPLES / name
    if name.endswith(".jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        t = np.array([r["timestamp"] / 1000 for r in rows])
        return t - t[0], np.array([r["input_length"] for r in rows]), np.array([r["output_length"] for r in rows])
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if "TIMESTAMP" in rows[0]:
        stamps = [dt.datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f") for r in rows]
        t = np.array([(s - stamps[0]).total_seconds() for s in stamps])
        return t, np.array([int(r["ContextTokens"]) for r in rows]), np.array([int(r["GeneratedTokens"]) for r in rows])
    t = np.array([float(r["Timestamp"]) for r in rows])
    return (
        t - t[0],
        np.array([int(r["Request tokens"]) for r in rows]),
        np.array([int(r["Response tokens"]) for r in rows]),
    )


@pytest.mark.parametrize(
    ("name", "fmt"), [("mooncake.jsonl", "mooncake"), ("azure.csv", "azure"), ("burstgpt.csv", "burstgpt")]
)
def test_each_format_reads_its_recorded_times_and_lengths(name: str, fmt: str) -> None:
    tr = load_trace(TraceOptions(str(SAMPLES / name)))
    t, p, o = recorded(name)
    assert tr.format == fmt and len(tr) == tr.total_rows == 240 and tr.rows.tolist() == list(range(240))
    np.testing.assert_allclose(tr.offsets, t, rtol=0, atol=1e-9)
    assert tr.input_tokens.tolist() == p.tolist() and tr.output_tokens.tolist() == o.tolist()
    assert tr.mean_rate == pytest.approx(239 / t[-1])


def test_speed_window_and_rate() -> None:
    path = str(SAMPLES / "burstgpt.csv")
    t, _, _ = recorded("burstgpt.csv")
    fast = load_trace(TraceOptions(path, speed=4.0))
    np.testing.assert_allclose(fast.offsets, t / 4, atol=1e-9)
    win = load_trace(TraceOptions(path, window=parse_window("10:30")))
    keep = np.flatnonzero((t >= 10) & (t < 30))
    assert win.rows.tolist() == keep.tolist() and win.span_s == pytest.approx(t[keep[-1]] - t[keep[0]])
    np.testing.assert_allclose(win.offsets, t[keep] - t[keep[0]], atol=1e-9)
    r = load_trace(TraceOptions(path, rate=50.0))
    assert r.mean_rate == pytest.approx(50.0)
    np.testing.assert_allclose(r.offsets / r.offsets[-1], t / t[-1], atol=1e-12)  # same shape, new scale
    assert parse_window(":20") == (0.0, 20.0) and parse_window("5:") == (5.0, float("inf"))
    for bad in ("20", "a:b", "30:10", "-1:5"):
        with pytest.raises(ConfigError, match=r"^window: "):
            parse_window(bad)
    with pytest.raises(ConfigError, match=r"^window: no row of .* lies in 9000:9001 s"):
        load_trace(TraceOptions(path, window=(9000.0, 9001.0)))
    with pytest.raises(ConfigError, match=r"^speed: give either --speed or --rate"):
        load_trace(TraceOptions(path, speed=2.0, rate=3.0))


def test_rows_out_of_time_order_replay_sorted_and_keep_their_row(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(
        "".join(
            json.dumps({"timestamp": ts, "input_length": 10 + i, "output_length": 1, "hash_ids": []}) + "\n"
            for i, ts in enumerate([500, 0, 250])
        )
    )
    tr = load_trace(TraceOptions(str(p)))
    assert tr.rows.tolist() == [1, 2, 0] and tr.offsets.tolist() == [0.0, 0.25, 0.5]
    assert tr.input_tokens.tolist() == [11, 12, 10]


def test_the_runner_sends_at_the_trace_offsets() -> None:
    tr = load_trace(TraceOptions(str(SAMPLES / "mooncake.jsonl")))
    plan = LevelPlan(index=0, mode="rate", value=tr.mean_rate, requests=100, warmup_requests=5, offsets=tr.offsets)
    assert _schedule(plan).tolist() == tr.offsets[:105].tolist()
    cut = LevelPlan(index=0, mode="rate", value=1.0, duration_s=10.0, offsets=tr.offsets)
    assert _schedule(cut).tolist() == tr.offsets[tr.offsets < 10.0].tolist()


def mooncake(tmp_path: Path, rows: list[tuple[int, list[int]]]) -> str:
    p = tmp_path / "m.jsonl"
    p.write_text(
        "".join(
            json.dumps({"timestamp": 10 * i, "input_length": n, "output_length": 4, "hash_ids": h}) + "\n"
            for i, (n, h) in enumerate(rows)
        )
    )
    return str(p)


def test_equal_hash_ids_become_identical_blocks(tmp_path: Path) -> None:
    path = mooncake(tmp_path, [(1200, [7, 8, 9]), (1100, [7, 8, 20]), (900, [5, 8]), (1700, [7, 8])])
    synth = PromptSynthesizer(seed=3)
    specs = TraceSource(load_trace(TraceOptions(path)), 3, synth).sends(0, range(4))
    words = [s.prompt.split(" ") for s in specs]  # one token per word (uncalibrated)
    assert [len(w) for w in words] == [1200, 1100, 900, 1700] and [s.prompt_tokens for s in specs] == [
        1200,
        1100,
        900,
        1700,
    ]
    assert [s.source_row for s in specs] == [0, 1, 2, 3]
    blocks = [[w[k : k + BLOCK_TOKENS] for k in range(0, len(w), BLOCK_TOKENS)] for w in words]
    assert blocks[0][0] == blocks[1][0] == blocks[3][0] and blocks[0][1] == blocks[1][1] == blocks[3][1]
    assert blocks[2][1] == blocks[0][1][:388]  # id 8 is the same text wherever it appears (here its first 388)
    assert blocks[2][0] != blocks[0][0] and blocks[0][2] != blocks[1][2][: len(blocks[0][2])]  # 5 vs 7, 9 vs 20
    assert words[3][1024:] != words[0][1024 : 1024 + 676]  # beyond its blocks: unique text
    again = TraceSource(load_trace(TraceOptions(path)), 3, PromptSynthesizer(seed=3)).sends(0, [1])
    assert again[0].prompt == specs[1].prompt  # deterministic per hash id


def test_blocks_are_exact_with_a_tokenizer(tmp_path: Path) -> None:
    counter = TokenizerCounter(bpe(tmp_path))
    path = mooncake(tmp_path, [(1200, [1, 2, 3]), (700, [1, 4])])
    synth = PromptSynthesizer(seed=0, counter=counter)
    synth.tokens_per_word, synth.overhead_tokens = 2.0, 3.0  # calibrated: 3 template tokens
    src = TraceSource(load_trace(TraceOptions(path)), 0, synth)
    specs = src.sends(0, [0, 1])
    # + the template = the trace's length, as exactly as a word boundary allows (a word is a few tokens)
    longest = max(counter.count(w) for w in specs[0].prompt.split())
    counts = [counter.count(s.prompt) for s in specs]
    assert all(0 <= want - c < longest for c, want in zip(counts, (1200 - 3, 700 - 3))), counts
    assert BLOCK_TOKENS - longest < counter.count(src._block(1, BLOCK_TOKENS)) <= BLOCK_TOKENS
    assert specs[1].prompt.startswith(src._block(1, BLOCK_TOKENS) + " ")


BAD = [
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 3, "output_length": 1}\n',
        r"m\.jsonl: line 2: input_length: missing",
    ),
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]}\n',
        r"m\.jsonl: line 1: hash_ids: expected an array of whole numbers",
    ),
    (
        "m.jsonl",
        '{"timestamp": -4, "input_length": 5, "output_length": 1}\n',
        r"line 1: timestamp: expected milliseconds >= 0",
    ),
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5.5, "output_length": 1}\n',
        r"line 1: input_length: expected a whole number",
    ),
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1,\n',
        r"m\.jsonl: line 2: not valid JSON",
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,3\nyesterday,10,3\n",
        r"a\.csv: line 3: TIMESTAMP: expected a date-time, got 'yesterday'",
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,3\n2023-11-16 18:15:47,x,3\n",
        r"a\.csv: line 3: ContextTokens: expected a whole number >= 0, got 'x'",
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.1,10\n",
        r"a\.csv: line 1: GeneratedTokens: no such column",
    ),
    (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens\n1.5,m,10,3\n2.0,m,10,-3\n",
        r"b\.csv: line 3: Response tokens: expected a whole number >= 0, got '-3'",
    ),
    (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens\nsoon,m,10,3\n",
        r"b\.csv: line 2: Timestamp: expected seconds >= 0",
    ),
    ("x.csv", "when,a,b\n1,2,3\n", r"x\.csv: cannot tell the trace format"),
    ("e.jsonl", "", r"e\.jsonl: cannot tell the trace format"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD)
def test_malformed_traces_fail_in_one_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(WorkloadError, match=message) as info:
        load_trace(TraceOptions(str(p)))
    assert "\n" not in str(info.value)
