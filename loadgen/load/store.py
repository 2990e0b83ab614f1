"""Finished records of a level, kept compactly until the level's summary is drawn.

A level can last hours: its records must stay in memory for the summary, but not as
Python objects. A :class:`RequestRecord` with a ``[t_ns, n_tokens]`` list per event
costs about 110 bytes per event and 350 per record; :class:`RecordStore` keeps the
fields the summary reads in typed arrays — 8 bytes per integer field, one per code —
and each event in 5 bytes: the gap since the request's previous event (its send, for
the first), in ns as a 32-bit integer, and its token count as a byte. The rare value
that does not fit (a gap over 4.29 s, a count over 254, a time before the send) is kept
exactly in a side table, so :meth:`RecordStore.events` gives back every time and count
as they were received.

What the summary does not read is dropped: the vendor timings of the final event
(``server``) — they are in ``records.jsonl`` — and the events' list objects.
:meth:`RecordStore.records` rebuilds the records (without events) and
:meth:`RecordStore.events` their events as columns, the form
:func:`~loadgen.metrics.summary.summarize_level` takes.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.records import ErrorKind, RequestRecord, TokenSource

__all__ = ["RecordStore"]

_INTS = (
    "index",
    "level",
    "worker",
    "target_prompt_tokens",
    "target_output_tokens",
    "scheduled_ns",
    "sent_ns",
    "done_ns",
    "credit_ns",
    "turn",
    "turns",
    "first_answer_ns",
    "reasoning_tokens",
    "trial",
    "retries",
    "inputs",
)
_OPTIONAL = ("http_status", "prompt_tokens", "completion_tokens", "session", "source_row")
_NONE = -(2**63)  # an optional field's None
_STATUS = list(ErrorKind)
_STATUS_CODE = {k: i for i, k in enumerate(_STATUS)}
_SOURCE = list(TokenSource)
_SOURCE_CODE = {k: i for i, k in enumerate(_SOURCE)}
_WIDE_GAP = 0xFFFFFFFF  # the gap is in the side table
_WIDE_N = 0xFF
I64 = npt.NDArray[np.int64]


class RecordStore:
    """Records appended one at a time (:meth:`add`), read back once for the summary."""

    def __init__(self) -> None:
        self._ints = {name: array("q") for name in (*_INTS, *_OPTIONAL)}
        self._status = array("B")
        self._source = array("B")
        self._warmup = array("B")
        self._new_conn = array("b")  # 1 new, 0 reused, -1 not known
        self._connect_ms = array("d")  # NaN: None
        self._class = array("H")
        self._class_names: list[str] = []
        self._class_code: dict[str, int] = {}
        self._errors: dict[int, str] = {}  # row -> error text (failed requests only)
        self._images: dict[int, tuple[int, int]] = {}  # row -> (images, image_bytes) (requests that sent images)
        self._agent: dict[int, tuple[int, int, int, int, float]] = {}  # row -> task, step, branch, steps, tool_ms
        self._n_events = array("I")
        self._gap = array("I")  # ns since the previous event of the request (its send for the first)
        self._tokens = array("B")
        self._wide_t: dict[int, int] = {}  # event position -> its absolute t_ns (gap out of range)
        self._wide_n: dict[int, int] = {}  # event position -> its token count (out of range)

    def __len__(self) -> int:
        return len(self._status)

    @property
    def n_events(self) -> int:
        return len(self._gap)

    @property
    def nbytes(self) -> int:
        """Bytes the columns hold (the side tables aside)."""
        cols: list[array[Any]] = [
            *self._ints.values(),
            self._status,
            self._source,
            self._warmup,
            self._new_conn,
            self._connect_ms,
            self._class,
            self._n_events,
            self._gap,
            self._tokens,
        ]
        return sum(len(c) * c.itemsize for c in cols)

    def add(self, rec: RequestRecord) -> None:
        """Keep ``rec`` (its ``events`` and ``server`` are not referenced afterwards)."""
        row = len(self._status)
        for name in _INTS:
            self._ints[name].append(getattr(rec, name))
        for name in _OPTIONAL:
            v = getattr(rec, name)
            self._ints[name].append(_NONE if v is None else v)
        self._status.append(_STATUS_CODE[ErrorKind(rec.status)])
        self._source.append(_SOURCE_CODE[TokenSource(rec.token_source)])
        self._warmup.append(1 if rec.warmup else 0)
        self._new_conn.append(-1 if rec.new_connection is None else int(rec.new_connection))
        self._connect_ms.append(math.nan if rec.connect_ms is None else rec.connect_ms)
        code = self._class_code.get(rec.request_class)
        if code is None:
            code = self._class_code[rec.request_class] = len(self._class_names)
            self._class_names.append(rec.request_class)
        self._class.append(code)
        if rec.error is not None:
            self._errors[row] = rec.error
        if rec.images:
            self._images[row] = (rec.images, rec.image_bytes)
        if rec.task is not None:
            self._agent[row] = (rec.task, rec.step, rec.branch, rec.steps, rec.tool_ms)
        events = rec.events
        self._n_events.append(len(events))
        prev = rec.sent_ns
        gaps, tokens = self._gap, self._tokens
        for t, n in events:
            gap = t - prev
            if 0 <= gap < _WIDE_GAP:
                gaps.append(gap)
            else:
                self._wide_t[len(gaps)] = t
                gaps.append(_WIDE_GAP)
            if 0 <= n < _WIDE_N:
                tokens.append(n)
            else:
                self._wide_n[len(tokens)] = n
                tokens.append(_WIDE_N)
            prev = t

    def records(self) -> list[RequestRecord]:
        """The records, in the order added, without their events (see :meth:`events`)."""
        cols = [self._ints[name].tolist() for name in _INTS]
        opt = [[None if v == _NONE else v for v in self._ints[name].tolist()] for name in _OPTIONAL]
        names = self._class_names
        errors = self._errors
        out = []
        rows = zip(zip(*cols), zip(*opt), self._status, self._source, self._warmup, self._class)
        conns = zip(self._new_conn, self._connect_ms)
        for row, ((vals, optional, status, source, warm, cls), (new, connect)) in enumerate(zip(rows, conns)):
            http, prompt, completion, session, source_row = optional
            (
                index,
                level,
                worker,
                tp,
                to,
                sched,
                sent,
                done,
                credit,
                turn,
                turns,
                answer,
                reasoning,
                trial,
                retries,
                inputs,
            ) = vals
            images, image_bytes = self._images.get(row, (0, 0))
            agent = self._agent.get(row)
            task, step, branch, steps, tool_ms = (None, 0, 0, 0, 0.0) if agent is None else agent
            out.append(
                RequestRecord(
                    index=index,
                    level=level,
                    worker=worker,
                    request_class=names[cls],
                    target_prompt_tokens=tp,
                    target_output_tokens=to,
                    scheduled_ns=sched,
                    sent_ns=sent,
                    done_ns=done,
                    status=_STATUS[status],
                    http_status=http,
                    error=errors.get(row),
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    token_source=_SOURCE[source],
                    warmup=bool(warm),
                    credit_ns=credit,
                    session=session,
                    turn=turn,
                    turns=turns,
                    first_answer_ns=answer,
                    reasoning_tokens=reasoning,
                    trial=trial,
                    source_row=source_row,
                    retries=retries,
                    images=images,
                    image_bytes=image_bytes,
                    new_connection=None if new < 0 else bool(new),
                    connect_ms=None if math.isnan(connect) else connect,
                    inputs=inputs,
                    task=task,
                    step=step,
                    branch=branch,
                    steps=steps,
                    tool_ms=tool_ms,
                )
            )
        return out

    def events(self) -> tuple[I64, I64, I64]:
        """Every record's events as ``(n_events, t_ns, n_tokens)`` columns (record order),
        exactly as received."""
        counts, gap, n = _wide(self._n_events), _wide(self._gap), _wide(self._tokens)
        for j, v in self._wide_n.items():
            n[j] = v
        # times: within a request, its send plus the running sum of gaps; an event whose
        # time is in the side table restarts the sum from that time
        starts = np.zeros(gap.size, dtype=bool)
        first = (np.cumsum(counts) - counts)[counts > 0]
        starts[first] = True
        base = np.zeros(gap.size, dtype=np.int64)
        sent = _wide(self._ints["sent_ns"])
        base[first] = sent[counts > 0]
        if self._wide_t:
            wide = np.fromiter(self._wide_t.keys(), dtype=np.int64, count=len(self._wide_t))
            starts[wide] = True
            gap[wide] = 0
            base[wide] = np.fromiter(self._wide_t.values(), dtype=np.int64, count=len(self._wide_t))
        total = np.cumsum(gap)
        at = np.flatnonzero(starts)
        seg = np.cumsum(starts) - 1
        t = base[at][seg] + total - (total[at] - gap[at])[seg] if gap.size else gap
        return counts, t, n


def _wide(values: array[int]) -> I64:
    """An array module's integers as a fresh int64 array."""
    return np.array(values, dtype=np.int64) if len(values) else np.zeros(0, dtype=np.int64)
