"""Peak memory of a 2-request run over a large dataset file.

Writes a ShareGPT JSONL file of about ``--mb`` MB (synthetic words; one prompt of 50-1,200
words and an answer of 20-400 per entry), the same entries as one ShareGPT JSON array,
and their prompts as a CSV, then runs ``loadgen run --requests 2`` over each against the
scripted server (its own process, on 127.0.0.1) and prints the run's peak RSS (the
child's ``ru_maxrss``) and wall time next to the file's size; a first run with synthetic
prompts is the baseline (the interpreter and loadgen's imports).

    python benchmarks/dataset_memory.py [--mb 300] [--folder DIR] [--tree CHECKOUT ...]

``--tree`` runs another checkout's loadgen too (e.g. the commit before, for a before/after
table); each file is written once.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.scripted_server import Script, ScriptedServerProcess  # noqa: E402


def write_files(folder: Path, mb: int) -> dict[str, Path]:
    r = random.Random(0)
    words = [f"w{i}" for i in range(2000)]
    jsonl, array, table = folder / "big.jsonl", folder / "big.json", folder / "big.csv"
    size, target = 0, mb << 20
    with jsonl.open("w") as f_l, array.open("w") as f_a, table.open("w", newline="") as f_c:
        rows = csv.writer(f_c)
        rows.writerow(["prompt", "output_tokens"])
        f_a.write("[")
        while size < target:
            prompt = " ".join(r.choices(words, k=r.randint(50, 1200)))
            entry = {
                "conversations": [
                    {"from": "human", "value": prompt},
                    {"from": "gpt", "value": " ".join(r.choices(words, k=r.randint(20, 400)))},
                ]
            }
            line = json.dumps(entry)
            f_l.write(line + "\n")
            f_a.write(("," if size else "") + "\n" + line)
            rows.writerow([prompt, 64])
            size += len(line) + 1
        f_a.write("\n]\n")
    return {"sharegpt jsonl": jsonl, "sharegpt json": array, "prompts csv": table}


def run(tree: Path, url: str, path: Path | None, out: Path) -> tuple[int, float, int]:
    """(peak RSS in bytes, seconds, exit code) of one 2-request run (no file: synthetic prompts)."""
    given = ["--dataset", str(path)] if path is not None else ["--prompt-tokens", "8"]
    cmd = [
        sys.executable,
        "-m",
        "loadgen.cli",
        "run",
        "--url",
        url,
        *given,
        "--requests",
        "2",
        "--concurrency",
        "1",
        "--output-tokens",
        "4",
        "--quiet",
        "--out",
        str(out),
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss * 1024, time.perf_counter() - t0, proc.returncode  # (Linux: kB)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=300, help="size of the JSONL file in MB")
    ap.add_argument("--folder", type=Path, default=None, help="write the files here (default: a temporary folder)")
    ap.add_argument("--tree", type=Path, action="append", default=[], help="also run this checkout's loadgen")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ScriptedServerProcess(Script(ttft_s=0.001, itl_s=0.001)) as srv:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        files = write_files(folder, args.mb)
        print(f"{'file':<16} {'MB':>6} {'checkout':<24} {'peak RSS MB':>11} {'s':>6} {'exit':>4}")
        k = 0
        for name, path in {"none (synthetic)": None, **files}.items():
            for tree in [ROOT, *args.tree]:
                rss, secs, rc = run(tree, srv.url, path, Path(tmp) / f"run{k}")
                k += 1
                print(
                    f"{name:<16} {path.stat().st_size / 1e6 if path else 0:>6.0f} {str(tree)[-24:]:<24} {rss / 1e6:>11.0f} "
                    f"{secs:>6.1f} {rc:>4}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
