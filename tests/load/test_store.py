"""RecordStore: a level's records kept compactly give back exactly what went in, and
the same summary as the records themselves."""

from __future__ import annotations

import dataclasses
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.load.store import RecordStore
from loadgen.metrics.results import Load
from loadgen.metrics.summary import summarize_level
from loadgen.records import ErrorKind, RequestRecord, TokenSource

BIG_GAP = 5_000_000_000  # over the 32-bit gap of the compact form


@st.composite
def records(draw: st.DrawFn) -> list[RequestRecord]:
    n = draw(st.integers(0, 12))
    out = []
    for i in range(n):
        sent = draw(st.sampled_from([0, 10**12 + i * 1_000_000, 3 * 10**15]))
        t = sent
        events = []
        for _ in range(draw(st.integers(0, 6))):
            t += draw(st.sampled_from([0, 1, 7_000_000, BIG_GAP, -5]))  # ties, long gaps, out of order
            events.append([t, draw(st.sampled_from([0, 1, 2, 254, 255, 300, 2**40]))])
        failed = draw(st.booleans())
        agent = draw(st.booleans())  # an agent's call: its task fields go in the side table
        out.append(
            RequestRecord(
                index=i,
                level=draw(st.integers(0, 3)),
                worker=draw(st.integers(0, 2)),
                request_class=draw(st.sampled_from(["default", "long", "ünïcode"])),
                target_prompt_tokens=draw(st.integers(0, 10**6)),
                target_output_tokens=draw(st.integers(0, 4096)),
                scheduled_ns=max(sent - 5, 0),
                sent_ns=sent,
                done_ns=t + 3 if sent else 0,
                events=events,
                status=draw(st.sampled_from(list(ErrorKind))) if failed else ErrorKind.OK,
                http_status=draw(st.sampled_from([None, 200, 500])),
                error="boom" if failed else None,
                prompt_tokens=draw(st.sampled_from([None, 0, 17])),
                completion_tokens=draw(st.sampled_from([None, 5])),
                token_source=draw(st.sampled_from(list(TokenSource))),
                warmup=draw(st.booleans()),
                server={"ttft_s": 0.1},
                credit_ns=draw(st.sampled_from([0, sent])),
                task=draw(st.integers(0, 2**40)) if agent else None,
                step=draw(st.integers(1, 20)) if agent else 0,
                branch=draw(st.integers(0, 3)) if agent else 0,
                steps=draw(st.integers(1, 20)) if agent else 0,
                tool_ms=draw(st.sampled_from([0.0, 0.25, 312.5])) if agent else 0.0,
            )
        )
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_the_store_gives_back_every_field_and_event_exactly(recs: list[RequestRecord]) -> None:
    store = RecordStore()
    for r in recs:
        store.add(r)
    assert len(store) == len(recs)
    assert store.records() == [dataclasses.replace(r, events=[], server=None) for r in recs]
    counts, t, n = store.events()
    assert counts.tolist() == [len(r.events) for r in recs]
    assert [[a, b] for a, b in zip(t.tolist(), n.tolist())] == [e for r in recs for e in r.events]


def test_a_level_summarised_from_the_store_equals_the_records_own_summary() -> None:
    recs = []
    for i in range(200):
        sent = 10**12 + i * 3_000_000
        events = [[sent + 40_000_000 + k * 9_000_000 + (i % 3) * 1000, 1 + (k % 2)] for k in range(i % 17)]
        if i % 11 == 0:
            events.append([events[-1][0] if events else sent, 1])  # coalesced: same read
        status = ErrorKind.OK if i % 13 else ErrorKind.TIMEOUT
        recs.append(
            RequestRecord(
                index=i,
                sent_ns=sent,
                scheduled_ns=sent - 100,
                done_ns=sent + 400_000_000,
                events=events,
                status=status,
                warmup=i < 5,
                prompt_tokens=20,
                request_class="a" if i % 2 else "b",
                server={"x": 1.0},
            )
        )
    store = RecordStore()
    for r in recs:
        store.add(r)
    want = summarize_level(recs, load=Load("rate", 10.0), scheduled=200)
    got = summarize_level(store.records(), load=Load("rate", 10.0), scheduled=200, events=store.events())
    assert got.to_json() == want.to_json()


def test_the_store_costs_a_few_bytes_per_event() -> None:
    """The point of the store: 100 records of 64 events each, in a fraction of the
    memory the records take as Python objects."""
    store = RecordStore()
    for i in range(100):
        store.add(RequestRecord(index=i, sent_ns=10**12, events=[[10**12 + k * 8_000_000, 1] for k in range(64)]))
    as_objects = sum(sys.getsizeof(e) + sys.getsizeof(e[0]) for r in range(100) for e in [[10**12, 1]] * 64)
    assert store.nbytes < 100 * 64 * 8 < as_objects / 10  # < 8 B per event, every column included
