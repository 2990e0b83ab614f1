"""Datasets: every format reads, malformed files fail in one line naming file, line and
field, lengths are measured (exactly with a tokenizer), filtered and sampled by position."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import WorkloadError
from loadgen.records import LEVEL_STRIDE, USER_STRIDE
from loadgen.workload.datasets import (
    DEFAULT_OUTPUT_TOKENS,
    DatasetOptions,
    DatasetSource,
    load_dataset,
    measure,
)
from loadgen.workload.prompts import PromptSynthesizer, TokenizerCounter, default_corpus
from loadgen.workload.spec import load_workload

SAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "samples"
FILES = ["sharegpt.json", "chat.jsonl", "prompts.jsonl", "prompts.csv", "sharegpt.parquet"]


def synth(tpw: float = 1.0, overhead: float = 0.0) -> PromptSynthesizer:
    s = PromptSynthesizer(seed=0)
    s.tokens_per_word, s.overhead_tokens = tpw, overhead
    return s


def bpe(tmp_path: Path) -> Path:
    """A tiny BPE tokenizer trained here on the bundled words (most words: several tokens)."""
    tokenizers = pytest.importorskip("tokenizers", reason="optional extra loadgen[tokenizer] is not installed")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator([" ".join(default_corpus())] * 4, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def sharegpt_texts() -> tuple[list[str], list[str]]:
    doc = json.loads((SAMPLES / "sharegpt.json").read_text())
    return [e["conversations"][0]["value"] for e in doc], [e["conversations"][1]["value"] for e in doc]


@pytest.mark.parametrize("name", FILES)
def test_every_sample_format_reads_the_same_entries(name: str) -> None:
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (loadgen[datasets])")
    opts = DatasetOptions(str(SAMPLES / name))
    ds = load_dataset(opts)
    prompts, answers = sharegpt_texts()
    assert len(ds.prompts) == len(prompts) == 48 and ds.rows == list(range(48))
    texts = [p if isinstance(p, str) else p[-1]["content"] for p in ds.prompts]
    assert texts == prompts
    m = measure(ds, opts, synth())
    # one token per word, no overhead: the prompt's word count (chat: its system message too)
    want = [len(p.split()) if isinstance(p, str) else sum(len(x["content"].split()) for x in p) for p in ds.prompts]
    assert m.prompt_tokens.tolist() == want
    # the recorded answer's length (or the file's output_tokens, which the samples set to it)
    assert m.output_tokens.tolist() == [len(a.split()) for a in answers]


def test_chat_sends_messages_up_to_the_last_user_turn(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one two"},
        {"role": "assistant", "content": "a b c"},
        {"role": "user", "content": "three four five"},
        {"role": "assistant", "content": [{"type": "text", "text": "x y z w"}]},
    ]
    path.write_text(json.dumps({"messages": msgs}) + "\n" + json.dumps({"messages": msgs[:2]}) + "\n")
    ds = load_dataset(DatasetOptions(str(path)))
    assert ds.format == "chat" and ds.prompts[0] == msgs[:4] and ds.answers == ["x y z w", None]
    m = measure(ds, DatasetOptions(str(path)), synth(1.0, 2.0))
    # calibrated overhead (one message's template) counted once per message
    assert m.prompt_tokens.tolist() == [2 + 2 + 3 + 3 + 4 * 2, 2 + 2 + 2 * 2]
    assert m.output_tokens.tolist() == [4, DEFAULT_OUTPUT_TOKENS]


def test_sharegpt_skips_entries_without_a_human_turn(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "gpt", "value": "hi"}]},
                {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}]},
            ]
        )
    )
    ds = load_dataset(DatasetOptions(str(path)))
    assert ds.skipped == 1 and ds.prompts == ["q"] and ds.rows == [1] and ds.answers == [None]


def test_filters_override_and_calibration(tmp_path: Path) -> None:
    opts = DatasetOptions(str(SAMPLES / "prompts.jsonl"), min_prompt_tokens=50, max_prompt_tokens=120, output_tokens=7)
    ds = load_dataset(opts)
    m = measure(ds, opts, synth(1.25, 3.0))
    words = np.array([len(p.split()) for p in ds.prompts])  # type: ignore[union-attr]
    est = np.rint(words * 1.25 + 3.0)
    keep = (est >= 50) & (est <= 120)
    assert 0 < len(m) < len(ds.prompts) and m.prompt_tokens.tolist() == est[keep].astype(int).tolist()
    assert m.rows.tolist() == np.flatnonzero(keep).tolist() and set(m.output_tokens.tolist()) == {7}
    with pytest.raises(WorkloadError, match=r"prompts\.jsonl: prompt_token_range: none of its 48"):
        measure(ds, DatasetOptions(opts.path, min_prompt_tokens=100_000), synth())


def test_a_tokenizer_counts_exactly(tmp_path: Path) -> None:
    counter = TokenizerCounter(bpe(tmp_path))
    opts = DatasetOptions(str(SAMPLES / "sharegpt.json"))
    s = PromptSynthesizer(seed=0, counter=counter)
    s.overhead_tokens = 4.0
    ds = load_dataset(opts)
    m = measure(ds, opts, s)
    prompts, answers = sharegpt_texts()
    assert m.exact
    assert m.prompt_tokens.tolist() == [counter.count(p) + 4 for p in prompts]
    assert m.output_tokens.tolist() == [counter.count(a) for a in answers]
    assert (m.prompt_tokens > np.array([len(p.split()) for p in prompts]) + 4).mean() > 0.9  # BPE: more than words


def source(replacement: bool, n: int = 10) -> DatasetSource:
    opts = DatasetOptions(str(SAMPLES / "prompts.jsonl"), replacement=replacement)
    data = measure(load_dataset(opts), opts, synth())
    data.prompts, data.prompt_tokens = data.prompts[:n], data.prompt_tokens[:n]
    data.output_tokens, data.rows = data.output_tokens[:n], data.rows[:n]
    return DatasetSource(data, seed=5, replacement=replacement)


def test_sampling_without_replacement_uses_every_entry_once_per_pass() -> None:
    src = source(False)
    specs = src.sends(2, list(range(30)))
    rows = [s.source_row for s in specs]
    assert [sorted(rows[k : k + 10]) for k in (0, 10, 20)] == [list(range(10))] * 3
    assert rows[:10] != rows[10:20]  # each pass a fresh permutation
    assert [s.index for s in specs] == [2 * LEVEL_STRIDE + i for i in range(30)]
    assert src.sends(2, [3, 17]) == [specs[3], specs[17]]  # by position: any process agrees
    assert [s.source_row for s in source(False).sends(2, range(10))] == rows[:10]  # seeded
    assert [s.source_row for s in src.sends(3, range(10))] != rows[:10]  # levels differ


def test_closed_loop_users_share_one_permutation() -> None:
    src = source(False)
    src.set_users(0, 3)
    per_user = [list(src.user(0, u, q)) for u, q in ((0, 4), (1, 3), (2, 3))]
    rows = [s.source_row for u in per_user for s in u]
    assert sorted(rows) == list(range(10))  # 10 requests of 10 entries: none twice
    assert [s.index for s in per_user[1]] == [USER_STRIDE + k for k in range(3)]
    dense = {k * 3 + u: s.source_row for u, specs in enumerate(per_user) for k, s in enumerate(specs)}
    assert [s.source_row for s in src.sends(0, range(10))] == [dense[i] for i in range(10)]


def test_sampling_with_replacement_repeats() -> None:
    rows = [s.source_row for s in source(True).sends(0, range(200))]
    assert set(rows) == set(range(10)) and len(rows) == 200
    assert max(rows.count(r) for r in range(10)) < 40  # uniform-ish: 20 expected each


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


BAD = [
    (
        "a.jsonl",
        '{"prompt": "ok"}\n{"prompt": 5}\n',
        r"a\.jsonl: line 2: prompt: expected a non-empty string, got a number",
    ),
    (
        "a.jsonl",
        '{"prompt": "ok"}\n{"prompt": "x", "output_tokens": 0}\n',
        r"line 2: output_tokens: expected a whole number >= 1",
    ),
    ("a.jsonl", '{"prompt": "ok"}\n{"prompt": "x"\n', r"a\.jsonl: line 2: not valid JSON"),
    ("a.jsonl", '{"text": "x"}\n', r"line 1: cannot tell the format"),
    (
        "c.jsonl",
        '{"messages": [{"role": "user", "content": "x"}]}\n{"messages": [{"role": "user"}]}\n',
        r"c\.jsonl: line 2: messages\[0\]\.content: missing",
    ),
    (
        "c.jsonl",
        '{"messages": [{"role": "assistant", "content": "x"}]}\n',
        r"line 1: messages: has no message with role 'user'",
    ),
    (
        "c.jsonl",
        '{"messages": [{"role": "user", "content": 3}]}\n',
        r"line 1: messages\[0\]\.content: expected a string",
    ),
    (
        "s.json",
        '[{"conversations": [{"from": "human", "value": "x"}]}, {"conversations": [{"value": "y"}]}]',
        r"s\.json: entry 1: conversations\[0\]\.from: missing or not a string",
    ),
    ("s.json", '[{"conversations": "x"}]', r"entry 0: conversations: expected an array of turns"),
    ("s.json", '{"conversations": []}', r"s\.json: line 1: expected a JSON array of entries"),
    ("s.json", '[{"conversations": [}]', r"s\.json: line 1: not valid JSON"),
    (
        "p.csv",
        "prompt,output_tokens\nhello,4\nworld,many\n",
        r"p\.csv: line 3: output_tokens: expected a whole number >= 1, got 'many'",
    ),
    ("p.csv", "text\nhello\n", r"p\.csv: line 1: prompt: no such column; columns: text"),
    ("p.csv", 'prompt\nhello\n""\n', r"p\.csv: line 3: prompt: empty"),
    ("p.txt", "hello\n", r"p\.txt: cannot tell the format from '\.txt'"),
    ("e.jsonl", "\n\n", r"e\.jsonl: holds no usable entry"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD)
def test_malformed_files_fail_in_one_line_naming_file_line_and_field(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(WorkloadError, match=message) as info:
        load_dataset(DatasetOptions(path))
    assert "\n" not in str(info.value) and str(info.value).startswith(path)


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such dataset file"):
        load_dataset(DatasetOptions(str(tmp_path / "none.jsonl")))
    with pytest.raises(WorkloadError, match="unknown dataset format 'yaml'"):
        load_dataset(DatasetOptions(str(SAMPLES / "prompts.csv"), format="yaml"))


def test_parquet_without_pyarrow_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    with pytest.raises(
        WorkloadError, match=r"sharegpt\.parquet: reading Parquet needs pyarrow: pip install 'loadgen\[datasets\]'"
    ):
        load_dataset(DatasetOptions(str(SAMPLES / "sharegpt.parquet")))


def test_a_hugging_face_save_to_disk_folder(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (loadgen[datasets])")
    split = tmp_path / "ds" / "train"  # what datasets.DatasetDict.save_to_disk writes: a folder per split
    split.mkdir(parents=True)
    table = pa.table({"prompt": [f"q {i} " + "w " * i for i in range(1, 7)], "output_tokens": [3, 4, 5, 6, 7, 8]})
    for k, part in enumerate((table.slice(0, 4), table.slice(4))):  # two shards, Arrow IPC streams
        with (
            pa.OSFile(str(split / f"data-0000{k}-of-00002.arrow"), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as writer,
        ):
            writer.write_table(part)
    (split / "state.json").write_text("{}")
    ds = load_dataset(DatasetOptions(str(split)))
    assert (
        ds.format == "parquet" and ds.prompts == table.column("prompt").to_pylist() and ds.outputs == [3, 4, 5, 6, 7, 8]
    )
    with pytest.raises(
        WorkloadError,
        match=r"no \*\.parquet or \*\.arrow file; a dataset dict: give one split's folder, "
        r"e\.g\. .*ds/train",
    ):
        load_dataset(DatasetOptions(str(tmp_path / "ds")))


def test_dataset_table_in_a_workload_file(tmp_path: Path) -> None:
    wl = tmp_path / "w.toml"
    wl.write_text(
        f'name = "real"\n[dataset]\npath = "{SAMPLES / "prompts.csv"}"\nmax_prompt_tokens = 100\n'
        "replacement = true\noutput_tokens = 32\n"
    )
    w = load_workload(str(wl), [])
    assert w.classes == [] and w.dataset == DatasetOptions(str(SAMPLES / "prompts.csv"), "auto", None, 100, True, 32)
    rel = tmp_path / "sub"
    rel.mkdir()
    (rel / "d.jsonl").write_text('{"prompt": "a b"}\n')
    (rel / "r.toml").write_text('[dataset]\npath = "d.jsonl"\n')
    assert load_workload(str(rel / "r.toml"), []).dataset == DatasetOptions(str(rel / "d.jsonl"))  # next to the file
    for body, key in (
        ('[dataset]\npath = "x"\nshuffle = 1\n', "dataset.shuffle"),
        ('prompt_tokens = 5\n[dataset]\npath = "x"\n', "prompt_tokens"),
        ('[dataset]\npath = "x"\nreplacement = "yes"\n', "dataset.replacement"),
        ('[dataset]\npath = "x"\nformat = "xml"\n', "dataset.format"),
    ):
        (tmp_path / "bad.toml").write_text(body)
        with pytest.raises(WorkloadError, match=f"bad.toml: {key}: "):
            load_workload(str(tmp_path / "bad.toml"), [])
