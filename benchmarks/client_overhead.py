"""Client timing fidelity: how far the client's per-event timestamps are from the truth.

A local server in its own process streams 64 tokens per request at a fixed 20 ms
spacing and stamps every event with ``perf_counter_ns()`` right before writing it
(CLOCK_MONOTONIC is system-wide on Linux, so both processes share the clock). The real
loadgen client (``--transport``, aiohttp by default; closed loop) runs at 1, 16, 64, 256 and 1024
concurrent streams; per level we print events/s, the client's CPU use, and the p50/p99
of |client-measured gap − server gap| between consecutive events of a request, plus
the delivery delay (client read time − server write time).

Target (issue 2): p99 gap error ≤ 2 ms up to 100 streams per client core.

    python benchmarks/client_overhead.py [--levels 1,16,64,256,1024] [--seconds 6] [--transport fast]

Every level is bounded (requests and time) and stops by itself; traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import numpy as np
from _bench import raise_fd_limit, server_process, use_uvloop
from aiohttp import web

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import RequestSpec

TOKENS = 64
SPACING_S = 0.020


_STAMPS: dict[str, list[int]] = {}


async def _handle(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    ts: list[int] = []
    _STAMPS[body["prompt"]] = ts
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for k in range(TOKENS):
        delay = t0 + SPACING_S * (k + 1) - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        fin = '"length"' if k == TOKENS - 1 else "null"
        data = f'data: {{"choices":[{{"index":0,"text":" t","finish_reason":{fin}}}]}}\n\n'.encode()
        ts.append(time.perf_counter_ns())
        await resp.write(data)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _log(request: web.Request) -> web.Response:
    out = json.dumps(_STAMPS)
    _STAMPS.clear()
    return web.Response(text=out)


def routes(app: web.Application) -> None:
    app.router.add_post("/v1/completions", _handle)
    app.router.add_get("/log", _log)


async def _level(url: str, streams: int, seconds: float, kind: str = "aiohttp") -> dict[str, float]:
    cfg = TransportConfig(
        url, get_dialect("completions"), DialectOptions(model="m", strict=True), max_connections=streams + 8
    )
    transport = make_transport(kind, cfg)
    # each request lasts ~1.3 s; enough requests to fill `seconds`, bounded
    n = max(streams, int(streams * seconds / (TOKENS * SPACING_S)))
    specs = iter([RequestSpec(i, f"req-{streams}-{i}", 1, TOKENS) for i in range(n + streams)])
    runner = Runner(transport)
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    res = await runner.run_level(LevelPlan(0, "concurrency", streams, requests=n, warmup_requests=streams), specs)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    await transport.aclose()
    import httpx

    async with httpx.AsyncClient() as c:
        stamps = (await c.get(url + "/log", timeout=60)).json()
    gap_err: list[np.ndarray] = []
    delivery: list[np.ndarray] = []
    events = 0
    for rec in res.records:
        if rec.warmup or not rec.ok:
            continue
        srv = np.array(stamps[f"req-{streams}-{rec.index}"], dtype=np.int64)
        cli = np.array([t for t, _ in rec.events], dtype=np.int64)
        if len(srv) != len(cli):
            continue
        events += len(cli)
        gap_err.append(np.abs(np.diff(cli) - np.diff(srv)) / 1e6)
        delivery.append((cli - srv) / 1e6)
    ge = np.concatenate(gap_err) if gap_err else np.array([np.nan])
    dl = np.concatenate(delivery) if delivery else np.array([np.nan])
    ok = sum(1 for r in res.records if r.ok and not r.warmup)
    streamed = sum(len(r.events) for r in res.records)  # the CPU was spent on the warm-up requests too
    return {
        "streams": streams,
        "requests": ok,
        "events_per_s": streamed / wall,
        "cpu_pct": 100 * cpu / wall,
        "cpu_us_per_event": 1e6 * cpu / max(streamed, 1),
        "gap_err_p50": float(np.percentile(ge, 50)),
        "gap_err_p99": float(np.percentile(ge, 99)),
        "delivery_p50": float(np.percentile(dl, 50)),
        "delivery_p99": float(np.percentile(dl, 99)),
        "loop_lag_p99": float(np.percentile(res.loop_lag_ms, 99)) if res.loop_lag_ms else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,16,64,256,1024")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--transport", default="aiohttp", help="the client transport: aiohttp, httpx or fast")
    args = ap.parse_args()
    raise_fd_limit()
    with server_process(routes) as url:
        use_uvloop()
        print(
            f"transport {args.transport}; client CPU cores: {os.cpu_count()} (client and server share them); {TOKENS} tokens every {SPACING_S * 1e3:.0f} ms"
        )
        hdr = f"{'streams':>7} {'requests':>8} {'events/s':>9} {'client CPU%':>11} {'µs/event':>8} {'|gap err| p50':>13} {'p99 ms':>7} {'delivery p50':>12} {'p99 ms':>7} {'loop lag p99':>12}"
        print(hdr)
        for s in [int(x) for x in args.levels.split(",")]:
            r = asyncio.run(_level(url, s, args.seconds, args.transport))
            print(
                f"{r['streams']:>7} {r['requests']:>8} {r['events_per_s']:>9.0f} {r['cpu_pct']:>11.0f} {r['cpu_us_per_event']:>8.1f} "
                f"{r['gap_err_p50']:>13.3f} {r['gap_err_p99']:>7.3f} {r['delivery_p50']:>12.3f} {r['delivery_p99']:>7.3f} "
                f"{r['loop_lag_p99']:>12.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
