"""Screenshots of ``loadgen demo`` from one source tree, for before/after comparisons (a
benchmark script, not a test).

Runs ``loadgen demo`` with the loadgen of ``--tree PATH`` (``PYTHONPATH=PATH python -m
loadgen`` in a subprocess, in a temporary folder, so two trees can be compared: main and a
branch), its output piped as a CI job sees it (``COLUMNS=160``, no live display), and saves
in ``--out DIR``, each name prefixed with ``--label`` (default: the tree's folder name):

- ``LABEL-console.txt`` and ``LABEL-console.png``: what the demo printed, as text and drawn
  by headless Chromium as a monospace ``<pre>`` (the temporary folder written as ``$TMP``,
  so two trees' texts differ only where their output does);
- ``LABEL-report-chunked.png``, ``LABEL-report-unchunked.png``: the top of each run's
  ``report.html`` (headline, Answer cards, level table; the page clipped at
  ``--max-height`` px, 0 for all of it), once every plot on it is drawn;
- ``LABEL-comparison.png``: the demo's ``comparison.html``, clipped the same way.

Needs Playwright and the system Chromium (``LOADGEN_CHROMIUM``: another binary); 2-4 min:

    nice python benchmarks/screens.py --tree . --out /tmp/screens-main --label main
    nice python benchmarks/screens.py --tree ../wt-branch --out /tmp/screens-branch
"""

from __future__ import annotations

import argparse
import html
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ALL_DRAWN = "() => Array.from(document.querySelectorAll('div.lg-plot')).every(d => d.querySelector('svg.main-svg'))"
COLUMNS = 160
DEMO_GUARD_S = 900  # the demo ends by itself; this only stops a hang
DRAW_GUARD_MS = 120_000
PAGES = (("report-chunked", "chunked/report.html"), ("report-unchunked", "unchunked/report.html"))


class ScreensError(Exception):
    """Something this script cannot do; printed as one line."""


def run_demo(tree: Path, folder: Path, seconds: float | None) -> tuple[int, str, float]:
    """``loadgen demo`` of ``tree`` writing under ``folder``: exit code, output, seconds."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "COLUMNS": str(COLUMNS),
        "PYTHONUNBUFFERED": "1",
        "NO_COLOR": "1",
    }
    env.pop("FORCE_COLOR", None)
    cmd = [sys.executable, "-m", "loadgen", "demo", "--out", str(folder / "demo")]
    if seconds is not None:
        cmd += ["--seconds", str(seconds)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            cwd=folder,  # the tree's own workloads, nothing written into it
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=DEMO_GUARD_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise ScreensError(f"loadgen demo did not end within {DEMO_GUARD_S} s") from exc
    return proc.returncode, proc.stdout.replace(str(folder), "$TMP"), time.perf_counter() - t0


def console_page(text: str, title: str) -> str:
    """The console's text as one HTML page: a monospace ``<pre>``, nothing loaded."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>"
        "body{margin:0;background:#0f172a}"
        "pre{margin:0;padding:16px 20px;display:inline-block;color:#e5e7eb;background:#0f172a;"
        "font:13px/1.35 'DejaVu Sans Mono','Liberation Mono',Menlo,Consolas,monospace;white-space:pre}"
        f"</style></head><body><pre>{html.escape(text)}</pre></body></html>\n"
    )


def chromium() -> str:
    exe = os.environ.get("LOADGEN_CHROMIUM", "/usr/bin/chromium")
    if not Path(exe).is_file():
        raise ScreensError(f"no Chromium at {exe} (apt-get install chromium, or set LOADGEN_CHROMIUM)")
    return exe


def shoot(page: Any, url: str, path: Path, max_height: int, *, plots: bool) -> str:
    """Open ``url``, wait for its plots (if any), save a full-page PNG clipped at
    ``max_height`` px (0: the whole page); returns a line that says what was saved."""
    page.goto(url)
    note = ""
    if plots:
        try:
            page.wait_for_function(ALL_DRAWN, timeout=DRAW_GUARD_MS)
        except Exception:  # a page that never draws is still worth a look: say so
            note = " (not every plot was drawn)"
    height = int(page.evaluate("document.documentElement.scrollHeight"))
    width = int(page.evaluate("document.documentElement.scrollWidth"))
    clip = None
    if max_height and height > max_height:
        clip = {"x": 0, "y": 0, "width": width, "height": max_height}
        note += f" (clipped at {max_height} of {height} px)"
    page.screenshot(path=str(path), full_page=True, clip=clip)
    return f"{path}  {width}x{min(height, max_height or height)} px{note}"


def screens(tree: Path, out: Path, label: str, seconds: float | None, max_height: int) -> list[str]:
    """Run the demo of ``tree`` and save its screens in ``out``; the lines to print."""
    exe = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise ScreensError("playwright is not installed (pip install playwright)") from exc
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="loadgen-screens-") as tmp:
        folder = Path(tmp)
        code, text, took = run_demo(tree, folder, seconds)
        lines.append(f"loadgen demo of {tree}: exit {code} in {took:.0f} s")
        console_txt = out / f"{label}-console.txt"
        console_txt.write_text(text)
        lines.append(str(console_txt))
        console_html = folder / "console.html"
        console_html.write_text(console_page(text, f"{label}: loadgen demo"))
        with tempfile.TemporaryDirectory(prefix="loadgen-screens-chromium-") as profile, sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile, executable_path=exe, headless=True, args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 900}
            )
            try:
                page = ctx.new_page()
                page.goto(console_html.as_uri())
                png = out / f"{label}-console.png"
                page.locator("pre").screenshot(path=str(png))
                lines.append(str(png))
                demo = folder / "demo"
                for name, rel in (*PAGES, ("comparison", "comparison.html")):
                    src = demo / rel
                    if not src.is_file():  # no stale PNG of an earlier run left beside the new ones
                        (out / f"{label}-{name}.png").unlink(missing_ok=True)
                        lines.append(f"no {rel} written: not shot")
                        continue
                    lines.append(shoot(page, src.as_uri(), out / f"{label}-{name}.png", max_height, plots=True))
            finally:
                ctx.close()
    if code != 0:
        lines.append(f"warning: loadgen demo exited {code}; see {console_txt}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", type=Path, required=True, help="a loadgen source tree (the folder holding loadgen/)")
    ap.add_argument("--out", type=Path, required=True, help="where the text and PNGs go")
    ap.add_argument("--label", help="prefix of the files written (default: the tree's folder name)")
    ap.add_argument("--seconds", type=float, help="the demo's seconds per level (default: the demo's own)")
    ap.add_argument("--max-height", type=int, default=2000, help="clip pages at this many px (0: whole page)")
    args = ap.parse_args(argv)
    tree = args.tree.resolve()
    label = args.label or tree.name
    try:
        if not (tree / "loadgen" / "__main__.py").is_file():
            raise ScreensError(f"--tree: {args.tree} holds no loadgen package (no loadgen/__main__.py)")
        if args.max_height < 0:
            raise ScreensError(f"--max-height must be 0 or more, not {args.max_height}")
        if args.seconds is not None and not args.seconds > 0:
            raise ScreensError(f"--seconds must be more than 0, not {args.seconds}")
        if not label or "/" in label or label.startswith("."):
            raise ScreensError(f"--label must be a plain file name prefix, not {label!r}")
        for line in screens(tree, args.out, label, args.seconds, args.max_height):
            print(line)
    except ScreensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
