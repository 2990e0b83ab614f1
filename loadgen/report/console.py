"""Console output with rich: the live progress line and the result tables.

Reads records and summaries only; computes nothing beyond running medians for the live
display (the reported numbers come from :mod:`loadgen.metrics`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from loadgen.records import RequestRecord

__all__ = ["LiveStats", "level_table", "metrics_table", "answer_lines", "fmt_ms"]


def fmt_ms(v: Any) -> str:
    if v is None:
        return "–"
    v = float(v)
    if v >= 10_000:
        return f"{v / 1000:.1f}s"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _num(v: Any, digits: int = 1) -> str:
    return "–" if v is None else f"{float(v):,.{digits}f}"


class LiveStats:
    """Running counters for the progress display, fed one finished record at a time."""

    def __init__(self, in_flight: Callable[[], int], label: Callable[[], str]) -> None:
        self._in_flight = in_flight
        self._label = label
        self.done = 0
        self.failed = 0
        self.tokens = 0
        self._tok_window: deque[tuple[float, int]] = deque()
        self._ttft: deque[float] = deque(maxlen=2000)
        self._itl: deque[float] = deque(maxlen=2000)
        self.started = time.monotonic()

    def add(self, rec: RequestRecord) -> None:
        if rec.ok:
            self.done += 1
        else:
            self.failed += 1
        n = rec.output_tokens
        self.tokens += n
        self._tok_window.append((time.monotonic(), n))
        ev = rec.events
        if ev and rec.sent_ns:
            self._ttft.append((ev[0][0] - rec.sent_ns) / 1e6)
            if len(ev) > 1 and rec.output_tokens > 1:
                self._itl.append((ev[-1][0] - ev[0][0]) / 1e6 / max(rec.output_tokens - 1, 1))

    def _tokens_per_s(self) -> float:
        now = time.monotonic()
        w = self._tok_window
        while w and now - w[0][0] > 5.0:
            w.popleft()
        span = min(5.0, now - self.started) or 1e-9
        return sum(n for _, n in w) / span

    @staticmethod
    def _median(xs: deque[float]) -> float | None:
        if not xs:
            return None
        s = sorted(xs)
        return s[len(s) // 2]

    def __rich__(self) -> Text:
        elapsed = time.monotonic() - self.started
        t = Text()
        t.append(f"{self._label()}  ", style="bold cyan")
        t.append(f"done {self.done}", style="green")
        t.append("  failed ")
        t.append(str(self.failed), style="red" if self.failed else "")
        t.append(f"  in flight {self._in_flight()}  {self._tokens_per_s():,.0f} tok/s")
        t.append(f"  TTFT p50 {fmt_ms(self._median(self._ttft))} ms  TPOT p50 {fmt_ms(self._median(self._itl))} ms")
        t.append(f"  {elapsed:,.0f}s", style="dim")
        return t


_METRICS = [
    ("TTFT", "ttft_ms"),
    ("TTFT (queued)", "ttft_queued_ms"),
    ("ITL", "itl_ms"),
    ("TPOT", "tpot_ms"),
    ("E2E", "e2e_ms"),
    ("Inter-chunk", "inter_chunk_ms"),
]


def metrics_table(level: dict[str, Any], title: str = "") -> Group:
    """One level in detail: latency percentiles, throughput, goodput, failures, client."""
    tab = Table(title=title or None, title_justify="left", header_style="bold")
    tab.add_column("metric (ms)")
    for col in ("mean", "p50", "p90", "p99", "p99.9", "max"):
        tab.add_column(col, justify="right")
    for name, key in _METRICS:
        d = level.get(key) or {}
        tab.add_row(name, *(fmt_ms(d.get(c)) for c in ("mean", "p50", "p90", "p99", "p99.9", "max")))
    req = level.get("requests", {})
    thr = level.get("throughput", {})
    good = level.get("goodput", {})
    client = level.get("client", {})
    lines = Text()
    lines.append(
        f"requests {req.get('ok', 0)} ok / {req.get('failed', 0)} failed in {_num(level.get('duration_s'), 2)} s"
        f"   {_num(thr.get('requests_per_s'), 2)} req/s   {_num(thr.get('output_tokens_per_s'))} out tok/s"
        f"   {_num(thr.get('total_tokens_per_s'))} total tok/s\n"
    )
    if good.get("slos"):
        lines.append(
            f"SLO {', '.join(good['slos'])}: attainment {100 * (good.get('slo_attainment') or 0):.1f}%"
            f"   goodput {_num(good.get('requests_per_s'), 2)} req/s\n"
        )
    for chk in good.get("checks") or ():
        mark = "pass" if chk.get("pass") else "FAIL"
        lines.append(f"check {chk['slo']}: {fmt_ms(chk.get('value_ms'))} ms {mark}\n")
    if req.get("by_error"):
        errs = ", ".join(f"{k} {v}" for k, v in sorted(req["by_error"].items()))
        lines.append(f"failures: {errs}\n", style="red")
    verdict = client.get("verdict", "ok")
    lag = (client.get("loop_lag_ms") or {}).get("p99")
    lines.append(
        f"client: {verdict}  (event-loop lag p99 {fmt_ms(lag)} ms)",
        style="bold red" if verdict != "ok" else "dim",
    )
    return Group(tab, lines)


def level_table(levels: Sequence[dict[str, Any]], title: str = "") -> Table:
    """One row per load level (the rising-load view)."""
    tab = Table(title=title or None, title_justify="left", header_style="bold")
    cols = ["load", "ok/fail", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50"]
    cols += ["attain", "goodput", "client"]
    for c in cols:
        tab.add_column(c, justify="right")
    for lv in levels:
        load = lv.get("load", {})
        unit = "users" if load.get("mode") == "concurrency" else "req/s"
        req = lv.get("requests", {})
        thr = lv.get("throughput", {})
        good = lv.get("goodput", {})
        att = good.get("slo_attainment")
        verdict = (lv.get("client") or {}).get("verdict", "ok")
        tab.add_row(
            f"{load.get('value')} {unit}",
            f"{req.get('ok', 0)}/{req.get('failed', 0)}",
            _num(thr.get("requests_per_s"), 2),
            _num(thr.get("output_tokens_per_s"), 0),
            fmt_ms((lv.get("ttft_ms") or {}).get("p50")),
            fmt_ms((lv.get("ttft_ms") or {}).get("p99")),
            fmt_ms((lv.get("itl_ms") or {}).get("p50")),
            fmt_ms((lv.get("itl_ms") or {}).get("p99")),
            fmt_ms((lv.get("tpot_ms") or {}).get("p50")),
            "–" if att is None else f"{100 * att:.0f}%",
            _num(good.get("requests_per_s"), 2),
            Text(verdict, style="red" if verdict != "ok" else "green"),
        )
    return tab


def answer_lines(summary: dict[str, Any]) -> list[str]:
    """The capacity and knee lines printed under the level table (and used in reports)."""
    out: list[str] = []
    cap = summary.get("capacity")
    if cap and cap.get("slos"):
        unit = "users" if cap.get("mode") == "concurrency" else "req/s"
        slos = ", ".join(cap["slos"])
        tgt = f"{100 * cap['target']:.0f}%"
        if cap["status"] == "ok":
            lo, hi = cap["between"]
            out.append(f"capacity at {slos} ({tgt} attainment): {cap['value']:.3g} {unit} (between {lo:g} and {hi:g})")
        elif cap["status"] == "not_reached":
            out.append(f"capacity at {slos}: not reached — every level met {tgt} (at least {cap['value']:g} {unit})")
        else:
            out.append(f"capacity at {slos}: never met — even the lowest level missed {tgt} attainment")
    sat = summary.get("saturation")
    if sat:
        unit = "users" if sat.get("mode") == "concurrency" else "req/s"
        if sat.get("found"):
            out.append(
                f"saturation (knee) at {sat['load']:g} {unit}: throughput +{100 * sat['throughput_gain']:.0f}% "
                f"while {sat['metric']} +{100 * sat['latency_growth']:.0f}%"
            )
        else:
            out.append("saturation: no knee within the levels run")
    return out
