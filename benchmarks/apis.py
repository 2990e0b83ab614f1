"""Every API against the reference server: latency, rate and the client's CPU, then images' TTFT.

``loadgen serve --engine sim --gpu h100 --model llama-3.1-8b`` (no reasoning, the default)
runs in its own process (:class:`~loadgen.server.process.ServerProcess`); loadgen runs in
this one through its Python API (``loadgen.api.run``, ``--workers 1``: every request is
sent, read and parsed here). Per API and closed-loop level (``--levels``, with
``--requests`` each):

- the streamed APIs (chat, responses, messages; prompt ``--prompt`` tokens, output
  ``--output`` tokens): the achieved request rate, TTFT p50/p99 and ITL p50;
- the non-streamed ones (embeddings with 1 and 8 inputs, rerank with 8 documents;
  ``--prompt`` tokens per request, split between the inputs): the rate, inputs/s and
  E2E p50/p99;
- the client's CPU per request: this process's CPU seconds (``getrusage``, user +
  system) over the level alone, divided by its requests; for the streamed APIs also per
  SSE event. The level is what the in-process executor runs between its own CPU stamps
  (``loadgen.load.share.measure_share``, which this script wraps to take ``getrusage``
  around it): sending, reading, parsing and writing each record, but not the run's
  discovery, calibration or summary. The runner opens each level with a full
  ``gc.collect()`` and freezes the heap (no collector pauses inside the level): a fixed
  cost per level that grows with the heap, not with the requests (the header gives it),
  so this script collects and freezes the heap itself before each run, and the runner's
  collect then only walks what the run made since. The server's CPU is in the other
  process and not counted.

The new parsers must not be the bottleneck: the last table gives each streamed API's
client CPU per event over all its levels as a ratio to chat's (the issue asks for it
within 20 %).

Then images (chat API, concurrency 1, ``--image-requests`` each): 0, 1 and 4 PNG images of
512x512 pixels at ``--image-text`` text tokens, from workload files written to a temporary
folder (an ``[images]`` table). The measured TTFT p50 beside the sim's prediction: the
roofline's prefill of the prompt as the server counted it (text, template and image
tokens; ``usage.prompt_tokens``) plus its vision encoder over the images' patches; and
each row's rise over the row without images, measured and predicted. The rest of a
measured TTFT is HTTP, the server's Python and the client.

    python benchmarks/apis.py [--levels 1,4,16,64] [--requests 40,40,64,100] [--prompt 512]
        [--output 128] [--image-requests 20] [--image-text 256] [--apis chat,...] [--no-images]

Bounded (requests per level, and a timeout per request); loopback only.
"""

from __future__ import annotations

import argparse
import gc
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loadgen.load.executor as executor
from loadgen.api import run
from loadgen.load.profiles import Profile
from loadgen.metrics.results import LevelSummary
from loadgen.orchestrate import RunConfig
from loadgen.report.files import read_records
from loadgen.server.config import ServeConfig, SimOptions
from loadgen.server.process import ServerProcess
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.vision import PATCH, smart_resize
from loadgen.workload.distributions import parse_distribution
from loadgen.workload.spec import Workload, load_workload, workload_from_flags

GPU, MODEL = "h100", "llama-3.1-8b"
SERVER = ["--engine", "sim", "--gpu", GPU, "--model", MODEL]
STREAMED = ("chat", "responses", "messages")
# row name -> (API, inputs per request: None for the streamed APIs)
ROWS: dict[str, tuple[str, int | None]] = {
    "chat": ("chat", None),
    "responses": ("responses", None),
    "messages": ("messages", None),
    "embeddings x1": ("embeddings", 1),
    "embeddings x8": ("embeddings", 8),
    "rerank x8": ("rerank", 8),
}


def _cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


LEVEL_CPU: list[float] = []  # CPU seconds of each level run in this process, in order
_measure_share = executor.measure_share


async def _counted_share(*args: Any, **kwargs: Any) -> Any:
    cpu0 = _cpu_s()
    try:
        return await _measure_share(*args, **kwargs)
    finally:
        LEVEL_CPU.append(_cpu_s() - cpu0)


executor.measure_share = _counted_share  # type: ignore[assignment]  # instrumentation, not a behaviour change


@dataclass
class Measured:
    level: LevelSummary
    cpu_s: float  # this process's CPU over the level
    events: int  # SSE events of the measured requests
    requests: int
    wall_s: float


class Bench:
    """Runs against one server; every run gets its own seed, so no prompt repeats (no
    prefix-cache hits across runs)."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp, self.seed = url, tmp, 0

    def measure(self, api: str, workload: Workload, users: int, requests: int, inputs: int | None) -> Measured:
        self.seed += 1
        out = self.tmp / f"run{self.seed}"
        cfg = RunConfig(
            url=self.url,
            api=api,
            workload=workload,
            profile=Profile(levels=[users], requests=requests),
            out=out,
            seed=self.seed,
            workers=1,
            inputs=None if inputs is None else parse_distribution(str(inputs), source="apis.py", key="inputs"),
            request_timeout_s=120.0,
        )
        LEVEL_CPU.clear()
        gc.collect()
        gc.freeze()  # the runner unfreezes at the level's end
        wall0 = time.perf_counter()
        summary = run(cfg, report=False)
        wall = time.perf_counter() - wall0
        if len(LEVEL_CPU) != 1:
            raise SystemExit(f"expected one level run in this process, saw {len(LEVEL_CPU)} (workers?)")
        recs = [r for r in read_records(out) if not r.warmup]
        return Measured(summary.levels[0], LEVEL_CPU[0], sum(len(r.events) for r in recs), len(recs), wall)


def _ms(x: float | None, width: int = 8) -> str:
    return f"{x:>{width}.1f}" if x is not None else f"{'-':>{width}}"


def api_table(bench: Bench, args: argparse.Namespace, rows: list[str]) -> dict[str, tuple[float, int]]:
    """Print one line per (row, level); return each streamed row's (net CPU s, events) over its levels."""
    levels = [int(x) for x in args.levels.split(",")]
    counts = [int(x) for x in args.requests.split(",")]
    if len(counts) == 1:
        counts *= len(levels)
    if len(counts) != len(levels):
        raise SystemExit("--requests: give one count, or one per level")
    print(
        f"{'API':<14}{'users':>6}{'reqs':>6}{'ok':>5}{'req/s':>8}{'inputs/s':>9}{'TTFT p50':>9}{'p99':>7}"
        f"{'ITL p50':>8}{'E2E p50':>8}{'p99':>7}{'CPU us/req':>11}{'us/event':>9}{'wall s':>7}"
    )
    per_event: dict[str, tuple[float, int]] = {}
    for name in rows:
        api, inputs = ROWS[name]
        workload = workload_from_flags(str(args.prompt), str(args.output if inputs is None else 1), name="apis")
        bench.measure(api, workload, 1, 2, inputs)  # warm: first-use imports and caches
        cpu_total, events_total = 0.0, 0
        for users, n in zip(levels, counts, strict=True):
            m = bench.measure(api, workload, users, n, inputs)
            lv = m.level
            per_req = m.cpu_s / max(m.requests, 1)
            us_event = f"{1e6 * m.cpu_s / m.events:>9.1f}" if inputs is None and m.events else f"{'-':>9}"
            if inputs is None:
                cpu_total, events_total = cpu_total + m.cpu_s, events_total + m.events
            ns = lv.non_streamed
            streamed = inputs is None
            print(
                f"{name:<14}{users:>6}{lv.requests.total:>6}{lv.requests.ok:>5}"
                f"{lv.throughput.requests_per_s or 0.0:>8.1f}"
                f"{(ns.inputs_per_s or 0.0) if ns else 0.0:>9.1f}"
                f"{_ms(lv.ttft_ms.p50 if streamed else None, 9)}{_ms(lv.ttft_ms.p99 if streamed else None, 7)}"
                f"{_ms(lv.itl_ms.p50 if streamed else None)}"
                f"{_ms(None if streamed else lv.e2e_ms.p50)}{_ms(None if streamed else lv.e2e_ms.p99, 7)}"
                f"{1e6 * per_req:>11.0f}{us_event}{m.wall_s:>7.1f}",
                flush=True,
            )
        if inputs is None:
            per_event[name] = (cpu_total, events_total)
    return per_event


def ratio_table(per_event: dict[str, tuple[float, int]]) -> None:
    if "chat" not in per_event or not per_event["chat"][1]:
        return
    chat = per_event["chat"][0] / per_event["chat"][1]
    print("\nclient CPU per SSE event over all levels, against chat's (the issue: within 20 %)")
    for name, (cpu, events) in per_event.items():
        us = cpu / events if events else float("nan")
        ratio = us / chat
        verdict = "ok" if abs(ratio - 1) <= 0.2 else "OVER 20 %"
        print(f"{name:<10} {1e6 * us:7.1f} us/event  {events:>7} events  ratio {ratio:5.2f}  {verdict}")


def _roofline() -> RooflineModel:
    cfg = ServeConfig(model=MODEL, sim=SimOptions(gpu=GPU))
    sim = cfg.sim
    return RooflineModel(
        get_gpu(sim.gpu),
        cfg.shape,
        cfg.tp,
        mfu=sim.mfu,
        mbu=sim.mbu,
        overhead_s=sim.overhead_ms / 1e3,
        allreduce_latency_s=sim.allreduce_latency_s,
        dtype=sim.dtype,
        kv_cache_dtype=sim.kv_cache_dtype,
    )


def image_table(bench: Bench, args: argparse.Namespace) -> None:
    roof = _roofline()
    h, w = smart_resize(512, 512)
    patches = (h // PATCH) * (w // PATCH)
    budget = ServeConfig(model=MODEL, sim=SimOptions(gpu=GPU)).limits.max_num_batched_tokens
    print(
        f"\nimages: chat, 1 user, {args.image_requests} requests per row, {args.image_text} text tokens, "
        f"512x512 PNG ({patches} patches, {patches // 4} tokens each); token budget per step {budget}"
    )
    print(
        f"{'images':>6}{'ok':>4}{'prompt tok':>11}{'TTFT p50':>9}{'p99':>7}{'predicted':>10}{'encoder':>8}"
        f"{'meas-pred':>10}{'rise meas':>10}{'rise pred':>10}"
    )
    first: tuple[float, float] | None = None
    for count in (0, 1, 4):
        if count:
            spec = bench.tmp / f"images-{count}.toml"
            spec.write_text(
                f'name = "images-{count}"\nprompt_tokens = {args.image_text}\noutput_tokens = 8\n\n'
                f"[images]\ncount = {count}\nwidth = 512\nheight = 512\n"
            )
            workload = load_workload(str(spec), [])
        else:
            workload = workload_from_flags(str(args.image_text), "8", name="images-0")
        bench.measure("chat", workload, 1, 2, None)  # warm
        m = bench.measure("chat", workload, 1, args.image_requests, None)
        lv = m.level
        prompt = lv.images.prompt_tokens_reported if lv.images else lv.lengths.prompt_achieved_mean
        enc = roof.encoder_time(count * patches)
        pred = 1e3 * (roof.prefill_time(round(prompt or 0)) + enc)
        meas = lv.ttft_ms.p50 or float("nan")
        if first is None:
            first = (meas, pred)
        print(
            f"{count:>6}{lv.requests.ok:>4}{prompt or 0:>11.0f}{meas:>9.2f}{lv.ttft_ms.p99 or float('nan'):>7.2f}"
            f"{pred:>10.2f}{1e3 * enc:>8.2f}{meas - pred:>10.2f}{meas - first[0]:>10.2f}{pred - first[1]:>10.2f}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--levels", default="1,4,16,64", help="closed-loop users per level")
    ap.add_argument("--requests", default="40,40,64,100", help="requests per level (one, or one per level)")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--apis", default=",".join(ROWS), help=f"rows: {', '.join(ROWS)}")
    ap.add_argument("--image-requests", type=int, default=20)
    ap.add_argument("--image-text", type=int, default=256)
    ap.add_argument("--no-images", action="store_true")
    args = ap.parse_args()
    rows = [r.strip() for r in args.apis.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"--apis: unknown {', '.join(unknown)}; choose from: {', '.join(ROWS)}")
    print(
        f"loadgen serve {' '.join(SERVER)} in its own process; the client in this one (--workers 1); "
        f"streamed: prompt {args.prompt}, output {args.output} tokens; non-streamed: {args.prompt} tokens a request"
    )
    cpu0 = time.process_time()
    gc.collect()
    print(
        f"one full gc.collect() of this process's {len(gc.get_objects())} objects: {1e3 * (time.process_time() - cpu0):.0f} ms CPU"
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(SERVER) as url:
        bench = Bench(url, Path(tmp))
        per_event = api_table(bench, args, rows)
        ratio_table(per_event)
        if not args.no_images:
            image_table(bench, args)
    print(f"\ntotal wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
