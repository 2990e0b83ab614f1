"""Hostile servers against ``loadgen run``: time, peak RSS, exit code and records per probe.

Each probe starts :class:`tests.hostile_server.HostileServer` on loopback and runs one
bounded ``loadgen run`` under ``/usr/bin/time -v`` (and a hard ``timeout``), with the
loadgen found on ``--tree`` (a checkout: compare a fix with the code before it):

    python benchmarks/hostile.py --tree /path/to/checkout [--vs /path/to/other] [--probes longline,...]

With ``--vs`` the same probes run on a second checkout and a table prints both, side by
side (the first tree as "before", the second as "after").

Probes: ``longline`` (a 64 MiB SSE line in a 64 KiB gzip body, ``--timeout 40``),
``error_bomb`` (HTTP 500, a gzip body inflating to 256 MiB, 4 requests at concurrency 2),
``models_bomb`` (``/v1/models`` inflating to 512 MiB), ``trickle`` (``/v1/models`` one byte
per second, SIGTERM after 5 s). Issue 35's: ``interim`` (100 Continue and 103 Early Hints
before each 200, 4 requests at concurrency 1), ``endless_header`` (a header line that never
ends, ``--timeout 60``), ``stream_flood`` (1 GiB of tiny valid output events for requests
of 5 output tokens, ``--timeout 30``), ``echo_percent`` (the API key echoed percent-encoded
in an error body: the files of the run folder that hold the key or one of its forms),
``save_result_own`` (``--save-result`` naming the run's own ``records.jsonl``), ``sighup``
(SIGHUP during a run of slow streams: the exit code and whether summary.json was written),
``trace_1e300`` (an agent trace whose tool call lasts 1e300 ms; SIGTERM after 20 s),
``watch_devzero`` (``loadgen watch`` of a folder whose run.json links to /dev/zero, under a
6 GiB address-space limit; SIGTERM after 8 s).
Also ``lag``: the worst event-loop stall seen by a ticker
while the transport takes a 64 MiB flood of tiny events beside a normal stream.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hostile_server import HostileServer, echo_forms

MIB = 1 << 20
PROBES = {
    "longline": (
        {"streams": ["longline"], "size": 64 * MIB},
        ["--requests", "1", "--concurrency", "1", "--timeout", "40"],
        None,
    ),
    "error_bomb": ({"streams": ["error_bomb"], "size": 256 * MIB}, ["--requests", "4", "--concurrency", "2"], None),
    "models_bomb": ({"models": "bomb", "size": 512 * MIB}, ["--requests", "1"], None),
    "trickle": ({"models": "trickle", "trickle_s": 1.0}, ["--requests", "1"], 5.0),
    "interim": ({"streams": ["interim"]}, ["--requests", "4", "--concurrency", "1"], None),
    "endless_header": ({"streams": ["endless_header"], "size": 8 << 30}, ["--requests", "1", "--timeout", "60"], None),
    "stream_flood": (
        {"streams": ["stream_flood"], "size": 1 << 30},
        ["--requests", "1", "--timeout", "30", "--output-tokens", "5"],
        None,
    ),
    "echo_percent": (
        {"streams": ["form:status:percent, dashes only"]},
        ["--requests", "2", "--api-key-env", "HOSTILE_KEY"],
        None,
    ),
    "save_result_own": ({}, ["--requests", "2", "--save-result", "{out}/records.jsonl"], None),
    "sighup": ({"streams": ["slow"]}, ["--requests", "4", "--concurrency", "2"], ("HUP", 4.0)),
    "trace_1e300": ({}, ["--trace", "{tmp}/trace.jsonl"], ("TERM", 20.0)),
    "watch_devzero": ({}, ["WATCH"], ("TERM", 8.0)),
}
TRACE = [
    {"task": "a", "step": 1, "output_tokens": 4, "tool_tokens": 20, "tool_latency_ms": 1e300, "t_s": 0},
    {"task": "a", "step": 2, "output_tokens": 4},
]
KEY = "sk-SEC-AAA111"


def probe(tree: str, name: str) -> dict[str, object]:
    server_kw, extra, term_after = PROBES[name]
    with HostileServer(**server_kw) as srv, tempfile.TemporaryDirectory() as tmp:  # type: ignore[arg-type]
        out = Path(tmp) / "run"
        (Path(tmp) / "trace.jsonl").write_text("".join(json.dumps(row) + "\n" for row in TRACE))
        if extra == ["WATCH"]:  # loadgen watch of a folder whose run.json is a link to /dev/zero
            out.mkdir()
            (out / "run.json").symlink_to("/dev/zero")
            extra = []
        cmd = [
            "timeout",
            "-s",
            "KILL",
            "300",
            "/usr/bin/time",
            "-v",
            sys.executable,
            "-m",
            "loadgen.cli",
            *(["watch", str(out), "--port", "0"] if name == "watch_devzero" else ["run"]),
            "--url",
            srv.url,
            "--api",
            "completions",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "4",
            "--no-calibrate",
            "--out",
            str(out),
            "--quiet",
            *(a.replace("{out}", str(out)).replace("{tmp}", tmp) for a in extra),
        ]
        if "--trace" in extra:  # a trace brings its own lengths
            at = cmd.index("--prompt-tokens")
            del cmd[at : at + 4]
            cmd[cmd.index("completions")] = "chat"  # an agent's calls are chat calls
        if name == "watch_devzero":
            cmd = cmd[: cmd.index("--url")]  # watch takes no run flags
            cmd[:0] = ["prlimit", f"--as={6 << 30}"]  # 6 GiB of address space: the old read stops there
        env = {**os.environ, "PYTHONPATH": tree, "HOSTILE_KEY": KEY}
        t0 = time.monotonic()
        # cwd: python -m puts the working folder first on sys.path, before PYTHONPATH
        proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if term_after is not None:
            sig, after = term_after if isinstance(term_after, tuple) else ("TERM", term_after)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(after)  # a process that ends sooner is not waited for
            # the python process is the grandchild (timeout -> time -> python)
            for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
                for gp in subprocess.run(["pgrep", "-P", pid], capture_output=True, text=True).stdout.split():
                    os.kill(int(gp), getattr(signal, f"SIG{sig}"))
        stdout, stderr = proc.communicate()
        wall = time.monotonic() - t0
        text = stderr.decode(errors="replace")
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        code = re.search(r"Exit status: (\d+)", text)
        killed = re.search(r"Command terminated by signal (\d+)", text)
        recs = []
        if (out / "records.jsonl").exists():
            for line in (out / "records.jsonl").read_text().splitlines():
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    recs.append({"status": "(damaged line)"})
        statuses: dict[str, int] = {}
        for r in recs:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        last = [
            ln
            for ln in (stdout + stderr).decode(errors="replace").splitlines()
            if ln.strip() and not ln.startswith("\t") and "Command being timed" not in ln
        ]
        errors = sorted({str(r.get("error"))[:90] for r in recs if r.get("error")})
        forms = [KEY, *echo_forms(KEY).values()]
        leaked = sorted(
            f.name for f in out.glob("*") if f.is_file() and any(x.encode() in f.read_bytes() for x in forms)
        )
        return {
            "probe": name,
            "server_requests": srv.handled,
            "summary": (out / "summary.json").exists(),
            "key_in": leaked,
            "wall_s": round(wall, 1),
            "peak_rss_mib": round(int(rss.group(1)) / 1024) if rss else None,
            "exit": f"killed by signal {killed.group(1)}"
            if killed
            else int(code.group(1))
            if code
            else proc.returncode,
            "records": statuses,
            "errors": errors,
            "line": last[0][:160] if last else "",
        }


_LAG = """
import asyncio, sys, time
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.records import RequestRecord, RequestSpec

async def main(url, kind):
    cfg = TransportConfig(base_url=url, dialect=get_dialect("completions"), options=DialectOptions(model="h"))
    tr = make_transport(kind, cfg)
    worst, stop = 0.0, False
    async def ticker():
        nonlocal worst
        while not stop:
            t = time.perf_counter(); await asyncio.sleep(0.001); worst = max(worst, time.perf_counter() - t - 0.001)
    tick = asyncio.create_task(ticker())
    recs = [RequestRecord(index=i) for i in range(2)]
    t0 = time.perf_counter()
    await asyncio.gather(*(tr.send(RequestSpec(index=i, prompt="x", prompt_tokens=1, max_tokens=4), r) for i, r in enumerate(recs)))
    wall = time.perf_counter() - t0
    stop = True; await tick; await tr.aclose()
    print(kind, round(worst * 1000, 1), round(wall, 2), [r.status.value for r in recs], [len(r.events) for r in recs])

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def lag(tree: str) -> None:
    """The worst loop stall (ms) while one stream is a 64 MiB flood and one is normal."""
    for kind in ("aiohttp", "httpx"):
        with HostileServer(streams=["flood", "ok"], size=64 * MIB) as srv:
            res = subprocess.run(
                [sys.executable, "-c", _LAG, srv.url, kind],
                env={**os.environ, "PYTHONPATH": tree},
                cwd=tree,
                capture_output=True,
                text=True,
                timeout=300,
            )
            print(json.dumps({"probe": "lag", "out": res.stdout.strip(), "err": res.stderr.strip()[-300:]}), flush=True)


def _cell(row: dict[str, object]) -> str:
    recs = ",".join(f"{k} {v}" for k, v in sorted(row["records"].items())) or "none"  # type: ignore[union-attr]
    extra = f"; key in {','.join(row['key_in'])}" if row["key_in"] else ""  # type: ignore[arg-type]
    summary = "" if row["summary"] else "; no summary"
    return (
        f"{row['wall_s']} s, {row['peak_rss_mib']} MiB, exit {row['exit']}, "
        f"{recs}; server got {row['server_requests']}{summary}{extra}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", required=True, help="the checkout whose loadgen runs")
    ap.add_argument("--vs", help="a second checkout: both run, printed side by side")
    ap.add_argument("--probes", default=",".join(PROBES))
    args = ap.parse_args()
    rows = []
    for name in args.probes.split(","):
        if name == "lag":
            lag(args.tree)
            if args.vs:
                lag(args.vs)
            continue
        before = probe(args.tree, name)
        print(json.dumps(before), flush=True)
        if args.vs:
            after = probe(args.vs, name)
            print(json.dumps(after), flush=True)
            rows.append((name, _cell(before), _cell(after)))
    if rows:
        print("\n| probe | before | after |\n|---|---|---|")
        for name, b, a in rows:
            print(f"| {name} | {b} | {a} |")


if __name__ == "__main__":
    main()
