"""Event-loop lag and peak memory while the client takes large non-streamed answers.

A loopback server in its own process answers ``/v1/embeddings`` with ``--batch`` vectors
of random floats, about ``--mib`` MiB of JSON per answer (just under the 64 MiB cap by
default). The real client (``--transport``, ``fast`` by default) sends ``--concurrency``
such requests at once, ``--rounds`` times, while a ticker task sleeps 1 ms in a loop and
records how late each wake-up was (the loop lag a timeout or another stream would see). We
print the lag's p50 / p99 / max, the client's peak RSS, its CPU time and the records' status.

    python benchmarks/answer_large.py [--mib 60] [--concurrency 4] [--rounds 2] [--transport fast]

Bounded (requests), loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import time

from _bench import server_process
from aiohttp import web

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.records import RequestRecord, RequestSpec

_CFG = {"mib": float(os.environ.get("ANSWER_MIB", "60")), "batch": int(os.environ.get("ANSWER_BATCH", "768"))}


def _routes(app: web.Application) -> None:
    batch = int(_CFG["batch"])
    rng = random.Random(0)
    dim = int(_CFG["mib"] * (1 << 20) / batch / 20.5)  # a random float is ~20 bytes of JSON
    vectors = [[rng.uniform(-1, 1) for _ in range(dim)] for _ in range(batch)]
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    body = json.dumps({"object": "list", "data": data, "usage": {"prompt_tokens": 8, "total_tokens": 8}}).encode()

    async def embeddings(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    app.router.add_post("/v1/embeddings", embeddings)


async def _run(url: str, args: argparse.Namespace) -> None:
    options = DialectOptions(model="m", inputs=(args.batch,))
    cfg = TransportConfig(url, get_dialect("embeddings"), options, read_timeout_s=120, request_timeout_s=300)
    t = make_transport(args.transport, cfg)
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t0 - 0.001)

    async def one(i: int) -> RequestRecord:
        rec = RequestRecord(index=i)
        await t.send(RequestSpec(index=i, prompt="a b c d " * 32, prompt_tokens=8, max_tokens=1), rec)
        return rec

    tick = asyncio.create_task(ticker())
    await one(-1)  # warm: the server has built its answer
    lags.clear()
    cpu0, t0 = time.process_time(), time.perf_counter()
    records = []
    for r in range(args.rounds):
        records += await asyncio.gather(*(one(r * args.concurrency + k) for k in range(args.concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    stop.set()
    await tick
    await t.aclose()
    lags.sort()
    pick = lambda q: 1e3 * lags[min(len(lags) - 1, int(q * len(lags)))]  # noqa: E731
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    status = {s: sum(1 for r in records if r.status.value == s) for s in {r.status.value for r in records}}
    print(
        f"{len(records)} answers of ~{args.mib:g} MiB, {args.concurrency} at once ({args.transport}): "
        f"loop lag p50 {pick(0.5):.2f} ms, p99 {pick(0.99):.1f} ms, max {1e3 * lags[-1]:.1f} ms "
        f"({len(lags)} ticks); peak RSS {rss:.0f} MiB; CPU {cpu:.2f} s, wall {wall:.2f} s; {status}; "
        f"prompt_tokens {sorted({r.prompt_tokens for r in records}, key=str)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=60.0)
    ap.add_argument("--batch", type=int, default=768)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--transport", default="fast")
    args = ap.parse_args()
    os.environ["ANSWER_MIB"], os.environ["ANSWER_BATCH"] = str(args.mib), str(args.batch)
    _CFG.update(mib=args.mib, batch=args.batch)
    with server_process(_routes) as url:
        asyncio.run(_run(url, args))


if __name__ == "__main__":
    main()
