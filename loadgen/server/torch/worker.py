"""The torch engine's own side: the shared step loop, in a spawned process or a thread.

:func:`engine_main` is the target of the engine process (or of a thread, in tests). It
builds the model, the runner and a real-time :class:`~loadgen.server.engine.core.EngineCore`
from the server's :class:`~loadgen.server.config.ServeConfig`, says ``("ready", info)`` (or
``("failed", message)``), then loops: take the server's messages (``("req", adds,
aborts)`` or ``("stop",)``), run one step, send back ``("step", outputs, rejects,
stats)``. The engine process exits as soon as the server dies, and ignores SIGINT and
SIGHUP (the server stops it).

Docs: docs/server.md, "The torch engine" (the loop, the clock, shutdown).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loadgen.errors import EngineError
from loadgen.server.engine.core import EngineCore
from loadgen.server.engine.interface import EngineRequest, SamplingParams, TokenOutput

if TYPE_CHECKING:
    from loadgen.server.config import ServeConfig

__all__ = ["build_core", "decode_outputs", "default_threads", "encode_request", "engine_main", "graph_batch_sizes"]

_STOP = ("stop",)
_GRAPH_GATHER = 1 << 30  # bytes of gathered K/V per layer up to which decodes use CUDA graphs


def default_threads() -> int:
    """CPU threads for torch: all cores this process may use but one (left to the client
    and the HTTP server), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


# ---------------------------------------------------------------------- wire format
def encode_request(request: EngineRequest, arrival: float) -> tuple[Any, ...]:
    """A request as a plain tuple for the pipe."""
    return (request.request_id, request.prompt_token_ids, dataclasses.astuple(request.params), arrival)


def _decode_request(item: tuple[Any, ...]) -> tuple[EngineRequest, float]:
    rid, prompt, params, arrival = item
    p = SamplingParams(*params)
    p.stop_token_ids = tuple(p.stop_token_ids)
    return EngineRequest(rid, list(prompt), p), arrival


def _encode_outputs(outputs: list[TokenOutput]) -> list[tuple[Any, ...]]:
    return [(o.request_id, o.token_ids, o.finish_reason, o.num_cached_tokens, o.timings) for o in outputs]


def decode_outputs(items: list[tuple[Any, ...]]) -> list[TokenOutput]:
    """The outputs of a ``("step", ...)`` message."""
    return [TokenOutput(*item) for item in items]


# ---------------------------------------------------------------------- building
def graph_batch_sizes(sizes: Sequence[int], max_num_seqs: int) -> list[int]:
    """The padded decode batch sizes: ``sizes`` (``--cuda-graph-sizes``; default 1, 2, 4,
    ... 256) below ``max_num_seqs``, and ``max_num_seqs`` itself, so every batch pads."""
    base = sizes or (1, 2, 4, 8, 16, 32, 64, 128, 256)
    return sorted({b for b in base if b < max_num_seqs} | {max_num_seqs})


def build_core(config: ServeConfig) -> tuple[EngineCore, dict[str, Any]]:
    """The step loop of ``config`` (model, runner, scheduler); also the facts the server
    reports."""
    import torch

    from loadgen.server.tokenizer import NUM_RESERVED
    from loadgen.server.torch.loader import build_model, resolve_dtype
    from loadgen.server.torch.memory import plan_kv_blocks
    from loadgen.server.torch.runner import TorchRunner

    shape, opts, limits = config.shape, config.torch, config.limits
    device = opts.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EngineError(f"--device {device}: CUDA is not available to this torch build ({torch.__version__})")
    threads = opts.threads or default_threads()
    torch.set_num_threads(threads)
    dtype_name = resolve_dtype(opts.dtype, device)
    if device.startswith("cuda:"):
        torch.cuda.set_device(torch.device(device))
    model = build_model(shape, device=device, dtype=getattr(torch, dtype_name), seed=config.seed)
    graphs = opts.cuda_graphs and device.startswith("cuda")
    # graphs: a gathered K+V of at most _GRAPH_GATHER per captured shape, twice that reserved
    # for the graph pool
    blocks = limits.num_gpu_blocks or plan_kv_blocks(
        model, limits, kv_cache_gb=opts.kv_cache_gb, graph_memory_bytes=2 * _GRAPH_GATHER if graphs else 0
    )
    random_weights = shape.weights == "random"  # meaningless text has no natural end: no EOS
    engine_config = limits.engine_config(
        shape, num_gpu_blocks=blocks, eos_token_id=None if random_weights else shape.eos_token_id
    )
    engine_config.max_model_len = min(engine_config.max_model_len, blocks * limits.block_size)
    runner = TorchRunner(
        model,
        num_blocks=blocks,
        block_size=limits.block_size,
        suppress_token_ids=range(NUM_RESERVED) if random_weights else (),
        cuda_graphs=graphs,
        decode_batch_sizes=graph_batch_sizes(opts.cuda_graph_sizes, limits.seq_limit),
        graph_memory_bytes=_GRAPH_GATHER,
    )
    num_graphs, capture_s = runner.capture_graphs(engine_config.max_model_len)
    info = {
        "device": device,
        "dtype": dtype_name,
        "threads": threads,
        "num_gpu_blocks": blocks,
        "max_model_len": engine_config.max_model_len,
        "kv_cache_bytes": runner.kv_bytes,
        "weight_bytes": model.weight_bytes,
        "model": config.model,
        "torch": torch.__version__,
        "cuda_graphs": num_graphs,
        "graph_capture_s": round(capture_s, 2),
    }
    return EngineCore(engine_config, runner, time.monotonic, realtime=True), info


# ---------------------------------------------------------------------- the loop
def _reader(conn: Any, inbox: queue.Queue[Any], exit_with_parent: bool) -> None:
    """Move the server's messages into ``inbox``; on end of file the server is gone."""
    parent = os.getppid()
    try:
        while True:
            if conn.poll(1.0):
                msg = conn.recv()
                inbox.put(msg)
                if msg == _STOP:
                    conn.close()
                    return
            elif exit_with_parent and os.getppid() != parent:
                break
    except (EOFError, OSError):
        pass
    if exit_with_parent:
        os._exit(0)  # the server died: end now, even mid-step
    inbox.put(_STOP)
    conn.close()


def engine_main(inbox_conn: Any, outbox_conn: Any, config: ServeConfig, exit_with_parent: bool = True) -> None:
    """Build the engine and serve the server's messages until told to stop (see the
    module docstring). ``exit_with_parent``: the process form (not for threads)."""
    if exit_with_parent:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    inbox: queue.Queue[Any] = queue.Queue()
    threading.Thread(
        target=_reader, args=(inbox_conn, inbox, exit_with_parent), name="engine-inbox", daemon=True
    ).start()
    try:
        try:
            core, info = build_core(config)
        except Exception as exc:
            outbox_conn.send(("failed", f"{type(exc).__name__}: {exc}"))
            return
        outbox_conn.send(("ready", info))
        try:
            _serve(core, inbox, outbox_conn)
        except Exception:
            outbox_conn.send(("failed", traceback.format_exc()))
    finally:
        outbox_conn.close()


def _serve(core: EngineCore, inbox: queue.Queue[Any], out: Any) -> None:
    idle = True
    while True:
        msgs = [inbox.get()] if idle else []
        while True:
            try:
                msgs.append(inbox.get_nowait())
            except queue.Empty:
                break
        rejects: list[tuple[str, str, str]] = []
        for msg in msgs:
            if msg[0] == "stop":
                core.abort_all()
                out.send(("stopped", dataclasses.astuple(core.stats())))
                return
            _, adds, aborts = msg
            for item in adds:
                request, arrival = _decode_request(item)
                try:
                    core.add_request(request, at=arrival)
                except EngineError as exc:
                    rejects.append((request.request_id, type(exc).__name__, str(exc)))
            for rid in aborts:
                core.abort(rid)
        outputs = core.poll()  # one step, when there is work
        idle = core.next_event_time() is None
        if msgs or outputs:
            out.send(("step", _encode_outputs(outputs), rejects, dataclasses.astuple(core.stats())))
