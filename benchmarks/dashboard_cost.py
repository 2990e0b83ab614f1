"""What the live dashboard costs the process that runs the load: CPU time per tick of serving
N connected pages (1, 4, 16) with a full-size snapshot (3600 points), the sizes of what
goes over the wire, and what pages reloading over and over cost (CPU per reload, and the
lateness of the serving loop's ticker while they reload: the lag a measuring loop would see).

The pages are aiohttp clients in another process (reading and discarding the stream), so
``time.process_time`` here counts the server side only: the ticker, the feed's tick, JSON
encoding once per tick and one write per page. The feed is loadgen's Feed fed as a run
feeds it (tests/dashboard/conftest.py's RecordFeed); its own tick, records included, is
timed apart and subtracted (benchmarks/dashboard_feed.py measures it).

    PYTHONPATH=. python benchmarks/dashboard_cost.py [--ticks 100] [--interval 0.05] [--reloads 20]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time

import aiohttp

from loadgen.dashboard.server import Dashboard, _sse
from tests.dashboard.conftest import RecordFeed


def _pages(port: int, n: int, seconds: float) -> None:
    async def one(http: aiohttp.ClientSession) -> None:
        async with http.get(f"http://127.0.0.1:{port}/events") as resp:
            async for _chunk in resp.content.iter_any():
                pass

    async def main() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as http:
            await asyncio.gather(*(one(http) for _ in range(n)), return_exceptions=True)

    asyncio.run(main())


def _reloading(port: int, n: int, reloads: int) -> None:
    """``n`` pages, each loading the page and its snapshot ``reloads`` times, as a browser
    does (gzip accepted)."""

    async def one(http: aiohttp.ClientSession) -> None:
        for _ in range(reloads):
            async with http.get(f"http://127.0.0.1:{port}/") as resp:
                await resp.read()
            async with http.get(f"http://127.0.0.1:{port}/events") as resp:
                await resp.content.readuntil(b"\n\n")  # the snapshot, then gone

    async def main() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
            await asyncio.gather(*(one(http) for _ in range(n)))

    asyncio.run(main())


async def _serve_reloads(n: int, reloads: int, interval: float, feed_ms: float) -> tuple[float, float, float, int]:
    """CPU ms per reload (the feed's ticks subtracted), the ticker's lag p99 and max (ms)
    while the pages reload, and the page's bytes on the wire."""
    feed = RecordFeed(points=3600)
    async with Dashboard(feed, port=0, interval_s=interval) as dash:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{dash.port}/") as resp:
            wire = int(resp.headers.get("Content-Length", 0))
            await resp.read()
        feed.lags.clear()
        proc = mp.get_context("spawn").Process(target=_reloading, args=(dash.port, n, reloads))
        ticks, c0 = dash.ticks, time.process_time()
        proc.start()
        await asyncio.to_thread(proc.join, 300)
        cpu_ms = (time.process_time() - c0) * 1000 - (dash.ticks - ticks) * feed_ms
        lags = sorted(v for v in feed.lags if v is not None)
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0
    return cpu_ms / (n * reloads), p99, lags[-1] if lags else 0.0, wire


def _feed_tick_cpu(ticks: int) -> float:
    feed = RecordFeed(points=3600)
    t0 = time.process_time()
    for _ in range(ticks):
        feed.tick()
    return (time.process_time() - t0) / ticks


async def _serve(n: int, ticks: int, interval: float) -> float:
    feed = RecordFeed(points=3600)
    async with Dashboard(feed, port=0, interval_s=interval) as dash:
        proc = mp.get_context("spawn").Process(target=_pages, args=(dash.port, n, ticks * interval * 4 + 30))
        proc.start()
        try:
            for _ in range(600):  # at most 30 s for the pages to connect
                if dash.clients == n:
                    break
                await asyncio.sleep(0.05)
            assert dash.clients == n, f"{dash.clients} of {n} pages connected"
            await asyncio.sleep(interval * 3)  # let the snapshots go out before measuring
            start, c0 = dash.ticks, time.process_time()
            await asyncio.sleep(ticks * interval)  # one wake-up: the measuring adds nothing per tick
            cpu = time.process_time() - c0
            assert dash.clients == n and dash.dropped == 0
            return cpu / (dash.ticks - start)
        finally:
            proc.terminate()
            proc.join(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=100)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--reloads", type=int, default=20, help="reloads per page (0: skip that part)")
    args = ap.parse_args()
    feed = RecordFeed(points=3600)
    t0 = time.process_time()
    snap = _sse("snapshot", feed.snapshot())  # as the server encodes it
    snap_ms = (time.process_time() - t0) * 1000
    point = _sse("point", feed.tick())
    print(
        f"snapshot (3600 points): {len(snap):,} bytes, encoded in {snap_ms:.1f} ms CPU; a point: {len(point):,} bytes"
    )
    feed_ms = _feed_tick_cpu(args.ticks) * 1000
    print(f"the stand-in feed's own tick: {feed_ms:.3f} ms CPU (subtracted below)")
    print(f"{'pages':>5} {'CPU ms/tick':>12} {'dashboard ms/tick':>18} {'% of a core at 1 tick/s':>24}")
    for n in (1, 4, 16):
        per_tick = asyncio.run(_serve(n, args.ticks, args.interval)) * 1000
        own = per_tick - feed_ms
        print(f"{n:>5} {per_tick:>12.3f} {own:>18.3f} {own / 10:>23.3f}%")
    if args.reloads:
        print(
            f"{'pages':>5} {'reloads':>8} {'page bytes sent':>16} {'CPU ms/reload':>14} {'lag p99 ms':>11} {'lag max ms':>11}"
        )
        for n in (1, 8):
            per, p99, worst, wire = asyncio.run(_serve_reloads(n, args.reloads, args.interval, feed_ms))
            print(f"{n:>5} {n * args.reloads:>8} {wire:>16,} {per:>14.2f} {p99:>11.1f} {worst:>11.1f}")


if __name__ == "__main__":
    main()
