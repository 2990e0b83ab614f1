"""The compact record format: records.jsonl lines with their events in events.bin."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from loadgen.errors import ConfigError
from loadgen.records import ErrorKind, RequestRecord, TokenSource, record_from_json, record_to_json
from loadgen.report import readers
from loadgen.report.files import RunWriter, read_records, read_records_columnar, read_records_pieces, record_line
from loadgen.report.recordio import (
    EVENTS_FILE,
    EVENTS_MAGIC,
    decode_batch,
    decode_events,
    encode_batch,
    encode_columns,
    encode_events,
    parse_line,
    split_batch,
)
from loadgen.report.rundata import load_run
from tests.report.test_columnar import assert_same_reading, hand_records

INT64 = (-(2**63), 2**63 - 1)
MS = 1_000_000


def random_records(seed: int, n: int = 200) -> list[RequestRecord]:
    """Ordinary streams and odd ones: out of order, coalesced, tokenless, negative and
    huge token counts, any int64 time, no events, sent_ns 0 or anywhere."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.choice([0, 1, 2, 7, 40])
        if rng.random() < 0.15:
            events = [[rng.randint(*INT64), rng.randint(*INT64)] for _ in range(k)]
        else:
            t, events = rng.randint(0, 10**16), []
            for _ in range(k):
                t += rng.choice([0, 20 * MS, rng.randint(-MS, 10**10)])
                events.append([t, rng.choice([1, 1, 1, 0, 2, 3, -1, 500])])
        sent = rng.choice([0, 10**15, rng.randint(*INT64)])
        out.append(
            RequestRecord(
                index=i,
                level=i % 3,
                sent_ns=sent,
                scheduled_ns=sent,
                done_ns=sent + 1,
                events=events,
                status=rng.choice(list(ErrorKind)),
                token_source=rng.choice(list(TokenSource)),
                warmup=rng.random() < 0.1,
                error=rng.choice([None, 'é \u2028 "x"']),
            )
        )
    return out


@pytest.mark.parametrize("seed", range(5))
def test_batches_round_trip_exactly(seed: int) -> None:
    records = random_records(seed)
    back = decode_batch(encode_batch(records))
    assert back == records  # every timestamp and token count, and every other field


def test_the_run_writer_round_trips_through_both_readers(tmp_path: Path) -> None:
    records = random_records(7) + hand_records()
    with RunWriter(tmp_path) as writer:
        writer.append(records[0])
        writer.append_batch(encode_batch(records[1:50]))
        for r in records[50:]:
            writer.append(r)
    assert writer.count == len(records)
    assert list(read_records(tmp_path)) == records
    assert assert_same_reading(tmp_path) == records
    cols = read_records_columnar(tmp_path)
    assert cols.n_events.tolist() == [len(r.events) for r in records]


def test_a_line_refers_to_its_events_and_old_readers_refuse_it(tmp_path: Path) -> None:
    rec = hand_records()[1]
    with RunWriter(tmp_path) as writer:
        writer.append(rec)
    line = (tmp_path / "records.jsonl").read_bytes()
    # events 30, 40, 40, 40 (2 tokens), 55 ms after the send: 4 + 4 + 1 + (1 + 1) + 4 bytes
    want = {**json.loads(record_to_json(rec)), "events": {"n": 5, "bytes": 15}}
    assert line == orjson.dumps(want) + b"\n"  # the same fields in the same order, events by reference
    assert (tmp_path / EVENTS_FILE).read_bytes().startswith(EVENTS_MAGIC)
    with pytest.raises(ValueError, match=r"events.bin"):
        record_from_json(line.decode())


def test_twenty_ms_tokens_cost_at_most_six_bytes_an_event(tmp_path: Path) -> None:
    """A deterministic run: 1,000 requests of 100 tokens, 20 ms apart (+- 2 ms), every
    50th event coalesced, every 40th carrying two tokens."""
    rng = np.random.default_rng(3)
    n, e = 1000, 100
    sent = 2 * 10**15 + np.arange(n, dtype=np.int64) * 50 * MS
    gaps = 20 * MS + rng.integers(-2 * MS, 2 * MS, (n, e))
    gaps[:, ::50] = 0
    t = sent[:, None] + 80 * MS + np.cumsum(gaps, axis=1)
    tokens = np.where(np.arange(e) % 40 == 39, 2, 1) * np.ones((n, 1), dtype=np.int64)
    records = [RequestRecord(index=i, sent_ns=int(s), done_ns=int(s) + 3 * 10**9) for i, s in enumerate(sent)]
    with RunWriter(tmp_path) as writer:
        writer.append_batch(encode_columns(records, np.full(n, e), t.ravel(), tokens.ravel()))
    per_event = ((tmp_path / EVENTS_FILE).stat().st_size - len(EVENTS_MAGIC)) / (n * e)
    assert per_event <= 6.0
    assert per_event == pytest.approx(4.0, abs=0.1)  # one 4-byte varint an event, a few extra counts
    old = sum(
        len(record_line(dataclasses.replace(r, events=[[int(a), int(b)] for a, b in zip(ta, na)])))
        - len(record_line(r))
        for r, ta, na in zip(records, t, tokens)
    )
    assert old / (n * e) > 5 * per_event  # the JSON pairs of older versions
    cols = read_records_columnar(tmp_path)
    np.testing.assert_array_equal(cols.t_ns, t.ravel())
    np.testing.assert_array_equal(cols.n_tokens, tokens.ravel())


def _killed_run(tmp_path: Path, records: list[RequestRecord], last: RequestRecord) -> tuple[bytes, bytes, bytes, bytes]:
    """The two files of a run with ``records`` finished, and the bytes ``last`` adds."""
    with RunWriter(tmp_path) as writer:
        writer.append_batch(encode_batch(records))
    lines, events = (bytes(part) for part in split_batch(encode_batch([last])))
    return (tmp_path / "records.jsonl").read_bytes(), (tmp_path / EVENTS_FILE).read_bytes(), lines, events


def test_a_killed_run_loses_only_the_unfinished_record(tmp_path: Path) -> None:
    """Killed anywhere while writing the last record: in its events, between the two
    files, or in its line. Every earlier record reads back; the last one never half."""
    records = random_records(2, 30)
    last = RequestRecord(index=99, sent_ns=10**15, events=[[10**15 + k * 20 * MS, 1 + k % 3] for k in range(20)])
    jsonl, events_bin, line, events = _killed_run(tmp_path, records, last)
    cuts = [(events[:k], b"") for k in range(len(events) + 1)] + [(events, line[:k]) for k in range(len(line) - 1)]
    for ev_part, line_part in cuts:
        (tmp_path / EVENTS_FILE).write_bytes(events_bin + ev_part)
        (tmp_path / "records.jsonl").write_bytes(jsonl + line_part)
        assert list(read_records(tmp_path)) == records
        assert assert_same_reading(tmp_path) == records
    for whole in (line[:-1], line):  # the line made it (its newline or not): the record is whole
        (tmp_path / "records.jsonl").write_bytes(jsonl + whole)
        assert list(read_records(tmp_path)) == [*records, last]


def test_old_and_new_lines_mix(tmp_path: Path) -> None:
    records = hand_records() + random_records(4, 20)
    old_lines = [record_line(r) for r in records]
    new = [bytes(part) for part in split_batch(encode_batch(records))]
    new_lines = new[0].splitlines(keepends=True)
    pick = [i % 3 == 0 for i in range(len(records))]  # every third line the old way
    chosen = [o if p else n for o, n, p in zip(old_lines, new_lines, pick)]
    events = b"".join(
        bytes(split_batch(encode_batch([r]))[1]) for r, p in zip(records, pick) if not p
    )  # the events of the new lines, in their order
    tmp_path.joinpath("records.jsonl").write_bytes(b"".join(chosen))
    tmp_path.joinpath(EVENTS_FILE).write_bytes(EVENTS_MAGIC + events)
    assert list(read_records(tmp_path)) == records
    assert assert_same_reading(tmp_path) == records
    kept = read_records_columnar(tmp_path, keep=lambda r: not r.warmup and r.index % 2 == 0)
    want = [r for r in records if not r.warmup and r.index % 2 == 0]
    assert kept.records == [dataclasses.replace(r, events=[]) for r in want]
    np.testing.assert_array_equal(kept.events.reshape(-1), [v for r in want for e in r.events for v in e])


def test_old_folders_without_events_bin_read(tmp_path: Path) -> None:
    records = hand_records()
    tmp_path.joinpath("records.jsonl").write_bytes(b"".join(record_line(r) for r in records))
    assert assert_same_reading(tmp_path) == records


def _written(tmp_path: Path, records: list[RequestRecord]) -> tuple[Path, Path]:
    with RunWriter(tmp_path) as writer:
        for r in records:
            writer.append(r)
    return tmp_path / "records.jsonl", tmp_path / EVENTS_FILE


def _both_raise(folder: Path, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        list(read_records(folder))
    with pytest.raises(ConfigError, match=match):
        read_records_columnar(folder)


def test_damaged_event_files_are_named(tmp_path: Path) -> None:
    records = random_records(5, 40)
    jsonl, events = _written(tmp_path, records)
    data = events.read_bytes()
    events.write_bytes(data[:-3])  # cut short: a line points past its end
    _both_raise(tmp_path, "events.bin ends before the events of records.jsonl")
    events.write_bytes(b"something else" + data[len(EVENTS_MAGIC) :])
    _both_raise(tmp_path, "not a loadgen events file")
    events.unlink()
    _both_raise(tmp_path, "cannot read .*events.bin")
    lines = jsonl.read_bytes().splitlines(keepends=True)
    events.write_bytes(data)
    jsonl.write_bytes(b"".join(lines[:3] + lines[4:]))  # a line lost: the bytes after it shift
    _both_raise(tmp_path, r"the events of records.jsonl line \d+ do not decode")
    bad = json.loads(lines[1])
    bad["events"] = {"n": 2}
    jsonl.write_bytes(lines[0] + json.dumps(bad).encode() + b"\n")
    _both_raise(tmp_path, r'records.jsonl line 2: events: must be a list of \[t_ns, n_tokens\] pairs or \{"n"')


def test_every_misaligned_byte_count_is_caught() -> None:
    """Bytes that do not fit the counts raise (they never decode to wrong events)."""
    rng = np.random.default_rng(0)
    counts = np.array([3, 0, 5, 1, 4], dtype=np.int64)
    sent = np.arange(5, dtype=np.int64) * 10**9
    t = np.repeat(sent, counts) + rng.integers(0, 10**9, counts.sum())
    n = rng.choice([1, 1, 2, 0], counts.sum())
    buf, nbytes = encode_events(sent, counts, t, n)
    got_t, got_n = decode_events(buf, counts, nbytes, sent)
    np.testing.assert_array_equal(got_t, t)
    np.testing.assert_array_equal(got_n, n)
    for i in range(counts.size):
        for step in (-1, 1):
            shifted = nbytes.copy()
            shifted[i] += step
            shifted[(i + 1) % counts.size] -= step
            with pytest.raises(ValueError):
                decode_events(buf, counts, shifted, sent)
        more = counts.copy()
        more[i] += 1
        with pytest.raises(ValueError):
            decode_events(buf, more, nbytes, sent)


@pytest.mark.parametrize("events", [[[1.5, 1]], [[1, 2, 3]], [[1]], [[2**63, 1]], [["1", 1]], [[1, 1], [2]]])
def test_only_int64_pairs_encode(events: list[list[object]]) -> None:
    with pytest.raises(ValueError, match="pairs of int64"):
        encode_batch([RequestRecord(index=0, events=events)])  # type: ignore[arg-type]


def test_batches_are_checked() -> None:
    blob = encode_batch(hand_records())
    for bad in (b"", b"LGB1", blob[:-1], b"LGB2" + blob[4:], blob + b"x"):
        with pytest.raises(ValueError, match="not a record batch"):
            split_batch(bad)
    lines, events = (bytes(p) for p in split_batch(blob))
    head = len(blob) - len(lines) - len(events)
    with pytest.raises(ValueError):
        decode_batch(blob[:head] + lines.replace(b'"index":1,', b'"index":"one",') + events)
    assert decode_batch(encode_batch([])) == []


def test_pieces_of_any_size_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_folder: Path) -> None:
    """Decoding a few events at a time (pieces cut anywhere, warm-ups skipped between
    them) gives the records, frame and figures data of decoding all at once."""
    records = hand_records() + random_records(6, 60)
    pick = [i % 4 == 0 for i in range(len(records))]  # old lines mixed in
    new = split_batch(encode_batch(records))
    chosen = [record_line(r) if p else line for r, p, line in zip(records, pick, bytes(new[0]).splitlines(True))]
    events = b"".join(bytes(split_batch(encode_batch([r]))[1]) for r, p in zip(records, pick) if not p)
    tmp_path.joinpath("records.jsonl").write_bytes(b"".join(chosen))
    tmp_path.joinpath(EVENTS_FILE).write_bytes(EVENTS_MAGIC + events)
    want = read_records_columnar(tmp_path)
    want_run = load_run(run_folder)
    for size in (1, 7, 50):
        monkeypatch.setattr(readers, "_PIECE", size)
        got = read_records_columnar(tmp_path)
        assert got.records == want.records
        np.testing.assert_array_equal(got.events, want.events)
        measured = read_records_pieces(tmp_path, keep=lambda r: not r.warmup)
        assert measured.records == [r for r in want.records if not r.warmup]
        lo = len(measured.records) // 3
        n, t, _k = measured.columns(lo, 2 * lo)
        whole = measured.columns()
        at = int(whole[0][:lo].sum())
        np.testing.assert_array_equal(t, whole[1][at : at + t.size])
        np.testing.assert_array_equal(n, measured.n_events[lo : 2 * lo])
        run = load_run(run_folder)
        pd.testing.assert_frame_equal(run.frame, want_run.frame, check_exact=True)
        np.testing.assert_array_equal(run.ev.itl_ms(), want_run.ev.itl_ms())


def test_a_line_in_any_key_order_reads_as_in_the_writers_order() -> None:
    """parse_line binds the writer's lines by position (fast), any other line by name."""
    rec = RequestRecord(
        index=7,
        level=2,
        worker=1,
        request_class="long",
        sent_ns=5,
        done_ns=9,
        status=ErrorKind.TIMEOUT,
        error="slow",
        prompt_tokens=3,
        token_source=TokenSource.USAGE_DELTA,
        warmup=True,
        server={"q": 1},
        credit_ns=4,
    )
    line = orjson.loads(record_line(rec))
    shuffled = dict(reversed(list(line.items())))
    extra = {**line, "from_a_newer_version": 1}
    for d in (line, shuffled, extra):
        parsed = parse_line(orjson.dumps(d))
        assert parsed is not None
        assert parsed[0] == dataclasses.replace(rec, events=[]) and parsed[1] == line["events"]
        assert parsed[0].status is ErrorKind.TIMEOUT and parsed[0].token_source is TokenSource.USAGE_DELTA
    assert parse_line(orjson.dumps({**line, "status": "no-such-kind"})) is None


def test_an_older_writers_line_reads_by_position_with_the_newer_fields_at_their_defaults(tmp_path: Path) -> None:
    """A line of an older writer (the fields up to some point, in order) reads as the
    record with the fields it lacks at their defaults, in a folder too."""
    rec = RequestRecord(index=3, level=1, sent_ns=10, done_ns=20, events=[[15, 1], [18, 2]], prompt_tokens=7)
    line = orjson.loads(record_line(rec))
    names = list(line)
    for cut in (names.index("events") + 1, names.index("connect_ms") + 1, len(names) - 1):
        old = {k: line[k] for k in names[:cut]}
        parsed = parse_line(orjson.dumps(old))
        assert parsed is not None
        want = RequestRecord(**{k: getattr(rec, k) for k in names[:cut] if k != "events"})
        assert parsed[0] == want and parsed[1] == line["events"]
    with RunWriter(tmp_path) as w:
        w.append(rec)
    text = (tmp_path / "records.jsonl").read_bytes()
    older = orjson.loads(text)
    older.pop("image_bytes")
    older.pop("images")
    (tmp_path / "records.jsonl").write_bytes(b"  " + orjson.dumps(older) + b" \r\n\n")
    found = read_records_pieces(tmp_path)
    assert found.records == [dataclasses.replace(rec, events=[])]
    assert [c.tolist() for c in found.columns()] == [[2], [15, 18], [1, 2]]
