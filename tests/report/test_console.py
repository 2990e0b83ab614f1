"""The console: the live line of the level in progress, and the end-of-run view (units in
every table, the client-bound reason, late sends, how the output tokens were counted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from loadgen.metrics import summarize_level, summarize_run
from loadgen.metrics.client import WorkerStats
from loadgen.metrics.results import LevelSummary
from loadgen.records import ErrorKind, RequestRecord, TokenSource
from loadgen.report.console import level_line, level_notes, level_table, metrics_table, show_summary, token_source_line
from loadgen.report.files import read_summary
from loadgen.report.live import LiveStats, level_heading
from tests.metrics.helpers import rec
from tests.report.synth import Spec, make_run


def _level(value: int, sources: list[TokenSource]) -> LevelSummary:
    recs = [rec(i, [(10.0 + i, 1), (12.0 + i, 1)], sent=float(i), token_source=s) for i, s in enumerate(sources)]
    return summarize_level(recs, load={"mode": "concurrency", "value": value})


def _shown(levels: list[LevelSummary]) -> str:
    console = Console(width=60, record=True, color_system=None)
    show_summary(summarize_run(levels), console, Path("run"))
    return console.export_text()


def test_one_source_is_one_plain_line() -> None:
    lv = _level(1, [TokenSource.EVENTS] * 3)
    line = token_source_line([lv])
    assert line == (
        "output tokens counted one per event (the server streamed no usage; exact when each event holds one token)"
    )
    assert line in _shown([lv]).splitlines()  # one line, even on a narrow console
    exact = _level(2, [TokenSource.USAGE_DELTA] * 2)
    assert token_source_line([exact]) == "output tokens from the server's usage on every event (exact)"


def test_mixed_sources_count_the_requests_over_all_levels() -> None:
    a = _level(1, [TokenSource.EVENTS_CORRECTED] * 3)
    b = _level(2, [TokenSource.EVENTS_CORRECTED, TokenSource.EVENTS])
    line = token_source_line([a, b], prefix="")
    assert line == (
        "counted one per event, scaled to the server's final usage.completion_tokens for 4 of 5 "
        "requests; counted one per event (the server streamed no usage; exact when each event holds "
        "one token) for 1 of 5 requests"
    )
    assert "output tokens " + line in _shown([a, b]).splitlines()


def test_no_successful_request_no_line() -> None:
    assert token_source_line([]) == "" and token_source_line([_level(1, [])]) == ""
    assert "output tokens" not in _shown([_level(1, [])])


# --- the live line ---------------------------------------------------------------------------------


class Clock:
    """Virtual time for the live line (seconds)."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _finished(
    level: int, *, warmup: bool = False, ok: bool = True, trial: int = 0, ttft_ms: float = 10.0
) -> RequestRecord:
    r = rec(
        0,
        [(ttft_ms, 1), (ttft_ms + 2.0, 1), (ttft_ms + 4.0, 1)],
        warmup=warmup,
        status=ErrorKind.OK if ok else ErrorKind.HTTP_ERROR,
    )
    r.level, r.trial = level, trial
    return r


def _line(stats: LiveStats) -> str:
    console = Console(width=250, record=True, color_system=None)
    console.print(stats)
    return console.export_text().strip()


def test_live_counters_start_again_with_each_level() -> None:
    clock = Clock()
    stats = LiveStats(lambda: 3, clock=clock)
    stats.start_level(level_heading(0, (4, True)), "8 users", level=0, requests=10, warmup=2)
    for _ in range(2):
        stats.add(_finished(0, warmup=True, ttft_ms=900.0))  # warm-up: apart, not in done or the medians
    for _ in range(6):
        stats.add(_finished(0, ttft_ms=50.0))
    stats.add(_finished(0, ok=False))
    line = _line(stats)
    assert line.startswith("level 1 of 4 · target 8 users  warm-up 2/2  done 6/10  failed 1  in flight 3")
    assert "TTFT p50 50 ms" in line and "TPOT p50 2 ms" in line
    stats.start_level(level_heading(1, (4, True)), "16 users", level=1, requests=10)
    stats.add(_finished(0))  # a late record of the level before: not this level's
    stats.add(_finished(1, ttft_ms=20.0))
    line = _line(stats)
    assert line.startswith("level 2 of 4 · target 16 users  done 1/10  failed 0") and "warm-up" not in line
    assert "TTFT p50 20 ms" in line
    assert stats.done == 1 and stats.failed == 0 and stats.warm == 0


def test_live_heading_of_a_search_and_of_trials() -> None:
    assert level_heading(2, (10, False)) == "level 3 of at most 10"
    assert level_heading(0, (1, True), trial=1, trials=3) == "level 1 of 1, trial 2/3"
    stats = LiveStats(lambda: 0, clock=Clock())
    stats.start_level("level 1 of 1", "4 users", level=0, trial=1, requests=5)
    stats.add(_finished(0, trial=0))  # the trial before
    assert stats.done == 0


def test_live_time_left() -> None:
    clock = Clock()
    stats = LiveStats(lambda: 0, clock=clock)
    stats.start_level("level 1 of 2", "10 req/s", level=0, requests=100, sends_s=9.9)  # open loop: the schedule
    clock.t += 4.0
    assert stats.time_left() == pytest.approx(5.9)
    assert _line(stats).endswith("4s, ~6s left") and "late sends 0" in _line(stats)
    late = [rec(i, [(20.0, 1)], sent=10.0, scheduled=10.0 - 2.5 * i) for i in range(3)]  # 0, 2.5 and 5 ms late
    late.append(rec(9, [(20.0, 1)], sent=10.0, scheduled=0.0, warmup=True))  # warm-up: not counted
    for r in late:
        stats.add(r)
    assert stats.late == 2 and "late sends 2" in _line(stats)
    stats.start_level("level 2 of 2", "4 users", level=1, requests=10)  # closed loop: the pace so far
    assert stats.time_left() is None
    for _ in range(3):
        clock.t += 2.0
        stats.add(_finished(1))
    assert stats.time_left() == pytest.approx(7 * 2.0)  # 7 left, one every 2 s
    stats.start_level("level 1 of 1", "64 users", level=0, duration_s=60.0)
    clock.t += 15.0
    assert stats.time_left() == pytest.approx(45.0) and _line(stats).endswith("15s, ~45s left")
    clock.t += 100.0
    assert stats.time_left() == 0.0


# --- the result tables -----------------------------------------------------------------------------


def _open_level(value: float, slow: bool = False) -> LevelSummary:
    scale = 1000.0 if slow else 1.0  # slow: seconds-long latencies
    recs = [
        rec(
            i,
            [(10.0 * scale + i, 1), (20.0 * scale + i, 1)],
            sent=float(i),
            scheduled=float(i) - (5.0 if i < 3 else 0.0),
        )
        for i in range(10)
    ]
    return summarize_level(recs, load={"mode": "rate", "value": value}, scheduled=12, dropped=2)


def test_one_level_table_has_a_unit_in_every_cell() -> None:
    lv = _open_level(5.0, slow=True)
    console = Console(width=150, record=True, color_system=None)
    console.print(metrics_table(lv))
    text = console.export_text()
    assert "metric (ms)" not in text
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == 6
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")][1:]
        # a latency with its unit, always (issue 37: a value is never hidden), and its interval
        # where it has one: ±6%, the bounds when wider than the value, "±—" when it cannot be bounded
        assert cells and all(re.fullmatch(r"–|[\d.,]+ (ms|s)( ±[\d.]+%| ±—| \[[^\]]+\])?", c) for c in cells), row
    e2e = next(r for r in rows if r.startswith("│ E2E"))
    assert "20 s" in e2e  # seconds-long, in seconds, said so
    assert f"sends: {lv.schedule.late} of 12 late (over 2 ms), 2 dropped" in text  # type: ignore[union-attr]
    assert lv.schedule is not None and lv.schedule.late == 3


def test_level_table_headers_name_their_units() -> None:
    fast, slow = _open_level(2.0), _open_level(8.0, slow=True)
    console = Console(width=150, record=True, color_system=None)
    console.print(level_table([fast, slow]))
    text = console.export_text()
    head = text.split("┡")[0]
    for unit_header in ("req/s", "tok/s", "%", "late", "sends"):
        assert unit_header in head
    assert head.count(" ms ") + head.count(" s ") >= 5  # a unit under each latency
    # TTFT p50 is 10 ms and 10 s: one unit for the column, seconds, and each cell in it
    body = [line for line in text.splitlines() if line.startswith("│")]
    assert "10 ±" in body[1] and "10,000" not in body[1]
    assert "3/12" in body[0] and "3/12" in body[1]  # the late sends of each level


def test_the_console_gives_the_summarys_client_bound_reason() -> None:
    recs = [rec(i, [(10.0 + i, 1), (12.0 + i, 1)], sent=float(i)) for i in range(5)]
    busy = WorkerStats(worker=0, loop_lag_ms=[0.1] * 10, cpu_s=1.0, wall_s=10.0, runqueue_s=0.8)
    lv = summarize_level(recs, load={"mode": "concurrency", "value": 2}, workers=[busy])
    assert lv.client.client_bound and lv.client.reasons == ["waited for a CPU 8% of the time"]
    console = Console(width=150, record=True, color_system=None)
    console.print(metrics_table(lv))
    text = console.export_text()
    assert "client-bound: waited for a CPU 8% of the time" in text and "event-loop lag" not in text
    other = _level(4, [TokenSource.EVENTS] * 2)
    assert "4 users: client-bound" not in "\n".join(level_notes([lv, other]))
    assert level_notes([lv, other])[0] == "2 users: client-bound: waited for a CPU 8% of the time"
    # then, once for the table, the intervals and whose n_eff, and what is not bounded where
    assert level_notes([lv, other])[1].startswith("±: 95% intervals")
    assert all(n.startswith("±— not bounded: ") for n in level_notes([lv, other])[2:])
    assert level_line(lv).endswith("; client-bound: waited for a CPU 8% of the time")


def test_a_value_is_never_hidden_and_a_wide_interval_shows_its_bounds() -> None:
    """Issue 37: a statistic whose interval cannot be bounded still prints its value (was: a
    bare "—" in its place, so the console said nothing of a TTFT p99 the report printed);
    an interval wider than the value prints its bounds, never "±1561%"."""
    from loadgen.metrics.results import StatInterval
    from loadgen.report.console import with_pm

    unbounded = StatInterval(low=None, high=None, n_eff=9.0, confidence=0.95, reason="too few")
    assert with_pm("148 ms", 148.0, unbounded) == "148 ms ±—"
    wide = StatInterval(low=0.51, high=413.2, n_eff=9.0, confidence=0.95)
    assert with_pm("24.9 ms", 24.9, wide) == "24.9 ms [0.51, 413]"
    narrow = StatInterval(low=23.0, high=26.0, n_eff=90.0, confidence=0.95)
    assert with_pm("24.9 ms", 24.9, narrow) == "24.9 ms ±7.6%"
    big = StatInterval(low=1.0, high=14_500.0, n_eff=9.0, confidence=0.95)
    assert "e+" not in with_pm("1,450 ms", 1450.0, big)  # no exponent form


# --- issue 37: one formatting rule, one n_eff per level, the reason once per table ------------------


def _synth_levels(tmp_path: Path, spec: Spec) -> list[LevelSummary]:
    folder = make_run(tmp_path / "run", spec)
    return [LevelSummary.from_json(lv) for lv in read_summary(folder)["levels"]]


def test_a_rate_sweep_table_keeps_each_load_label_and_client_verdict_whole(tmp_path: Path) -> None:
    """A rate sweep's levels (3.6336, 12.8241 req/s) were labelled ``12.8241 req/s``, wrapped
    over two lines, and the client column was cut to ``client-b…`` on a 120-column terminal."""
    rates = (1.0127, 3.6336, 6.2545, 8.8754, 11.4963, 12.8241)
    levels = _synth_levels(tmp_path, Spec(loads=rates, mode="rate", client_bound_level=4))
    console = Console(width=120, record=True, color_system=None)
    console.print(level_table(levels))
    text = console.export_text()
    rows = [line for line in text.splitlines() if line.startswith("│")]
    firsts = [row.strip("│").split("│")[0].strip() for row in rows]
    labels = [lv.load.label() for lv in levels]
    assert labels[1] == "3.63 req/s" and labels[-1] == "12.8 req/s"
    assert [f for f in firsts if f] == labels  # each label on one line, none cut
    assert "…" not in text
    verdicts = [row.strip("│").split("│")[-1].strip() for row in rows if row.strip("│").split("│")[0].strip()]
    assert verdicts == [lv.client.verdict for lv in levels] and "client-bound" in verdicts


def test_one_n_eff_per_level_and_the_reason_once_per_table(tmp_path: Path) -> None:
    """Issue 37 item 4: the level line said "n_eff 26 of 53" (TTFT mean's) and the reason
    under it "(n_eff = 41)" (TTFT p99's), unlabelled; and the reason came once per level."""
    levels = _synth_levels(tmp_path, Spec(loads=(1, 4, 16, 32), client_bound_level=None))
    assert all(not (lv.ttft_ms.intervals or {})["p99"].bounded for lv in levels)  # 60 requests: p99 unbounded
    for lv in levels:
        line = level_line(lv)
        assert line.count("n_eff") == 1 and "n_eff" in line and "(TTFT mean)" in line, line
        assert " ±—" in line  # TTFT p99's value with its unbounded mark, never a bare "—"
    notes = level_notes(levels)
    unbounded = [n for n in notes if "not bounded" in n]
    assert len(unbounded) == 1, notes  # once for the table
    assert "TTFT p99 at 1 user, 4 users, 16 users, 32 users" in unbounded[0]
    text = "\n".join(notes)
    assert "(n_eff = " not in text  # the metric's reason keeps its n_eff, printed labelled instead
    # each n_eff value printed names whose it is: the table's column (TTFT mean) or one statistic's
    labelled = re.findall(r"n_eff: each level's TTFT mean|TTFT p\d+ at [^:]+: [^;)]*its n_eff \d+", text)
    assert len(labelled) == 2 and len(re.findall(r"n_eff \d", text)) == 1, text
    one = Console(width=150, record=True, color_system=None)
    one.print(metrics_table(levels[0]))
    single = one.export_text()
    assert "(n_eff = " not in single and single.count("(TTFT mean)") == 1
    assert sum("not bounded" in line for line in single.splitlines()) == 1
