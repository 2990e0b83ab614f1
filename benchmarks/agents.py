"""Coding-agent tasks against the reference server (sim, H100, Llama-3.1-8B), on loopback.

The workload is workloads/agent.toml (system prompt + tools ~4k tokens, 6-20 steps, tool
outputs of 200-4,000 tokens, fan-out of 1-4 on a quarter of the steps) with two cuts so the
whole matrix runs in a few minutes on a 2-core machine: tools take a lognormal around
50 ms (not 400 ms) and answers (the tool calls) ~60 tokens (not 120). Closed loop: each
user runs one task at a time; each level runs for a fixed time, so tasks still running at
its end are *incomplete* and left out of the completion times (long tasks are therefore
under-represented at low concurrency: read p99 as "of the tasks that finished").

1. One replica, prefix caching on and off, 1/4/8/16 users.
2. ``--replica-users`` users (default 8: the heaviest level whose tasks finish inside a
   level on a 2-core machine) on 2 and 4 replicas, the prefix-aware router against
   round-robin (prefix caching on).

Per row: tasks (completed/all), task completion p50/p99, tasks/s, goodput at the task SLO
(task=30s), TTFT p50 of steps 1, 2, 5, 10 and 11+, the prefix-cache hit rate (the server's
``cached_tokens`` over prompt tokens, per call, from the records), the server's queueing
(mean ``queue_s``) and preemptions. Then a short conclusion from the numbers.

    python benchmarks/agents.py [--seconds 20] [--out benchmarks/results/agents.txt]
"""

from __future__ import annotations

import argparse
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.metrics.slo import parse_slo
from loadgen.orchestrate import RunConfig, execute
from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import load_workload

ROOT = Path(__file__).resolve().parent.parent
SIM = ["--engine", "sim", "--gpu", "h100", "--model", "llama-3.1-8b"]
SLO = "task=30s"
STEPS = ("1", "2", "5", "10", "11+")
LEVELS = [1, 4, 8, 16]


@dataclass
class Row:
    name: str
    users: int
    tasks: int
    completed: int
    p50_s: float | None
    p99_s: float | None
    tasks_per_s: float | None
    goodput: float | None
    ttft: dict[str, float | None]
    hit_rate: float
    queue_ms: float
    preemptions: int


def _workload(tmp: Path) -> Path:
    text = (ROOT / "workloads" / "agent.toml").read_text(encoding="utf-8")
    text = text.replace('tool_latency_ms = "lognormal:median=400,', 'tool_latency_ms = "lognormal:median=50,')
    text = text.replace('output_tokens = "lognormal:median=120,', 'output_tokens = "lognormal:median=60,')
    assert "median=50," in text and "median=60," in text, "workloads/agent.toml changed: update the cuts"
    path = tmp / "agent-short.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _run(name: str, args: list[str], levels: list[int], seconds: float, wl: Path, out: Path) -> list[Row]:
    with ServerProcess([*SIM, *args]) as url:
        cfg = RunConfig(
            url=url,
            api="chat",
            workload=load_workload(str(wl), []),
            profile=Profile(levels=levels, duration_s=seconds),
            out=out,
            live=False,
            slos=[parse_slo(SLO)],
        )
        summary = execute(cfg, Console(file=io.StringIO())).summary
    records = [r for r in read_records(out) if not r.warmup and r.ok]
    rows = []
    for i, (users, level) in enumerate(zip(levels, summary.levels)):
        t = level.tasks
        assert t is not None
        recs = [r for r in records if r.level == i]
        prompt = sum(r.prompt_tokens or 0 for r in recs)
        cached = sum(int((r.server or {}).get("cached_tokens", 0)) for r in recs)
        queue = [float((r.server or {}).get("queue_s", 0.0)) for r in recs]
        pre = sum(int((r.server or {}).get("preemptions", 0)) for r in recs)
        c = t.completion_ms
        rows.append(
            Row(
                name,
                users,
                t.tasks,
                t.completed,
                None if c.p50 is None else c.p50 / 1e3,
                None if c.p99 is None else c.p99 / 1e3,
                t.tasks_per_s,
                t.goodput_tasks_per_s,
                {s: (t.by_step[s].ttft_ms.p50 if s in t.by_step else None) for s in STEPS},
                cached / prompt if prompt else 0.0,
                1e3 * sum(queue) / len(queue) if queue else 0.0,
                pre,
            )
        )
    return rows


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _table(rows: list[Row]) -> list[str]:
    head = (
        f"{'deployment':<34} {'users':>5} {'tasks':>7} {'p50 s':>6} {'p99 s':>6} {'task/s':>6} "
        f"{'good/s':>6} " + " ".join(f"{'T' + s:>6}" for s in STEPS) + f" {'hit %':>6} {'queue':>6} {'preempt':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.name:<34} {r.users:>5} {f'{r.completed}/{r.tasks}':>7} {_f(r.p50_s):>6} {_f(r.p99_s):>6} "
            f"{_f(r.tasks_per_s, 3):>6} {_f(r.goodput, 3):>6} "
            + " ".join(f"{_f(r.ttft[s], 0):>6}" for s in STEPS)
            + f" {100 * r.hit_rate:>6.1f} {r.queue_ms:>6.0f} {r.preemptions:>7}"
        )
    return lines


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def _conclusion(rows: list[Row], replica_users: int) -> list[str]:
    def get(name: str, users: int) -> Row:
        return next(r for r in rows if r.name == name and r.users == users)

    both = [
        u
        for u in LEVELS
        if get("1 replica, cache on", u).p50_s is not None and get("1 replica, cache off", u).p50_s is not None
    ]
    top = max(both) if both else LEVELS[-1]  # the heaviest level where both finished tasks
    on, off = get("1 replica, cache on", top), get("1 replica, cache off", top)
    out = [
        f"- prefix cache, {top} users on 1 replica: hit rate {100 * on.hit_rate:.0f}% vs {100 * off.hit_rate:.0f}%; "
        f"task p50 {_f(on.p50_s)} s vs {_f(off.p50_s)} s ({_ratio(off.p50_s, on.p50_s)} slower without); "
        f"step-10 TTFT p50 {_f(on.ttft['10'], 0)} ms vs {_f(off.ttft['10'], 0)} ms; server queueing "
        f"{on.queue_ms:.0f} vs {off.queue_ms:.0f} ms per call; preemptions {on.preemptions} vs {off.preemptions}."
    ]
    top = replica_users
    for n in (2, 4):
        pa, rr = get(f"{n} replicas, prefix-aware", top), get(f"{n} replicas, round-robin", top)
        out.append(
            f"- {n} replicas, {top} users: prefix-aware hit rate {100 * pa.hit_rate:.0f}% vs round-robin "
            f"{100 * rr.hit_rate:.0f}%; task p50 {_f(pa.p50_s)} vs {_f(rr.p50_s)} s, tasks/s "
            f"{_f(pa.tasks_per_s, 3)} vs {_f(rr.tasks_per_s, 3)}; step-10 TTFT p50 {_f(pa.ttft['10'], 0)} vs "
            f"{_f(rr.ttft['10'], 0)} ms; queueing {pa.queue_ms:.0f} vs {rr.queue_ms:.0f} ms."
        )
    done = [r for r in rows if r.users == top and r.p50_s is not None]
    if done:
        best = min(done, key=lambda r: r.p50_s or 0.0)
        out.append(
            f"- fastest at {top} users: {best.name} (task p50 {_f(best.p50_s)} s, {_f(best.tasks_per_s, 3)} tasks/s)."
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=25.0, help="each level's duration")
    ap.add_argument("--out", type=Path, default=None, help="also write the output here")
    ap.add_argument("--replica-users", type=int, default=8, help="users of the replica and router rows")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="loadgen-agents-"))
    wl = _workload(tmp)
    rows: list[Row] = []
    for name, args in (
        ("1 replica, cache on", ["--prefix-caching"]),
        ("1 replica, cache off", ["--no-prefix-caching"]),
    ):
        rows += _run(name, args, LEVELS, a.seconds, wl, tmp / name.replace(" ", "_").replace(",", ""))
    for n in (2, 4):
        for router in ("prefix-aware", "round-robin"):
            name = f"{n} replicas, {router}"
            args = ["--prefix-caching", "--replicas", str(n), "--router", router]
            rows += _run(name, args, [a.replica_users], a.seconds, wl, tmp / name.replace(" ", "_").replace(",", ""))
    lines = [
        "# benchmarks/agents.py: coding-agent tasks, sim H100 + Llama-3.1-8B, chat API, closed loop, loopback",
        f"# workloads/agent.toml with tools ~50 ms and answers ~60 tokens (cut for time); {a.seconds:.0f} s per level,",
        f"# replica rows at {a.replica_users} users only (cut for time). Task SLO {SLO}. tasks = completed/all (the rest",
        "# were still running at the level's end: incomplete). T<step> = TTFT p50 ms of that step's calls;",
        "# hit % = server cached_tokens / prompt tokens; queue = mean server queue_s per call (ms).",
        *_table(rows),
        "",
        "Conclusion:",
        *_conclusion(rows, a.replica_users),
    ]
    text = "\n".join(lines)
    print(text)
    if a.out is not None:
        a.out.write_text(text + "\n", encoding="utf-8")
    print(f"run folders: {tmp}")


if __name__ == "__main__":
    main()
