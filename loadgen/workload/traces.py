"""Timestamped traces, replayed at their recorded times.

Formats (``format = "auto"`` picks by extension and header): ``mooncake`` (JSONL with
``hash_ids``, each one shared 512-token block of prompt, so a server's prefix cache sees the
trace's real sharing), ``azure`` and ``burstgpt`` (CSV; prompts are synthetic text of the
recorded length). Offsets are seconds from the first kept row; ``window``, then ``speed``
or ``rate``, reshape them. Lengths over ``MAX_LENGTH``, timestamps that are not finite and
replays over 30 days (``MAX_LEVEL_S``) are refused, naming the line. Every request's
``source_row`` is its row in the file (0-based data row).

The columns of each format and the replay rules: workloads/README.md, "Real traffic:
datasets and traces".
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.errors import ConfigError, WorkloadError
from loadgen.inputs import input_problem, open_input
from loadgen.records import LEVEL_STRIDE, MAX_LEVEL_S, RequestSpec
from loadgen.workload.distributions import MAX_LENGTH
from loadgen.workload.prompts import PromptSynthesizer

__all__ = [
    "BLOCK_TOKENS",
    "TRACE_FORMATS",
    "Trace",
    "TraceOptions",
    "TraceSource",
    "gamma_shape",
    "load_trace",
    "parse_window",
]

TRACE_FORMATS = ("auto", "mooncake", "azure", "burstgpt")
BLOCK_TOKENS = 512  # tokens per Mooncake hash id


@dataclass(frozen=True, slots=True)
class TraceOptions:
    path: str
    format: str = "auto"
    speed: float = 1.0
    window: tuple[float, float] | None = None
    rate: float | None = None


@dataclass(slots=True)
class Trace:
    """A trace's kept rows: send offsets (s), lengths, file rows and Mooncake hash ids."""

    path: str
    format: str
    offsets: np.ndarray  # float64 seconds from the first kept row, after window/speed/rate
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    rows: np.ndarray  # int64
    hash_ids: list[list[int]] | None = None
    total_rows: int = 0
    span_s: float = field(default=0.0)  # recorded seconds the kept rows cover (before speed/rate)

    def __len__(self) -> int:
        return int(self.offsets.size)

    @property
    def mean_rate(self) -> float:
        """Requests per second over the replayed span (one request: 1/s)."""
        span = float(self.offsets[-1] - self.offsets[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if span > 0 else 1.0

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "rows": len(self),
            "file_rows": self.total_rows,
            "recorded_span_s": self.span_s,
            "replay_span_s": float(self.offsets[-1]) if len(self) else 0.0,
            "mean_rate": self.mean_rate,
        }


def parse_window(text: str) -> tuple[float, float]:
    """``"START:END"`` seconds (either may be empty: from the start, to the end)."""
    a, sep, b = text.partition(":")
    try:
        start = float(a) if a.strip() else 0.0
        end = float(b) if b.strip() else float("inf")
    except ValueError:
        raise ConfigError(f"expected START:END in seconds, e.g. 60:180, got {text!r}", field="window") from None
    if not sep or start < 0 or not end > start:
        raise ConfigError(f"expected START:END seconds with 0 <= START < END, got {text!r}", field="window")
    return start, end


def _err(path: str, where: str, fld: str | None, msg: str) -> WorkloadError:
    return WorkloadError(msg, source=f"{path}: {where}", key=fld)


def _length(v: Any, path: str, where: str, fld: str) -> int:
    """A token count in [0, MAX_LENGTH] (0 is read as 1 later)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v or v < 0:
        raise _err(path, where, fld, f"expected a whole number >= 0, got {v!r}")
    if v > MAX_LENGTH:
        raise _err(path, where, fld, f"at most {MAX_LENGTH:,} tokens, got {v:,}")
    return int(v)


def _mooncake(path: Path, src: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]:
    ts, inp, out, hashes = [], [], [], []
    with open_input(path) as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"line {n}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise _err(src, where, None, f"not valid JSON: {exc.msg}") from None
            if not isinstance(obj, dict):
                raise _err(src, where, None, "expected an object")
            for k in ("timestamp", "input_length", "output_length"):
                if k not in obj:
                    raise _err(src, where, k, "missing")
            t = obj["timestamp"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < math.inf:
                raise _err(src, where, "timestamp", f"expected milliseconds >= 0, got {t!r}")
            ts.append(float(t))
            inp.append(_length(obj["input_length"], src, where, "input_length"))
            out.append(_length(obj["output_length"], src, where, "output_length"))
            h = obj.get("hash_ids", [])
            if not isinstance(h, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63 for x in h
            ):
                raise _err(src, where, "hash_ids", "expected an array of whole numbers in [0, 2**63)")
            hashes.append(h)
    return np.asarray(ts) / 1000.0, np.asarray(inp, dtype=np.int64), np.asarray(out, dtype=np.int64), hashes


_CSV_COLUMNS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}


def _csv(path: Path, src: str, fmt: str, header: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import pandas as pd

    cols = _CSV_COLUMNS[fmt]
    for c in cols:
        if c not in header:
            raise _err(
                src, "line 1", c, f"no such column ({fmt} needs {', '.join(cols)}); columns: {', '.join(header)}"
            )
    try:
        frame = pd.read_csv(path, usecols=list(cols), dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as exc:
        raise _err(src, "line ?", None, f"invalid CSV: {exc}") from None
    if fmt == "azure":
        stamps = pd.to_datetime(frame[cols[0]], format="ISO8601", errors="coerce")
        bad = np.flatnonzero(stamps.isna().to_numpy())
        if bad.size:
            i = int(bad[0])
            raise _err(src, f"line {i + 2}", cols[0], f"expected a date-time, got {frame[cols[0]].iloc[i]!r}")
        ns = stamps.to_numpy().astype("datetime64[ns]").astype(np.int64)
        t = (ns - ns.min()) / 1e9
    else:
        t = _numbers(frame[cols[0]], src, cols[0], float_ok=True)
    return t, _numbers(frame[cols[1]], src, cols[1]), _numbers(frame[cols[2]], src, cols[2])


def _numbers(col: Any, src: str, name: str, float_ok: bool = False) -> np.ndarray:
    import pandas as pd

    v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(v) | (v < 0)
    if not float_ok:
        bad |= v != np.round(v)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "seconds >= 0" if float_ok else "a whole number >= 0"
        raise _err(src, f"line {i + 2}", name, f"expected {what}, got {col.iloc[i]!r}")
    if not float_ok and (v > MAX_LENGTH).any():
        i = int(np.flatnonzero(v > MAX_LENGTH)[0])
        raise _err(src, f"line {i + 2}", name, f"at most {MAX_LENGTH:,} tokens, got {col.iloc[i]}")
    out: np.ndarray = v if float_ok else v.astype(np.int64)
    return out


def _sniff(path: Path, src: str) -> tuple[str, list[str]]:
    with open_input(path) as fh:
        head = fh.read(4096)
    lines = head.decode("utf-8-sig", errors="replace").splitlines()  # (4 KiB may end inside a character)
    first = lines[0] if lines else ""
    if first.lstrip().startswith("{"):
        return "mooncake", []
    header = next(csv.reader(io.StringIO(first)), [])
    for fmt, cols in _CSV_COLUMNS.items():
        if cols[0] in header:
            return fmt, header
    raise WorkloadError(
        f"cannot tell the trace format from its first line {first[:80]!r}: expected Mooncake JSONL, "
        "or a CSV with TIMESTAMP (Azure) or Timestamp (BurstGPT)",
        source=src,
    )


def gamma_shape(offsets: np.ndarray) -> float | None:
    """Gamma shape ``1/CV²`` of the gaps between sorted arrival times (None: too few or none vary)."""
    gaps = np.diff(np.sort(np.asarray(offsets, dtype=float)))
    if gaps.size < 2 or gaps.mean() <= 0:
        return None
    cv = gaps.std() / gaps.mean()
    return float(min(max(1.0 / (cv * cv), 1e-3), 1e3)) if cv > 0 else 1e3


def load_trace(opts: TraceOptions) -> Trace:
    """Read a trace, keep its window and rescale its times (see the module docstring)."""
    path, src = Path(opts.path), opts.path
    if opts.format not in TRACE_FORMATS:
        raise ConfigError(
            f"unknown trace format {opts.format!r}; choose one of: {', '.join(TRACE_FORMATS)}", field="trace_format"
        )
    why = input_problem(path)  # (a FIFO would block the read, out of a signal's reach)
    if why is not None:
        raise WorkloadError("no such trace file" if why == "no such file" else why, source=src)
    if not opts.speed > 0:
        raise ConfigError(f"must be > 0, got {opts.speed:g}", field="speed")
    if opts.rate is not None and opts.speed != 1.0:
        raise ConfigError("give either --speed or --rate (both rescale the trace's times), not both", field="speed")
    try:
        fmt, header = _sniff(path, src)
        if opts.format != "auto":
            fmt = opts.format
            if fmt != "mooncake" and not header:
                with open_input(path) as fh:
                    header = next(csv.reader(io.StringIO(fh.readline().decode("utf-8-sig"))), [])
        hashes: list[list[int]] | None = None
        if fmt == "mooncake":
            t, inp, out, hashes = _mooncake(path, src)
        else:
            t, inp, out = _csv(path, src, fmt, header)
    except OSError as exc:
        raise WorkloadError(f"cannot read: {exc.strerror or exc}", source=src) from None
    total = int(t.size)
    if total == 0:
        raise WorkloadError("holds no row", source=src)
    rows = np.arange(total, dtype=np.int64)
    if (np.diff(t) < 0).any():  # replay in time order; each row keeps its file row
        order = np.argsort(t, kind="stable")
        t, inp, out, rows = t[order], inp[order], out[order], rows[order]
        if hashes is not None:
            hashes = [hashes[i] for i in order.tolist()]
    rel = t - t[0]
    if opts.window is not None:
        start, end = opts.window
        keep = (rel >= start) & (rel < end)
        if not keep.any():
            raise ConfigError(
                f"no row of {src} lies in {start:g}:{end:g} s (the trace spans {rel[-1]:.1f} s)", field="window"
            )
        idx = np.flatnonzero(keep)
        rel, inp, out, rows = rel[idx] - rel[idx[0]], inp[idx], out[idx], rows[idx]
        if hashes is not None:
            hashes = [hashes[i] for i in idx.tolist()]
    span = float(rel[-1]) if rel.size else 0.0
    offsets = rel / opts.speed
    if opts.rate is not None:
        if not opts.rate > 0:
            raise ConfigError(f"must be > 0, got {opts.rate:g}", field="rate")
        if span > 0:
            offsets = rel * ((rel.size - 1) / span) / opts.rate
    if not offsets[-1] <= MAX_LEVEL_S:  # scheduled times are int64 nanoseconds; a replay must end
        raise WorkloadError(
            f"its rows would take {float(offsets[-1]):.3g} s to replay, more than "
            f"{MAX_LEVEL_S // 86_400} days; keep a --window or raise --speed/--rate",
            source=src,
        )
    return Trace(
        path=src,
        format=fmt,
        offsets=offsets.astype(np.float64),
        input_tokens=np.maximum(inp, 1),
        output_tokens=np.maximum(out, 1),
        rows=rows,
        hash_ids=hashes,
        total_rows=total,
        span_s=span,
    )


class TraceSource:
    """The runner's ``SpecSource`` for a trace: schedule position ``i`` is kept row ``i``."""

    def __init__(self, trace: Trace, seed: int, synth: PromptSynthesizer) -> None:
        self.trace, self.seed, self.synth = trace, seed, synth
        self._blocks: dict[tuple[int, int], str] = {}

    def _block(self, h: int, tokens: int) -> str:
        """The text of hash id ``h``, ``tokens`` long (a shorter one is a prefix of the full one)."""
        key = (h, tokens)
        if key not in self._blocks:
            synth, counter = self.synth, self.synth.counter
            words = max(1, round(tokens / synth.tokens_per_word))
            if counter is not None:  # exact: the word count whose text counts ``tokens``
                lo, hi = 1, max(2, 2 * tokens)
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if counter.count(synth.group_text(h, mid)) <= tokens:
                        lo = mid
                    else:
                        hi = mid
                words = lo
            self._blocks[key] = synth.group_text(h, words)
        return self._blocks[key]

    def _prompt(self, row: int, index: int) -> str:
        tr, synth = self.trace, self.synth
        n = int(tr.input_tokens[row])
        hashes = tr.hash_ids[row] if tr.hash_ids is not None else []
        if not hashes:
            return synth.text(n, index)
        counter = synth.counter
        body = max(1, n - round(synth.overhead_tokens))  # the text's own tokens
        parts: list[str] = []
        left = body
        for k, h in enumerate(hashes):
            if left <= 0:
                break
            last = k == len(hashes) - 1 or left <= BLOCK_TOKENS
            take = left if last and left <= BLOCK_TOKENS else BLOCK_TOKENS  # the last block fills what is left
            parts.append(self._block(h, take))
            # with a tokenizer a block may fall a token or two short of a word boundary: the
            # next block (or the tail) makes up for it, so the prompt's total stays exact
            left -= counter.count(parts[-1]) if counter is not None else take
        if left > 0 and body > BLOCK_TOKENS * len(hashes):  # longer than its blocks: a unique tail
            parts.append(synth.text(left + round(synth.overhead_tokens), index))
        return " ".join(parts)

    def sends(self, level: int, positions: Sequence[int]) -> list[RequestSpec]:
        tr = self.trace
        out = []
        for p in positions:
            index = level * LEVEL_STRIDE + p
            out.append(
                RequestSpec(
                    index=index,
                    prompt=self._prompt(p, index),
                    prompt_tokens=int(tr.input_tokens[p]),
                    max_tokens=int(tr.output_tokens[p]),
                    request_class=tr.format,
                    source_row=int(tr.rows[p]),
                )
            )
        return out

    def user(self, level: int, user: int, quota: int | None) -> Iterator[RequestSpec]:
        raise ConfigError(
            "a trace replays at its recorded times (open loop): use --rate or no load flag, not --concurrency"
        )
