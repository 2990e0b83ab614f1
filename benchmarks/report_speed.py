"""How long the HTML report takes, how big it gets, and how records scale (a benchmark, not a test).

Writes synthetic run folders (N records over 4 concurrency levels, E output events
each, a few failures, long prompts, coalesced events, a few two-token events) with the
run writer's format (``records.jsonl`` + ``events.bin``), computes their summaries with
the real metrics, then times ``render_run_report`` step by step and prints a table:
reading the records into the per-request frame, building the figures and writing the
page, the file size, and — when Playwright and Chromium are installed — the time
headless Chromium takes until every plot is drawn. Also times ``render_comparison`` of
two runs. Targets: a 10,000-request report under 10 MB that draws in under 3 s; 100,000
records rendered in under 10 s.

``--scale`` measures records that scale instead (issue 10: a 1,000,000-request,
100-token run summarised and reported in <= 60 s and <= 4 GB, <= 6 bytes an event): one
run folder per N, then bytes per event on disk (the old all-JSON lines, measured on the
first 10,000 records, against ``events.bin``), and in a fresh process each (so the peak
RSS is the step's own) the time and peak RSS to summarise every level (read the lines,
then per level decode its events and ``summarize_level``) and to render the report.

Run from the repository root (``pip install -e .`` or ``PYTHONPATH=.``):

    python benchmarks/report_speed.py                      # 10k and 100k records x 64 events
    python benchmarks/report_speed.py --records 20000 --events 256 --no-browser
    python benchmarks/report_speed.py --scale --records 1000000 --events 100
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import numpy as np
import orjson

from loadgen.metrics import parse_slo, summarize_level
from loadgen.records import ErrorKind, RequestRecord, TokenSource
from loadgen.report.compare import render_comparison
from loadgen.report.files import RunWriter, read_records, read_records_pieces, record_line
from loadgen.report.html import build_run_page
from loadgen.report.page import write_page
from loadgen.report.recordio import EVENTS_FILE, EVENTS_MAGIC, encode_columns
from loadgen.report.rundata import load_run

LEVELS = (4, 16, 64, 256)
BATCH = 10_000  # records generated and written at a time


def write_folder(folder: Path, n: int, e: int, seed: int) -> None:
    """records.jsonl, events.bin and run.json of a synthetic run (no summary yet)."""
    rng = np.random.default_rng(seed)
    anchor = 2_000_000 * 10**9  # perf_counter_ns 23 days after boot
    per = n // len(LEVELS)
    with RunWriter(folder) as writer:
        t = anchor + 10**8
        for li, users in enumerate(LEVELS):
            t_end = t
            for lo in range(0, per, BATCH):
                m = min(BATCH, per - lo)
                sent = t + np.cumsum(rng.exponential(2e9 / users / 10, m)).astype(np.int64)
                t = int(sent[-1])
                ttft = rng.lognormal(np.log(40e6 * (1 + li)), 0.4, m).astype(np.int64)
                gaps = rng.gamma(4.0, 2.5e6, (m, e)).astype(np.int64)
                gaps[:, 0] = 0
                gaps[rng.random((m, e)) < 0.02] = 0  # coalesced reads
                times = sent[:, None] + ttft[:, None] + np.cumsum(gaps, axis=1)
                tokens = np.where(rng.random((m, e)) < 0.01, 2, 1)
                recs, keep = [], np.ones(m, dtype=bool)
                for k in range(m):
                    i = lo + k
                    failed = i % 211 == 5
                    long_prompt = i % 20 == 0
                    keep[k] = not failed
                    s = int(sent[k])
                    recs.append(
                        RequestRecord(
                            index=li * per + i,
                            level=li,
                            target_prompt_tokens=4000 if long_prompt else 500,
                            target_output_tokens=e,
                            scheduled_ns=s,
                            sent_ns=s + 40_000,
                            done_ns=s + 10**7 if failed else int(times[k, -1]) + 10**6,
                            status=ErrorKind.HTTP_ERROR if failed else ErrorKind.OK,
                            http_status=500 if failed else None,
                            error="HTTP 500: overloaded" if failed else None,
                            prompt_tokens=None if failed else (4000 if long_prompt else 500),
                            completion_tokens=None if failed else int(tokens[k].sum()),
                            token_source=TokenSource.EVENTS_CORRECTED,
                            warmup=i < 4,
                        )
                    )
                counts = np.where(keep, e, 0)
                writer.append_batch(encode_columns(recs, counts, times[keep].ravel(), tokens[keep].ravel()))
                t_end = max(t_end, int(times[:, -1].max()))
            t = t_end + 10**8
        run = {
            "label": f"bench-{seed}",
            "clock_anchor": {"perf_counter_ns": anchor},
            "target": {"url": "http://127.0.0.1:8000", "model": "bench-model", "api": "chat"},
            "workload": {"name": "bench", "classes": []},
            "slos": ["ttft=200ms"],
        }
        writer.write_run(run)


def summarise(folder: Path) -> tuple[float, float]:
    """summary.json of a folder, a level at a time (its records are in level order):
    seconds to read the lines, to decode each level's events and summarise it."""
    t0 = time.perf_counter()
    found = read_records_pieces(folder, keep=lambda r: not r.warmup)  # summaries drop warm-ups
    t1 = time.perf_counter()
    rng = np.random.default_rng(7)
    level = np.fromiter((r.level for r in found.records), dtype=np.int16, count=len(found.records))
    starts = np.searchsorted(level, np.arange(len(LEVELS) + 1))
    assert (np.diff(level) >= 0).all(), "records out of level order"
    slos = [parse_slo("ttft=200ms")]
    levels = []
    for li, users in enumerate(LEVELS):
        lo, hi = int(starts[li]), int(starts[li + 1])
        summary = summarize_level(
            found.records[lo:hi],
            load={"mode": "concurrency", "value": users},
            slos=slos,
            loop_lag_ms=list(rng.exponential(0.3, 1000)),
            events=found.columns(lo, hi),
        )
        levels.append(summary.to_json())
    (folder / "summary.json").write_text(json.dumps({"levels": levels, "capacity": None, "saturation": None}))
    return t1 - t0, time.perf_counter() - t1


def render(folder: Path) -> tuple[float, float, float, Path]:
    """The run's report.html: seconds to load the run, build the figures, write the page."""
    t0 = time.perf_counter()
    data = load_run(folder)
    t1 = time.perf_counter()
    page = build_run_page(data)
    t2 = time.perf_counter()
    out = write_page(folder / "report.html", page.render())
    return t1 - t0, t2 - t1, time.perf_counter() - t2, out


def browser_seconds(path: Path) -> float | None:
    """Seconds from opening ``path`` in headless Chromium until every plot is drawn."""
    exe = os.environ.get("LOADGEN_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(exe).exists():
        return None
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=exe, headless=True, args=args)
        page = ctx.new_page()
        page.goto("about:blank")
        t = time.perf_counter()
        page.goto(path.resolve().as_uri())
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('div.lg-plot')).every(d => d.querySelector('svg.main-svg'))",
            timeout=120_000,
        )
        seconds = time.perf_counter() - t
        ctx.close()
    return seconds


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cpu_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def phase(name: str, folder: Path) -> None:
    """One step of ``--scale`` in this (fresh) process; prints its times, CPU seconds
    and peak RSS as JSON."""
    cpu_at_start = cpu_seconds()
    if name == "summarise":
        times = summarise(folder)
    else:
        times = render(folder)[:3]
    print(json.dumps({"seconds": list(times), "rss_mb": peak_rss_mb(), "cpu_s": cpu_seconds() - cpu_at_start}))


def in_child(name: str, folder: Path) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--phase", name, str(folder)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{name} failed:\n{res.stderr}")
    out: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def sizes(folder: Path, sample: int = 10_000) -> dict[str, float]:
    """Bytes per event: events.bin's, the old inline JSON's (first ``sample`` records), and
    each format's whole record files."""
    recs = list(islice(read_records(folder), sample))
    inline = sum(len(record_line(r)) for r in recs)
    bare = sum(len(record_line(dataclasses.replace(r, events=[]))) for r in recs)
    n_sample = sum(len(r.events) for r in recs)
    n_events = 0
    with open(folder / "records.jsonl", "rb") as fh:
        for line in fh:
            n_events += orjson.loads(line)["events"]["n"]
    jsonl = (folder / "records.jsonl").stat().st_size
    events_bin = (folder / EVENTS_FILE).stat().st_size - len(EVENTS_MAGIC)
    return {
        "events": n_events,
        "old_event_b": (inline - bare) / n_sample,
        "old_total_b": inline / n_sample,
        "new_event_b": events_bin / n_events,
        "new_total_b": (jsonl + events_bin) / n_events,
        "mb": (jsonl + events_bin) / 1e6,
    }


def scale(args: argparse.Namespace, root: Path) -> None:
    rows = []
    for n in args.records:
        folder = root / f"scale-{n}-{args.events}"
        if not (folder / "run.json").exists():
            write_folder(folder, n, args.events, seed=0)
        size = sizes(folder)
        summ = in_child("summarise", folder)
        rep = in_child("report", folder)
        rows.append((n, size, summ, rep))
    print(f"records that scale: {args.events} events per request (peak RSS of a fresh process per step)")
    head = (
        f"{'records':>9} {'events':>11} {'old B/ev':>8} {'new B/ev':>8} {'old+rec':>7} {'new+rec':>7} "
        f"{'disk MB':>7} | {'read s':>6} {'summ s':>6} {'cpu s':>6} {'RSS MB':>6} | "
        f"{'load s':>6} {'figs s':>6} {'page s':>6} {'cpu s':>6} {'RSS MB':>6}"
    )
    print(head)
    print("-" * len(head))
    for n, size, summ, rep in rows:
        ss, rs = summ["seconds"], rep["seconds"]
        assert isinstance(ss, list) and isinstance(rs, list)
        print(
            f"{n:>9,} {size['events']:>11,} {size['old_event_b']:>8.2f} {size['new_event_b']:>8.2f} "
            f"{size['old_total_b']:>7.2f} {size['new_total_b']:>7.2f} {size['mb']:>7.0f} | "
            f"{ss[0]:>6.1f} {ss[1]:>6.1f} {summ['cpu_s']:>6.1f} {summ['rss_mb']:>6.0f} | "
            f"{rs[0]:>6.1f} {rs[1]:>6.1f} {rs[2]:>6.1f} {rep['cpu_s']:>6.1f} {rep['rss_mb']:>6.0f}"
        )
    print(
        "B/ev: bytes per event, of the events alone and of whole record files (+rec); old = every event as"
        " JSON inside its line (first 10,000 records), new = records.jsonl + events.bin. cpu s: user + system"
        " seconds of the step (wall seconds grow when other work shares the cores)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--events", type=int, default=64, help="output events per request")
    ap.add_argument("--no-browser", action="store_true", help="skip the headless Chromium timing")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here (reused when present)")
    ap.add_argument("--scale", action="store_true", help="bytes per event, summarise and report time and peak RSS")
    ap.add_argument("--phase", nargs=2, metavar=("STEP", "FOLDER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        phase(args.phase[0], Path(args.phase[1]))
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="loadgen-report-bench-"))
    rows = []
    try:
        if args.scale:
            scale(args, root)
            return
        for n in args.records:
            folders = []
            for seed in (0, 1):
                folder = root / f"run-{n}-{args.events}-{seed}"
                if not (folder / "summary.json").exists():
                    write_folder(folder, n, args.events, seed)
                    summarise(folder)
                folders.append(folder)
            read, figs, write, out = render(folders[0])
            t4 = time.perf_counter()
            cmp = render_comparison(folders, root / f"compare-{n}.html")
            t5 = time.perf_counter()
            size = sum((folders[0] / name).stat().st_size for name in ("records.jsonl", EVENTS_FILE)) / 1e6
            draw = None if args.no_browser else browser_seconds(out)
            draw_cmp = None if args.no_browser else browser_seconds(cmp)
            rows.append(
                (
                    n,
                    size,
                    read,
                    figs,
                    write,
                    read + figs + write,
                    out.stat().st_size / 1e6,
                    draw,
                    t5 - t4,
                    cmp.stat().st_size / 1e6,
                    draw_cmp,
                )
            )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)

    def f(v: float | None, spec: str) -> str:
        return "–" if v is None else format(v, spec)

    head = (
        f"{'records':>8} {'recs MB':>8} {'read s':>7} {'figures s':>9} {'write s':>7} {'total s':>7} "
        f"{'html MB':>7} {'draw s':>6} | {'compare s':>9} {'html MB':>7} {'draw s':>6}"
    )
    print(f"report speed, {args.events} events per request (draw = headless Chromium until every plot is drawn)")
    print(head)
    print("-" * len(head))
    for n, size, read, figs, write, total, html_mb, draw, cmp_s, cmp_mb, draw_cmp in rows:
        print(
            f"{n:>8,} {size:>8.1f} {read:>7.2f} {figs:>9.2f} {write:>7.2f} {total:>7.2f} {html_mb:>7.2f} "
            f"{f(draw, '6.2f'):>6} | {cmp_s:>9.2f} {cmp_mb:>7.2f} {f(draw_cmp, '6.2f'):>6}"
        )


if __name__ == "__main__":
    main()
