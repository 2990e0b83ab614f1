"""The run writer holds single records and writes them in batches: the same bytes as
writing each at once, and never a record lost on close, before a summary, before a
batch, after a while (a virtual clock) or when the run goes quiet (the run's timer)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest

from loadgen.records import ErrorKind, RequestRecord, TokenSource
from loadgen.report import files
from loadgen.report.files import FLUSH_RECORDS, FLUSH_S, RunWriter, read_records
from loadgen.report.recordio import _FIELDS, _line, encode_batch
from tests.report.test_columnar import hand_records
from tests.report.test_recordio import random_records


def _lines(folder: Path) -> int:
    return (folder / "records.jsonl").read_bytes().count(b"\n")


def _dict_line(rec: RequestRecord, n: int, nbytes: int) -> bytes:
    """The line as a dict of the fields would give it (what ``_line`` wrote before)."""
    d = {name: getattr(rec, name) for name in _FIELDS}
    d["events"] = {"n": n, "bytes": nbytes}
    return orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE)


def test_lines_are_the_fields_in_order_and_the_record_is_left_as_it_was() -> None:
    for rec in random_records(1) + hand_records():
        events = [list(e) for e in rec.events]
        try:
            want = _dict_line(rec, 7, 21)
        except TypeError:  # orjson refuses it (a lone surrogate): json's line
            want = None
        got = _line(rec, 7, 21)
        if want is not None:
            assert got == want
        assert json.loads(got)["events"] == {"n": 7, "bytes": 21}
        assert rec.events == events


def test_a_line_orjson_refuses_is_written_by_json_and_the_events_come_back() -> None:
    rec = RequestRecord(index=1, error="bad \udc80 text", events=[[5, 1]], prompt_tokens=2**70)
    line = _line(rec, 1, 1)
    d = json.loads(line)
    assert d["error"] == "bad \udc80 text" and d["prompt_tokens"] == 2**70
    assert d["status"] == ErrorKind.OK.value and d["token_source"] == TokenSource.EVENTS.value
    assert rec.events == [[5, 1]]


def test_held_records_make_the_bytes_of_one_batch(tmp_path: Path) -> None:
    records = random_records(3, 3 * FLUSH_RECORDS + 17)
    with RunWriter(tmp_path / "held") as writer:
        for rec in records:
            writer.append(rec)
    with RunWriter(tmp_path / "batch") as batch:
        for at in range(0, len(records), 100):  # other cuts, the same bytes
            batch.append_batch(encode_batch(records[at : at + 100]))
    for name in ("records.jsonl", "events.bin"):
        assert (tmp_path / "held" / name).read_bytes() == (tmp_path / "batch" / name).read_bytes()
    assert writer.count == batch.count == len(records)
    assert list(read_records(tmp_path / "held")) == records


def test_records_are_written_when_enough_are_held_or_before_anything_else(tmp_path: Path) -> None:
    records = random_records(4, FLUSH_RECORDS + 5)
    with RunWriter(tmp_path) as writer:
        for rec in records[: FLUSH_RECORDS - 1]:
            writer.append(rec)
        assert (_lines(tmp_path), writer.held, writer.count) == (0, FLUSH_RECORDS - 1, 0)
        writer.append(records[FLUSH_RECORDS - 1])
        assert (_lines(tmp_path), writer.held, writer.count) == (FLUSH_RECORDS, 0, FLUSH_RECORDS)
        writer.append(records[FLUSH_RECORDS])
        writer.append_batch(encode_batch(records[FLUSH_RECORDS + 1 : FLUSH_RECORDS + 3]))  # after the held one
        writer.append(records[FLUSH_RECORDS + 3])
        writer.write_summary({"levels": []})  # a summary follows every record before it
        assert _lines(tmp_path) == FLUSH_RECORDS + 4
        writer.append(records[FLUSH_RECORDS + 4])
        writer.write_run({"schema_version": 1})
        assert _lines(tmp_path) == len(records)
    assert list(read_records(tmp_path)) == records


def test_a_held_record_waits_at_most_the_flush_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(files, "_now", lambda: clock[0])
    records = random_records(5, 4)
    with RunWriter(tmp_path) as writer:
        writer.append(records[0])
        clock[0] += FLUSH_S * 0.9
        writer.append(records[1])
        assert writer.held == 2
        clock[0] += FLUSH_S * 0.2  # the first was held FLUSH_S * 1.1
        writer.append(records[2])
        assert (writer.held, _lines(tmp_path)) == (0, 3)
        writer.append(records[3])  # held since now
        assert writer.held == 1
    assert _lines(tmp_path) == 4


def test_a_bad_record_costs_only_itself(tmp_path: Path) -> None:
    good = random_records(6, 5)
    bad = RequestRecord(index=99, events=[[1.5, 1]])  # type: ignore[list-item]
    writer = RunWriter(tmp_path)
    with writer:
        for rec in good[:2]:
            writer.append(rec)
        writer.append(bad)
        for rec in good[2:]:
            writer.append(rec)
        with pytest.raises(ValueError, match="pairs of int64"):
            writer.flush()
        assert writer.held == 0
    assert list(read_records(tmp_path)) == good
    assert writer.count == len(good)


def test_an_exception_still_writes_the_held_records(tmp_path: Path) -> None:
    records = random_records(7, 9)
    with pytest.raises(KeyboardInterrupt), RunWriter(tmp_path) as writer:
        for rec in records:
            writer.append(rec)
        raise KeyboardInterrupt
    assert list(read_records(tmp_path)) == records


def test_the_runs_timer_writes_a_quiet_runs_records(tmp_path: Path) -> None:
    from loadgen.orchestrate.execution import _RunFolder
    from loadgen.report.console import LiveStats

    records = random_records(8, 3)

    async def main() -> tuple[int, int]:
        with RunWriter(tmp_path) as writer:
            folder = _RunFolder(writer)
            on_record = folder.on_record(LiveStats(lambda: 0))
            for rec in records:
                on_record(rec)
            before = _lines(tmp_path)
            # the timer's deadline is earlier than this sleep's, so it runs first
            await asyncio.sleep(FLUSH_S * 1.5)
            return before, _lines(tmp_path)

    assert asyncio.run(main()) == (0, len(records))
    assert list(read_records(tmp_path)) == records


def test_varint_lengths_at_every_boundary_and_past_a_floats_precision() -> None:
    import numpy as np

    from loadgen.report.recordio import _LIMITS, _lengths

    values = [0, 1] + [(1 << k) + d for k in range(1, 64) for d in (-2, -1, 0, 1)] + [(1 << 64) - 1]
    lo = np.array(values, dtype=np.uint64)
    want = [max(1, -(-v.bit_length() // 7)) for v in values]
    assert _lengths(lo).tolist() == want
    assert (np.searchsorted(_LIMITS, lo, side="right") + 1).tolist() == want
