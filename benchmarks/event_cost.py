"""Client CPU per streamed event, stage by stage, in one process (no network).

Realistic SSE bytes (one OpenAI chat or completions content-delta event per read, a final
event with ``finish_reason`` and ``usage``, then ``[DONE]``) go through the same pieces
the transports use: the SSE decoder alone, the SSE decoder plus JSON decoding plus the
dialect's ``parse_event``, and the whole :class:`~loadgen.client.stream.StreamState`
(``feed`` of every read, then ``close``), which is the per-event path minus the socket.
Each stage prints µs per event (best of ``--repeat`` runs, so noise from other processes
counts least).

    python benchmarks/event_cost.py [--events 20000] [--repeat 5] [--api chat] [--before COMMIT]

``--before COMMIT`` measures that commit's ``loadgen`` too (``git archive`` into a
temporary folder, run in a child process) and prints both, side by side. Not included:
the event loop's ``call_soon`` per read (the stream parses at once here), the socket and
the HTTP parser; ``client_overhead.py`` measures the whole client.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import loadgen
from loadgen.client.dialects import get_dialect
from loadgen.client.sse import SSEDecoder
from loadgen.client.stream import StreamState
from loadgen.records import RequestRecord


def _chunks(api: str, n: int) -> list[bytes]:
    if api == "chat":
        ev = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
        last = (
            b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
            + f'"usage":{{"prompt_tokens":10,"completion_tokens":{n},"total_tokens":{n + 10}}}}}\n\n'.encode()
        )
    else:
        ev = b'data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n'
        last = (
            b'data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"length"}],'
            + f'"usage":{{"prompt_tokens":10,"completion_tokens":{n},"total_tokens":{n + 10}}}}}\n\n'.encode()
        )
    return [ev] * n + [last, b"data: [DONE]\n\n"]


def _best(fn: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time_ns()
        fn()
        best = min(best, time.process_time_ns() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--api", default="chat", choices=["chat", "completions"])
    ap.add_argument("--before", metavar="COMMIT", help="also measure COMMIT's loadgen and print both")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    dialect = get_dialect(args.api)
    chunks = _chunks(args.api, args.events)
    n = len(chunks)

    def sse() -> None:
        dec = SSEDecoder()
        for c in chunks:
            dec.feed(c)

    def sse_parse() -> None:
        dec = SSEDecoder()
        parse = dialect.parse_event
        decode = getattr(dialect, "decode", json.loads)  # json.loads in trees from before decode
        for c in chunks:
            for ev in dec.feed(c):
                if ev.data != "[DONE]":
                    parse(decode(ev.data))

    def whole() -> None:
        rec = RequestRecord(index=0)
        state = StreamState(rec, dialect, defer=False)
        t = 0
        for c in chunks:
            t += 1000
            state.feed(c, t)
        state.close(t)
        assert len(rec.events) == args.events, len(rec.events)

    stages = [("SSE decode", sse), ("SSE + JSON + dialect parse", sse_parse), ("whole StreamState", whole)]
    after = {name: _best(fn, args.repeat) / 1e3 / n for name, fn in stages}
    if args.json:
        print(json.dumps(after))
        return
    before = _measure_commit(args.before, args) if args.before else None
    tree = os.path.dirname(os.path.dirname(os.path.abspath(loadgen.__file__)))
    print(f"loadgen from {tree}; api {args.api}; {args.events} content events per stream; best of {args.repeat}")
    if before is None:
        print(f"{'stage':<28} {'µs/event':>9}")
        for name, us in after.items():
            print(f"{name:<28} {us:>9.2f}")
        return
    print(f"{'stage':<28} {'before':>9} {'after':>9} {'after/before':>12}   (µs/event; before: {args.before})")
    for name, us in after.items():
        print(f"{name:<28} {before[name]:>9.2f} {us:>9.2f} {us / before[name]:>12.2f}")


def _measure_commit(commit: str, args: argparse.Namespace) -> dict[str, float]:
    """This benchmark run on ``commit``'s loadgen (``git archive`` into a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", commit, "loadgen"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        cmd = [sys.executable, __file__, "--json", "--events", str(args.events), "--repeat", str(args.repeat)]
        out = subprocess.run(
            [*cmd, "--api", args.api],
            env={**os.environ, "PYTHONPATH": tmp},
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    result: dict[str, float] = json.loads(out)
    return result


if __name__ == "__main__":
    main()
