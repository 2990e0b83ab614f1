"""One server, 16 users, three run lengths: the whole-window rate moves, the headline does not.

``loadgen serve --engine sim`` (H100, Llama-3.1-8B, the defaults) runs in its own process;
loadgen runs in this one through its Python API, at 16 users with the ``chat`` workload
(lognormal outputs, median 200 tokens: a long tail that makes a drain tail):

- (a) the README's command: 200 requests;
- (b) a 60 s level (``--duration 60``: users stop sending at 60 s; in-flight requests end);
- (c) a short sweep-like level: ``--duration 7``;
- (d) an open loop below saturation, like a rate sweep's level: ``--rate 6 --duration 8``
  (Poisson arrivals).

Per run: the whole window (first send to last completion) with its req/s and output tok/s,
and the headline window (docs/metrics.md, "Throughput windows": a closed loop's held window,
the 16th send to the first user out of work; an open loop's arrival window after the fill
time) with its req/s and output tok/s and their 95% intervals (batch means). The last column
says, for the closed loops, whether the longest run's (b) headline req/s and tok/s lie inside
this run's intervals; for the open loop, whether the offered rate lies inside its req/s one.

    python benchmarks/throughput_window.py [--users 16] [--requests 200] [--long 60] [--short 7] [--rate 6]

Bounded (requests or seconds per level, a timeout per request); loopback only; ~2.5 min.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from loadgen.api import run
from loadgen.load.profiles import Profile
from loadgen.metrics.results import LevelSummary, StatInterval
from loadgen.orchestrate import RunConfig
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import load_workload

SERVER = ["--engine", "sim"]


def _level(
    url: str, out: Path, load: float, requests: int | None, duration: float | None, rate: bool = False
) -> LevelSummary:
    workload = load_workload("chat", [Path(__file__).parent.parent / "workloads"])
    cfg = RunConfig(
        url=url,
        api="chat",
        workload=workload,
        profile=Profile(mode="rate" if rate else "concurrency", levels=[load], requests=requests, duration_s=duration),
        out=out,
        seed=0,
        workers=1,
        request_timeout_s=60.0,
    )
    return run(cfg, report=False).levels[0]


def _iv(iv: StatInterval | None, digits: int) -> str:
    if iv is None or iv.low is None or iv.high is None:
        return "[-]"
    return f"[{iv.low:.{digits}f}, {iv.high:.{digits}f}]"


def _inside(value: float | None, iv: StatInterval | None) -> str:
    if value is None or iv is None or iv.low is None or iv.high is None:
        return "no"
    return "yes" if iv.low <= value <= iv.high else "no"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--long", type=float, default=60.0, help="seconds of run (b)")
    ap.add_argument("--short", type=float, default=7.0, help="seconds of run (c)")
    ap.add_argument("--rate", type=float, default=6.0, help="req/s of the open loop (d), for 8 s")
    args = ap.parse_args()
    long = f"(b) {args.long:g} s"
    runs = {
        f"(a) {args.requests} requests": (args.users, args.requests, None, False),
        long: (args.users, None, args.long, False),
        f"(c) {args.short:g} s": (args.users, None, args.short, False),
        f"(d) {args.rate:g} req/s, 8 s": (args.rate, None, 8.0, True),
    }
    t0 = time.perf_counter()
    print("$ throughput_window.py")
    print(
        f"loadgen serve {' '.join(SERVER)} in its own process; --workload chat, --workers 1, seed 0; (a)-(c) {args.users} users"
    )
    levels: dict[str, LevelSummary] = {}
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(SERVER) as url:
        for i, (name, (load, requests, duration, rate)) in enumerate(runs.items()):
            levels[name] = _level(url, Path(tmp) / f"run{i}", load, requests, duration, rate)
    ref = levels[long].throughput
    print(
        f"{'run':<20} {'ok':>4} {'whole s':>7} {'req/s':>6} {'tok/s':>6}   {'head s':>6} {'rule':<8} "
        f"{'req/s':>6} {'95% interval':<14} {'tok/s':>6} {'95% interval':<13} (b) or offered inside"
    )
    for name, lv in levels.items():
        tp = lv.throughput
        whole = tp.whole_rates(lv.duration_s)
        win = tp.window
        ivs = tp.intervals or {}
        req_iv, tok_iv = ivs.get("requests_per_s"), ivs.get("output_tokens_per_s")
        if lv.load.mode == "rate":
            inside = f"offered {_inside(float(lv.load.value), req_iv)}"
        else:
            inside = f"req {_inside(ref.requests_per_s, req_iv)}, tok {_inside(ref.output_tokens_per_s, tok_iv)}"
        print(
            f"{name:<20} {lv.requests.ok:>4} {whole.window_s:>7.1f} {whole.requests_per_s or 0:>6.2f} "
            f"{whole.output_tokens_per_s or 0:>6.0f}   {0 if win is None else win.window_s:>6.1f} "
            f"{'-' if win is None else win.rule:<8} {tp.requests_per_s or 0:>6.2f} {_iv(req_iv, 2):<14} "
            f"{tp.output_tokens_per_s or 0:>6.0f} {_iv(tok_iv, 0):<13} {inside}"
        )
    print(f"\ntotal wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
