"""Datasets stream: a JSON array is split into its elements block by block (any split of the
bytes gives orjson's elements), a file costs a few numbers per entry rather than its size,
the prompts a run sends are read back by span, and a changed file is refused."""

from __future__ import annotations

import json
import os
import pickle
import random
import tracemalloc
from pathlib import Path

import orjson
import pytest

from loadgen.errors import WorkloadError
from loadgen.workload import dataset_index
from loadgen.workload.dataset_index import json_array_spans
from loadgen.workload.datasets import DatasetOptions, DatasetSource, load_dataset, measure
from loadgen.workload.prompts import PromptSynthesizer

TRICKY = [
    'a "quoted" word',
    "back\\slash\\",
    "brackets ] } [ { and , commas",
    "\u00e9\u2028\U0001f600",
    "",
    '\\"',
    "\n\t",
]


def tricky_doc(seed: int) -> list[object]:
    r = random.Random(seed)
    out: list[object] = []
    for i in range(60):
        conv = [
            {"from": "human", "value": " ".join(r.choice(TRICKY) for _ in range(r.randint(1, 5)))},
            {"from": "gpt", "value": r.choice(TRICKY)},
        ]
        out.append({"id": i, "conversations": conv, "meta": [[], {}, [1.5e3, -2, True, None, {"x": ["]"]}]]})
    return out


@pytest.mark.parametrize("block", [1, 2, 7, 64, 1 << 20])
@pytest.mark.parametrize("indent", [None, 2])
def test_the_array_scanner_finds_orjsons_elements_at_any_block_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, indent: int | None
) -> None:
    monkeypatch.setattr(dataset_index, "_BLOCK", block)
    doc = tricky_doc(block)
    path = tmp_path / "a.json"
    path.write_text(" \n" + json.dumps(doc, indent=indent, ensure_ascii=block % 2 == 0) + "\n\n")
    raw = path.read_bytes()
    with path.open("rb") as fh:
        spans = list(json_array_spans(fh, str(path)))
    assert [obj for _, _, _, obj in spans] == doc
    assert [orjson.loads(raw[o : o + n]) for o, n, _, _ in spans] == doc  # each span is its element's bytes
    assert [w for _, _, w, _ in spans] == [f"entry {i}" for i in range(len(doc))]


def test_the_scanner_splits_scalars_too(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('[1, "a,]\\"" ,true,\nnull , -2.5e3]')
    with path.open("rb") as fh:
        assert [obj for _, _, _, obj in json_array_spans(fh, str(path))] == [1, 'a,]"', True, None, -2.5e3]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"a": 1}, {"a": 2}', "line 1: not valid JSON: unexpected end of data"),
        ('[{"a": 1}\n {"a": 2}]', "line 2: not valid JSON: expected ',' or ']' after an entry"),
        ('[{"a": 1}] x', "line 1: not valid JSON: trailing data after the array"),
        ('[\n\n{"a": "unterminated}]', "line 3: not valid JSON: unexpected end of data"),
        ('[\n{"a": 1},\n{"a": tru}]', "line 3: not valid JSON"),
        ('"just a string"', "line 1: expected a JSON array of entries, got a string"),
        ("", "line 1: not valid JSON: empty file"),
    ],
)
def test_a_broken_array_fails_in_one_line_naming_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(text)
    with path.open("rb") as fh, pytest.raises(WorkloadError, match=message) as info:
        list(json_array_spans(fh, str(path)))
    assert "\n" not in str(info.value)


def big_prompt(i: int) -> str:
    return f"entry {i} " + "lorem ipsum dolor sit amet " * 400  # ~11 kB each


@pytest.mark.parametrize("name", ["big.jsonl", "big.json", "big.csv"])
def test_a_large_file_costs_a_small_fraction_of_its_size(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    n = 1500  # ~16 MB
    if name.endswith(".csv"):
        path.write_text("prompt,output_tokens\n" + "".join(f'"{big_prompt(i)}",{i % 50 + 1}\n' for i in range(n)))
    else:
        entries = [
            {"conversations": [{"from": "human", "value": big_prompt(i)}, {"from": "gpt", "value": "a b c"}]}
            for i in range(n)
        ]
        path.write_text("\n".join(json.dumps(e) for e in entries) if name.endswith("l") else json.dumps(entries))
    size = path.stat().st_size
    opts = DatasetOptions(str(path))
    tracemalloc.start()
    try:
        m = measure(load_dataset(opts), opts, PromptSynthesizer(seed=0))
        specs = DatasetSource(m, seed=3).sends(0, [0, 1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(m) == n and [s.prompt for s in specs] == [big_prompt(s.source_row or 0) for s in specs]
    assert peak < size / 6, (peak, size)  # read whole, the file alone would be 1x (and parsed, 2x)


def test_the_same_seed_gives_the_same_requests_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i} " + "w " * i}) + "\n" for i in range(40)))
    opts = DatasetOptions(str(path))
    src = DatasetSource(measure(load_dataset(opts), opts, PromptSynthesizer(seed=0)), seed=11)
    copy = pickle.loads(pickle.dumps(src))  # what a worker process gets: the path and the spans, no text
    assert b"p39 " not in pickle.dumps(src)
    assert copy.sends(1, range(40)) == src.sends(1, range(40))
    assert sorted(s.source_row or 0 for s in src.sends(1, range(40))) == list(range(40))


def test_a_file_changed_after_it_was_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(10)))
    opts = DatasetOptions(str(path))
    m = measure(load_dataset(opts), opts, PromptSynthesizer(seed=0))
    path.write_text("".join(json.dumps({"prompt": f"other {i}"}) + "\n" for i in range(12)))
    with pytest.raises(WorkloadError, match=r"p\.jsonl: changed since it was read"):
        DatasetSource(m, seed=1).sends(0, [0])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_device_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "d.jsonl"
    os.mkfifo(fifo)  # no writer: opening it for reading would block
    with pytest.raises(WorkloadError, match=r"d\.jsonl: is a FIFO, not a regular file or a folder"):
        load_dataset(DatasetOptions(str(fifo)))
    if Path("/dev/zero").exists():
        with pytest.raises(WorkloadError, match=r"/dev/zero: is a character device, not a regular file"):
            load_dataset(DatasetOptions("/dev/zero", format="prompts"))
