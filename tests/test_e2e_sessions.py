"""End to end: multi-turn sessions and reasoning through `loadgen run`'s wiring against
`loadgen serve --engine sim` in its own process, on loopback.

Prefix caching: sessions each with their own long system prompt (2,048 tokens, one of
1,000 groups drawn uniformly) and short turns. Turn 1 prefills the system prompt; later
turns resend it with the history. With the server's prefix cache on, later turns prefill
only what is new, so their TTFT falls well below turn 1's; with it off they pay for the
whole, longer history again. Stated as ratios of medians, not times, and with the
server's own account of each request (its cached tokens and prefill time).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.metrics import RunSummary
from loadgen.orchestrate import RunConfig, execute
from loadgen.report.files import read_records
from loadgen.report.html import render_run_report
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import load_workload, workload_from_flags

SESSIONS = """\
prompt_tokens = 32
output_tokens = 16
[sessions]
turns = 4
system_prompt_tokens = 2048
groups = 1000
zipf = 0
"""


def _run(url: str, out: Path, workload_path: Path, workers: int = 1) -> RunSummary:
    cfg = RunConfig(
        url=url,
        api="chat",
        workload=load_workload(str(workload_path), []),
        profile=Profile(levels=[2], requests=16),
        out=out,
        live=False,
        workers=workers,
    )
    text = io.StringIO()
    summary = execute(cfg, Console(file=text, width=200)).summary
    assert "sessions 4 (4 completed); TTFT p50 by turn 1: " in text.getvalue()  # the console says it briefly
    assert "sessions 4 (4 completed)" in render_run_report(out).read_text()  # and the report
    return summary


def test_later_turns_hit_the_prefix_cache(tmp_path: Path) -> None:
    wl = tmp_path / "sessions.toml"
    wl.write_text(SESSIONS, encoding="utf-8")
    ttft: dict[bool, dict[str, float]] = {}
    served: dict[bool, list[tuple[int, float, int]]] = {}  # (turn, prefill_s, cached_tokens)
    for caching in (True, False):
        flag = "--prefix-caching" if caching else "--no-prefix-caching"
        with ServerProcess(["--engine", "sim", flag]) as url:
            summary = _run(url, tmp_path / flag, wl, workers=2 if caching else 1)
        level = summary.levels[0]
        assert level.requests.ok == 16 and level.by_turn is not None and level.sessions is not None
        assert sorted(level.by_turn) == ["1", "2", "3", "4"] and level.sessions.sessions == 4
        assert level.sessions.completed == 4 and level.sessions.turns_per_session.p50 == 4
        ttft[caching] = {t: v.ttft_ms.p50 for t, v in level.by_turn.items() if v.ttft_ms.p50 is not None}
        records = list(read_records(tmp_path / flag))
        served[caching] = [
            (r.turn, r.server["prefill_s"], r.server["cached_tokens"]) for r in records if not r.warmup and r.server
        ]
        assert len(served[caching]) == 16
        for s in {r.session for r in records}:  # a session stays on one worker
            assert len({r.worker for r in records if r.session == s}) == 1
        # the prompts grow by each turn's message and the answer the server gave
        by_turn = {t: v.prompt_tokens.p50 for t, v in level.by_turn.items()}
        assert by_turn["1"] < by_turn["2"] < by_turn["3"] < by_turn["4"]
        saved = json.loads((tmp_path / flag / "summary.json").read_text())["levels"][0]
        assert saved["by_turn"]["4"]["requests"] == 4 and saved["sessions"]["completed"] == 4
    on, off = ttft[True], ttft[False]
    assert on["4"] < 0.5 * on["1"] and on["2"] < 0.5 * on["1"]  # the history comes from the cache
    # without it, every turn prefills its whole, longer history again: the server reports no
    # cached token and no prefill shorter than turn 1's fastest (TTFT alone also holds the
    # queueing behind another session's prefill, which differs from turn to turn)
    fresh = min(p for t, p, _ in served[False] if t == 1)
    assert all(c == 0 and p >= fresh for _, p, c in served[False])
    assert all(c >= 2048 for t, _, c in served[True] if t > 1)
    assert on["4"] < 0.5 * off["4"]


def test_reasoning_tokens_stream_first_and_are_counted(tmp_path: Path) -> None:
    with ServerProcess(["--engine", "sim", "--reasoning-tokens", "uniform:min=8,max=12"]) as url:
        cfg = RunConfig(
            url=url,
            api="chat",
            workload=workload_from_flags("64", "24"),
            profile=Profile(levels=[2], requests=8),
            out=tmp_path / "r",
            live=False,
        )
        text = io.StringIO()
        summary = execute(cfg, Console(file=text, width=200)).summary
    assert "reasoning in 8 answers: first answer token p50 " in text.getvalue()
    records = [r for r in read_records(tmp_path / "r") if not r.warmup]
    assert len(records) == 8 and all(r.ok for r in records)
    for r in records:
        assert 8 <= r.reasoning_tokens <= 12 and r.output_tokens == r.completion_tokens == 24
        # the first answer token is the one after the reasoning: TTFT < time to first answer
        first_answer = [t for t, _ in r.events][r.reasoning_tokens]
        assert r.first_answer_ns == first_answer > r.events[0][0]
    level = summary.levels[0]
    assert level.reasoning is not None and level.reasoning.requests == 8
    assert level.reasoning.reasoning_tokens.min is not None and level.reasoning.reasoning_tokens.min >= 8
    assert level.reasoning.answer_tokens.max is not None and level.reasoning.answer_tokens.max <= 16
    ttfa, ttft = level.reasoning.time_to_first_answer_ms.p50, level.ttft_ms.p50
    assert ttfa is not None and ttft is not None and ttfa > ttft
    # ITL over reasoning and answer tokens alike: every token after the first chunk
    # (events read together form one chunk: on a busy machine the first may hold two)
    first_chunk = sum(n for r in records for t, n in r.events if t == r.events[0][0])
    assert level.itl_ms.count == 8 * 24 - first_chunk
