"""Real prompts from a dataset file, measured, filtered and sampled into requests.

Formats (``format = "auto"`` picks by extension, and for JSONL by the first entry's keys):
``sharegpt``, ``chat``, ``prompts``, ``csv`` and ``parquet`` (needs ``pyarrow``). A
prompt's length is exact with a tokenizer, else estimated from the run's calibration; the
recorded answer's count is the request's ``max_tokens`` unless ``output_tokens`` overrides
it (:data:`DEFAULT_OUTPUT_TOKENS` with neither). Sampling is seeded and by position, so
worker processes agree; each request's ``source_row`` is its entry's 0-based row. A JSON
array, JSONL or CSV file is read as a stream (:mod:`loadgen.workload.dataset_index`); the
texts are read back when counted and when sent. Errors name the file, the line (or entry)
and the field.

What each format reads and the counting, sampling and memory rules: workloads/README.md,
"Real traffic: datasets and traces".
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import importlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.inputs import input_problem, open_input
from loadgen.records import LEVEL_STRIDE, USER_STRIDE, Prompt, RequestSpec
from loadgen.workload.dataset_formats import ENTRY, Entry, csv_entry, entry_error, kind_of, prompt_entry
from loadgen.workload.dataset_images import COLUMNS, ImageRef, ImageResolver, with_images
from loadgen.workload.dataset_index import (
    EntryView,
    FileEntries,
    HeldEntries,
    Store,
    csv_spans,
    json_array_spans,
    jsonl_spans,
    stamp,
)
from loadgen.workload.distributions import MAX_LENGTH
from loadgen.workload.images import ImageConfig, request_images
from loadgen.workload.prompts import PromptSynthesizer, TokenCounter

__all__ = [
    "DEFAULT_OUTPUT_TOKENS",
    "FORMATS",
    "Dataset",
    "DatasetOptions",
    "DatasetSource",
    "EntryView",
    "MeasuredDataset",
    "load_dataset",
    "measure",
]

FORMATS = ("auto", "sharegpt", "chat", "prompts", "csv", "parquet")
DEFAULT_OUTPUT_TOKENS = 128
_BLOCK = 1024
_COUNT_BATCH = 1024  # entries counted per tokenizer call


@dataclass(frozen=True, slots=True)
class DatasetOptions:
    """How to read and sample a dataset (``--dataset`` and its flags, or a ``[dataset]`` table)."""

    path: str
    format: str = "auto"
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    replacement: bool = False
    output_tokens: int | None = None  # overrides every entry's recorded answer
    image_root: str | None = None  # the folder an entry's image files are relative to (default: the dataset's)

    def __post_init__(self) -> None:
        for flag, v in (
            ("--min-prompt-tokens", self.min_prompt_tokens),
            ("--max-prompt-tokens", self.max_prompt_tokens),
            ("--output-tokens", self.output_tokens),
        ):
            if v is not None and not 1 <= v <= MAX_LENGTH:
                raise WorkloadError(f"must be in [1, {MAX_LENGTH:,}] tokens, got {v:,}", key=flag)

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "min_prompt_tokens": self.min_prompt_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "replacement": self.replacement,
            "output_tokens": self.output_tokens,
            "image_root": self.image_root,
        }


@dataclass(slots=True)
class Dataset:
    """A dataset file's entries as indexed: for each, its file row, recorded output count and
    word counts; the texts stay in the file (:attr:`prompts` and :attr:`answers` read them
    back), so a large file costs a few numbers per entry."""

    path: str
    format: str
    store: Store
    rows: list[int]  # each entry's 0-based row in the file
    outputs: list[int | None]  # recorded output_tokens
    words: np.ndarray  # int64, the prompt's words (chat: all its messages')
    messages: np.ndarray  # int64, messages sent (a plain prompt: 1)
    answer_words: np.ndarray  # int64, the recorded answer's words (-1: no answer)
    skipped: int = 0  # entries without a prompt (ShareGPT without a human turn)
    with_images: int = 0  # entries that name images

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def prompts(self) -> EntryView:
        """Each entry's prompt (a string, or chat messages), read from the file when indexed."""
        return EntryView(self.store, 0, np.arange(len(self.rows)))

    @property
    def answers(self) -> EntryView:
        """Each entry's recorded answer (None: none), read from the file when indexed."""
        return EntryView(self.store, 1, np.arange(len(self.rows)))


class _Builder:
    """A dataset's numbers gathered entry by entry while the file streams past."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.outputs: list[int | None] = []
        self.counts = array("q")  # words, messages, answer words: three per entry
        self.spans = array("q")
        self.held: list[Any] = []
        self.skipped = self.with_images = 0

    def add(self, row: int, entry: Any, span: tuple[int, int] | None = None) -> None:
        if entry is None:
            self.skipped += 1
            return
        prompt, answer, output, images = entry
        self.with_images += bool(images)
        self.rows.append(row)
        self.outputs.append(output)
        self.counts.extend(
            (
                _words(_prompt_text(prompt)),
                1 if isinstance(prompt, str) else len(prompt),
                _words(answer) if answer else -1,
            )
        )
        if span is None:
            self.held.append(entry)
        else:
            self.spans.extend(span)

    def build(self, path: str, fmt: str, store: Store) -> Dataset:
        c = np.frombuffer(self.counts, dtype=np.int64).reshape(-1, 3) if self.counts else np.zeros((0, 3), np.int64)
        return Dataset(
            path,
            fmt,
            store,
            self.rows,
            self.outputs,
            c[:, 0].copy(),
            c[:, 1].copy(),
            c[:, 2].copy(),
            self.skipped,
            self.with_images,
        )


def _read_file(path: Path, src: str, reader: str, kind: str | None, b: _Builder, base: str) -> Dataset:
    """A JSON array, JSONL or CSV file (``reader``) streamed entry by entry; ``kind``: the
    entries' format (None: told by the first entry); image files relative to ``base``."""
    with open_input(path) as fh:
        file_stamp = stamp(fh)
        header: list[str] = []
        parse: Callable[[Any, str], Entry | None] | None = None
        if reader == "csv":
            header, spans = csv_spans(fh, src)
            if "prompt" not in header:
                raise entry_error(src, "line 1", "prompt", f"no such column; columns: {', '.join(header) or '(none)'}")
            kind, parse = "csv", functools.partial(with_images, csv_entry, base, src)
        else:
            spans = json_array_spans(fh, src) if reader == "json" else jsonl_spans(fh, src)
        for row, (offset, length, where, obj) in enumerate(spans):
            if parse is None:
                kind = kind or kind_of(obj) or ("sharegpt" if reader == "json" else None)
                if kind is None:
                    raise entry_error(
                        src,
                        where,
                        None,
                        "cannot tell the format: expected an object with conversations, messages or prompt",
                    )
                parse = functools.partial(with_images, ENTRY[kind], base, src)
            b.add(row, parse(obj, where), (offset, length))
    spans_ = np.frombuffer(b.spans, dtype=np.int64).reshape(-1, 2) if b.spans else np.zeros((0, 2), np.int64)
    store = FileEntries(
        src,
        "csv" if header else "json",
        spans_,
        header,
        file_stamp,
        parse or functools.partial(with_images, prompt_entry, base, src),
    )
    return b.build(src, kind or "sharegpt", store)


def _arrow(path: Path) -> Any:
    """A Hugging Face ``save_to_disk`` shard (an Arrow IPC stream) as a data frame."""
    pa: Any = importlib.import_module("pyarrow")  # (checked by the caller)
    with pa.memory_map(str(path)) as src:
        return pa.ipc.open_stream(src).read_all().to_pandas()


def _read_parquet(path: Path, src: str, b: _Builder, base: str) -> Dataset:
    try:
        importlib.import_module("pyarrow")
    except ImportError:
        raise WorkloadError("reading Parquet needs pyarrow: pip install 'loadgen[datasets]'", source=src) from None
    import pandas as pd

    files = (sorted(path.glob("*.parquet")) or sorted(path.glob("*.arrow"))) if path.is_dir() else [path]
    if not files:
        splits = sorted(p.name for p in path.iterdir() if p.is_dir() and any(p.glob("*.arrow")))
        hint = f"; a dataset dict: give one split's folder, e.g. {path / splits[0]}" if splits else ""
        raise WorkloadError(f"the folder holds no *.parquet or *.arrow file{hint}", source=src)
    try:
        frame = pd.concat([_arrow(f) if f.suffix == ".arrow" else pd.read_parquet(f) for f in files], ignore_index=True)
    except (OSError, ValueError, TypeError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise WorkloadError(f"cannot read {files[0].suffix[1:].capitalize()}: {exc}", source=src) from None
    kind = next(
        (
            k
            for c, k in (("conversations", "sharegpt"), ("messages", "chat"), ("prompt", "prompts"))
            if c in frame.columns
        ),
        None,
    )
    if kind is None:
        raise WorkloadError(
            f"no conversations, messages or prompt column; columns: {', '.join(map(str, frame.columns))}", source=src
        )
    cols = [c for c in ("conversations", "messages", "prompt", "output_tokens", *COLUMNS) if c in frame.columns]
    for row, values in enumerate(zip(*(frame[c].tolist() for c in cols))):
        obj = dict(zip(cols, values))
        for c in ("conversations", "messages"):
            if isinstance(obj.get(c), np.ndarray):
                obj[c] = list(obj[c])
        b.add(row, with_images(ENTRY[kind], base, src, obj, f"row {row}"))
    return b.build(src, "parquet", HeldEntries(b.held))


def load_dataset(opts: DatasetOptions) -> Dataset:
    """Read every entry of ``opts.path`` once, keeping its numbers and where it lies in the
    file (no token counts yet: those need the calibration)."""
    path, src = Path(opts.path), opts.path
    if opts.format not in FORMATS:
        raise WorkloadError(
            f"unknown dataset format {opts.format!r}; choose one of: {', '.join(FORMATS)}", key="format"
        )
    why = input_problem(path, folder_ok=True)  # (a FIFO would block the read, out of a signal's reach)
    if why is not None:
        raise WorkloadError("no such dataset file" if why == "no such file" else why, source=src)
    fmt = opts.format
    if fmt == "auto":
        suffix = path.suffix.lower()
        fmt = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}.get(suffix, "")
        if path.is_dir():
            fmt = "parquet"
        if not fmt:
            raise WorkloadError(
                f"cannot tell the format from {suffix or 'no extension'!r}: name it .json, .jsonl, "
                ".csv or .parquet, or give the format",
                source=src,
            )
    b = _Builder()
    base = opts.image_root or str(path if path.is_dir() else path.parent)
    try:
        if fmt == "parquet":
            ds = _read_parquet(path, src, b, base)
        elif fmt == "csv":
            ds = _read_file(path, src, "csv", None, b, base)
        elif fmt == "json" or (fmt == "sharegpt" and path.suffix.lower() == ".json"):
            ds = _read_file(path, src, "json", None if fmt == "json" else fmt, b, base)
        else:
            ds = _read_file(path, src, "jsonl", None if fmt == "jsonl" else fmt, b, base)
    except OSError as exc:
        raise WorkloadError(f"cannot read: {exc.strerror or exc}", source=src) from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"not UTF-8 text: {exc}", source=src) from None
    except csv.Error as exc:
        raise WorkloadError(f"invalid CSV: {exc}", source=src) from None
    if not len(ds):
        raise WorkloadError(
            "holds no usable entry" + (f" ({ds.skipped} without a human turn)" if ds.skipped else ""), source=src
        )
    return ds


@dataclass(slots=True)
class MeasuredDataset:
    """A dataset's entries that passed the filters, with their token counts (the prompts
    are read from the file when a request needs one)."""

    prompts: Sequence[Prompt]
    prompt_tokens: np.ndarray  # int64, the target (server-counted) prompt lengths
    output_tokens: np.ndarray  # int64, max_tokens per entry
    rows: np.ndarray  # int64, each entry's row in the file
    exact: bool  # counted with a tokenizer (else estimated from the calibration)
    total: int  # entries before filtering
    images: Sequence[tuple[ImageRef, ...]] = ()  # each entry's image references (empty: none has images)

    def __len__(self) -> int:
        return len(self.prompts)

    def held(self) -> MeasuredDataset:
        """The same with its prompts and images in memory (for workers that cannot read the files: Ray)."""
        read = ImageResolver(str(getattr(getattr(self.prompts, "store", None), "path", "dataset")))
        images = [read(refs, int(row)) for refs, row in zip(self.images, self.rows)]
        return dataclasses.replace(self, prompts=list(self.prompts), images=images)


def _words(text: str) -> int:
    return len(text.split())


def _prompt_text(p: Prompt) -> str:
    return p if isinstance(p, str) else "\n".join(m["content"] for m in p)


def _count(texts: list[str], counter: TokenCounter) -> list[int]:
    many = getattr(counter, "count_many", None)
    return list(many(texts)) if many is not None else [counter.count(t) for t in texts]


def _exact(ds: Dataset, counter: TokenCounter) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's prompt and answer tokens (-1: no answer), read back in batches."""
    prompts = np.zeros(len(ds), dtype=float)
    answers = np.full(len(ds), -1.0)
    for start in range(0, len(ds), _COUNT_BATCH):
        entries = [ds.store.read(k) for k in range(start, min(start + _COUNT_BATCH, len(ds)))]
        prompts[start : start + len(entries)] = _count([_prompt_text(e[0]) for e in entries], counter)
        said = [i for i, e in enumerate(entries) if e[1]]
        if said:
            answers[[start + i for i in said]] = _count([entries[i][1] or "" for i in said], counter)
    return prompts, answers


def measure(ds: Dataset, opts: DatasetOptions, synth: PromptSynthesizer) -> MeasuredDataset:
    """Count every entry's tokens (exact with ``synth.counter``, reading the file again in
    batches; else calibrated words), apply the length filters and the output override."""
    counter = synth.counter
    if counter is None:
        counted = synth.tokens_per_word * ds.words.astype(float)
        answered = np.where(ds.answer_words >= 0, synth.tokens_per_word * ds.answer_words, -1.0)
    else:
        counted, answered = _exact(ds, counter)
    # the template's tokens: the calibrated overhead (one user message) per message sent
    prompt = np.maximum(1, np.rint(counted + synth.overhead_tokens * ds.messages)).astype(np.int64)
    if opts.output_tokens is not None:
        output = np.full(len(ds), opts.output_tokens, dtype=np.int64)
    else:
        recorded = np.array([-1 if o is None else o for o in ds.outputs], dtype=np.int64)
        output = np.where(recorded > 0, recorded, DEFAULT_OUTPUT_TOKENS)
        use = (recorded < 0) & (answered >= 0)
        output[use] = np.maximum(1, np.rint(answered[use])).astype(np.int64)
    keep = np.ones(len(prompt), dtype=bool)
    if opts.min_prompt_tokens is not None:
        keep &= prompt >= opts.min_prompt_tokens
    if opts.max_prompt_tokens is not None:
        keep &= prompt <= opts.max_prompt_tokens
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        raise WorkloadError(
            f"none of its {len(prompt)} entries has a prompt of {opts.min_prompt_tokens or 1}.."
            f"{opts.max_prompt_tokens or 'any'} tokens (prompts here: {prompt.min()}..{prompt.max()})",
            source=ds.path,
            field="prompt_token_range",
        )
    return MeasuredDataset(
        prompts=EntryView(ds.store, 0, idx),
        prompt_tokens=prompt[idx],
        output_tokens=output[idx].astype(np.int64),
        rows=np.asarray(ds.rows, dtype=np.int64)[idx],
        exact=counter is not None,
        total=len(prompt),
        images=EntryView(ds.store, 3, idx) if ds.with_images else (),
    )


class DatasetSource:
    """The runner's ``SpecSource`` over a measured dataset (see the module docstring); each
    request sends its entry's images, or (a dataset without any) those of ``images``."""

    def __init__(
        self,
        data: MeasuredDataset,
        seed: int,
        replacement: bool = False,
        name: str = "dataset",
        images: ImageConfig | None = None,
    ) -> None:
        self.data, self.seed, self.replacement, self.name, self.synthetic = data, int(seed), replacement, name, images
        self._read = ImageResolver(str(getattr(getattr(data.prompts, "store", None), "path", name)))
        self._users: dict[int, int] = {}
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def set_users(self, level: int, users: int) -> None:
        """Closed loop: level ``level`` has ``users`` users (user ``u``'s ``k``-th request is
        the level's request ``k * users + u``)."""
        self._users[level] = max(int(users), 1)

    def _entries(self, level: int, numbers: np.ndarray) -> np.ndarray:
        n = len(self.data)
        size = n if not self.replacement else _BLOCK
        chunk = numbers // size
        out = np.empty(numbers.size, dtype=np.int64)
        for c in np.unique(chunk).tolist():
            key = (level, c)
            if key not in self._cache:
                if len(self._cache) > 64:
                    self._cache.clear()
                rng = np.random.default_rng([self.seed & ((1 << 64) - 1), level, c])
                self._cache[key] = rng.integers(0, n, size) if self.replacement else rng.permutation(n)
            sel = chunk == c
            out[sel] = self._cache[key][numbers[sel] - c * size]
        return out

    def _specs(self, level: int, numbers: np.ndarray, indices: np.ndarray) -> list[RequestSpec]:
        d = self.data
        entries = self._entries(level, numbers).tolist()
        specs = [
            RequestSpec(
                index=i,
                prompt=d.prompts[e],
                prompt_tokens=int(d.prompt_tokens[e]),
                max_tokens=int(d.output_tokens[e]),
                request_class=self.name,
                source_row=int(d.rows[e]),
            )
            for i, e in zip(indices.tolist(), entries)
        ]
        if len(d.images):
            for spec, e in zip(specs, entries):
                spec.images = self._read(d.images[e], int(d.rows[e]))
        elif self.synthetic is not None:
            for spec in specs:
                spec.images = request_images(self.synthetic, self.seed, spec.index)
        return specs

    def user(self, level: int, user: int, quota: int | None) -> Iterator[RequestSpec]:
        users = self._users.get(level)
        base = level * LEVEL_STRIDE + user * USER_STRIDE
        k, chunk = 0, 64
        while quota is None or k < quota:
            m = chunk if quota is None else min(chunk, quota - k)
            ks = np.arange(k, k + m, dtype=np.int64)
            # without the user count (a caller that never said it): each user its own stream
            numbers = ks * users + user if users is not None else user * USER_STRIDE + ks
            yield from self._specs(level, numbers, base + ks)
            k += m
            chunk = min(chunk * 2, 4096)

    def sends(self, level: int, positions: Sequence[int]) -> list[RequestSpec]:
        pos = np.asarray(positions, dtype=np.int64)
        return self._specs(level, pos, level * LEVEL_STRIDE + pos)
