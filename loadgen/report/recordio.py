"""The compact record format: one JSON line per request, its events in ``events.bin``.

A line of ``records.jsonl`` carries ``"events": {"n": N, "bytes": B}``: the request's N
``[t_ns, n_tokens]`` events are the next B bytes of ``events.bin`` (which starts with
:data:`EVENTS_MAGIC`), in line order, as unsigned LEB128 varints of zigzagged deltas from
``sent_ns``; lines of the old format (a list of pairs) own no bytes. Every int64 comes
back exactly. A request's bytes are flushed before its line, so a killed run never leaves
a line pointing at missing bytes. :func:`encode_batch` / :func:`decode_batch` turn records
into one blob and back (``RunWriter.append_batch`` writes its two parts as they are):
worker processes encode once; the coordinator writes and decodes.

The byte layout, its costs and why not Arrow/Parquet: docs/architecture.md, "The records
format".
"""

from __future__ import annotations

import dataclasses
import json
import operator
import struct
from collections.abc import Sequence
from itertools import chain, starmap
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from loadgen.metrics.per_request import segment_sum
from loadgen.records import ErrorKind, RequestRecord, TokenSource, record_and_events

__all__ = [
    "BATCH_MAGIC",
    "EVENTS_FILE",
    "EVENTS_MAGIC",
    "EventsCorrupt",
    "decode_batch",
    "decode_events",
    "encode_batch",
    "encode_columns",
    "encode_events",
    "events_ref",
    "fill_events",
    "parse_line",
    "split_batch",
]

EVENTS_FILE = "events.bin"
EVENTS_MAGIC = b"loadgen events v1\n"
BATCH_MAGIC = b"LGB1"
_BATCH_HEAD = struct.Struct("<4sQQ")  # magic, bytes of lines, bytes of events
_PAIR = struct.Struct("<qq")  # an event, as the batch encoder reads it

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]
Bools = npt.NDArray[np.bool_]

_ONE = np.uint64(1)
_SEVEN_BITS = np.uint64(0x7F)
_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
_EVENTS, _SENT = operator.attrgetter("events"), operator.attrgetter("sent_ns")


class EventsCorrupt(ValueError):
    """Event bytes that do not decode to the counts their lines give; ``record`` is the
    index (within the decoded group) of the first record whose bytes are wrong."""

    def __init__(self, record: int) -> None:
        super().__init__(f"the events of record {record} do not decode")
        self.record = record


def _zigzag(v: I64) -> U64:
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _unzigzag(u: U64) -> U64:
    """The two's-complement bits (as uint64) of the zigzag-encoded ``u``."""
    sign = u & _ONE
    np.negative(sign, out=sign)  # 0 or all ones (modulo 2**64)
    out = u >> _ONE
    out ^= sign
    return out


_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)  # 2**7 .. 2**63
_SPREAD = [  # 56 bits -> 28 in 32-bit lanes -> 14 in 16 -> 7-bit groups in bytes
    (np.uint64(0x000000000FFFFFFF), np.uint64(0x00FFFFFFF0000000), np.uint64(4)),
    (np.uint64(0x00003FFF00003FFF), np.uint64(0x0FFFC0000FFFC000), np.uint64(2)),
    (np.uint64(0x007F007F007F007F), np.uint64(0x3F803F803F803F80), np.uint64(1)),
]
_CONTINUED = np.array([0] + [sum(0x80 << (8 * j) for j in range(k - 1)) for k in range(1, 9)], dtype=np.uint64)
_SLICE = 1 << 20  # values encoded at a time (bounds the temporaries)


_EXACT = np.uint64(1 << 53)  # below it a float64 holds the value exactly


def _lengths(lo: U64) -> I64:
    """The LEB128 bytes of each value: its bit length (a float's exponent, exact below
    2**53; the rare bigger values looked up) in 7-bit groups, one at least."""
    bits = np.frexp(lo.astype(np.float64))[1].astype(np.int64)
    length = bits + 6
    length //= 7
    np.maximum(length, 1, out=length)
    big = np.flatnonzero(lo >= _EXACT)
    if big.size:
        length[big] = np.searchsorted(_LIMITS, lo[big], side="right") + 1
    return length


def _varints(lo: U64, top: Bools) -> tuple[U8, I64]:
    """LEB128 of ``lo + 2**64 * top`` for each value, concatenated, and each one's length."""
    length = _lengths(lo)
    length[top] = 10
    parts = []
    for at in range(0, lo.size, _SLICE):
        sl = slice(at, at + _SLICE)
        parts.append(
            _short_varints(lo[sl], length[sl])
            if length[sl].max(initial=0) <= 8
            else _long_varints(lo[sl], top[sl], length[sl])
        )
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)), length


def _short_varints(lo: U64, length: I64) -> U8:
    """:func:`_varints` of values under 2**56: each one's 7-bit groups spread over the
    bytes of a word, continuation bits set, and the bytes each needs kept."""
    word = lo.copy()
    moved = np.empty_like(word)
    for low, high, shift in _SPREAD:
        np.bitwise_and(word, high, out=moved)
        np.left_shift(moved, shift, out=moved)
        np.bitwise_and(word, low, out=word)
        np.bitwise_or(word, moved, out=word)
    continued = _CONTINUED[length]
    word |= continued
    continued <<= _ONE  # byte j's low bit: byte j - 1 continues, so byte j is one to keep
    continued |= _ONE
    keep = continued.astype("<u8", copy=False).view(np.bool_)
    return word.astype("<u8", copy=False).view(np.uint8)[keep]


def _long_varints(lo: U64, top: Bools, length: I64) -> U8:
    """:func:`_varints` of any values, a byte position at a time."""
    start = np.cumsum(length) - length
    out = np.empty(int(length.sum()), dtype=np.uint8)
    for k in range(10):
        at = np.flatnonzero(length > k)
        byte = (lo[at] >> np.uint64(7 * k)) & _SEVEN_BITS
        if k == 9:
            byte |= top[at].astype(np.uint64) << _ONE
        byte |= (length[at] > k + 1).astype(np.uint64) << np.uint64(7)
        out[start[at] + k] = byte
    return out


def encode_events(sent_ns: I64, counts: I64, t_ns: I64, n_tokens: I64) -> tuple[U8, I64]:
    """The bytes of several records' events (see the module docstring) and how many
    belong to each record. ``counts[i]`` events of ``t_ns``/``n_tokens`` (flat, in
    record order) are record ``i``'s, whose ``sent_ns[i]`` the first delta is taken from."""
    n_ev = t_ns.size
    first = np.cumsum(counts) - counts
    has = counts > 0
    prev = np.empty(n_ev, dtype=np.int64)
    prev[1:] = t_ns[:-1]
    prev[first[has]] = sent_ns[has]
    zz = _zigzag((t_ns.view(np.uint64) - prev.view(np.uint64)).view(np.int64))
    flag = n_tokens != 1
    main = (zz << _ONE) | flag.astype(np.uint64)
    main_top = zz >= np.uint64(1 << 63)
    if not flag.any():  # one token an event: no counts follow
        out, length = _varints(main, main_top)
        return out, segment_sum(length, counts)
    n_flag = segment_sum(flag, counts)
    values = np.empty(n_ev + int(n_flag.sum()), dtype=np.uint64)
    top = np.zeros(values.size, dtype=bool)
    main_at = np.arange(n_ev, dtype=np.int64) + np.repeat(np.cumsum(n_flag) - n_flag, counts)
    values[main_at] = main
    top[main_at] = main_top
    rank = np.cumsum(flag) - flag  # flagged events before this one, over all records
    values[(np.repeat(first + counts, counts) + rank)[flag]] = _zigzag(n_tokens[flag])
    out, length = _varints(values, top)
    return out, segment_sum(length, counts + n_flag)


_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_PAYLOAD = np.uint64(0x7F7F7F7F7F7F7F7F)
_PACK = [  # 7-bit groups in bytes -> 14 bits in 16-bit lanes -> 28 in 32 -> 56 bits
    (np.uint64(0x007F007F007F007F), np.uint64(0x7F007F007F007F00), np.uint64(1)),
    (np.uint64(0x00003FFF00003FFF), np.uint64(0x3FFF00003FFF0000), np.uint64(2)),
    (np.uint64(0x000000000FFFFFFF), np.uint64(0x0FFFFFFF00000000), np.uint64(4)),
]


def _leb128(buf: U8, start: I64, length: I64) -> tuple[U64, U64 | None]:
    """The varints of ``buf`` starting at ``start``: their low 64 bits, and bits 64 and
    up (None when no varint reaches a tenth byte). Eight bytes at a time: each varint's
    first eight bytes read as one little-endian word, its 7-bit groups packed together."""
    padded = np.zeros(buf.size + 8, dtype=np.uint8)
    padded[: buf.size] = buf
    # a little-endian word at every byte offset (overlapping, unaligned: a view, no copy)
    words = np.ndarray(shape=(buf.size,), dtype="<u8", buffer=padded, strides=(1,))
    word = words[start].astype(np.uint64, copy=False)
    word &= _LOW_BYTES[np.minimum(length, 8)]
    word &= _PAYLOAD
    moved = np.empty_like(word)
    for low, high, shift in _PACK:
        np.bitwise_and(word, high, out=moved)
        np.right_shift(moved, shift, out=moved)
        np.bitwise_and(word, low, out=word)
        np.bitwise_or(word, moved, out=word)
    top = None
    long = np.flatnonzero(length > 8)  # rare: values of 56 bits and more
    if long.size:
        for k in (8, 9):
            at = long[length[long] > k]
            byte = padded[start[at] + k].astype(np.uint64) & _SEVEN_BITS
            word[at] |= byte << np.uint64(7 * k)
            if k == 9:
                top = np.zeros(word.size, dtype=np.uint64)
                top[at] = byte >> _ONE
    return word, top


def decode_events(buf: U8, counts: I64, nbytes: I64, sent_ns: I64) -> tuple[I64, I64]:
    """:func:`encode_events` undone: the flat ``t_ns`` and ``n_tokens`` of records that
    own ``counts[i]`` events in ``nbytes[i]`` bytes each, one after another in ``buf``.
    Raises :class:`EventsCorrupt` when the bytes do not fit those counts."""
    n_rec = counts.size
    rec_end = np.cumsum(nbytes)
    if int(rec_end[-1] if n_rec else 0) != buf.size or (counts < 0).any() or (nbytes < 0).any():
        raise EventsCorrupt(0)
    if buf.size == 0:
        if counts.any():
            raise EventsCorrupt(int(np.argmax(counts > 0)))
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    term = buf < 0x80
    ends = np.flatnonzero(term)
    # each record's bytes end a varint, so the varints ending inside them are its own
    bad = (nbytes > 0) & ~term[np.maximum(rec_end - 1, 0)] | ((nbytes == 0) != (counts == 0))
    v_end = np.searchsorted(ends, rec_end)
    v_count = np.diff(v_end, prepend=0)
    bad |= counts > v_count
    if bad.any():
        raise EventsCorrupt(int(np.argmax(bad)))
    length = np.diff(ends, prepend=-1)
    if int(length.max()) > 10:  # over 70 bits: no varint of ours
        raise EventsCorrupt(_record_of(int(np.argmax(length > 10)), v_end))
    ends -= length - 1  # now where each varint starts
    value, top = _leb128(buf, ends, length)
    del term, ends, length
    n_ev = int(counts.sum())
    if value.size == n_ev:  # no event carries a token count: one token each
        main, main_top, extra, extra_top = value, top, value[:0], None
    else:  # a record's varints: one per event, then the token counts of flagged events
        marks = np.zeros(value.size + 1, dtype=np.int8)
        extras = v_count > counts
        marks[(v_end - v_count + counts)[extras]] = 1
        marks[v_end[extras]] = -1
        is_extra = np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)
        main, extra = value[~is_extra], value[is_extra]
        main_top = None if top is None else top[~is_extra]
        extra_top = None if top is None else top[is_extra]
    flag = (main & _ONE).astype(np.bool_)
    bad = counts + segment_sum(flag, counts) != v_count
    if main_top is not None:
        bad |= segment_sum(main_top > 1, counts) > 0
    if bad.any():
        raise EventsCorrupt(int(np.argmax(bad)))
    if extra_top is not None and extra_top.any():  # a token count over 64 bits
        at = int(np.argmax(extra_top != 0))  # the extra's rank among all extras
        raise EventsCorrupt(int(np.searchsorted(np.cumsum(v_count - counts), at, side="right")))
    n_tokens = np.ones(n_ev, dtype=np.int64)
    n_tokens[flag] = _unzigzag(extra).view(np.int64)
    delta = main >> _ONE
    if main_top is not None:
        delta |= main_top << np.uint64(63)
    delta = _unzigzag(delta)
    # t = sent_ns + the running sum of the record's deltas: one running sum over all
    # records, each record's first delta shifted to restart it at its sent_ns
    has = counts > 0
    first = (np.cumsum(counts) - counts)[has]
    sent = sent_ns[has].view(np.uint64)
    restart = sent.copy()
    restart[1:] -= sent[:-1] + np.add.reduceat(delta, first)[:-1]
    delta[first] += restart
    return np.cumsum(delta, out=delta).view(np.int64), n_tokens


def _record_of(varint: int, v_end: I64) -> int:
    return int(np.searchsorted(v_end, varint, side="right"))


# -- lines -----------------------------------------------------------------------------


def _line(rec: RequestRecord, n: int, nbytes: int) -> bytes:
    """The record's ``records.jsonl`` line with its events given by reference."""
    events = rec.events
    # orjson writes the dataclass itself, fields in order, faster than a dict of them:
    # its events swapped for their reference a moment (records are written by one thread)
    rec.events = {"n": n, "bytes": nbytes}  # type: ignore[assignment]
    try:
        return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # an integer over 64 bits or a lone surrogate (a server's odd text)
        # json writes both; a lone surrogate can only sit inside a JSON string, where
        # backslashreplace turns it into its JSON escape (\udXXX)
        d = {name: getattr(rec, name) for name in _FIELDS}
        d["status"] = ErrorKind(rec.status).value
        d["token_source"] = TokenSource(rec.token_source).value
        text = json.dumps(d, separators=(",", ":"), ensure_ascii=False)
        return (text + "\n").encode("utf-8", "backslashreplace")
    finally:
        rec.events = events


def parse_line(line: bytes) -> tuple[RequestRecord, Any] | None:
    """The record of one ``records.jsonl`` line (its ``events`` left empty) and the
    line's ``events`` value (a list of pairs, a reference, or whatever else it holds);
    None when the line is not a JSON object of a record. orjson first; ``json`` reads
    what orjson refuses but ``json`` writes (``NaN``, ``Infinity``, lone surrogates)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            obj = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError included
            return None
    if not isinstance(obj, dict):
        return None
    try:
        return record_and_events(obj)
    except (ValueError, TypeError):
        return None


def events_ref(events: Any) -> tuple[int, int] | None:
    """``(n, bytes)`` when a line's ``events`` refers to ``events.bin``, else None."""
    if type(events) is dict and events.keys() == {"n", "bytes"}:
        n, nbytes = events["n"], events["bytes"]
        if type(n) is int and type(nbytes) is int and 0 <= n <= nbytes <= 20 * n:
            return n, nbytes
    return None


# -- batches ---------------------------------------------------------------------------


def _event_columns(records: Sequence[RequestRecord]) -> tuple[I64, I64, I64]:
    events = list(map(_EVENTS, records))  # map and chain, not generators: no Python frame a record
    counts = np.fromiter(map(len, events), dtype=np.int64, count=len(records))
    # one pass at C speed: struct takes each pair as two integers of 64 bits (Python's or
    # numpy's; bools as numpy takes them), never floats, strings, bigger integers or
    # pairs of another length
    try:
        packed = b"".join(starmap(_PAIR.pack, chain.from_iterable(events)))
    except (struct.error, TypeError):
        raise ValueError("events must be [t_ns, n_tokens] pairs of int64 integers") from None
    values = np.frombuffer(packed, dtype="<i8").astype(np.int64, copy=False).reshape(-1, 2)
    return counts, values[:, 0], values[:, 1]


def encode_batch(records: Sequence[RequestRecord]) -> bytes:
    """Records as one blob: their ``records.jsonl`` lines and their ``events.bin`` bytes
    (:func:`split_batch` cuts it; ``RunWriter.append_batch`` writes it). Raises
    ValueError when an event is not a pair of int64 integers."""
    return encode_columns(records, *_event_columns(records))


def encode_columns(records: Sequence[RequestRecord], n_events: I64, t_ns: I64, n_tokens: I64) -> bytes:
    """:func:`encode_batch` of records whose events are given apart (their own
    ``events`` are ignored): record ``i`` owns ``n_events[i]`` of the flat ``t_ns`` and
    ``n_tokens``, in record order."""
    counts = np.asarray(n_events, dtype=np.int64)
    t_ns, n_tokens = np.asarray(t_ns, dtype=np.int64), np.asarray(n_tokens, dtype=np.int64)
    if counts.size != len(records) or t_ns.size != counts.sum() or n_tokens.size != t_ns.size:
        raise ValueError(f"{counts.size} counts for {len(records)} records and {t_ns.size} events")
    sent = np.fromiter(map(_SENT, records), dtype=np.int64, count=len(records))
    events, nbytes = encode_events(sent, counts, t_ns, n_tokens)
    lines = b"".join(map(_line, records, counts.tolist(), nbytes.tolist()))
    return _BATCH_HEAD.pack(BATCH_MAGIC, len(lines), events.size) + lines + events.tobytes()


def split_batch(blob: bytes | memoryview) -> tuple[memoryview, memoryview]:
    """The lines and the events bytes of a batch (views, no copy); ValueError when
    ``blob`` is not one."""
    view = memoryview(blob)
    head = _BATCH_HEAD.size
    if len(view) < head:
        raise ValueError("not a record batch: too short")
    magic, n_lines, n_events = _BATCH_HEAD.unpack_from(view)
    if magic != BATCH_MAGIC or head + n_lines + n_events != len(view):
        raise ValueError("not a record batch (wrong magic or length)")
    return view[head : head + n_lines], view[head + n_lines :]


def decode_batch(blob: bytes | memoryview) -> list[RequestRecord]:
    """The records of an :func:`encode_batch` blob, events included; ValueError when the
    blob is damaged."""
    lines, events = split_batch(blob)
    records: list[RequestRecord] = []
    refs: list[tuple[int, int]] = []
    text = bytes(lines)
    if text and not text.endswith(b"\n"):
        raise ValueError("a record batch's lines must end in a newline")
    for raw in text.split(b"\n")[:-1]:
        parsed = parse_line(raw)
        ref = None if parsed is None else events_ref(parsed[1])
        if parsed is None or ref is None:
            raise ValueError("a record batch holds a line that is not a record")
        records.append(parsed[0])
        refs.append(ref)
    fill_events(records, refs, np.frombuffer(events, dtype=np.uint8))
    return records


def fill_events(records: Sequence[RequestRecord], refs: Sequence[tuple[int, int]], buf: U8) -> None:
    """Decode ``buf`` (the events bytes of ``records``, whose ``refs`` say ``(n, bytes)``)
    into each record's ``events`` list. Raises :class:`EventsCorrupt`."""
    if not records:
        if buf.size:
            raise EventsCorrupt(0)
        return
    counts = np.array([n for n, _ in refs], dtype=np.int64)
    nbytes = np.array([b for _, b in refs], dtype=np.int64)
    sent = np.fromiter((r.sent_ns for r in records), dtype=np.int64, count=len(records))
    t_ns, n_tokens = decode_events(buf, counts, nbytes, sent)
    pairs = np.column_stack((t_ns, n_tokens)).tolist()
    at = 0
    for rec, n in zip(records, counts.tolist()):
        rec.events = pairs[at : at + n]
        at += n
