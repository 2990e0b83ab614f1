"""The end-of-run console view says how the output tokens were counted."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from loadgen.metrics import summarize_level, summarize_run
from loadgen.metrics.results import LevelSummary
from loadgen.records import TokenSource
from loadgen.report.console import show_summary, token_source_line
from tests.metrics.helpers import rec


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
    assert line == ("output tokens counted one per event (the server streamed no usage; exact when each event "
                    "holds one token)")  # fmt: skip
    assert line in _shown([lv]).splitlines()  # one line, even on a narrow console
    exact = _level(2, [TokenSource.USAGE_DELTA] * 2)
    assert token_source_line([exact]) == "output tokens from the server's usage on every event (exact)"


def test_mixed_sources_count_the_requests_over_all_levels() -> None:
    a = _level(1, [TokenSource.EVENTS_CORRECTED] * 3)
    b = _level(2, [TokenSource.EVENTS_CORRECTED, TokenSource.EVENTS])
    line = token_source_line([a, b], prefix="")
    assert line == ("counted one per event, scaled to the server's final usage.completion_tokens for 4 of 5 "
                    "requests; counted one per event (the server streamed no usage; exact when each event holds "
                    "one token) for 1 of 5 requests")  # fmt: skip
    assert "output tokens " + line in _shown([a, b]).splitlines()


def test_no_successful_request_no_line() -> None:
    assert token_source_line([]) == "" and token_source_line([_level(1, [])]) == ""
    assert "output tokens" not in _shown([_level(1, [])])
