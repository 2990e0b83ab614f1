"""Per-request metrics and the ITL / inter-chunk samples, on hand-built records."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import numpy as np
import pandas as pd
import pytest

from loadgen.metrics import per_request
from loadgen.metrics.per_request import (
    FRAME_COLUMNS,
    event_arrays,
    event_arrays_from_flat,
    event_arrays_from_pieces,
    frame_and_events,
    frame_and_events_from_flat,
    frame_and_events_from_pieces,
    inter_chunk_samples,
    itl_samples,
    per_request_frame,
)
from loadgen.records import ErrorKind
from tests.metrics.helpers import MS, ns, rec


def row(record):
    return per_request_frame([record]).iloc[0]


def test_reference_request_exact_values():
    r = rec(events=[(100, 1), (120, 1), (160, 2)], done=170, prompt_tokens=33, target_prompt=32, target_output=4)
    f = row(r)
    assert f["ttft_ms"] == 100.0
    assert f["ttft_queued_ms"] == 100.0
    assert f["tpot_ms"] == 20.0  # (160 - 100) / (4 - 1)
    assert f["itl_max_ms"] == 20.0
    assert f["e2e_ms"] == 170.0
    assert f["output_tokens"] == 4
    assert (f["n_events"], f["n_chunks"], f["coalesced_events"]) == (3, 3, 0)
    assert (f["first_token_ns"], f["last_token_ns"]) == (ns(100), ns(160))
    assert f["prompt_tokens"] == 33.0
    assert (f["target_prompt_tokens"], f["target_output_tokens"]) == (32, 4)
    assert f["ok"] and f["status"] == "ok"
    assert itl_samples([r]).tolist() == [20.0, 20.0, 20.0]
    assert inter_chunk_samples([r]).tolist() == [20.0, 40.0]


def test_coalesced_events_merge_and_never_give_zero_gaps():
    r = rec(events=[(100, 1), (130, 1), (130, 1), (150, 1)])
    f = row(r)
    assert (f["n_events"], f["n_chunks"], f["coalesced_events"]) == (4, 3, 1)
    assert inter_chunk_samples([r]).tolist() == [30.0, 20.0]
    assert itl_samples([r]).tolist() == [15.0, 15.0, 20.0]
    assert f["itl_max_ms"] == 20.0
    assert f["tpot_ms"] == pytest.approx(50 / 3)


def test_coalesced_first_chunk_counts_for_ttft_only():
    r = rec(events=[(100, 1), (100, 1), (100, 1), (140, 1)])
    f = row(r)
    assert f["ttft_ms"] == 100.0
    assert (f["n_chunks"], f["coalesced_events"], f["output_tokens"]) == (2, 2, 4)
    assert itl_samples([r]).tolist() == [40.0]
    assert f["tpot_ms"] == pytest.approx(40 / 3)


def test_zero_output_tokens():
    f = row(rec(events=[], done=250))
    assert math.isnan(f["ttft_ms"]) and math.isnan(f["ttft_queued_ms"])
    assert math.isnan(f["tpot_ms"]) and math.isnan(f["itl_max_ms"])
    assert f["e2e_ms"] == 250.0
    assert (f["output_tokens"], f["n_chunks"], f["first_token_ns"], f["last_token_ns"]) == (0, 0, 0, 0)


def test_one_output_token_has_ttft_but_no_tpot_or_itl():
    r = rec(events=[(80, 1)], done=90)
    f = row(r)
    assert f["ttft_ms"] == 80.0
    assert math.isnan(f["tpot_ms"]) and math.isnan(f["itl_max_ms"])
    assert itl_samples([r]).size == 0 and inter_chunk_samples([r]).size == 0


def test_two_tokens_in_one_event_give_zero_tpot_and_no_itl():
    r = rec(events=[(80, 2)])
    assert row(r)["tpot_ms"] == 0.0
    assert itl_samples([r]).size == 0


def test_queue_inclusive_and_lateness():
    f = row(rec(events=[(100, 1)], sent=10, scheduled=0, done=120))
    assert f["ttft_ms"] == 90.0 and f["ttft_queued_ms"] == 100.0
    assert f["e2e_ms"] == 110.0 and f["e2e_queued_ms"] == 120.0
    assert f["send_lateness_ms"] == 10.0


def test_missing_schedule_is_taken_as_the_send_time():
    r = rec(events=[(100, 1)], sent=10)
    r.scheduled_ns = 0
    f = row(r)
    assert f["scheduled_ns"] == r.sent_ns
    assert f["ttft_queued_ms"] == f["ttft_ms"] == 90.0
    assert f["send_lateness_ms"] == 0.0


def test_missing_prompt_usage_is_nan():
    assert math.isnan(row(rec(events=[(1, 1)]))["prompt_tokens"])


def test_warmup_excluded_everywhere():
    warm = rec(0, [(10, 1), (500, 1)], warmup=True)
    real = rec(1, [(100, 1), (120, 1)])
    frame = per_request_frame([warm, real])
    assert frame["index"].tolist() == [1]
    assert itl_samples([warm, real]).tolist() == [20.0]
    assert inter_chunk_samples([warm, real]).tolist() == [20.0]


def test_failed_requests_in_frame_but_not_in_samples():
    bad = rec(0, [(100, 1), (900, 1)], status=ErrorKind.DISCONNECTED)
    good = rec(1, [(100, 1), (130, 1)])
    frame = per_request_frame([bad, good])
    assert frame["ok"].tolist() == [False, True]
    assert frame["status"].tolist() == ["disconnected", "ok"]
    assert itl_samples([bad, good]).tolist() == [30.0]
    assert inter_chunk_samples([bad, good]).tolist() == [30.0]


def test_gaps_never_span_two_requests():
    a = rec(0, [(100, 1), (120, 1)])
    b = rec(1, [(50, 1), (90, 1)])
    assert inter_chunk_samples([a, b]).tolist() == [20.0, 40.0]
    # same timestamp at the end of one request and the start of the next: not coalesced
    c = rec(2, [(10, 1), (20, 1)])
    d = rec(3, [(20, 1), (25, 1)])
    frame = per_request_frame([c, d])
    assert frame["coalesced_events"].tolist() == [0, 0]
    assert inter_chunk_samples([c, d]).tolist() == [10.0, 5.0]


def test_events_without_tokens_are_ignored_for_timing():
    r = rec(events=[(100, 1), (110, 0), (130, 1)])
    f = row(r)
    assert (f["n_events"], f["n_chunks"], f["output_tokens"]) == (3, 2, 2)
    assert itl_samples([r]).tolist() == [30.0]


def test_out_of_order_events_are_sorted_per_request():
    r = rec(events=[(130, 1), (100, 1), (160, 2)])
    f = row(r)
    assert f["ttft_ms"] == 100.0
    assert itl_samples([r]).tolist() == [30.0, 15.0, 15.0]


def test_frame_columns_and_empty_input():
    frame = per_request_frame([])
    assert list(frame.columns) == list(FRAME_COLUMNS)
    assert len(frame) == 0
    assert itl_samples([]).size == 0
    ev = event_arrays([])
    assert ev.n_records == 0 and ev.ch_gap_ms.size == 0


def _naive_itl(record):
    """Straight-line reference: merge equal timestamps, then gap / k, k times."""
    chunks: list[list[int]] = []
    for t, n in sorted(record.events, key=lambda e: e[0]):
        if n <= 0:
            continue
        if chunks and chunks[-1][0] == t:
            chunks[-1][1] += n
        else:
            chunks.append([t, n])
    itl: list[float] = []
    for (t0, _), (t1, k) in itertools.pairwise(chunks):
        itl += [(t1 - t0) / MS / k] * k
    return chunks, itl


def test_vectorised_matches_a_naive_reference_on_random_records():
    rng = random.Random(7)
    records = []
    for i in range(300):
        t = rng.uniform(0, 1000)
        events = []
        for _ in range(rng.randint(0, 12)):
            if not events or rng.random() > 0.3:  # 30% coalesced with the previous one
                t += rng.uniform(0.01, 50)
            events.append((round(t, 3), rng.choice([0, 1, 1, 1, 2, 5])))
        status = ErrorKind.OK if rng.random() > 0.1 else ErrorKind.TIMEOUT
        records.append(rec(i, events, sent=0, status=status))
    expected_itl: list[float] = []
    frame, _ev = frame_and_events(records)
    for i, r in enumerate(records):
        chunks, itl = _naive_itl(r)
        if r.status is ErrorKind.OK:
            expected_itl += itl
        assert frame["n_chunks"].iat[i] == len(chunks)
        assert frame["output_tokens"].iat[i] == sum(k for _, k in chunks)
        if itl:
            assert frame["itl_max_ms"].iat[i] == pytest.approx(max(itl))
    np.testing.assert_allclose(itl_samples(records), expected_itl)


def _flat(records):
    n_events = np.array([len(r.events) for r in records], dtype=np.int64)
    flat = np.array([e for r in records for e in r.events], dtype=np.int64).reshape(-1, 2)
    return n_events, flat


def _assert_same_events(a, b):
    for name in a.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=name)
            assert x.dtype == y.dtype, name
        else:
            assert x == y, name


def _odd_records():
    """Coalesced, out of order, zero-token, failed, warm-up and event-less records."""
    return [
        rec(0, [(100, 1), (130, 1), (130, 1), (150, 2)], warmup=True),
        rec(1, [(100, 1), (100, 1), (100, 1), (140, 1)], prompt_tokens=7),
        rec(2, [(130, 1), (100, 1), (160, 2)], scheduled=-5.0),
        rec(3, [(100, 0), (110, 1), (120, 0), (130, 3)]),
        rec(4, [], status=ErrorKind.HTTP_ERROR, done=5),
        rec(5, [(100, 1), (120, 1)], status=ErrorKind.TIMEOUT, done=400),
        rec(6, [(50, 1)], warmup=True, status=ErrorKind.TIMEOUT),
        rec(7, [(90, 4)]),
        rec(8, []),
    ]


def test_event_arrays_from_flat_equal_event_arrays():
    records = _odd_records()
    n_events, flat = _flat(records)
    _assert_same_events(event_arrays_from_flat(n_events, flat), event_arrays(records))
    _assert_same_events(event_arrays_from_flat(n_events, flat.ravel()), event_arrays(records))  # interleaved
    _assert_same_events(event_arrays_from_flat([], np.zeros((0, 2), np.int64)), event_arrays([]))


def test_frame_from_flat_equals_frame_from_records_and_drops_warmup_events():
    records = _odd_records()
    n_events, flat = _flat(records)
    bare = [dataclasses.replace(r, events=[]) for r in records]
    frame, ev = frame_and_events_from_flat(bare, n_events, flat)
    want_frame, want_ev = frame_and_events(records)
    pd.testing.assert_frame_equal(frame, want_frame, check_exact=True)
    _assert_same_events(ev, want_ev)
    assert frame["index"].tolist() == [1, 2, 3, 4, 5, 7, 8]  # warm-up records 0 and 6 dropped
    assert ev.ev_t.size == 4 + 3 + 2 + 0 + 2 + 1 + 0  # tokenless events dropped, warm-ups' too
    assert frame["coalesced_events"].tolist() == [2, 0, 0, 0, 0, 0, 0]


def test_frame_from_flat_on_random_records_with_warmups():
    rng = random.Random(11)
    records = []
    for i in range(200):
        t, events = rng.uniform(0, 100), []
        for _ in range(rng.randint(0, 9)):
            t += 0 if events and rng.random() < 0.3 else rng.uniform(0.01, 40)
            events.append((round(t, 3), rng.choice([0, 1, 1, 2, 5])))
        status = rng.choice([ErrorKind.OK] * 8 + [ErrorKind.TIMEOUT, ErrorKind.DISCONNECTED])
        records.append(rec(i, events, status=status, warmup=rng.random() < 0.1))
    n_events, flat = _flat(records)
    frame, ev = frame_and_events_from_flat([dataclasses.replace(r, events=[]) for r in records], n_events, flat)
    want_frame, want_ev = frame_and_events(records)
    pd.testing.assert_frame_equal(frame, want_frame, check_exact=True)
    _assert_same_events(ev, want_ev)


def test_flat_events_must_match_their_counts():
    records = _odd_records()
    n_events, flat = _flat(records)
    with pytest.raises(ValueError, match="add up to"):
        event_arrays_from_flat(n_events, flat[:-1])
    with pytest.raises(ValueError, match="counts given for"):
        frame_and_events_from_flat(records[:-1], n_events, flat)


def _random_records(seed, n=300):
    rng = random.Random(seed)
    records = []
    for i in range(n):
        t, events = rng.uniform(0, 100), []
        for _ in range(rng.randint(0, 9)):
            t += 0 if events and rng.random() < 0.3 else rng.uniform(-5, 40)  # coalesced, out of order
            events.append((round(t, 3), rng.choice([0, 1, 1, 2, 5])))
        records.append(
            rec(i, events, status=rng.choice([ErrorKind.OK] * 8 + [ErrorKind.TIMEOUT]), warmup=rng.random() < 0.1)
        )
    return records


def _pieces(n_events, flat, cuts):
    """The events split after the records at ``cuts``."""
    bounds = [0, *cuts, len(n_events)]
    first = np.r_[0, np.cumsum(n_events)]
    for a, b in itertools.pairwise(bounds):
        yield n_events[a:b], flat[first[a] : first[b], 0], flat[first[a] : first[b], 1]


@pytest.mark.parametrize("seed", range(4))
def test_event_arrays_from_pieces_equal_the_whole(seed):
    records = [r for r in _random_records(seed) if not r.warmup]
    n_events, flat = _flat(records)
    whole = event_arrays_from_flat(n_events, flat)
    cuts = sorted(random.Random(seed).sample(range(1, len(records)), 12))
    ev = event_arrays_from_pieces(n_events, _pieces(n_events, flat, cuts))
    for name in ("n_records", "n_events", "ev_count", "ev_n", "n_chunks", "ch_t", "ch_n", "ev_t", "ch_gap_ms"):
        np.testing.assert_array_equal(getattr(ev, name), getattr(whole, name), err_msg=name)
    assert ev.ev_n.dtype == ev.ch_n.dtype == np.int32  # what a whole run is held in
    np.testing.assert_array_equal(ev.itl_max_ms(), whole.itl_max_ms())
    np.testing.assert_array_equal(ev.itl_ms(), whole.itl_ms())


def test_pieces_keep_int64_counts_that_int32_cannot_hold():
    n_events = np.array([2, 1])
    pieces = [(n_events[:1], [5, 9], [1, 2]), (n_events[1:], [7], [2**40])]
    ev = event_arrays_from_pieces(n_events, pieces)
    assert ev.ch_n.dtype == np.int64 and ev.ch_n.tolist() == [1, 2, 2**40]
    with pytest.raises(ValueError, match="pieces hold 1 records"):
        event_arrays_from_pieces(n_events, pieces[:1])


def test_frame_from_pieces_equals_frame_from_records():
    records = _random_records(9)
    n_events, flat = _flat(records)
    bare = [dataclasses.replace(r, events=[]) for r in records]
    frame, ev = frame_and_events_from_pieces(bare, n_events, _pieces(n_events, flat, [3, 4, 100, 250]))
    want_frame, want_ev = frame_and_events(records)
    pd.testing.assert_frame_equal(frame, want_frame, check_exact=True)
    np.testing.assert_array_equal(ev.itl_ms(), want_ev.itl_ms())


def test_itl_max_a_block_at_a_time(monkeypatch):
    records = _random_records(3)
    want = frame_and_events(records)[1].itl_max_ms()
    monkeypatch.setattr(per_request, "_BLOCK", 5)
    np.testing.assert_array_equal(frame_and_events(records)[1].itl_max_ms(), want)
