"""How long the HTML report takes, and how big it gets (a benchmark, not a test).

Writes synthetic run folders (N records over 4 concurrency levels, E output events
each, a few failures, long prompts, coalesced events), computes their summaries with
the real metrics, then times ``render_run_report`` step by step and prints a table:
reading records.jsonl into the per-request frame, building the figures and writing the
page, the file size, and — when Playwright and Chromium are installed — the time
headless Chromium takes until every plot is drawn. Also times ``render_comparison`` of
two runs. Targets: a 10,000-request report under 10 MB that draws in under 3 s; 100,000
records rendered in under 10 s.

Run from the repository root (``pip install -e .`` or ``PYTHONPATH=.``):

    python benchmarks/report_speed.py                      # 10k and 100k records x 64 events
    python benchmarks/report_speed.py --records 20000 --events 256 --no-browser
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from loadgen.metrics import parse_slo, summarize_level
from loadgen.report.compare import render_comparison
from loadgen.report.files import read_records
from loadgen.report.html import build_run_page
from loadgen.report.page import write_page
from loadgen.report.rundata import load_run

LEVELS = (4, 16, 64, 256)


def write_folder(folder: Path, n: int, e: int, seed: int) -> None:
    """records.jsonl and run.json of a synthetic run, then summary.json from them."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    anchor = 10**12
    per = n // len(LEVELS)
    with open(folder / "records.jsonl", "w", encoding="utf-8") as fh:
        t = anchor + 10**8
        for li, users in enumerate(LEVELS):
            sent = t + np.cumsum(rng.exponential(2e9 / users / 10, per)).astype(np.int64)
            ttft = rng.lognormal(np.log(40e6 * (1 + li)), 0.4, per).astype(np.int64)
            gaps = rng.gamma(4.0, 2.5e6, (per, e)).astype(np.int64)
            gaps[:, 0] = 0
            gaps[rng.random((per, e)) < 0.02] = 0  # coalesced reads
            times = sent[:, None] + ttft[:, None] + np.cumsum(gaps, axis=1)
            for i in range(per):
                failed = i % 211 == 5
                long_prompt = i % 20 == 0
                ev = [] if failed else np.column_stack([times[i], np.ones(e, dtype=np.int64)]).tolist()
                done = int(sent[i]) + 10**7 if failed else int(times[i, -1]) + 10**6
                rec = {"index": li * per + i, "level": li, "request_class": "default",
                       "target_prompt_tokens": 4000 if long_prompt else 500, "target_output_tokens": e,
                       "scheduled_ns": int(sent[i]), "sent_ns": int(sent[i]) + 40_000, "done_ns": done, "events": ev,
                       "status": "http_error" if failed else "ok", "http_status": 500 if failed else None,
                       "error": "HTTP 500: overloaded" if failed else None,
                       "prompt_tokens": None if failed else (4000 if long_prompt else 500),
                       "completion_tokens": None if failed else e, "token_source": "events_corrected",
                       "warmup": i < 4, "server": None}  # fmt: skip
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
            t = int(times[:, -1].max()) + 10**8
    run = {"label": f"bench-{seed}", "clock_anchor": {"perf_counter_ns": anchor},
           "target": {"url": "http://127.0.0.1:8000", "model": "bench-model", "api": "chat"},
           "workload": {"name": "bench", "classes": []}, "slos": ["ttft=200ms"]}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(run))
    records = list(read_records(folder))
    slos = [parse_slo("ttft=200ms")]
    levels = []
    for li, users in enumerate(LEVELS):
        recs = [r for r in records if r.level == li]
        levels.append(summarize_level(recs, load={"mode": "concurrency", "value": users}, slos=slos,
                                      loop_lag_ms=list(rng.exponential(0.3, 1000))).to_json())  # fmt: skip
    (folder / "summary.json").write_text(json.dumps({"levels": levels, "capacity": None, "saturation": None}))


def browser_seconds(path: Path) -> float | None:
    """Seconds from opening ``path`` in headless Chromium until every plot is drawn."""
    exe = os.environ.get("LOADGEN_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(exe).exists():
        return None
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--events", type=int, default=64, help="output events per request")
    ap.add_argument("--no-browser", action="store_true", help="skip the headless Chromium timing")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here (reused when present)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="loadgen-report-bench-"))
    rows = []
    try:
        for n in args.records:
            folders = []
            for seed in (0, 1):
                folder = root / f"run-{n}-{args.events}-{seed}"
                if not (folder / "summary.json").exists():
                    write_folder(folder, n, args.events, seed)
                folders.append(folder)
            t0 = time.perf_counter()
            data = load_run(folders[0])
            t1 = time.perf_counter()
            page = build_run_page(data)
            t2 = time.perf_counter()
            out = write_page(folders[0] / "report.html", page.render())
            t3 = time.perf_counter()
            t4 = time.perf_counter()
            cmp = render_comparison(folders, root / f"compare-{n}.html")
            t5 = time.perf_counter()
            size = (folders[0] / "records.jsonl").stat().st_size / 1e6
            draw = None if args.no_browser else browser_seconds(out)
            draw_cmp = None if args.no_browser else browser_seconds(cmp)
            rows.append((n, size, t1 - t0, t2 - t1, t3 - t2, t3 - t0, out.stat().st_size / 1e6, draw,
                         t5 - t4, cmp.stat().st_size / 1e6, draw_cmp))  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)

    def f(v: float | None, spec: str) -> str:
        return "–" if v is None else format(v, spec)

    head = (f"{'records':>8} {'jsonl MB':>8} {'read s':>7} {'figures s':>9} {'write s':>7} {'total s':>7} "
            f"{'html MB':>7} {'draw s':>6} | {'compare s':>9} {'html MB':>7} {'draw s':>6}")  # fmt: skip
    print(f"report speed, {args.events} events per request (draw = headless Chromium until every plot is drawn)")
    print(head)
    print("-" * len(head))
    for n, size, read, figs, write, total, html_mb, draw, cmp_s, cmp_mb, draw_cmp in rows:
        print(f"{n:>8,} {size:>8.1f} {read:>7.2f} {figs:>9.2f} {write:>7.2f} {total:>7.2f} {html_mb:>7.2f} "
              f"{f(draw, '6.2f'):>6} | {cmp_s:>9.2f} {cmp_mb:>7.2f} {f(draw_cmp, '6.2f'):>6}")  # fmt: skip


if __name__ == "__main__":
    main()
