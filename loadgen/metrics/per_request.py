"""Records -> one row per request, plus the per-token and per-chunk latency samples.

The definitions (chunk, coalesced events, TTFT, inter-chunk latency, ITL, TPOT, E2E, time
to first answer token, sessions) are docs/metrics.md, "Per request", exactly.
:func:`per_request_frame` drops warm-up records first and keeps failed requests' values
(the ``ok`` column tells them apart); every aggregate, :func:`itl_samples` and
:func:`inter_chunk_samples` take latency samples from ``ok`` rows only.

Everything is vectorised over all events at once. The events may come inside the records,
already flattened (:func:`event_arrays_from_columns`, :func:`frame_and_events_from_columns`;
the ``_from_flat`` forms), or a few records at a time (``_from_pieces``); all give the same
frame. Missing values and the computation: docs/metrics.md, "Per request" (the table).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.records import ErrorKind, RequestRecord, TokenSource

__all__ = [
    "FRAME_COLUMNS",
    "EventArrays",
    "event_arrays",
    "event_arrays_from_columns",
    "event_arrays_from_flat",
    "event_arrays_from_pieces",
    "frame_and_events",
    "frame_and_events_from_columns",
    "frame_and_events_from_flat",
    "frame_and_events_from_pieces",
    "inter_chunk_samples",
    "itl_samples",
    "per_request_frame",
    "segment_sum",
]

I64 = npt.NDArray[np.int64]
Tokens = npt.NDArray[np.int64] | npt.NDArray[np.int32]  # token counts: int32 where a whole run is held
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
T = TypeVar("T", bound=np.generic)

FRAME_COLUMNS: tuple[str, ...] = (
    "index",
    "level",
    "request_class",
    "status",
    "ok",
    "scheduled_ns",
    "sent_ns",
    "done_ns",
    "ttft_ms",
    "ttft_queued_ms",
    "e2e_ms",
    "e2e_queued_ms",
    "tpot_ms",
    "itl_max_ms",
    "output_tokens",
    "prompt_tokens",
    "target_prompt_tokens",
    "target_output_tokens",
    "n_events",
    "n_chunks",
    "coalesced_events",
    "first_token_ns",
    "last_token_ns",
    "send_lateness_ms",
    "token_source",
    "credit_wait_ms",
    "ttfa_ms",
    "reasoning_tokens",
    "session",
    "turn",
)


@dataclass(slots=True)
class EventArrays:
    """The token-carrying events of a list of records, flattened, and their chunks.

    Events and chunks are ordered by record (in the order of the list the arrays were
    built from), then time; ``ev_count``/``n_chunks`` say how many belong to each
    record. A chunk's gap is the time from the previous chunk of the same record (none
    for a record's first chunk); gaps are computed when asked for, over the selected
    records only, so a run of 100M events holds no per-chunk float arrays. Selections
    take a boolean mask over records (``rows``); None means all.
    """

    n_records: int
    n_events: I64  # per record: raw number of events (as received)
    ev_count: I64  # per record: token-carrying events kept
    ev_n: Tokens  # tokens of each event
    n_chunks: I64  # per record
    ch_t: I64  # ns of each chunk
    ch_n: Tokens  # tokens of each chunk
    ev_chunk: Mask | None = None  # per event, whether it starts a chunk; None: every one does

    @property
    def ev_t(self) -> I64:
        """ns of each event (its chunk's: a copy when events were coalesced)."""
        return self.ch_t if self.ev_chunk is None else self.ch_t[np.cumsum(self.ev_chunk) - 1]

    @property
    def ch_gap_ms(self) -> F64:
        """The gap ending at each chunk (NaN for first chunks), aligned with the chunks."""
        gap = np.full(self.ch_t.size, np.nan)
        mask = self.gap_mask()
        gap[mask] = self.masked_gap_ms(mask)
        return gap

    @property
    def ch_itl_ms(self) -> F64:
        """Each chunk's gap / its tokens: its per-token ITL (NaN for first chunks)."""
        return self.ch_gap_ms / self.ch_n

    def gap_mask(self, rows: Mask | None = None) -> Mask:
        """Boolean mask over chunks: those with a gap (not a record's first) of the selected records."""
        later = np.ones(self.ch_t.size, dtype=bool)
        has = self.n_chunks > 0
        later[(np.cumsum(self.n_chunks) - self.n_chunks)[has]] = False
        if rows is not None:
            later &= np.repeat(rows, self.n_chunks)
        return later

    def gap_ms(self, at: I64) -> F64:
        """The gaps (ms) ending at chunks ``at`` (none of them a record's first)."""
        gap = self.ch_t[at]
        gap -= self.ch_t[at - 1]
        return np.asarray(gap / 1e6, dtype=np.float64)

    def masked_gap_ms(self, mask: Mask) -> F64:
        """The gaps (ms) ending at the chunks of ``mask`` (a :meth:`gap_mask`), in order:
        :meth:`gap_ms` by differences over the span the mask covers (no index arrays)."""
        if not mask.any():
            return np.zeros(0, dtype=np.float64)
        lo, hi = int(np.argmax(mask)), mask.size - int(np.argmax(mask[::-1]))
        diff = np.diff(self.ch_t[lo - 1 : hi])  # lo >= 1: chunk 0 is a record's first
        return np.asarray(diff[mask[lo:hi]] / 1e6, dtype=np.float64)

    def event_mask(self, rows: Mask) -> Mask:
        """Boolean mask over events: those of the selected records."""
        return np.repeat(rows, self.ev_count)

    def chunk_mask(self, rows: Mask) -> Mask:
        """Boolean mask over chunks: those of the selected records."""
        return np.repeat(rows, self.n_chunks)

    def output_tokens(self) -> I64:
        """Tokens per record (sum of its events)."""
        return segment_sum(self.ev_n, self.ev_count)

    def inter_chunk_ms(self, rows: Mask | None = None) -> F64:
        """Raw inter-chunk gaps of the selected records."""
        return self.masked_gap_ms(self.gap_mask(rows))

    def itl_ms(self, rows: Mask | None = None) -> F64:
        """Per-token ITL samples (gap / k, k times per gap) of the selected records."""
        mask = self.gap_mask(rows)
        k = self.ch_n[mask]
        return np.repeat(self.masked_gap_ms(mask) / k, k)

    def like_itl(self, per_chunk: npt.NDArray[T], rows: Mask | None = None) -> npt.NDArray[T]:
        """A per-chunk array repeated like :meth:`itl_ms`'s samples (same order), e.g.
        ``ch_t`` for the time of each sample."""
        mask = self.gap_mask(rows)
        return np.repeat(per_chunk[mask], self.ch_n[mask])

    def itl_max_ms(self) -> F64:
        """Largest per-token ITL per record (NaN where the record has no gap)."""
        out = np.full(self.n_records, np.nan)
        ends = np.cumsum(self.n_chunks)
        lo = 0
        while lo < self.n_records:  # a block of records at a time: bounded temporaries
            hi = max(int(np.searchsorted(ends, ends[lo] + _BLOCK, side="right")), lo + 1)
            counts = self.n_chunks[lo:hi]
            c0 = int(ends[lo] - counts[0])
            t = self.ch_t[c0 : int(ends[hi - 1])]
            itl = np.empty(t.size, dtype=np.float64)
            if t.size:
                itl[1:] = (t[1:] - t[:-1]) / 1e6
                first = (np.cumsum(counts) - counts)[counts > 0]
                itl[first] = np.nan
                itl /= self.ch_n[c0 : c0 + t.size]
                out[lo:hi][counts > 0] = np.fmax.reduceat(itl, first)
            lo = hi
        return out


_BLOCK = 1 << 22  # chunks at a time in itl_max_ms
_INT32 = np.iinfo(np.int32)


def segment_sum(values: npt.NDArray[Any], counts: I64) -> I64:
    """Sum of consecutive segments of ``values`` of the given lengths (0 for empty)."""
    out = np.zeros(counts.size, dtype=np.int64)
    has = counts > 0
    if has.any():
        out[has] = np.add.reduceat(values, (np.cumsum(counts) - counts)[has], dtype=np.int64)
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
        ev_count = segment_sum(keep.astype(np.int64), n_events)
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
    del later
    start[1:] |= t[1:] != t[:-1]
    if start.all():  # nothing coalesced: chunks are the events
        return EventArrays(n, n_events, ev_count, ev_n=k, n_chunks=ev_count.copy(), ch_t=t, ch_n=k)
    idx = np.flatnonzero(start)
    return EventArrays(
        n_records=n,
        n_events=n_events,
        ev_count=ev_count,
        ev_n=k,
        n_chunks=segment_sum(start, ev_count),
        ch_t=t[idx],
        ch_n=np.add.reduceat(k, idx),
        ev_chunk=start,
    )


def event_arrays_from_pieces(
    n_events: npt.ArrayLike, pieces: Iterable[tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike]]
) -> EventArrays:
    """:func:`event_arrays_from_columns` of events that come a few records at a time:
    each piece is ``(n_events, t_ns, n_tokens)`` of the next records, and the pieces
    together hold ``n_events``. Only the result and one piece exist at once, never the
    raw columns of the whole run (what a report of 100M events needs)."""
    counts = np.asarray(n_events, dtype=np.int64).reshape(-1)
    total = int(counts.sum())
    # sized for every event; chunks are fewer when events were coalesced (the pages
    # never written are never touched). Token counts as int32 while they fit (a run of
    # 100M events: 400 MB less each), else int64.
    ch_t = np.empty(total, dtype=np.int64)
    ch_n: Tokens = np.empty(total, dtype=np.int32)
    ev_n: Tokens = np.empty(total, dtype=np.int32)
    ev_chunk = np.ones(total, dtype=bool)
    ev_count = np.empty(counts.size, dtype=np.int64)
    n_chunks = np.empty(counts.size, dtype=np.int64)
    r = e = c = 0
    coalesced = False
    for piece in pieces:
        part = event_arrays_from_columns(*piece)
        pr, pe, pc = part.n_records, part.ev_n.size, part.ch_t.size
        if not np.array_equal(part.n_events, counts[r : r + pr]):
            raise ValueError(f"the pieces' event counts differ from n_events from record {r} on")
        if ch_n.dtype != np.int64 and pc and int(part.ch_n.max()) > _INT32.max:  # counts are >= 1
            ch_n, ev_n = ch_n.astype(np.int64), ev_n.astype(np.int64)
        ev_count[r : r + pr], n_chunks[r : r + pr] = part.ev_count, part.n_chunks
        ev_n[e : e + pe] = part.ev_n
        ch_t[c : c + pc], ch_n[c : c + pc] = part.ch_t, part.ch_n
        if part.ev_chunk is not None:
            ev_chunk[e : e + pe] = part.ev_chunk
            coalesced = True
        r, e, c = r + pr, e + pe, c + pc
    if r != counts.size:
        raise ValueError(f"the pieces hold {r} records, n_events {counts.size}")
    return EventArrays(
        n_records=r,
        n_events=counts,
        ev_count=ev_count,
        ev_n=ev_n[:e] if coalesced else ch_n[:c],
        n_chunks=n_chunks,
        ch_t=ch_t[:c],
        ch_n=ch_n[:c],
        ev_chunk=ev_chunk[:e] if coalesced else None,
    )


def _ints(records: Sequence[RequestRecord], attr: str) -> I64:
    return np.fromiter(map(attrgetter(attr), records), dtype=np.int64, count=len(records))


_STATUS_VALUE: dict[Any, str] = {k: k.value for k in ErrorKind}  # a str enum: its values hash alike


def _status_value(status: Any) -> str:
    return _STATUS_VALUE.get(status) or ErrorKind(status).value


_SOURCE_VALUE: dict[Any, str] = {k: k.value for k in TokenSource}


def _source_value(source: Any) -> Any:
    return _SOURCE_VALUE.get(source) or getattr(source, "value", source)


def _ms(later: I64, earlier: I64, valid: Mask) -> F64:
    return np.where(valid, (later - earlier) / 1e6, np.nan)


def _build_frame(recs: Sequence[RequestRecord], ev: EventArrays) -> pd.DataFrame:
    n = len(recs)
    status = list(map(_status_value, map(attrgetter("status"), recs)))
    sent = _ints(recs, "sent_ns")
    done = _ints(recs, "done_ns")
    sched = _ints(recs, "scheduled_ns")
    sched = np.where(sched == 0, sent, sched)
    credit = _ints(recs, "credit_ns")
    answer = _ints(recs, "first_answer_ns")
    prompt = np.array(list(map(attrgetter("prompt_tokens"), recs)), dtype=np.float64)  # None -> NaN

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
        "request_class": list(map(attrgetter("request_class"), recs)),
        "status": status,
        "ok": np.fromiter(map("ok".__eq__, status), dtype=bool, count=n),
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
        "send_lateness_ms": _ms(sent, np.maximum(sched, credit), is_sent),  # the client's own delay
        "token_source": list(map(_source_value, map(attrgetter("token_source"), recs))),
        "credit_wait_ms": _ms(credit, sched, credit != 0),  # waiting for the in-flight cap
        "ttfa_ms": _ms(answer, sent, (answer != 0) & is_sent),
        "reasoning_tokens": _ints(recs, "reasoning_tokens"),
        "session": np.fromiter((-1 if r.session is None else r.session for r in recs), dtype=np.int64, count=n),
        "turn": _ints(recs, "turn"),
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


def frame_and_events_from_pieces(
    records: Sequence[RequestRecord],
    n_events: npt.ArrayLike,
    pieces: Iterable[tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike]],
) -> tuple[pd.DataFrame, EventArrays]:
    """:func:`frame_and_events_from_columns` with the events in pieces (as
    :func:`event_arrays_from_pieces` takes them)."""
    counts = np.asarray(n_events, dtype=np.int64).reshape(-1)
    if counts.size != len(records):
        raise ValueError(f"{counts.size} event counts given for {len(records)} records")
    keep = np.fromiter((not r.warmup for r in records), dtype=bool, count=len(records))
    if keep.all():
        return _build_frame(records, ev := event_arrays_from_pieces(counts, pieces)), ev

    def measured() -> Iterator[tuple[I64, I64, I64]]:
        r = 0
        for piece in pieces:
            p_counts, t, k = _columns(*piece)
            mine = keep[r : r + p_counts.size]
            events = np.repeat(mine, p_counts)
            yield p_counts[mine], t[events], k[events]
            r += p_counts.size

    ev = event_arrays_from_pieces(counts[keep], measured())
    return _build_frame([r for r in records if not r.warmup], ev), ev


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
