"""A scripted feed (a test input for the server and the page, not the run's Feed: the end-to-end
tests in test_e2e_dashboard.py drive the real one) that produces the dashboard's SNAPSHOT / POINT messages as the spec
draws them, from a few plausible values, and a Dashboard served from a loop in a thread
(for the browser tests, whose Playwright API is synchronous)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from loadgen.dashboard.server import Controls, Dashboard

SERIES = (
    "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p99", "out_tok_s", "req_s", "in_flight",
    "loop_lag_ms", "running", "waiting", "kv_usage", "prefix_hit_rate", "gpu_util",
)  # fmt: skip
EVIL = "<img src=x onerror=alert(1)>"


def level_dict(index: int, users: int, ttft_p99: float, tok_s: float) -> dict[str, Any]:
    """A finished level as the feed lists it."""
    return {
        "index": index, "label": f"{users} users", "mode": "concurrency", "x": float(users),
        "ok": 100, "failed": 1,
        "ttft_p50_ms": round(ttft_p99 / 3, 3), "ttft_p99_ms": ttft_p99,
        "ttft_p99_lo": round(ttft_p99 * 0.9, 3), "ttft_p99_hi": round(ttft_p99 * 1.15, 3),
        "itl_p50_ms": 11.0, "itl_p99_ms": 30.5,
        "out_tok_s": tok_s, "out_tok_s_lo": round(tok_s * 0.95, 1), "out_tok_s_hi": round(tok_s * 1.05, 1),
        "req_s": round(tok_s / 200, 3), "stopped": None,
    }  # fmt: skip


class ScriptedFeed:
    """Stands in for loadgen.dashboard.feed.Feed: the same message shapes, made-up values
    that move with each tick (so a page can be seen to change), every tick counted."""

    def __init__(self, *, model: str | None = "llama-3.1-8b", points: int = 0, server: bool = True) -> None:
        self.loop_lag_ms: float | None = None
        self.lags: list[float | None] = []
        self.ticks = 0  # ticks the dashboard asked for (the prefilled points not counted)
        self._k = 0
        self.server = server
        self.started = 1_700_000_000.0
        self.run: dict[str, Any] = {
            "title": "sweep of chat", "api": "openai-chat", "model": model, "url": "http://127.0.0.1:8000/v1",
            "out": "reports/run-1", "state": "running", "levels_planned": 4, "levels_exact": True,
            "report": None, "started_unix": self.started,
        }  # fmt: skip
        self.level: dict[str, Any] | None = None
        self.series: dict[str, list[Any]] = {k: [] for k in ("t", "level", "errors", *SERIES)}
        self.levels: list[dict[str, Any]] = []
        self.new_levels: list[dict[str, Any]] = []
        self.totals: dict[str, Any] = {"done": 0, "failed": 0, "errors": {}}
        self.set_level(0)
        for _ in range(points):
            self.tick()
        self.ticks = 0
        self.lags = []

    def set_level(self, index: int) -> None:
        """Start level ``index`` (closing the previous one into ``levels``)."""
        if self.level is not None:
            done = level_dict(self.level["index"], 2 ** self.level["index"], 80.0 + 40 * index, 900.0 * index)
            self.levels.append(done)
            self.new_levels.append(done)
        self.level = {
            "index": index, "trial": 0, "heading": f"level {index + 1} of 4", "target": f"{2**index} users",
            "elapsed_s": 0.0, "duration_s": 60.0, "requests": None, "warmup": 4, "done": 0, "failed": 0,
            "warm": 0, "in_flight": 2**index, "left_s": 60.0, "progress": 0.0,
        }  # fmt: skip

    def end(self, state: str, report: str | None = None) -> None:
        self.run["state"] = state
        self.run["report"] = report
        self.level = None

    def _point(self) -> dict[str, Any]:
        k = self._k
        lv = self.level["index"] if self.level else None
        errors = {"http_error": 1} if k % 5 == 4 else {}
        p: dict[str, Any] = {
            "t": round(k * 1.0, 3), "level": lv,
            "ttft_p50": 40.0 + k % 7, "ttft_p90": 70.0 + k % 11, "ttft_p99": 120.0 + (k * 13) % 40,
            "itl_p50": 11.0 + (k % 3) * 0.5, "itl_p99": 30.0 + k % 9, "out_tok_s": 800.0 + (k * 37) % 300,
            "req_s": 4.0 + (k % 4) * 0.25, "in_flight": 2 ** (lv or 0), "loop_lag_ms": self.loop_lag_ms,
            "errors": errors,
            "running": (2 ** (lv or 0)) if self.server else None, "waiting": (k % 3) if self.server else None,
            "kv_usage": round(0.2 + (k % 10) / 50, 3) if self.server else None,
            "prefix_hit_rate": 0.4 if self.server else None, "gpu_util": 0.9 if self.server else None,
        }  # fmt: skip
        return p

    def tick(self) -> dict[str, Any]:
        self.lags.append(self.loop_lag_ms)
        p = self._point()
        self._k += 1
        self.ticks += 1
        for key, v in p.items():
            self.series[key].append(v)
        if self.level is not None:
            self.level["elapsed_s"] = min(60.0, self.level["elapsed_s"] + 1.0)
            self.level["done"] += 4
            self.level["progress"] = round(self.level["elapsed_s"] / 60.0, 4)
            self.level["left_s"] = 60.0 - self.level["elapsed_s"]
        self.totals["done"] += 4
        for kind, n in p["errors"].items():
            self.totals["failed"] += n
            self.totals["errors"][kind] = self.totals["errors"].get(kind, 0) + n
        new, self.new_levels = self.new_levels, []
        return {"v": 1, "point": p, **self._state(), "levels": new}

    def _state(self) -> dict[str, Any]:
        lv = self.level
        done_levels = len(self.levels) + (lv["progress"] if lv else 0.0)
        return {
            "run": dict(self.run),
            "level": dict(lv) if lv else None,
            "progress": round(done_levels / 4, 4),
            "totals": {**self.totals, "errors": dict(self.totals["errors"])},
        }

    def snapshot(self) -> dict[str, Any]:
        return {
            "v": 1,
            "series": {k: list(v) for k, v in self.series.items()},
            "levels": list(self.levels),
            **self._state(),
        }


class ThreadedDashboard:
    """A Dashboard on its own event loop in a thread; ``call`` runs a function on that loop."""

    def __init__(self, feed: ScriptedFeed, **kw: Any) -> None:
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

    def make(feed: ScriptedFeed, **kw: Any) -> ThreadedDashboard:
        kw.setdefault("port", 0)
        made.append(ThreadedDashboard(feed, **kw))
        return made[-1]

    yield make
    for d in made:
        d.close()


__all__ = ["EVIL", "SERIES", "Controls", "ScriptedFeed", "ThreadedDashboard", "level_dict"]
