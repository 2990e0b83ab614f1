"""The sim engine offline, in virtual time: what chunked prefill, prefix caching and
disaggregation do to TTFT and ITL (a benchmark, not a test; no server, no sleeps).

A closed loop of chat users (prompts ~N(600, 200) tokens, outputs 64-256 tokens, each
user sends its next request as soon as the last one ends) plus, every ``--long-every``
requests, one long prompt (``--long-tokens``). Every configuration serves the same
seeded request sequence through the engine core on a virtual clock; per configuration
we print TTFT and ITL percentiles of the chat requests, TTFT of the long ones, output
throughput and the simulated duration, plus the wall time the simulation took.

    python benchmarks/sim_engine.py [--gpu h100] [--model llama-3.1-8b] [--users 32]
                                    [--requests 600] [--long-every 25] [--long-tokens 16384]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import numpy as np
from _virtual import drive

from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
from loadgen.server.engine import ManualClock
from loadgen.server.sim import sim_engine

# name -> (scheduler limits, sim options other than the GPU)
CONFIGS: dict[str, tuple[SchedulerLimits, dict[str, Any]]] = {
    "chunked (vllm serve default)": (SchedulerLimits(), {}),
    "no chunked prefill": (SchedulerLimits(enable_chunked_prefill=False), {}),
    "chunked, budget 2048": (SchedulerLimits(max_num_batched_tokens=2048), {}),
    "chunked, budget 512": (SchedulerLimits(max_num_batched_tokens=512), {}),
    "disaggregated, 400 Gbit/s": (SchedulerLimits(), {"disaggregate": True, "kv_link_gbps": 400.0}),
}


def workload(n: int, long_every: int, long_tokens: int, seed: int) -> list[tuple[int, int, bool]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if long_every and i % long_every == long_every - 1:
            out.append((long_tokens, 64, True))
        else:
            out.append((max(16, int(rng.gauss(600, 200))), rng.randint(64, 256), False))
    return out


def simulate(args: argparse.Namespace, limits: SchedulerLimits, sim: dict[str, Any]) -> dict[str, float]:
    clock = ManualClock()
    config = ServeConfig(model=args.model, tp=args.tp, scheduler=limits, sim=SimOptions(gpu=args.gpu, **sim))
    engine = sim_engine(config, clock=clock)
    core = engine.core
    work = workload(args.requests, args.long_every, args.long_tokens, args.seed)
    arrivals = [(0.0, u) for u in range(args.users)]
    run = drive(core, clock, [(p, m) for p, m, _ in work], arrivals, closed=True)
    finished = run.finished
    sent_at = run.sent_at
    times = {r: [t for t, _ in ev] for r, ev in run.times.items()}
    is_long = {r: work[i][2] for r, i in run.index.items()}
    chat = [r for r in finished if not is_long[r]]
    longs = [r for r in finished if is_long[r]]
    ttft = np.array([times[r][0] - sent_at[r] for r in chat])
    itl = np.concatenate([np.diff(times[r]) for r in chat])
    long_ttft = np.array([times[r][0] - sent_at[r] for r in longs]) if longs else np.array([np.nan])
    tokens = sum(len(times[r]) for r in finished)
    return {
        "ttft_p50": np.percentile(ttft, 50),
        "ttft_p99": np.percentile(ttft, 99),
        "itl_p50": np.percentile(itl, 50),
        "itl_p99": np.percentile(itl, 99),
        "itl_max": itl.max(),
        "long_ttft_p50": np.percentile(long_ttft, 50),
        "tok_s": tokens / clock.t,
        "sim_s": clock.t,
        "requests": len(finished),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--long-every", type=int, default=25)
    ap.add_argument("--long-tokens", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(
        f"{args.model} on {args.tp}x {args.gpu}, {args.users} users, {args.requests} requests "
        f"(every {args.long_every}th has {args.long_tokens} prompt tokens)"
    )
    head = (
        f"{'configuration':<30}{'TTFT p50':>10}{'TTFT p99':>10}{'ITL p50':>9}{'ITL p99':>9}"
        f"{'ITL max':>9}{'long TTFT':>11}{'tok/s':>8}{'sim s':>8}{'wall s':>8}"
    )
    print(head)
    for name, (limits, sim) in CONFIGS.items():
        start = time.perf_counter()
        r = simulate(args, limits, sim)
        wall = time.perf_counter() - start
        ms = {k: v * 1e3 for k, v in r.items()}
        print(
            f"{name:<30}{ms['ttft_p50']:>8.1f}ms{ms['ttft_p99']:>8.1f}ms{ms['itl_p50']:>7.1f}ms"
            f"{ms['itl_p99']:>7.1f}ms{ms['itl_max']:>7.1f}ms{ms['long_ttft_p50']:>9.1f}ms"
            f"{r['tok_s']:>8.0f}{r['sim_s']:>8.1f}{wall:>8.1f}"
        )


if __name__ == "__main__":
    main()
