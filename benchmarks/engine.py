"""The torch engine's speed against the roofline of the device it runs on (not a test).

1. **Roofline of the device**, measured at start: memory bandwidth from a large copy
   (bytes read + written per second) and peak FLOP/s from a large matmul (fp32 on CPU,
   the model dtype on CUDA).
2. **Prefill**: one prompt of 128 ... 8192 tokens as one step (the runner alone, no
   scheduler): tokens/s, achieved FLOP/s (linear layers + causal attention + LM head)
   and its fraction of the measured matmul peak.
3. **Decode**: one step of B sequences (1 ... 256) at context C (256 ... 4096), each in
   its own KV blocks: step time against the roofline time max(FLOPs / peak, bytes /
   bandwidth), bytes = weights + KV read + KV written.
4. **Serving sweep** (``--sweep``): the reference server with the torch engine (HTTP in
   one process, the engine in a spawned one, as ``loadgen serve --engine torch``) driven
   by loadgen's runner with a demo-like workload at 4, 12 and 24 concurrent users,
   100 requests each: the wall time of the 300 requests and per-level latencies.

Combinations that would take too long or need too much memory are skipped (printed as
``skip``): a shape is not run when the previous, smaller one already took more than
``--max-step-s`` divided by the growth factor (prefill, measured once when slow: twice
``--max-step-s``), or when its KV needs more than
``--max-kv-gb``. Targets on an H100/H200-class GPU with the 8B shape: decode at batch 1
within 1.5x of weights / bandwidth, 4k prefill at >= 50% of the matmul peak. CPU target:
the tiny preset serves the 300-request sweep in under 90 s.

    python benchmarks/engine.py [--model tiny,small] [--device auto] [--threads N]
                                [--max-step-s 2] [--max-kv-gb 2] [--sweep] [--sweep-only]
                                [--long-tokens 2000:3000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.interface import SamplingParams
from loadgen.server.engine.models import ModelShape, get_model
from loadgen.server.torch.loader import build_model, resolve_dtype
from loadgen.server.torch.runner import TorchRunner
from loadgen.server.torch.worker import default_threads

PREFILL_LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192]
DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
DECODE_CONTEXTS = [256, 512, 1024, 2048, 4096]
BLOCK = 16
GREEDY = SamplingParams(temperature=0.0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    """Median seconds of ``reps`` calls (after the caller's warm-up)."""
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_roofline(device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    """(bytes/s of a large copy, read + write; FLOP/s of a large matmul)."""
    n = (256 if device.type == "cpu" else 2048) * 2**20 // 4
    a = torch.ones(n, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    bw = 2 * a.numel() * 4 / timed(lambda: b.copy_(a), device, 5)
    size = 2048 if device.type == "cpu" else 8192
    mdtype = torch.float32 if device.type == "cpu" else dtype
    x = torch.randn(size, size, device=device, dtype=mdtype)
    y = torch.randn(size, size, device=device, dtype=mdtype)
    x @ y
    flops = 2 * size**3 / timed(lambda: x @ y, device, 5)
    return bw, flops


def prefill_flops(cfg: ModelShape, n: int) -> float:
    attn = 4 * cfg.num_layers * cfg.q_size * n * (n + 1) / 2
    return 2 * cfg.num_linear_params * n + attn + 2 * cfg.hidden_size * cfg.vocab_size


def decode_cost(cfg: ModelShape, batch: int, ctx: int, elsize: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one decode step."""
    flops = batch * (2 * cfg.num_linear_params + 2 * cfg.hidden_size * cfg.vocab_size)
    flops += 4 * cfg.num_layers * cfg.q_size * batch * ctx
    kv = cfg.kv_values_per_token * elsize
    return flops, cfg.num_params * elsize + batch * ctx * kv + batch * kv


def bench_model(
    name: str, device: torch.device, dtype: torch.dtype, bw: float, peak: float, args: argparse.Namespace
) -> None:
    cfg = get_model(name)
    model = build_model(cfg, device=device, dtype=dtype, seed=0)
    elsize = model.embed.element_size()
    kv_token = cfg.kv_values_per_token * elsize
    max_tokens = max(int(args.max_kv_gb * 2**30) // kv_token, max(PREFILL_LENGTHS))
    runner = TorchRunner(
        model,
        num_blocks=max_tokens // BLOCK,
        block_size=BLOCK,
        cuda_graphs=device.type == "cuda" and not args.no_cuda_graphs,
    )
    weights = cfg.num_params * elsize
    print(
        f"\n== {name}: {cfg.num_params / 1e6:.1f}M parameters, {weights / 2**20:.0f} MiB "
        f"weights, KV {kv_token} B/token, pool {runner.kv_bytes / 2**30:.2f} GiB, "
        f"{str(dtype).removeprefix('torch.')} on {device}"
    )

    def prefill(n: int) -> None:
        seq = ScheduledSeq(0, "p", [5] * n, 0, list(range(-(-n // BLOCK))), True, False, GREEDY)
        runner.execute(ScheduledBatch(0, [seq], block_size=BLOCK))  # noqa: F821 - deleted only after the last call

    prefill(128)
    print(f"{'prompt':>8} {'ms':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'of peak':>8}")
    last, prev = 0.0, 1
    for n in PREFILL_LENGTHS:  # measured once when slow: allow twice the step limit
        if last * prefill_flops(cfg, n) / prefill_flops(cfg, prev) > 2 * args.max_step_s:
            print(f"{n:>8} {'skip':>9}")
            continue
        last, prev = timed(lambda: prefill(n), device, 3 if last < 0.2 else 1), n  # noqa: B023 - timed at once
        achieved = prefill_flops(cfg, n) / last
        print(f"{n:>8} {last * 1e3:>9.1f} {n / last:>10.0f} {achieved / 1e12:>8.3f} {achieved / peak:>7.0%}")

    print(f"{'batch':>6} {'context':>8} {'step ms':>9} {'roofline':>9} {'x':>6} {'tokens/s':>9}  bound")
    for ctx in DECODE_CONTEXTS:
        last = 0.0
        prev_batch = 1
        for batch in DECODE_BATCHES:
            if batch * ctx > max_tokens:
                print(f"{batch:>6} {ctx:>8} {'skip (KV > --max-kv-gb)':>27}")
                continue
            if last * batch / prev_batch > args.max_step_s:
                print(f"{batch:>6} {ctx:>8} {'skip (slow)':>9}")
                continue
            nb = ctx // BLOCK
            seqs = [
                ScheduledSeq(i, f"d{i}", [5], ctx - 1, list(range(i * nb, (i + 1) * nb)), True, True, GREEDY)
                for i in range(batch)
            ]
            step = ScheduledBatch(0, seqs, block_size=BLOCK)
            runner.execute(step)  # warm-up (and CUDA graph capture)
            last, prev_batch = timed(lambda: runner.execute(step), device, 5), batch  # noqa: B023, F821 - timed at once
            flops, nbytes = decode_cost(cfg, batch, ctx, elsize)
            roof = max(flops / peak, nbytes / bw)
            kind = "memory" if nbytes / bw >= flops / peak else "compute"
            print(
                f"{batch:>6} {ctx:>8} {last * 1e3:>9.2f} {roof * 1e3:>9.2f} "
                f"{last / roof:>6.1f} {batch / last:>9.0f}  {kind}"
            )
        if device.type == "cuda" and ctx == DECODE_CONTEXTS[0]:
            print(f"   target: batch-1 decode within 1.5x of weights/bandwidth = {weights / bw * 1e3:.2f} ms")
    del runner, model
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------- serving sweep
def _server_main(model: str, threads: int | None, out: Any) -> None:
    from loadgen.server.api import create_app
    from loadgen.server.app import run_forever
    from loadgen.server.build import build_engine
    from loadgen.server.config import ServeConfig, TorchOptions

    engine = build_engine(ServeConfig(engine="torch", model=model, torch=TorchOptions(threads=threads)))
    run_forever(create_app(engine), "127.0.0.1", 0, on_ready=out.put)


def sweep(args: argparse.Namespace) -> None:
    from rich.console import Console

    from loadgen.load.profiles import Profile
    from loadgen.orchestrate import RunConfig, execute
    from loadgen.workload.distributions import parse_distribution
    from loadgen.workload.spec import RequestClass, Workload

    low, high = (int(x) for x in args.long_tokens.split(":"))
    workload = Workload(
        name="demo-cpu",
        source="benchmarks/engine.py",
        classes=[
            RequestClass(
                "chat",
                92,
                parse_distribution("lognormal:median=250,sigma=0.8,max=2048"),
                parse_distribution("lognormal:median=80,sigma=0.5,min=8,max=256"),
            ),
            RequestClass(
                "long",
                8,
                parse_distribution(f"uniform:min={low},max={high}"),
                parse_distribution("uniform:min=16,max=48"),
            ),
        ],
        description=f"the demo workload, long prompts {low}-{high} tokens",
    )
    profile = Profile(name="sweep", levels=[4.0, 12.0, 24.0], requests=100, warmup_requests=0)
    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    proc = ctx.Process(target=_server_main, args=(args.sweep_model, args.threads, q))
    proc.start()
    try:
        url = q.get(timeout=300)
        with tempfile.TemporaryDirectory() as tmp:
            cfg = RunConfig(
                url=url,
                api="completions",
                workload=workload,
                profile=profile,
                out=Path(tmp) / "run",
                seed=0,
                label="engine-sweep",
                live=False,
            )
            t = time.perf_counter()
            outcome = execute(cfg, Console(quiet=True))
            wall = time.perf_counter() - t
    finally:
        proc.terminate()
        proc.join(30)
    levels = outcome.summary.levels
    total = sum(lv.requests.ok for lv in levels)
    print(f"\n== serving sweep: {args.sweep_model}, {workload.description}, users 4/12/24 x 100")
    print(
        f"{'users':>6} {'ok':>5} {'req/s':>7} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'ITL p50':>8} {'ITL p99':>8}  (ms)"
    )
    for lv in levels:
        thr, ttft, itl = lv.throughput, lv.ttft_ms, lv.itl_ms
        print(
            f"{lv.load.value:>6.0f} {lv.requests.ok:>5} "
            f"{thr.requests_per_s or 0:>7.2f} {thr.output_tokens_per_s or 0:>10.0f} "
            f"{ttft.p50 or 0:>9.0f} {ttft.p99 or 0:>9.0f} {itl.p50 or 0:>8.1f} {itl.p99 or 0:>8.1f}"
        )
    verdict = "meets" if wall < 90 and total == 300 else "misses"
    print(
        f"{total} requests served in {wall:.1f} s (incl. calibration): {verdict} the "
        f"CPU target of 300 requests in < 90 s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        default=None,
        help="presets, comma-separated (default: tiny,small on CPU; llama-3.2-1b-shape,llama-3.1-8b-shape on CUDA)",
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores but one)")
    ap.add_argument("--max-step-s", type=float, default=2.0)
    ap.add_argument("--max-kv-gb", type=float, default=None, help="KV pool per preset (default: 2 on CPU, 40 on CUDA)")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="also run the serving sweep")
    ap.add_argument("--sweep-only", action="store_true")
    ap.add_argument("--sweep-model", default="tiny")
    ap.add_argument(
        "--long-tokens", default="2000:3000", help="prompt range of the long class (the demo's is 10000:14000)"
    )
    args = ap.parse_args()
    if not args.sweep_only:
        device = torch.device(
            "cuda"
            if args.device == "auto" and torch.cuda.is_available()
            else "cpu"
            if args.device == "auto"
            else args.device
        )
        threads = args.threads or default_threads()
        torch.set_num_threads(threads)
        dtype = getattr(torch, resolve_dtype(args.dtype, device.type))
        if args.max_kv_gb is None:
            args.max_kv_gb = 2.0 if device.type == "cpu" else 40.0
        bw, peak = measure_roofline(device, dtype)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        print(
            f"device: {name}, {threads} torch threads; measured bandwidth "
            f"{bw / 1e9:.1f} GB/s (copy, read+write), matmul peak {peak / 1e12:.3f} TFLOP/s"
        )
        default = "llama-3.2-1b-shape,llama-3.1-8b-shape" if device.type == "cuda" else "tiny,small"
        for model in (args.model or default).split(","):
            bench_model(model, device, dtype, bw, peak, args)
    if args.sweep or args.sweep_only:
        sweep(args)


if __name__ == "__main__":
    main()
