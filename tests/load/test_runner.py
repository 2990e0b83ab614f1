"""The runner's clockwork, with a fake transport in virtual time (no network, no sleeps).

The fake answers each request after a service time the test chooses; the virtual clock
(tests/virtual_time.py) stands in for the runner's ``perf_counter_ns``, so every time
below is exact: a closed-loop user sends its next request at the very nanosecond its
last one ended, and an open-loop send goes out at its scheduled nanosecond.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest

import loadgen.load.runner as runner_module
from loadgen.load.arrivals import schedule
from loadgen.load.runner import LevelPlan, LevelResult, Runner
from loadgen.records import ErrorKind, RequestRecord, RequestSpec
from tests.virtual_time import VirtualClock, run_virtual

S = 1_000_000_000  # ns per second
EXACT_NS = 2  # float rounding of the virtual clock (seconds as float -> ns)


class FakeTransport:
    """Answers after ``service(spec)`` seconds with one output event every 10 ms of it;
    keeps what a test checks: in flight at each send, the peak, the order of sends."""

    def __init__(self, clock: VirtualClock, service: Callable[[RequestSpec], float] = lambda s: 0.1) -> None:
        self.clock = clock
        self.service = service
        self.in_flight = 0
        self.peak = 0
        self.in_flight_at_send: list[int] = []
        self.sends: list[tuple[int, int]] = []  # (spec index, sent_ns)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = self.clock.ns()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.in_flight_at_send.append(self.in_flight)
        self.sends.append((spec.index, record.sent_ns))
        try:
            end = record.sent_ns + round(self.service(spec) * S)
            while self.clock.ns() + 10_000_000 <= end:
                await asyncio.sleep(0.010)
                record.events.append([self.clock.ns(), 1])
            await asyncio.sleep(max(end - self.clock.ns(), 0) / S)
            record.done_ns = self.clock.ns()
        except asyncio.CancelledError:
            record.fail(ErrorKind.CANCELLED, "cancelled", self.clock.ns())
            raise
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        return None


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    clock = VirtualClock()
    monkeypatch.setattr(runner_module, "_now", clock.ns)
    return clock


def specs(n: int) -> list[RequestSpec]:
    return [RequestSpec(index=i, prompt="p", prompt_tokens=1, max_tokens=1) for i in range(n)]


def run_level(
    clock: VirtualClock,
    transport: FakeTransport,
    plan: LevelPlan,
    n_specs: int = 10_000,
    during: Callable[[Runner], Coroutine[Any, Any, None]] | None = None,
) -> tuple[LevelResult, list[RequestRecord]]:
    got: list[RequestRecord] = []
    runner = Runner(transport, on_record=got.append)

    async def main() -> LevelResult:
        side = asyncio.ensure_future(during(runner)) if during else None
        res = await runner.run_level(plan, iter(specs(n_specs)))
        if side is not None:
            await side
        return res

    return run_virtual(main(), clock), got


def test_closed_loop_keeps_exactly_n_in_flight(clock: VirtualClock) -> None:
    users, n = 4, 30
    fake = FakeTransport(clock, service=lambda s: 0.05 + 0.01 * (s.index % 7))
    res, got = run_level(clock, fake, LevelPlan(0, "concurrency", users, requests=n))
    assert len(res.records) == n and got == res.records and fake.peak == users
    assert fake.in_flight_at_send == [1, 2, 3, 4] + [users] * (n - users)
    assert [i for i, _ in fake.sends] == list(range(n))  # the specs in order
    by_worker: dict[int, list[RequestRecord]] = {}
    for r in sorted(res.records, key=lambda r: r.sent_ns):
        by_worker.setdefault(r.worker, []).append(r)
    assert sorted(by_worker) == list(range(users))
    for recs in by_worker.values():  # each user sends the moment its last request ends
        assert all(b.sent_ns - a.done_ns <= EXACT_NS for a, b in itertools.pairwise(recs))
        assert all(r.scheduled_ns == r.sent_ns for r in recs)
    assert all(r.status is ErrorKind.OK for r in res.records) and not res.interrupted


def test_closed_loop_flags_the_first_requests_as_warm_up(clock: VirtualClock) -> None:
    fake = FakeTransport(clock, service=lambda s: 0.2 if s.index % 2 else 0.05)
    res, _ = run_level(clock, fake, LevelPlan(0, "concurrency", 3, requests=12, warmup_requests=5))
    assert len(res.records) == 17
    assert sorted(r.index for r in res.records if r.warmup) == [0, 1, 2, 3, 4]


def test_closed_loop_duration_stops_new_sends(clock: VirtualClock) -> None:
    """Users stop sending at the deadline; what is in flight then still finishes."""
    fake = FakeTransport(clock, service=lambda s: 0.3)
    res, _ = run_level(clock, fake, LevelPlan(0, "concurrency", 2, duration_s=1.0))
    sent = sorted((r.sent_ns - res.start_ns) / S for r in res.records)
    assert sent == pytest.approx([0, 0, 0.3, 0.3, 0.6, 0.6, 0.9, 0.9], abs=1e-8)
    assert (res.end_ns - res.start_ns) / S == pytest.approx(1.2, abs=1e-8)


def test_closed_loop_ramp_starts_users_evenly(clock: VirtualClock) -> None:
    fake = FakeTransport(clock, service=lambda s: 5.0)
    res, _ = run_level(clock, fake, LevelPlan(0, "concurrency", 4, requests=4, ramp_s=2.0))
    firsts = sorted((r.worker, (r.sent_ns - res.start_ns) / S) for r in res.records)
    assert firsts == [(0, 0.0), (1, pytest.approx(0.5)), (2, pytest.approx(1.0)), (3, pytest.approx(1.5))]


@pytest.mark.parametrize(("arrival", "burstiness"), [("poisson", 1.0), ("gamma", 0.3), ("constant", 1.0)])
def test_open_loop_sends_on_the_schedule(clock: VirtualClock, arrival: str, burstiness: float) -> None:
    """Each send goes at its precomputed offset, whatever is in flight (no cap)."""
    plan = LevelPlan(1, "rate", 25.0, requests=60, warmup_requests=5, arrival=arrival, burstiness=burstiness, seed=3)
    fake = FakeTransport(clock, service=lambda s: 0.4)
    res, got = run_level(clock, fake, plan)
    assert res.scheduled == 65 and len(got) == 65 and res.dropped == 0
    recs = sorted(res.records, key=lambda r: r.index)
    want = np.round(schedule(arrival, 25.0, n=65, seed=3, burstiness=burstiness) * 1e9).astype(np.int64)
    due = np.array([r.scheduled_ns for r in recs]) - recs[0].scheduled_ns
    np.testing.assert_array_equal(due, want)
    assert all(0 <= r.sent_ns - r.scheduled_ns <= EXACT_NS for r in recs)
    assert [r.warmup for r in recs] == [True] * 5 + [False] * 60
    assert all(r.level == 1 for r in recs)
    assert fake.peak > 5  # 0.4 s of service at 25/s: several overlap


def test_open_loop_cap_holds_and_drops_what_waited_too_long(clock: VirtualClock) -> None:
    """Cap 5, service 0.5 s, 100 arrivals/s for 0.4 s, waiting at most 1 s: the sends
    go in waves at 0, 0.5 and 1.0 s (15 of them); the rest waited past 1 s and are
    dropped, none sent late by more than the limit."""
    plan = LevelPlan(0, "rate", 100.0, requests=40, arrival="constant", max_in_flight=5, max_lateness_s=1.0)
    fake = FakeTransport(clock, service=lambda s: 0.5)
    res, got = run_level(clock, fake, plan)
    assert fake.peak == 5
    assert res.scheduled == 40 and len(got) == 15 and res.dropped == 25
    lateness = sorted((r.sent_ns - r.scheduled_ns) / S for r in got)
    assert lateness[:5] == [0.0] * 5 and 0 < lateness[-1] <= 1.0
    waves = sorted({round((r.sent_ns - res.start_ns) / S, 1) for r in got})
    assert waves == [0.0, 0.5, 1.0]
    assert sorted(r.index for r in got) == list(range(15))  # waiting requests go first come, first served


@pytest.mark.parametrize("mode", ["concurrency", "rate"])
def test_interrupt_cancels_what_is_in_flight_and_sends_nothing_more(clock: VirtualClock, mode: str) -> None:
    async def interrupt_at_1s(runner: Runner) -> None:
        await asyncio.sleep(1.003)  # between two 10 ms events, not at the same instant
        runner.interrupt()

    plan = LevelPlan(0, mode, 3 if mode == "concurrency" else 2.0, requests=50, arrival="constant")
    fake = FakeTransport(clock, service=lambda s: 10.0)
    res, got = run_level(clock, fake, plan, during=interrupt_at_1s)
    assert res.interrupted
    in_flight = 3 if mode == "concurrency" else 2  # the open loop sent at 0 and 0.5 s
    assert len(got) == len(fake.sends) == in_flight
    assert all(r.status is ErrorKind.CANCELLED and r.error == "cancelled" for r in got)
    for r in got:  # cancelled at 1 s, keeping the events (one per 10 ms) that came before
        assert (r.done_ns - res.start_ns) / S == pytest.approx(1.003, abs=1e-8)
        assert len(r.events) == (r.done_ns - r.sent_ns) // 10_000_000 > 0
    assert (res.end_ns - res.start_ns) / S < 1.5


def test_the_collector_is_back_after_a_level(clock: VirtualClock) -> None:
    assert gc.isenabled()
    res, _ = run_level(clock, FakeTransport(clock), LevelPlan(0, "concurrency", 2, requests=4))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert res.loop_lag_ms and max(res.loop_lag_ms) == 0.0  # virtual time: the loop is never late


def test_an_unknown_mode_is_refused(clock: VirtualClock) -> None:
    with pytest.raises(ValueError, match="unknown load mode 'steps'"):
        run_level(clock, FakeTransport(clock), LevelPlan(0, "steps", 1, requests=1))


def test_what_a_level_keeps_of_its_records_compact_or_none_and_the_same_summary(clock: VirtualClock) -> None:
    """keep="compact" (the CLI's in-process runs) keeps the records in a RecordStore and
    summarises them as the full records would; keep="none" (worker processes) keeps
    nothing; every record still reaches on_record with its events."""
    from loadgen.metrics.results import Load
    from loadgen.metrics.summary import summarize_level

    plan = LevelPlan(0, "rate", 50.0, requests=40, warmup_requests=4, arrival="poisson", seed=3)
    results = {}
    for keep in ("all", "compact", "none"):
        got: list[RequestRecord] = []
        runner = Runner(FakeTransport(clock, service=lambda s: 0.03 + 0.01 * (s.index % 5)), got.append, keep=keep)
        results[keep] = run_virtual(runner.run_level(plan, iter(specs(100))), clock), got
        assert len(got) == 44 and all(r.events for r in got)
    full, compact, none = (results[k][0] for k in ("all", "compact", "none"))
    assert len(full.records) == 44 and full.store is None
    assert compact.records == [] and compact.store is not None and len(compact.store) == 44
    assert none.records == [] and none.store is None
    records, events = compact.for_summary()
    assert events is not None and len(records) == 44
    # the same requests at the same (virtual) times: the same summary from either form
    kw: dict[str, Any] = {"load": Load("rate", 50.0), "scheduled": 44}
    want = summarize_level(full.records, **kw).to_json()
    got_summary = summarize_level(records, events=events, **kw).to_json()
    want.pop("client"), got_summary.pop("client")  # loop lag: not replayed identically
    assert got_summary == want
