"""Multi-turn sessions and reasoning against the reference server (sim, H100, Llama-3.1-8B).

1. Sessions of 5 turns, each with its own 2,048-token system prompt (one of 1,000 groups,
   drawn uniformly), 64-token user messages, 32-token answers, 100 ms think time; 4
   users, 40 requests, prefix caching on, then off. Prints TTFT, ITL and E2E p50 by turn:
   with the cache, later turns prefill only what is new; without it, each turn prefills
   its whole, longer history again.
2. Reasoning: `serve --reasoning-tokens uniform:min=64,max=256`, 512-token prompts and
   384-token answers at concurrency 8: TTFT (first token of any kind) against the time to
   the first answer token, and the reasoning/answer split.

    python benchmarks/sessions.py
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import load_workload, workload_from_flags

SESSIONS = """\
prompt_tokens = 64
output_tokens = 32
[sessions]
turns = 5
think_time_ms = 100
system_prompt_tokens = 2048
groups = 1000
zipf = 0
"""


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="loadgen-sessions-"))
    wl = tmp / "sessions.toml"
    wl.write_text(SESSIONS, encoding="utf-8")
    for flag in ("--prefix-caching", "--no-prefix-caching"):
        with ServerProcess(["--engine", "sim", flag]) as url:
            cfg = RunConfig(
                url=url,
                api="chat",
                workload=load_workload(str(wl), []),
                profile=Profile(levels=[4], requests=40),
                out=tmp / flag,
                live=False,
            )
            level = execute(cfg, Console(file=io.StringIO())).summary.levels[0]
        assert level.by_turn is not None and level.sessions is not None
        print(f"{flag}: {level.sessions.sessions} sessions, {level.sessions.completed} completed")
        print("  turn  requests  prompt p50  TTFT p50 ms  ITL p50 ms  E2E p50 ms")
        for t in sorted(level.by_turn, key=int):
            v = level.by_turn[t]
            print(
                f"  {t:>4}  {v.requests:>8}  {_ms(v.prompt_tokens.p50):>10}  {_ms(v.ttft_ms.p50):>11}  "
                f"{_ms(v.itl_ms.p50):>10}  {_ms(v.e2e_ms.p50):>10}"
            )
    with ServerProcess(["--engine", "sim", "--reasoning-tokens", "uniform:min=64,max=256"]) as url:
        cfg = RunConfig(
            url=url,
            api="chat",
            workload=workload_from_flags("512", "384"),
            profile=Profile(levels=[8], requests=32),
            out=tmp / "reasoning",
            live=False,
        )
        level = execute(cfg, Console(file=io.StringIO())).summary.levels[0]
    r = level.reasoning
    assert r is not None
    print(
        f"reasoning: TTFT p50 {_ms(level.ttft_ms.p50)} ms, first answer token p50 "
        f"{_ms(r.time_to_first_answer_ms.p50)} ms; tokens p50 {_ms(r.reasoning_tokens.p50)} reasoning, "
        f"{_ms(r.answer_tokens.p50)} answer; ITL p50 {_ms(level.itl_ms.p50)} ms"
    )
    print(f"run folders: {tmp}")


if __name__ == "__main__":
    main()
