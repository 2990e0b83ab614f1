"""The sim engine against published vLLM V1 measurements (a calibration table, not a test).

Two tables: vLLM V1 (>= 0.8) points, which calibrate the sim, and, apart and labelled,
vLLM 0.6.0 (V0, ``--num-scheduler-steps 10``) rows from SGLang's repository, printed as
context only (the sim models V1's scheduler, not V0's multi-step one).

Each point is one published figure — its source named and the figure quoted — beside the
simulator's number for the same setup (GPU, model, tensor parallelism, workload, load) and
the relative error. The sim engine runs in virtual time directly (no HTTP, no sleeps), so
the whole table takes well under a minute.

    python benchmarks/sim_vs_published.py [--quick]

Target: every point within ±25 %, or the gap explained in its ``note``. The efficiency
constants are the simulator's defaults (:mod:`loadgen.server.sim.roofline`), the same for
every point: nothing here is tuned per point.

Workloads. "ShareGPT" is vLLM's and SGLang's ``sharegpt`` dataset; we do not ship it, so a
seeded log-normal stand-in is matched to its published means (vLLM's 1,000-prompt sample
reports ``Total input tokens: 215196`` and 185-198k generated tokens with a Llama tokenizer;
SGLang's offline row below gives 4281.51 / 22.03 = 194 output tokens per request) and to
the benchmarks' filter (prompt and output >= 4 tokens, prompt <= 1,024, sum <= 2,048).
Medians of TTFT and TPOT depend on the length *distribution*, which the stand-in only
approximates: a source of error of its own.

Scheduler settings follow what each source ran: vLLM V1's defaults (chunked prefill, a
2,048-token budget and 256 sequences on A100s) for the recent vLLM sweep; vLLM 0.6.0's for
the SGLang repository's rows (``--max_model_len 4096``: no chunked prefill, a 4,096-token
budget, 256 sequences). SGLang v0.3 does not mix prefill and decode either (a new
request's prefill runs as its own batch while the decodes wait), so its rows are simulated
with the same unchunked scheduler, where a step holds the prefill and the decodes.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from _virtual import drive

from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
from loadgen.server.engine import ManualClock
from loadgen.server.sim import sim_engine


@dataclass(frozen=True)
class Setup:
    """One simulated experiment: hardware, model, engine limits, workload and load."""

    gpu: str
    model: str
    tp: int
    workload: str  # "sharegpt" or "fixed:IN:OUT"
    load: str  # "poisson:RATE", "offline" (all at once) or "closed:USERS"
    requests: int
    limits: SchedulerLimits = field(default_factory=SchedulerLimits)


@dataclass
class Result:
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    output_tokens: int
    duration_s: float

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.duration_s


@dataclass(frozen=True)
class Point:
    name: str
    source: str  # title and URL
    figure: str  # the published figure, quoted
    published: float
    unit: str
    setups: tuple[Setup, ...]
    metric: Callable[[list[Result]], float]
    note: str = ""


A100_V1 = SchedulerLimits(max_num_batched_tokens=2048, max_num_seqs=256)
# vLLM 0.6.0 with --max_model_len 4096: chunked prefill off (on by default only above 32k
# context), budget max(max_model_len, 2048) = 4096, 256 sequences
V060 = SchedulerLimits(enable_chunked_prefill=False, max_num_batched_tokens=4096, max_num_seqs=256, max_model_len=4096)

SGLANG_060 = (
    "SGLang, benchmark/benchmark_vllm_060/README.md (SGLang v0.3.0 vs vLLM v0.6.0, "
    "ShareGPT), https://github.com/sgl-project/sglang/blob/main/benchmark/"
    "benchmark_vllm_060/README.md"
)
MUSGRAVE = (
    "J. Musgrave, 'vLLM throughput-latency sweep on NVIDIA A100' (Llama-3.1-8B-Instruct "
    "BF16, A100 40GB, vllm bench serve, random 1024 in / 128 out, --ignore-eos), "
    "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
)


def median_tpot_ms(r: list[Result]) -> float:
    return float(np.median(r[0].tpot_s)) * 1e3


def median_ttft_ms(r: list[Result]) -> float:
    return float(np.median(r[0].ttft_s)) * 1e3


# V1 figures found but left out (a missing GPU, workload lengths or version, or no preset
# for the GPU or model) are listed in docs/server.md's calibration section
V1_POINTS = [
    Point(
        "8B, 1x A100-40GB, one user: decode tok/s",
        MUSGRAVE,
        "'decode at one request per time runs at about 75 tokens/sec'",
        75.0,
        "tok/s",
        (Setup("a100-40gb", "llama-3.1-8b", 1, "fixed:1024:128", "closed:1", 20, A100_V1),),
        lambda r: 1.0 / float(np.mean(r[0].tpot_s)),
    ),
    Point(
        "8B, 1x A100-40GB: throughput 8 users / 1 user",
        MUSGRAVE,
        "'Batching buys throughput almost for free up to a concurrency of 8, a 6.6x gain'",
        6.6,
        "x",
        (
            Setup("a100-40gb", "llama-3.1-8b", 1, "fixed:1024:128", "closed:1", 20, A100_V1),
            Setup("a100-40gb", "llama-3.1-8b", 1, "fixed:1024:128", "closed:8", 160, A100_V1),
        ),
        lambda r: r[1].output_tok_s / r[0].output_tok_s,
    ),
]

# vLLM 0.6.0 (V0, --num-scheduler-steps 10), from SGLang's repository: the sim models V1,
# so these are printed apart, as context, not as calibration
V0_POINTS = [
    Point(
        "8B, 1x A100-80GB, ShareGPT 4 req/s: median TTFT",
        SGLANG_060,
        "vLLM v0.6.0 row, RPS 4: Median TTFT 100.48 ms (the SGLang row's 31.98 ms was "
        "quoted here before: wrong engine)",
        100.48,
        "ms",
        (Setup("a100-80gb", "llama-3.1-8b", 1, "sharegpt", "poisson:4", 1200, V060),),
        median_ttft_ms,
        "V0 with --num-scheduler-steps 10: a new request waits for the current 10-step "
        "decode window to end before its prefill runs (up to ~10 x 14 ms), which V1 and "
        "the sim do not do; the sim's TTFT is also the engine's alone",
    ),
    Point(
        "8B, 1x A100-80GB, ShareGPT 4 req/s: median TPOT",
        SGLANG_060,
        "vLLM v0.6.0 row, RPS 4: Median TPOT 14.14 ms",
        14.14,
        "ms",
        (Setup("a100-80gb", "llama-3.1-8b", 1, "sharegpt", "poisson:4", 1200, V060),),
        median_tpot_ms,
    ),
    Point(
        "8B, 1x A100-80GB, ShareGPT 8 req/s: median TPOT",
        SGLANG_060,
        "vLLM v0.6.0 row, RPS 8: Median TPOT 17.09 ms",
        17.09,
        "ms",
        (Setup("a100-80gb", "llama-3.1-8b", 1, "sharegpt", "poisson:8", 2400, V060),),
        median_tpot_ms,
    ),
    Point(
        "8B, 1x A100-80GB, ShareGPT offline: output tok/s",
        SGLANG_060,
        "vLLM v0.6.0 row, 5000 prompts, RPS inf: Output token throughput 4132.37",
        4132.37,
        "tok/s",
        (Setup("a100-80gb", "llama-3.1-8b", 1, "sharegpt", "offline", 5000, V060),),
        lambda r: r[0].output_tok_s,
    ),
    Point(
        "70B, 4x H100 (TP4), ShareGPT 4 req/s: median TPOT",
        SGLANG_060,
        "vLLM v0.6.0 row, RPS 4: Median TPOT 23.58 ms",
        23.58,
        "ms",
        (Setup("h100", "llama-3.1-70b", 4, "sharegpt", "poisson:4", 1200, V060),),
        median_tpot_ms,
    ),
    Point(
        "70B, 4x H100 (TP4), ShareGPT 8 req/s: median TPOT",
        SGLANG_060,
        "vLLM v0.6.0 row, RPS 8: Median TPOT 29.15 ms",
        29.15,
        "ms",
        (Setup("h100", "llama-3.1-70b", 4, "sharegpt", "poisson:8", 2400, V060),),
        median_tpot_ms,
        "vLLM 0.6.0 ran prefill steps eagerly (CUDA graphs for decode batches only): ~15 "
        "kernels x 80 layers of launch cost on every prefill step, and at 8 req/s a running "
        "request waits behind ~30 of them; the sim prices V1, which graphs mixed steps too. "
        "At 4 req/s (fewer prefills) the same setup is within 20 %",
    ),
    Point(
        "70B, 4x H100 (TP4), ShareGPT offline: output tok/s",
        SGLANG_060,
        "vLLM v0.6.0 row, 5000 prompts, RPS inf: Output token throughput 3700.64",
        3700.64,
        "tok/s",
        (Setup("h100", "llama-3.1-70b", 4, "sharegpt", "offline", 5000, V060),),
        lambda r: r[0].output_tok_s,
        "256 running sequences on 4 GPUs in vLLM 0.6.0 (V0): every step the driver prepared "
        "and broadcast the batch's inputs to the 3 other workers and processed 256 outputs "
        "on the CPU, several ms that multi-step scheduling hid only in part; the sim charges "
        "V1's 0.5 ms per step whatever the batch. The 1-GPU 8B row shows less of it",
    ),
]


def workload(spec: str, n: int, seed: int) -> list[tuple[int, int]]:
    """(prompt tokens, output tokens) of ``n`` requests."""
    if spec.startswith("fixed:"):
        _, inp, out = spec.split(":")
        return [(int(inp), int(out))] * n
    rng = random.Random(seed)
    work: list[tuple[int, int]] = []
    while len(work) < n:  # ShareGPT stand-in (module docstring); means ~215 in, ~195 out
        prompt = int(rng.lognormvariate(math.log(105), 1.15))
        output = int(rng.lognormvariate(math.log(120), 1.0))
        if 4 <= prompt <= 1024 and output >= 4 and prompt + output <= 2048:
            work.append((prompt, output))
    return work


def simulate(setup: Setup, seed: int = 0) -> Result:
    """Run ``setup`` on a virtual clock; per-request TTFT and TPOT, output tokens, duration."""
    clock = ManualClock()
    config = ServeConfig(model=setup.model, tp=setup.tp, scheduler=setup.limits, sim=SimOptions(gpu=setup.gpu))
    core = sim_engine(config, clock=clock).core
    work = workload(setup.workload, setup.requests, seed)
    kind, _, arg = setup.load.partition(":")
    rng = random.Random(seed + 1)
    arrivals: list[tuple[float, int]] = []  # (time, user) of the next sends
    if kind == "poisson":
        t = 0.0
        for i in range(len(work)):
            arrivals.append((t, i))
            t += rng.expovariate(float(arg))
    elif kind == "offline":
        arrivals = [(0.0, i) for i in range(len(work))]
    else:
        arrivals = [(0.0, u) for u in range(int(arg))]
    run = drive(core, clock, work, arrivals, closed=kind == "closed", ignore_eos=True, max_events=10**12)
    sent_at, times, done = run.sent_at, run.times, run.finished
    ttft = np.array([times[r][0][0] - sent_at[r] for r in done])
    tpot = np.array(
        [
            (times[r][-1][0] - times[r][0][0]) / (sum(n for _, n in times[r]) - 1)
            for r in done
            if sum(n for _, n in times[r]) > 1
        ]
    )
    tokens = sum(n for r in done for _, n in times[r])
    return Result(ttft, tpot, tokens, clock.t - min(sent_at.values()))


def table(title: str, points: list[Point], cache: dict[Setup, Result], quick: bool) -> None:
    """Simulate every point's setups (``cache`` shares runs) and print ``title``'s table."""
    rows = []
    for p in points:
        results = []
        for s in p.setups:
            if quick:
                s = Setup(s.gpu, s.model, s.tp, s.workload, s.load, max(20, s.requests // 4), s.limits)
            if s not in cache:
                cache[s] = simulate(s)
            results.append(cache[s])
        sim = p.metric(results)
        rows.append((p, sim, (sim - p.published) / p.published))
    print(f"\n== {title}\n{'point':<54}{'published':>11}{'sim':>9}{'error':>8}  unit")
    for p, sim, err in rows:
        flag = "" if abs(err) <= 0.25 else "  <-- outside ±25 %: gap below"
        print(f"{p.name:<54}{p.published:>11.2f}{sim:>9.2f}{err:>+8.0%}  {p.unit}{flag}")
    print("\nsources:")
    for i, (point, _, _) in enumerate(rows, 1):
        note = f"\n     gap: {point.note}" if point.note else ""
        print(f"  {i}. {point.figure} — {point.source}{note}")
    inside = sum(abs(err) <= 0.25 for _, _, err in rows)
    print(f"\n{inside}/{len(rows)} points within ±25 %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of the requests per setup")
    args = ap.parse_args()
    start = time.perf_counter()
    cache: dict[Setup, Result] = {}
    table("vLLM V1 (>= 0.8): calibration", V1_POINTS, cache, args.quick)
    table("vLLM 0.6.0 (V0, multi-step) and SGLang's repository: context only, not V1", V0_POINTS, cache, args.quick)
    print(f"\n{time.perf_counter() - start:.1f} s wall")


if __name__ == "__main__":
    main()
