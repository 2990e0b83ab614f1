"""Scale-out: the client's TTFT and gap error against a stamping server, 1 process vs N.

A server in its own process (aiohttp, uvloop) waits ``--ttft-ms``, then streams
``--tokens`` tokens at ``--itl-ms`` spacing, stamping each write with
``perf_counter_ns()`` (CLOCK_MONOTONIC is system-wide, so client and server share the
clock) and sending its arrival and write stamps in the final event (the record's
``server`` field). loadgen runs closed-loop levels (concurrent streams) and open-loop
rates with ``--workers`` 1, 2 and ``auto`` (processes, or Ray actors with ``--ray auto``:
a local Ray instance per run, on loopback, whose actors' CPU the client CPU column leaves
out: they are not this process's children); per run we print the TTFT error (client TTFT
minus the server's arrival → first write: mean and p99 of all requests, and the mean of the
first wave alone, each closed-loop user's first request), the p99 per-event gap error,
the achieved vs intended request rate (open loop), the client's CPU (coordinator plus
workers, in cores), the worst worker's run-queue wait (share of the time it was runnable
but had no CPU: the machine, not loadgen, is then the limit) and loadgen's own verdict.

    python benchmarks/scale_out.py [--streams 64,256,1024] [--rates 1000] [--workers 1,2,auto]
        [--transports fast,aiohttp] [--seconds 8] [--ray auto]

Each row also gives the client's CPU per streamed event (coordinator plus workers).

Every run is bounded in time and requests and stops by itself; traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from _bench import raise_fd_limit, server_process
from aiohttp import web
from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute
from loadgen.report.files import read_records
from loadgen.workload.spec import workload_from_flags

ARGS = {"tokens": 64, "itl_ms": 20.0, "ttft_ms": 75.0}  # the server process reads them from SCALE_OUT_*


def _server_args() -> dict[str, float]:
    return {k: float(os.environ.get(f"SCALE_OUT_{k.upper()}", v)) for k, v in ARGS.items()}


os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # --ray auto: Ray on 127.0.0.1, no usage stats
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


async def _handle(request: web.Request) -> web.StreamResponse:
    arrival = time.perf_counter_ns()
    body = await request.json()
    if not body.get("stream", False):
        return web.json_response(
            {
                "choices": [{"text": " t"}],
                "usage": {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": 1},
            }
        )
    args = _server_args()
    tokens, itl, ttft = int(args["tokens"]), args["itl_ms"] / 1e3, args["ttft_ms"] / 1e3
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    loop = asyncio.get_running_loop()
    t0 = loop.time() + ttft
    writes: list[int] = []
    n_prompt = len(body["prompt"].split())
    for k in range(tokens):
        delay = t0 + itl * k - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        writes.append(time.perf_counter_ns())
        await resp.write(b'data: {"choices":[{"index":0,"text":" t","finish_reason":null}]}\n\n')
    tail = {
        "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": tokens, "total_tokens": n_prompt + tokens},
        "loadgen": {"arrival_ns": arrival, "writes_ns": writes},
    }
    await resp.write(b"data: " + json.dumps(tail).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "stamp", "max_model_len": 100000}]})


def routes(app: web.Application) -> None:
    app.router.add_post("/v1/completions", _handle)
    app.router.add_get("/v1/models", _models)


def _cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one(
    url: str, mode: str, value: float, workers: str, seconds: float, ray: str | None = None, transport: str = "fast"
) -> dict[str, object]:
    prof = Profile(mode=mode, levels=[value], requests=None, duration_s=seconds, warmup_requests=0)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig(
            url=url,
            api="completions",
            workload=workload_from_flags("64", str(ARGS["tokens"])),
            profile=prof,
            out=Path(tmp) / "run",
            live=False,
            calibrate=False,
            strict=True,
            workers=workers if workers == "auto" else int(workers),
            read_timeout_s=60.0,
            ray=ray,
            transport=transport,
        )
        cpu0, t0 = _cpu_s(), time.perf_counter()
        outcome = execute(cfg, Console(file=io.StringIO()))
        wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        recs = list(read_records(Path(tmp) / "run"))
    level = outcome.summary.levels[0]
    ttft_err, gap_err, first = [], [], []
    n_events = 0
    wave = int(value) if mode == "concurrency" else 0  # closed loop: the first request of every user
    for r in sorted(recs, key=lambda r: r.sent_ns or 0):
        srv = r.server or {}
        w = srv.get("writes_ns")
        if not r.ok or not w or not r.events:
            continue
        ev = np.array([t for t, _ in r.events], dtype=np.int64)
        err = ((ev[0] - r.sent_ns) - (w[0] - srv["arrival_ns"])) / 1e6
        if len(first) < wave:
            first.append(err)
        ttft_err.append(err)
        n_events += len(ev)
        if len(ev) == len(w):
            gap_err.append(np.abs(np.diff(ev) - np.diff(np.asarray(w, dtype=np.int64))) / 1e6)
    gaps = np.concatenate(gap_err) if gap_err else np.zeros(1)
    n_workers = len(level.client.workers or []) or 1
    runq = [w.runqueue_wait_percent for w in level.client.workers or [] if w.runqueue_wait_percent is not None]
    return {
        "mode": mode,
        "load": value,
        "workers": n_workers,
        "requests": level.requests.ok,
        "transport": transport,
        "ttft_mean": float(np.mean(ttft_err)) if ttft_err else float("nan"),
        "first_wave": float(np.mean(first)) if first else float("nan"),
        "us_per_event": 1e6 * cpu / n_events if n_events else float("nan"),
        "ttft_p99": float(np.percentile(ttft_err, 99)) if ttft_err else float("nan"),
        "gap_p99": float(np.percentile(gaps, 99)),
        "rate": level.throughput.requests_per_s or 0.0,
        "cpu": cpu / wall,
        "verdict": level.client.verdict,
        "runq": max(runq) if runq else float("nan"),
        "intended": value if mode == "rate" else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="64,256,1024")
    ap.add_argument("--rates", default="1000")
    ap.add_argument("--workers", default="1,2,auto")
    ap.add_argument("--transports", default="fast,aiohttp", help="transports to run each level with")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--ray", default=None, help="workers as Ray actors: auto or a cluster address")
    ap.add_argument("--itl-ms", type=float, default=ARGS["itl_ms"], help="the server's spacing between tokens")
    ap.add_argument("--tokens", type=int, default=int(ARGS["tokens"]), help="tokens per answer")
    args = ap.parse_args()
    ARGS.update(itl_ms=args.itl_ms, tokens=args.tokens)
    os.environ["SCALE_OUT_ITL_MS"], os.environ["SCALE_OUT_TOKENS"] = str(args.itl_ms), str(args.tokens)
    raise_fd_limit()
    runs = [("concurrency", float(s)) for s in args.streams.split(",") if s] + [
        ("rate", float(r)) for r in args.rates.split(",") if r
    ]
    print(
        f"{'mode':>11} {'load':>6} {'transport':>9} {'workers':>7} {'ok':>6} {'TTFT err mean':>13} {'p99 ms':>7} "
        f"{'1st wave':>8} {'gap err p99':>11} {'req/s':>8} {'intended':>8} {'client CPU':>10} {'µs/event':>8} "
        f"{'run-queue':>9}  verdict"
    )
    with server_process(routes) as url:
        for mode, value in runs:
            for w in args.workers.split(","):
                for transport in args.transports.split(","):
                    row = one(url, mode, value, w, args.seconds, args.ray, transport)
                    print(
                        f"{row['mode']:>11} {row['load']:>6g} {transport:>9} {row['workers']:>7} {row['requests']:>6} "
                        f"{row['ttft_mean']:>+13.1f} {row['ttft_p99']:>+7.1f} {row['first_wave']:>+8.1f} "
                        f"{row['gap_p99']:>11.2f} {row['rate']:>8.1f} {row['intended']:>8.0f} {row['cpu']:>9.0%} "
                        f"{row['us_per_event']:>8.1f} {row['runq']:>8.0f}%  {row['verdict']}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
