"""Soak: memory, descriptors and records of a long fixed-rate run, client and server.

``loadgen serve`` (sim engine, a fast preset so the server is not the bottleneck) and
``loadgen run`` (one open-loop level at a fixed rate for the whole duration) run as
real subprocesses on 127.0.0.1. Every ``--interval`` seconds we sample each side's
resident memory (VmRSS of ``/proc/PID/status``, the process and its children) and open
descriptors (``/proc/PID/fd``), and how many requests have finished (the server's
``vllm:request_success_total``). At the end the run folder's ``records.jsonl`` lines
are compared with the requests sent (the client's schedule less its drops, and the
server's own count), and a verdict gives each side's memory growth in MB per 100,000
requests: the slope of a least-squares line through the samples taken after warm-up
while the level runs.

Target (issue 14): under 50 MB per 100,000 requests on each side, descriptors flat,
nothing lost.

    python benchmarks/soak.py [--minutes 30] [--rate 40] [--output-tokens 32]

The run stops by itself: the client's level is bounded by ``--minutes``, and a client
that outlives it by two minutes is killed. Traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from loadgen.server.process import ServerProcess

TARGET_MB_PER_100K = 50.0
FAST_SERVER = ["--gpu", "b200", "--model", "llama-3.1-8b", "--overhead-ms", "0.2"]
_SUCCESS = re.compile(r"^vllm:request_success_total\{[^}]*\}\s+([0-9.eE+]+)", re.MULTILINE)
_REJECTED = re.compile(r"^loadgen:requests_rejected_total\{[^}]*\}\s+([0-9.eE+]+)", re.MULTILINE)


@dataclass(slots=True)
class Sample:
    t_s: float
    requests: int  # finished at the server so far
    client_rss_mb: float
    server_rss_mb: float
    client_fds: int
    server_fds: int
    client_sockets: int = 0  # of the fds: sockets (connections, the listening one)
    server_sockets: int = 0


@dataclass(slots=True)
class Verdict:
    samples: list[Sample]
    warmup_s: float
    sent: int  # the client's schedule less its drops (summary.json)
    server_finished: int  # requests the server finished or rejected (its /metrics)
    records: int  # lines of records.jsonl
    client_exit: int
    client_mb_per_100k: float | None = None
    server_mb_per_100k: float | None = None
    client_fd_drift: int = 0
    server_fd_drift: int = 0
    client_socket_drift: int = 0  # of the drift: sockets (a connection pool that grew)
    server_socket_drift: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.sent - self.records


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            kids.append(int(entry))
    return kids


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, MB (0 for a process gone)."""
    total_kb = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total_kb += int(line.split()[1])
                        break
        except OSError:
            continue
    return total_kb / 1024


def open_fds(pid: int) -> tuple[int, int]:
    """Open descriptors of ``pid`` and its descendants, and how many of them are sockets."""
    n = sockets = 0
    for p in _tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        n += len(fds)
        for fd in fds:
            try:
                sockets += os.readlink(f"/proc/{p}/fd/{fd}").startswith("socket:")
            except OSError:
                continue
    return n, sockets


def server_finished(url: str) -> int:
    """Requests the reference server finished (any reason) or rejected, from /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return int(sum(float(v) for v in _SUCCESS.findall(text)) + sum(float(v) for v in _REJECTED.findall(text)))


def mb_per_100k(requests: list[int], mb: list[float]) -> float | None:
    """Slope of the least-squares line of memory over requests, MB per 100,000 requests."""
    x = np.asarray(requests, dtype=np.float64)
    if x.size < 3 or x.max() - x.min() < 100:
        return None
    slope = np.polyfit(x, np.asarray(mb, dtype=np.float64), 1)[0]
    return float(slope * 100_000)


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))


def _sent(out: Path) -> int:
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return -1
    sent = 0
    for level in summary.get("levels", []):
        sched = level.get("schedule") or {}
        if sched:
            sent += int(sched["scheduled"]) - int(sched.get("dropped", 0))
        else:
            sent += int(level["requests"]["total"])
    return sent


def soak(
    minutes: float,
    rate: float,
    *,
    prompt_tokens: int = 128,
    output_tokens: int = 32,
    interval_s: float = 10.0,
    warmup_s: float | None = None,
    out: Path | None = None,
    server_args: list[str] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
) -> Verdict:
    """Run the soak and return its samples and verdict (``on_sample(sample)`` is called
    as each sample is taken, when given)."""
    duration_s = minutes * 60
    warm = min(max(duration_s * 0.2, interval_s), 300.0) if warmup_s is None else warmup_s
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        run_dir = out if out is not None else Path(tmp) / "run"
        log = open(Path(tmp) / "client.log", "w+b")  # noqa: SIM115 (closed below)
        server = ServerProcess([*FAST_SERVER, *(server_args or [])])
        with server as url:
            assert server.proc is not None
            srv = server.proc.pid
            cmd = [
                sys.executable,
                "-m",
                "loadgen.cli",
                "run",
                "--url",
                url,
                "--api",
                "completions",
                "--rate",
                str(rate),
                "--arrival",
                "constant",
                "--duration",
                str(duration_s),
                "--prompt-tokens",
                str(prompt_tokens),
                "--output-tokens",
                str(output_tokens),
                "--no-calibrate",
                "--quiet",
                "--out",
                str(run_dir),
                "--label",
                "soak",
            ]
            client = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, COLUMNS="120"))
            samples: list[Sample] = []
            t0 = time.monotonic()
            deadline = t0 + duration_s + 120
            try:
                next_t = t0
                while client.poll() is None and time.monotonic() < deadline:
                    if time.monotonic() >= next_t:
                        (cfd, csock), (sfd, ssock) = open_fds(client.pid), open_fds(srv)
                        s = Sample(
                            time.monotonic() - t0,
                            server_finished(url),
                            rss_mb(client.pid),
                            rss_mb(srv),
                            cfd,
                            sfd,
                            csock,
                            ssock,
                        )
                        samples.append(s)
                        if on_sample is not None:
                            on_sample(s)
                        next_t += interval_s
                    time.sleep(min(0.2, max(next_t - time.monotonic(), 0.0)))
            finally:
                if client.poll() is None:
                    client.kill()
                code = client.wait()
            finished = server_finished(url)
        log.seek(0)
        tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
        log.close()
        v = Verdict(samples, warm, _sent(run_dir), finished, _lines(run_dir / "records.jsonl"), code)
        if code != 0:
            v.notes.append(f"client exit {code}: " + " | ".join(tail))
    # the fit: samples after warm-up while the level runs (the client's exit closes its
    # connections, a one-off step in the server's memory, not growth per request)
    after = [s for s in samples if warm <= s.t_s <= duration_s] or samples
    v.client_mb_per_100k = mb_per_100k([s.requests for s in after], [s.client_rss_mb for s in after])
    v.server_mb_per_100k = mb_per_100k([s.requests for s in after], [s.server_rss_mb for s in after])
    if after:
        v.client_fd_drift = after[-1].client_fds - after[0].client_fds
        v.server_fd_drift = after[-1].server_fds - after[0].server_fds
        v.client_socket_drift = after[-1].client_sockets - after[0].client_sockets
        v.server_socket_drift = after[-1].server_sockets - after[0].server_sockets
    return v


HEADER = f"{'time s':>7} {'requests':>9} {'client MB':>9} {'server MB':>9} {'client fds':>10} {'server fds':>10}"


def row(s: Sample) -> str:
    return (
        f"{s.t_s:>7.0f} {s.requests:>9,} {s.client_rss_mb:>9.1f} {s.server_rss_mb:>9.1f} "
        f"{s.client_fds:>10} {s.server_fds:>10}"
    )


def _growth(x: float | None) -> str:
    if x is None:
        return "n/a (too few samples after warm-up)"
    mark = "ok" if x < TARGET_MB_PER_100K else "OVER TARGET"
    return f"{x:+.1f} MB per 100,000 requests ({mark}, target < {TARGET_MB_PER_100K:.0f})"


def verdict_lines(v: Verdict) -> list[str]:
    n = v.samples[-1].requests if v.samples else 0
    return [
        f"verdict (linear fit over the samples after {v.warmup_s:.0f} s of warm-up; {n:,} requests sampled)",
        f"  client memory growth: {_growth(v.client_mb_per_100k)}",
        f"  server memory growth: {_growth(v.server_mb_per_100k)}",
        (
            f"  client fd drift: {v.client_fd_drift:+d} (sockets {v.client_socket_drift:+d})   "
            f"server fd drift: {v.server_fd_drift:+d} (sockets {v.server_socket_drift:+d}); sockets are the "
            "client's keep-alive pool, as large as the most requests in flight so far"
        ),
        (
            f"  sent {v.sent:,} (client schedule less drops), server finished {v.server_finished:,}, "
            f"records written {v.records:,}: {'nothing lost' if v.lost == 0 else f'{v.lost:,} LOST'}"
        ),
        *(f"  note: {x}" for x in v.notes),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=40.0, help="requests per second (constant arrivals)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=None, help="seconds left out of the fit (default 20%%, max 300)")
    ap.add_argument("--out", type=Path, default=None, help="keep the run folder here (default: a temporary one)")
    ap.add_argument(
        "--request-log", type=int, default=None, help="the server's --request-log (default: its own, 10,000 requests)"
    )
    args = ap.parse_args()
    print(
        f"soak: {args.minutes:g} min at {args.rate:g} req/s, prompt {args.prompt_tokens} / output "
        f"{args.output_tokens} tokens, server: loadgen serve {' '.join(FAST_SERVER)}",
        flush=True,
    )
    print(HEADER, flush=True)
    v = soak(
        args.minutes,
        args.rate,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        interval_s=args.interval,
        warmup_s=args.warmup,
        out=args.out,
        server_args=[] if args.request_log is None else ["--request-log", str(args.request_log)],
        on_sample=lambda s: print(row(s), flush=True),
    )
    print()
    print("\n".join(verdict_lines(v)), flush=True)


if __name__ == "__main__":
    main()
