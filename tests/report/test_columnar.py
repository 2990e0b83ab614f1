"""The columnar reading of records.jsonl gives the records, events and frame the record path gives."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadgen.errors import ConfigError
from loadgen.metrics.per_request import frame_and_events, frame_and_events_from_flat
from loadgen.records import ErrorKind, RequestRecord, TokenSource, record_to_json
from loadgen.report.files import RecordColumns, RunWriter, read_records, read_records_columnar
from loadgen.report.rundata import load_run

T0 = 7 * 10**12
MS = 1_000_000


def with_events(cols: RecordColumns) -> list[RequestRecord]:
    """The columnar records with their events put back."""
    assert cols.events.shape == (int(cols.n_events.sum()), 2) and cols.events.dtype == np.int64
    assert all(r.events == [] for r in cols.records)
    per_record = np.split(cols.events, np.cumsum(cols.n_events)[:-1]) if cols.records else []
    return [dataclasses.replace(r, events=e.tolist()) for r, e in zip(cols.records, per_record, strict=True)]


def assert_same_reading(folder: Path) -> list[RequestRecord]:
    """Both readers give equal records, and equal frames and event arrays."""
    want = list(read_records(folder))
    cols = read_records_columnar(folder)
    assert with_events(cols) == want
    frame, ev = frame_and_events_from_flat(cols.records, cols.n_events, cols.events)
    want_frame, want_ev = frame_and_events(want)
    pd.testing.assert_frame_equal(frame, want_frame, check_exact=True)
    for name in ev.__slots__:
        x, y = getattr(ev, name), getattr(want_ev, name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            assert x == y, name
    return want


def rec(index: int, events: list[tuple[int, int]], **kw: object) -> RequestRecord:
    sent = T0 + index * 10 * MS
    return RequestRecord(
        index=index,
        level=index % 2,
        request_class="chat",
        target_prompt_tokens=100,
        target_output_tokens=8,
        scheduled_ns=sent - MS,
        sent_ns=sent,
        done_ns=sent + 500 * MS,
        events=[[sent + t * MS, n] for t, n in events],
        prompt_tokens=100,
        completion_tokens=8,
        token_source=TokenSource.EVENTS_CORRECTED,
        **kw,  # type: ignore[arg-type]
    )


def hand_records() -> list[RequestRecord]:
    """Coalesced reads, out-of-order and tokenless events, failures, warm-ups, no events."""
    return [
        rec(0, [(30, 1), (40, 1)], warmup=True),
        rec(1, [(30, 1), (40, 1), (40, 1), (40, 2), (55, 1)]),
        rec(2, [(60, 1), (30, 1), (45, 3)]),
        rec(3, [(30, 0), (35, 1), (50, 0), (70, 2)]),
        rec(4, [], status=ErrorKind.HTTP_ERROR, http_status=500, error='HTTP 500: "events":[[1,2]] {'),
        rec(5, [(30, 1), (31, 1)], status=ErrorKind.TIMEOUT, error="no byte within 1 s"),
        rec(6, [(20, 1)], warmup=True, status=ErrorKind.DISCONNECTED),
        rec(7, [(25, 4)], server={"queue_ms": 1.5, "events": [[9, 9, 9]]}),
    ]


def write_lines(folder: Path, lines: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_bytes("".join(lines).encode("utf-8"))
    return folder


def test_run_folder_frame_is_the_record_paths(run_folder: Path) -> None:
    want = assert_same_reading(run_folder)
    frame = load_run(run_folder).frame
    assert (frame["coalesced_events"] > 0).any() and (~frame["ok"]).any()  # the cases that matter are there
    assert len(frame) == sum(not r.warmup for r in want) < len(want)
    pd.testing.assert_frame_equal(frame, frame_and_events(want)[0], check_exact=True)
    errors: dict[str, Counter[str]] = {}
    for r in want:
        if not r.warmup and not r.ok:
            errors.setdefault(r.status.value, Counter())[r.error or ""] += 1
    assert load_run(run_folder).errors == errors and len(errors) == 2


def test_records_written_by_the_run_writer(tmp_path: Path) -> None:
    with RunWriter(tmp_path) as writer:
        for r in hand_records():
            writer.append(r)
    want = assert_same_reading(tmp_path)
    assert len(want) == 8 and want[7].server == {"queue_ms": 1.5, "events": [[9, 9, 9]]}


def test_lines_in_other_forms_read_alike(tmp_path: Path) -> None:
    recs = hand_records()
    d = json.loads(record_to_json(recs[1]))
    nested_first = {"server": {"events": [[1, 2]]}, **{k: v for k, v in d.items() if k != "server"}}
    escaped_key = '{"a\\"events":[[5,5]],' + record_to_json(recs[2])[1:]
    no_events = json.loads(record_to_json(recs[4]))  # failed: no events of its own
    nested_only = {"server": {"events": [[1, 2]]}, **{k: v for k, v in no_events.items() if k != "server"}}
    escaped_only = '{"a\\"events":[[5,5]],' + record_to_json(recs[4])[1:]
    duplicate = record_to_json(recs[3])[:-1] + ',"events":[[' + str(T0) + ",3]]}"
    lines = [
        record_to_json(recs[0]) + "\n",
        json.dumps(json.loads(record_to_json(recs[1]))) + "\n",  # spaces after ':' and ','
        "\n",
        json.dumps(nested_first, separators=(",", ":")) + "\n",
        escaped_key + "\r\n",
        json.dumps(nested_only, separators=(",", ":")) + "\n",
        escaped_only + "\n",
        duplicate + "\n",
        "   \n",
        '["not", "a", "record"]\n',
        '[["index", 5]]\n',  # dict() would take it; json gives a list: no record
        '"events":[[1,1]]\n',
        record_to_json(recs[4]) + "\n",
        json.dumps({k: v for k, v in d.items() if k != "events"}) + "\n",  # no events key
        json.dumps({**d, "added_later": {"x": 1}}, separators=(",", ":")) + "\n",  # a newer version's key
        record_to_json(recs[7]) + "\n",
        record_to_json(recs[5])[:-40],  # torn: the run was killed mid-write
    ]
    want = assert_same_reading(write_lines(tmp_path, lines))
    assert [r.index for r in want] == [0, 1, 1, 2, 4, 4, 3, 4, 1, 1, 7]
    assert want[4].events == want[5].events == [] and want[4].server == {"events": [[1, 2]]}
    assert want[6].events == [[T0, 3]]  # the last "events" key wins, as in json
    assert want[8].events == []


@pytest.mark.parametrize(
    ("events", "json_reads_it"),
    [
        ("[[01,1]]", False),
        ("[[-,1]]", False),
        ("[[5,-]]", False),
        ("[[1,0],[2,-01]]", False),
        ("[[1-2,1]]", False),
        ("[[,1]]", False),
        ("[[1,1],[2 ,1]]", True),
        ("[[1,0],[-0,1]]", True),
        ("[[0,0],[-3,1]]", True),
    ],
)
def test_pairs_text_reads_exactly_as_json_does(tmp_path: Path, events: str, json_reads_it: bool) -> None:
    """Text that looks like pairs but is not JSON: the line is skipped, as json skips it."""
    good = [record_to_json(r) + "\n" for r in hand_records()[:3]]
    bad = record_to_json(rec(9, [(30, 1)])).replace(
        f'"events":[[{T0 + 9 * 10 * MS + 30 * MS},1]]', f'"events":{events}'
    )
    assert bad.count('"events":') == 1 and events in bad
    want = assert_same_reading(write_lines(tmp_path, [good[0], bad + "\n", *good[1:]]))
    assert [r.index for r in want] == ([0, 9, 1, 2] if json_reads_it else [0, 1, 2])


@pytest.mark.parametrize(
    "events",
    [
        "[[1,2,3]]",
        "[[1,2,3],[4]]",
        "[[1.5,1]]",
        "[[1e3,1]]",
        "null",
        "[[true,1]]",
        "[[99999999999999999999,1]]",
        '[["1",1]]',
        "[[1]]",
    ],
)
def test_events_that_are_not_integer_pairs_are_refused(tmp_path: Path, events: str) -> None:
    good = record_to_json(hand_records()[1]) + "\n"
    bad = json.dumps({**json.loads(good), "events": json.loads(events)}, separators=(",", ":"))
    write_lines(tmp_path, [good, good, bad + "\n", good])
    with pytest.raises(ConfigError, match=r"records\.jsonl line 3: events: must be a list of \[t_ns, n_tokens\]"):
        read_records_columnar(tmp_path)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    cols = read_records_columnar(write_lines(tmp_path / "empty", ["\n"]))
    assert cols.records == [] and cols.n_events.tolist() == [] and cols.events.shape == (0, 2)
    frame, ev = frame_and_events_from_flat(cols.records, cols.n_events, cols.events)
    assert len(frame) == 0 and ev.n_records == 0
    with pytest.raises(ConfigError, match=r"records.jsonl not found"):
        read_records_columnar(tmp_path / "nothing")


def test_the_writers_lines_are_record_to_json_s(tmp_path: Path) -> None:
    """The run writer (orjson) writes the bytes record_to_json (json) writes, but for
    the events, which it refers to instead (the reference is json's too)."""
    recs = hand_records()
    recs[1].error = 'é ünïcode \u2028 "quoted" \\ back'
    with RunWriter(tmp_path) as writer:
        for r in recs:
            writer.append(r)
    lines = (tmp_path / "records.jsonl").read_bytes().splitlines()
    for r, line in zip(recs, lines, strict=True):
        ref = json.loads(line)["events"]
        want = record_to_json(dataclasses.replace(r, events=ref))  # type: ignore[arg-type]
        assert line == want.encode("utf-8")
    assert list(read_records(tmp_path)) == recs


def test_what_orjson_refuses_is_written_and_read_by_json(tmp_path: Path) -> None:
    """A server's odd text or numbers: a lone surrogate, an integer over 64 bits, NaN;
    the lines stay UTF-8 and both readers read them back."""
    recs = hand_records()[:4]
    recs[0].error = "half an emoji: \ud83d"
    recs[1].server = {"big": 2**70, "small": -(2**70)}
    recs[2].server = {"nan": float("nan")}
    with RunWriter(tmp_path) as writer:
        for r in recs:
            writer.append(r)
    lines = (tmp_path / "records.jsonl").read_bytes().splitlines()
    assert all(line.decode("utf-8") for line in lines)
    assert b"\\ud83d" in lines[0]
    got = assert_same_reading(tmp_path)
    assert got[0].error == recs[0].error and got[1].server == recs[1].server
    assert got[2].server == {"nan": None}  # orjson writes NaN as null (json would write NaN, not JSON)
    assert got[3] == recs[3]


def test_lines_only_json_reads_read_alike(tmp_path: Path) -> None:
    """Lines json writes and reads but orjson refuses, and a line that is not UTF-8."""
    recs = hand_records()
    nan = record_to_json(recs[1]).replace('"server":null', '"server":{"x":NaN,"y":-Infinity,"z":1e400}')
    surrogate = record_to_json(recs[2]).replace('"error":null', '"error":"\\udc80"')
    assert nan != record_to_json(recs[1]) and surrogate != record_to_json(recs[2])
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "records.jsonl").write_bytes(
        b"\n".join(
            [nan.encode(), b'{"index": 9, "error": "\xff\xfe"}', surrogate.encode(), record_to_json(recs[3]).encode()]
        )
    )
    want = assert_same_reading(folder)
    assert [r.index for r in want] == [1, 2, 3]
    assert want[0].server is not None and np.isnan(want[0].server["x"]) and want[0].server["z"] == float("inf")
    assert want[1].error == "\udc80"
