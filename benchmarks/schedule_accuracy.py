"""Open-loop schedule accuracy: does the client send when the schedule says?

Poisson arrivals at 10, 100 and 1000 req/s against a no-delay local server (its own
process, one token per answer), each for a bounded time. Per rate we print the rate of
the precomputed schedule (a Poisson sample: it differs from the target by about
1/sqrt(n)), the achieved send rate and its error against the schedule (the client's
own error), the coefficient of variation of the inter-send gaps (≈ 1 for Poisson), and
the send lateness (sent − scheduled) p50/p99/max.

Target (issue 4): achieved rate within 1% of target and lateness p99 ≤ 2 ms up to
1000 req/s on one core.

    python benchmarks/schedule_accuracy.py [--rates 10,100,1000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
from _bench import raise_fd_limit, server_process, use_uvloop
from aiohttp import web

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import RequestSpec

BODY = (
    b'data: {"choices":[{"index":0,"text":"x","finish_reason":"length"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)


async def _handle(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="text/event-stream")


def routes(app: web.Application) -> None:
    app.router.add_post("/v1/completions", _handle)


async def _level(url: str, rate: float, seconds: float) -> dict[str, float]:
    cfg = TransportConfig(url, get_dialect("completions"), DialectOptions(model="m", strict=True), max_connections=2048)
    transport = make_transport("aiohttp", cfg)
    n = int(rate * seconds * 1.5) + 16
    specs = iter([RequestSpec(i, "x", 1, 1) for i in range(n)])
    runner = Runner(transport)
    cpu0 = time.process_time()
    plan = LevelPlan(0, "rate", rate, duration_s=seconds, arrival="poisson", seed=1)
    res = await runner.run_level(plan, specs)
    cpu = time.process_time() - cpu0
    await transport.aclose()
    sent = np.sort(np.array([r.sent_ns for r in res.records], dtype=np.int64))
    sched = np.array([r.scheduled_ns for r in res.records], dtype=np.int64)
    late = (np.array([r.sent_ns for r in res.records]) - sched) / 1e6
    gaps = np.diff(sent) / 1e9
    span = (sent[-1] - sent[0]) / 1e9
    sched_sorted = np.sort(sched)
    sched_rate = (len(sched) - 1) / ((sched_sorted[-1] - sched_sorted[0]) / 1e9)
    return {
        "rate": rate,
        "sent": len(sent),
        "failed": sum(1 for r in res.records if not r.ok),
        "achieved": (len(sent) - 1) / span,
        "scheduled": sched_rate,
        "cv": float(gaps.std() / gaps.mean()),
        "late_p50": float(np.percentile(late, 50)),
        "late_p99": float(np.percentile(late, 99)),
        "late_max": float(late.max()),
        "cpu_pct": 100 * cpu / seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    raise_fd_limit()
    with server_process(routes) as url:
        use_uvloop()
        print(
            f"{'target/s':>9} {'sent':>6} {'failed':>6} {'schedule/s':>10} {'achieved/s':>10} {'vs sched %':>10} {'gap CV':>7} "
            f"{'late p50 ms':>11} {'p99 ms':>7} {'max ms':>7} {'client CPU%':>11}"
        )
        for rate in [float(x) for x in args.rates.split(",")]:
            r = asyncio.run(_level(url, rate, args.seconds))
            err = 100 * (r["achieved"] - r["scheduled"]) / r["scheduled"]
            print(
                f"{rate:>9.0f} {r['sent']:>6} {r['failed']:>6} {r['scheduled']:>10.2f} {r['achieved']:>10.2f} {err:>10.3f} {r['cv']:>7.3f} "
                f"{r['late_p50']:>11.3f} {r['late_p99']:>7.3f} {r['late_max']:>7.2f} {r['cpu_pct']:>11.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
