"""Records -> one row per request, plus the per-token and per-chunk latency samples.

Definitions (DESIGN.md "Metric definitions"), for one request:

- Chunk: consecutive events with the same ``t_ns`` (read from the socket at once) are
  merged into one chunk, their tokens summed. Every event after the first of its chunk
  counts as *coalesced* (``coalesced_events = n_events - n_chunks``); no zero gap is
  ever produced from them. Events carrying no token are ignored for timing.
- TTFT = first chunk time - ``sent_ns``; ``ttft_queued`` measures from ``scheduled_ns``.
- Inter-chunk latency: the raw gaps between consecutive chunks.
- ITL (per token): each gap divided evenly over the tokens of the chunk that ends it,
  one sample per token (a chunk of k tokens after a gap g gives k samples of g/k).
  ``itl_max_ms`` is the request's largest such per-token value.
- TPOT = (last chunk time - first chunk time) / (output tokens - 1), for >= 2 tokens.
- E2E = ``done_ns`` - ``sent_ns``; ``e2e_queued`` from ``scheduled_ns``.

Warm-up records are dropped before anything. :func:`per_request_frame` keeps the values
of failed requests too (the ``ok`` column tells them apart); every aggregate in
:mod:`loadgen.metrics` takes latency samples from ``ok`` rows only, as do
:func:`itl_samples` and :func:`inter_chunk_samples`. A missing value is NaN; a missing
``first_token_ns``/``last_token_ns`` is 0 (the records' "unset" convention), and a record
with ``scheduled_ns == 0`` (none recorded) is taken as scheduled when it was sent.

Everything is vectorised over all events at once (one numpy pass, boundaries by masks).
The events may come inside the records or apart from them, already flattened
(:func:`event_arrays_from_columns`, :func:`frame_and_events_from_columns`: what a
columnar reader of a run folder gives; the ``_from_flat`` forms take ``[t_ns, n_tokens]``
pairs); all give the same frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.records import ErrorKind, RequestRecord

__all__ = [
    "EventArrays",
    "event_arrays",
    "event_arrays_from_flat",
    "event_arrays_from_columns",
    "frame_and_events",
    "frame_and_events_from_flat",
    "frame_and_events_from_columns",
    "per_request_frame",
    "itl_samples",
    "inter_chunk_samples",
    "FRAME_COLUMNS",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
T = TypeVar("T", bound=np.generic)

FRAME_COLUMNS: tuple[str, ...] = (
    "index", "level", "request_class", "status", "ok", "scheduled_ns", "sent_ns", "done_ns",
    "ttft_ms", "ttft_queued_ms", "e2e_ms", "e2e_queued_ms", "tpot_ms", "itl_max_ms",
    "output_tokens", "prompt_tokens", "target_prompt_tokens", "target_output_tokens",
    "n_events", "n_chunks", "coalesced_events", "first_token_ns", "last_token_ns",
    "send_lateness_ms", "token_source",
)  # fmt: skip

@dataclass(slots=True)
class EventArrays:
    """The token-carrying events of a list of records, flattened, and their chunks.

    Events and chunks are ordered by record (in the order of the list the arrays were
    built from), then time; ``ev_count``/``n_chunks`` say how many belong to each
    record. ``ch_gap_ms`` is aligned with the chunks: the gap from the previous chunk of
    the same record, NaN for a record's first chunk. Selections take a boolean mask
    over records (``rows``); None means all.
    """

    n_records: int
    n_events: I64  # per record: raw number of events (as received)
    ev_count: I64  # per record: token-carrying events kept
    ev_t: I64  # ns of each event
    ev_n: I64  # tokens of each event
    n_chunks: I64  # per record
    ch_t: I64  # ns of each chunk
    ch_n: I64  # tokens of each chunk
    ch_gap_ms: F64  # gap ending at each chunk (NaN for first chunks)
    ch_itl_ms: F64  # that gap / the chunk's tokens: its per-token ITL

    def _chunk_mask(self, rows: Mask | None) -> Mask:
        valid = ~np.isnan(self.ch_gap_ms)
        return valid if rows is None else valid & np.repeat(rows, self.n_chunks)

    def event_mask(self, rows: Mask) -> Mask:
        """Boolean mask over events: those of the selected records."""
        return np.repeat(rows, self.ev_count)

    def output_tokens(self) -> I64:
        """Tokens per record (sum of its events)."""
        return _segment_sum(self.ev_n, self.ev_count)

    def inter_chunk_ms(self, rows: Mask | None = None) -> F64:
        """Raw inter-chunk gaps of the selected records."""
        return self.ch_gap_ms[self._chunk_mask(rows)]

    def itl_ms(self, rows: Mask | None = None) -> F64:
        """Per-token ITL samples (gap / k, k times per gap) of the selected records."""
        return self.like_itl(self.ch_itl_ms, rows)

    def like_itl(self, per_chunk: npt.NDArray[T], rows: Mask | None = None) -> npt.NDArray[T]:
        """A per-chunk array repeated like :meth:`itl_ms`'s samples (same order), e.g.
        ``ch_t`` for the time of each sample."""
        counts = np.where(self._chunk_mask(rows), self.ch_n, 0)
        return np.repeat(per_chunk, counts)

    def itl_max_ms(self) -> F64:
        """Largest per-token ITL per record (NaN where the record has no gap)."""
        out = np.full(self.n_records, np.nan)
        has = self.n_chunks > 0
        if has.any():
            first = (np.cumsum(self.n_chunks) - self.n_chunks)[has]
            out[has] = np.fmax.reduceat(self.ch_itl_ms, first)
        return out


def _segment_sum(values: I64, counts: I64) -> I64:
    """Sum of consecutive segments of ``values`` of the given lengths (0 for empty)."""
    out = np.zeros(counts.size, dtype=np.int64)
    has = counts > 0
    if has.any():
        out[has] = np.add.reduceat(values, (np.cumsum(counts) - counts)[has])
    return out


def event_arrays(records: Sequence[RequestRecord]) -> EventArrays:
    """Flatten the events of ``records`` (no filtering: pass the records you mean)."""
    n = len(records)
    n_events = np.fromiter((len(r.events) for r in records), dtype=np.int64, count=n)
    flat = np.fromiter(
        chain.from_iterable(chain.from_iterable(r.events for r in records)),
        dtype=np.int64,
        count=2 * int(n_events.sum()),
    )
    return event_arrays_from_flat(n_events, flat)


def _columns(n_events: npt.ArrayLike, t_ns: npt.ArrayLike, n_tokens: npt.ArrayLike) -> tuple[I64, I64, I64]:
    counts = np.asarray(n_events, dtype=np.int64).reshape(-1)
    t = np.asarray(t_ns, dtype=np.int64).reshape(-1)
    k = np.asarray(n_tokens, dtype=np.int64).reshape(-1)
    if t.size != int(counts.sum()) or k.size != t.size or (counts < 0).any():
        raise ValueError(f"{t.size} events given, but the per-record counts add up to {int(counts.sum())}")
    return counts, t, k


def _pairs(flat: npt.ArrayLike) -> tuple[I64, I64]:
    pairs = np.asarray(flat, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]  # strided views: cheaper than fresh copies


def event_arrays_from_flat(n_events: npt.ArrayLike, flat: npt.ArrayLike) -> EventArrays:
    """:func:`event_arrays` from events already flattened: ``flat`` holds the
    ``[t_ns, n_tokens]`` pairs of every record in record order (shape ``(N, 2)``, or
    ``2N`` values interleaved), ``n_events[i]`` how many belong to record ``i``."""
    return event_arrays_from_columns(n_events, *_pairs(flat))


def event_arrays_from_columns(n_events: npt.ArrayLike, t_ns: npt.ArrayLike, n_tokens: npt.ArrayLike) -> EventArrays:
    """:func:`event_arrays_from_flat` with the times and token counts apart: ``t_ns[j]``
    and ``n_tokens[j]`` are event ``j``'s."""
    n_events, t, k = _columns(n_events, t_ns, n_tokens)
    n = n_events.size
    ev_count = n_events
    if not (k > 0).all():  # rare: events without tokens are dropped
        keep = k > 0
        ev_count = _segment_sum(keep.astype(np.int64), n_events)
        t, k = t[keep], k[keep]
    ev_first = np.cumsum(ev_count) - ev_count
    later = np.zeros(t.size, dtype=bool)  # True where an event follows one of its record
    later[1:] = True
    later[ev_first[ev_count > 0]] = False
    if t.size > 1 and np.any((t[1:] < t[:-1]) & later[1:]):
        row = np.repeat(np.arange(n, dtype=np.int64), ev_count)
        order = np.lexsort((t, row))  # stable: ties keep their received order
        t, k = t[order], k[order]

    start = ~later  # a chunk starts at a record's first event or at a new timestamp
    start[1:] |= t[1:] != t[:-1]
    idx = np.flatnonzero(start)
    if idx.size == t.size:  # nothing coalesced: chunks are the events
        ch_t, ch_n, ch_first = t, k, ev_first
    else:
        ch_t, ch_n = t[idx], np.add.reduceat(k, idx) if idx.size else k[:0]
        ch_first = np.searchsorted(idx, ev_first)
    n_chunks = np.diff(np.r_[ch_first, idx.size]).astype(np.int64) if n else np.zeros(0, np.int64)
    gap = np.empty(ch_t.size, dtype=np.float64)
    if ch_t.size:
        np.subtract(ch_t[1:], ch_t[:-1], out=gap[1:])
        gap /= 1e6
        gap[ch_first[n_chunks > 0]] = np.nan
    return EventArrays(
        n_records=n,
        n_events=n_events,
        ev_count=ev_count,
        ev_t=t,
        ev_n=k,
        n_chunks=n_chunks,
        ch_t=ch_t,
        ch_n=ch_n,
        ch_gap_ms=gap,
        ch_itl_ms=gap / ch_n,
    )


def _ints(records: Sequence[RequestRecord], attr: str) -> I64:
    return np.fromiter((getattr(r, attr) for r in records), dtype=np.int64, count=len(records))


def _ms(later: I64, earlier: I64, valid: Mask) -> F64:
    return np.where(valid, (later - earlier) / 1e6, np.nan)


def _build_frame(recs: Sequence[RequestRecord], ev: EventArrays) -> pd.DataFrame:
    n = len(recs)
    status = [ErrorKind(r.status).value for r in recs]
    sent = _ints(recs, "sent_ns")
    done = _ints(recs, "done_ns")
    sched = _ints(recs, "scheduled_ns")
    sched = np.where(sched == 0, sent, sched)
    prompt = np.array([np.nan if r.prompt_tokens is None else r.prompt_tokens for r in recs], dtype=np.float64)

    has = ev.n_chunks > 0
    first = np.zeros(n, dtype=np.int64)
    last = np.zeros(n, dtype=np.int64)
    ends = np.cumsum(ev.n_chunks)
    first[has] = ev.ch_t[(ends - ev.n_chunks)[has]]
    last[has] = ev.ch_t[ends[has] - 1]
    out_tok = ev.output_tokens()
    is_sent = sent != 0
    is_done = done != 0
    two = out_tok >= 2
    tpot = np.full(n, np.nan)
    tpot[two] = (last[two] - first[two]) / 1e6 / (out_tok[two] - 1)

    cols = {
        "index": _ints(recs, "index"),
        "level": _ints(recs, "level"),
        "request_class": [r.request_class for r in recs],
        "status": status,
        "ok": np.array([s == "ok" for s in status], dtype=bool),
        "scheduled_ns": sched,
        "sent_ns": sent,
        "done_ns": done,
        "ttft_ms": _ms(first, sent, has & is_sent),
        "ttft_queued_ms": _ms(first, sched, has & (sched != 0)),
        "e2e_ms": _ms(done, sent, is_done & is_sent),
        "e2e_queued_ms": _ms(done, sched, is_done & (sched != 0)),
        "tpot_ms": tpot,
        "itl_max_ms": ev.itl_max_ms(),
        "output_tokens": out_tok,
        "prompt_tokens": prompt,
        "target_prompt_tokens": _ints(recs, "target_prompt_tokens"),
        "target_output_tokens": _ints(recs, "target_output_tokens"),
        "n_events": ev.n_events,
        "n_chunks": ev.n_chunks,
        "coalesced_events": ev.ev_count - ev.n_chunks,
        "first_token_ns": first,
        "last_token_ns": last,
        "send_lateness_ms": _ms(sent, sched, is_sent),
        "token_source": [getattr(r.token_source, "value", r.token_source) for r in recs],
    }
    return pd.DataFrame(cols, columns=list(FRAME_COLUMNS))


def _measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup]


def frame_and_events(records: Iterable[RequestRecord]) -> tuple[pd.DataFrame, EventArrays]:
    """:func:`per_request_frame` and the :class:`EventArrays` it was built from (rows
    match), so callers needing both flatten the events once."""
    recs = _measured(records)
    ev = event_arrays(recs)
    return _build_frame(recs, ev), ev


def frame_and_events_from_flat(
    records: Sequence[RequestRecord], n_events: npt.ArrayLike, flat: npt.ArrayLike
) -> tuple[pd.DataFrame, EventArrays]:
    """:func:`frame_and_events` with the events given apart from the records (as
    :func:`event_arrays_from_flat` takes them, one count per record of ``records``);
    the records' own ``events`` are ignored. Warm-up records and their events are
    dropped; the result equals ``frame_and_events`` of the records with their events."""
    return frame_and_events_from_columns(records, n_events, *_pairs(flat))


def frame_and_events_from_columns(
    records: Sequence[RequestRecord], n_events: npt.ArrayLike, t_ns: npt.ArrayLike, n_tokens: npt.ArrayLike
) -> tuple[pd.DataFrame, EventArrays]:
    """:func:`frame_and_events_from_flat` with the times and token counts apart (as
    :func:`event_arrays_from_columns` takes them)."""
    counts, t, k = _columns(n_events, t_ns, n_tokens)
    if counts.size != len(records):
        raise ValueError(f"{counts.size} event counts given for {len(records)} records")
    keep = np.fromiter((not r.warmup for r in records), dtype=bool, count=len(records))
    if not keep.all():
        records = [r for r in records if not r.warmup]
        measured = np.repeat(keep, counts)
        t, k = t[measured], k[measured]
        counts = counts[keep]
    ev = event_arrays_from_columns(counts, t, k)
    return _build_frame(records, ev), ev


def per_request_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """One row per non-warm-up record, columns :data:`FRAME_COLUMNS` (see module doc)."""
    return frame_and_events(records)[0]


def _ok_events(records: Iterable[RequestRecord]) -> EventArrays:
    return event_arrays([r for r in records if not r.warmup and ErrorKind(r.status) is ErrorKind.OK])


def itl_samples(records: Iterable[RequestRecord]) -> F64:
    """Per-token ITL samples (ms) of the successful non-warm-up records."""
    return _ok_events(records).itl_ms()


def inter_chunk_samples(records: Iterable[RequestRecord]) -> F64:
    """Raw inter-chunk gaps (ms) of the successful non-warm-up records."""
    return _ok_events(records).inter_chunk_ms()
