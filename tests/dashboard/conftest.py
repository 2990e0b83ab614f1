"""The run's own Feed given real records on a virtual clock (the input of the server's and
the page's tests: what they draw is what a run's feed says), and a Dashboard served from a
loop in a thread (for the browser tests, whose Playwright API is synchronous)."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from loadgen.dashboard.feed import Feed
from loadgen.dashboard.server import Controls, Dashboard
from loadgen.records import ErrorKind, RequestRecord

EVIL = "<img src=x onerror=alert(1)>"
MS = 1_000_000
GUARD_S = 120  # a hang ends the test, nothing waits on it


def level_summary(index: int) -> dict[str, Any]:
    """A finished level as ``summary.json`` holds it (``LevelSummary.to_json()``'s keys)."""
    p99 = 80.0 + 40 * index
    tok_s = 900.0 * (index + 1)
    return {
        "load": {"mode": "concurrency", "value": 2**index},
        "requests": {"total": 101, "ok": 100, "failed": 1},
        "ttft_ms": {"p50": round(p99 / 3, 3), "p99": p99, "intervals": {"p99": {"low": p99 * 0.9, "high": p99 * 1.15}}},
        "itl_ms": {"p50": 11.0, "p99": 30.5},
        "throughput": {
            "output_tokens_per_s": tok_s,
            "requests_per_s": tok_s / 200,
            "intervals": {"output_tokens_per_s": {"low": tok_s * 0.95, "high": tok_s * 1.05}},
        },
        "client": {"verdict": "ok", "reasons": []},
    }


class RecordFeed(Feed):
    """loadgen's :class:`Feed`, fed as a run feeds it: each tick, four finished requests of
    the level (TTFT and gaps that move with the tick, one failed every fifth tick) and, with
    ``server``, one scraped sample; its clock moves one second a tick. ``ticks``, ``lags``
    and ``snapshots`` record what the dashboard asked of it (the prefilled ``points`` not
    counted)."""

    def __init__(self, *, model: str | None = "llama-3.1-8b", points: int = 0, server: bool = True) -> None:
        self.now = 1000.0
        super().__init__(clock=lambda: self.now)
        self.plan(
            title="sweep of chat",
            api="chat",
            model=model,
            url="http://127.0.0.1:8000/v1",
            out="reports/run-1",
            levels_planned=4,
            levels_exact=True,
        )
        self.server = server
        self.level_index: int | None = None
        self.set_in_flight(lambda: 2 ** (self.level_index or 0))
        self._k = 0
        self.ticks = 0
        self.snapshots = 0
        self.lags: list[float | None] = []
        self.set_level(0)
        for _ in range(points):
            self.tick()
        self.ticks = 0
        self.lags = []

    @property
    def run(self) -> dict[str, Any]:
        """The run's description the feed sends (a test may change it)."""
        return self._run

    @property
    def levels(self) -> list[dict[str, Any]]:
        """The finished levels, as the feed lists them."""
        return self._levels

    def set_level(self, index: int) -> None:
        """Start level ``index``; the level before it finishes with its summary."""
        if self.level_index is not None:
            self.level_done(level_summary(self.level_index))
        self.level_index = index
        self.start_level(
            index=index,
            trial=0,
            heading=f"level {index + 1} of 4",
            target=f"{2**index} users",
            requests=None,
            warmup=4,
            duration_s=60.0,
        )

    def _record(self, j: int, failed: bool) -> RequestRecord:
        k = self._k
        done = int(self.now * 1e9)
        sent = done - (400 + 10 * (k % 7)) * MS
        t = sent + (40 + k % 7 + 5 * j) * MS
        events = [[t, 1]]
        for g in range(8):
            t += (11 + (k + g) % 3) * MS
            events.append([t, 1])
        rec = RequestRecord(index=k * 4 + j, level=self.level_index or 0, sent_ns=sent, done_ns=done, events=events)
        if failed:
            rec.fail(ErrorKind.HTTP_ERROR, "HTTP 500", done, 500)
        return rec

    def snapshot(self) -> dict[str, Any]:
        self.snapshots += 1
        return super().snapshot()

    def tick(self) -> dict[str, Any]:
        self.lags.append(self.loop_lag_ms)
        k = self._k
        for j in range(4):
            self.add(self._record(j, failed=j == 0 and k % 5 == 4))
        if self.server:
            n = 2 ** (self.level_index or 0)
            self.server_sample(
                {"t_ns": k, "running": float(n), "waiting": float(k % 3), "kv_usage": 0.2 + (k % 10) / 50,
                 "prefix_hit_rate": 0.4, "gpu_util": 0.9}
            )  # fmt: skip
        msg = super().tick()
        self._k += 1
        self.ticks += 1
        self.now += 1.0
        return msg


class ThreadedDashboard:
    """A Dashboard on its own event loop in a thread; ``call`` runs a function on that loop."""

    def __init__(self, feed: RecordFeed, **kw: Any) -> None:
        self.feed = feed
        self.loop = asyncio.new_event_loop()
        self.dash = Dashboard(feed, **kw)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.dash.start(), self.loop).result(30)

    def call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.dash.aclose(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def threaded() -> Iterator[Callable[..., ThreadedDashboard]]:
    made: list[ThreadedDashboard] = []

    def make(feed: RecordFeed, **kw: Any) -> ThreadedDashboard:
        kw.setdefault("port", 0)
        made.append(ThreadedDashboard(feed, **kw))
        return made[-1]

    yield make
    for d in made:
        d.close()


class Loadgen:
    """``python -m loadgen.cli ARGS`` with its output read line by line in a thread (its
    address space capped at ``memory_cap`` bytes, if given)."""

    def __init__(self, args: list[str], *, memory_cap: int | None = None) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}

        def cap() -> None:  # its address space: an unbounded read fails fast, not the machine
            if memory_cap is not None:
                resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            preexec_fn=cap,
        )
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()

    def line(self, prefix: str) -> str:
        """The first line that starts with ``prefix``, once it is printed."""
        with self._seen:
            found = self._seen.wait_for(
                lambda: any(x.startswith(prefix) for x in self.lines) or self.proc.poll() is not None, GUARD_S
            )
            line = next((x for x in self.lines if x.startswith(prefix)), None)
        assert found and line is not None, "\n".join(self.lines[-30:])
        return line

    def url(self, prefix: str) -> str:
        """The URL on the first line that starts with ``prefix``."""
        line = self.line(prefix)
        m = re.search(r"http://127\.0\.0\.1:\d+/\S*", line)
        assert m, line
        return m.group(0)

    def wait(self) -> int:
        try:
            return self.proc.wait(GUARD_S)
        finally:
            self.close()

    def close(self) -> None:
        """Kill it if it still runs; read its output to the end and close the pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(GUARD_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def text(self) -> str:
        return "\n".join(self.lines)


__all__ = ["EVIL", "GUARD_S", "Controls", "Loadgen", "RecordFeed", "ThreadedDashboard", "level_summary"]
