"""The torch engine as the HTTP server sees it: an :class:`AsyncEngine` over a pipe.

:class:`TorchEngine` lives in the server process (whose event loop runs aiohttp) and
never imports torch. :meth:`TorchEngine.start` spawns the engine process (or, with
``engine_mode="thread"``, a background thread of this process: for tests) running
:func:`~loadgen.server.torch.worker.engine_main`, and waits for it to be ready.

Traffic, one message per tick each way: requests and aborts made during one turn of the
event loop go out together in one ``("req", adds, aborts)`` message (written by a sender
thread, so a busy engine never blocks the event loop); every engine step comes back as
one ``("step", outputs, rejects, stats)`` message, read by a receiver thread and handed
to the event loop, which routes each output to its request's queue. A rejected request
(prompt too long, queue full) raises :class:`~loadgen.errors.PromptTooLong` /
:class:`~loadgen.errors.QueueFull` from the first iteration of :meth:`generate`, as the
contract asks; closing a generator early sends an abort, which frees the KV blocks.
``stats()`` returns the engine's latest snapshot. If the engine dies, every open
request fails with :class:`~loadgen.errors.EngineError` and later ones are refused.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import threading
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from loadgen.errors import EngineError, PromptTooLong, QueueFull
from loadgen.server.engine.interface import EngineRequest, EngineStats
from loadgen.server.engine.streams import OutputStreams
from loadgen.server.tokenizer import Tokenizer
from loadgen.server.torch.loader import load_tokenizer
from loadgen.server.torch.worker import decode_outputs, encode_request, engine_main

if TYPE_CHECKING:
    from loadgen.server.config import ServeConfig

__all__ = ["TorchEngine", "torch_engine"]

_ERRORS: dict[str, type[EngineError]] = {"PromptTooLong": PromptTooLong, "QueueFull": QueueFull}


class TorchEngine(OutputStreams):
    """An :class:`~loadgen.server.engine.interface.AsyncEngine` running the torch engine
    of ``config`` in a spawned process (``engine_mode="process"``) or a thread
    (``engine_mode="thread"``).

    ``tokenizer`` is the model's own (None: the API's word tokenizer). ``info`` holds what
    the engine reported when ready (device, dtype, threads, KV blocks, ...).
    """

    def __init__(self, config: ServeConfig, *, tokenizer: Tokenizer | None = None) -> None:
        super().__init__()
        shape = config.shape
        self.config = config
        self.tokenizer = tokenizer
        self.model_name = config.model
        self.vocab_size = tokenizer.vocab_size if tokenizer is not None else shape.vocab_size
        self.max_model_len = config.scheduler.max_model_len or shape.max_model_len
        self.info: dict[str, Any] = {}
        self.process: Any = None  # multiprocessing.Process in process mode
        self._thread: threading.Thread | None = None
        self._receiver_thread: threading.Thread | None = None
        self._to_engine: Connection | None = None
        self._from_engine: Connection | None = None
        self._send_q: queue.Queue[Any] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._adds: list[tuple[Any, ...]] = []
        self._aborts: list[str] = []
        self._flush_pending = False
        self._stats = EngineStats()
        self._failure: str | None = None
        self._stopped = False
        self._running = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the engine and wait until its model is loaded (idempotent)."""
        if self._running:
            return
        if self._failure is not None:
            raise EngineError(f"the torch engine failed: {self._failure}")
        self._stopped = False
        self._loop = asyncio.get_running_loop()
        self._send_q = queue.Queue()
        to_engine_r, to_engine_w = mp.Pipe(duplex=False)
        from_engine_r, from_engine_w = mp.Pipe(duplex=False)
        self._to_engine, self._from_engine = to_engine_w, from_engine_r
        if self.config.torch.engine_mode == "process":
            ctx = mp.get_context("spawn")
            self.process = ctx.Process(
                target=engine_main,
                name="loadgen-engine",
                daemon=True,
                args=(to_engine_r, from_engine_w, self.config, True),
            )
            self.process.start()
            to_engine_r.close()  # the child holds its own copies: EOF when either side dies
            from_engine_w.close()
        else:
            self._thread = threading.Thread(
                target=engine_main,
                name="loadgen-engine",
                args=(to_engine_r, from_engine_w, self.config, False),
                daemon=True,
            )
            self._thread.start()
        msg = await self._loop.run_in_executor(None, self._wait_ready)
        if msg[0] != "ready":
            await self._reap()
            self._failure = msg[1]
            raise EngineError(f"the torch engine did not start: {msg[1]}")
        self.info = msg[1]
        self.max_model_len = int(self.info["max_model_len"])
        self._running = True
        threading.Thread(target=self._sender, name="engine-sender", daemon=True).start()
        self._receiver_thread = threading.Thread(target=self._receiver, name="engine-receiver", daemon=True)
        self._receiver_thread.start()

    def _wait_ready(self) -> tuple[Any, ...]:
        conn = self._from_engine
        assert conn is not None
        timeout = self.config.torch.startup_timeout_s
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if conn.poll(0.2):
                    msg: tuple[Any, ...] = conn.recv()
                    return msg
            except (EOFError, OSError):
                return ("failed", "the engine process exited during startup")
            if self.process is not None and not self.process.is_alive() and not conn.poll(0):
                return ("failed", f"the engine process exited with code {self.process.exitcode}")
        return ("failed", f"not ready within {timeout:.0f} s")

    async def stop(self) -> None:
        """Stop the engine (its requests are aborted) and end open requests with
        ``finish_reason="abort"``."""
        self._stopped = True
        if self._running:
            self._running = False
            self._send_q.put(("stop",))
            assert self._loop is not None
            await self._loop.run_in_executor(None, self._join, 15.0)
        await self._reap()
        self.end_all()

    def _join(self, timeout: float) -> None:
        if self.process is not None:
            self.process.join(timeout)
        elif self._thread is not None:
            self._thread.join(timeout)

    async def _reap(self) -> None:
        """Make sure the engine process is gone and the pipes are closed."""
        self._send_q.put(None)  # ends the sender thread
        proc = self.process
        if proc is not None and proc.is_alive():
            proc.terminate()
            assert self._loop is not None
            await self._loop.run_in_executor(None, proc.join, 5.0)
            if proc.is_alive():
                proc.kill()
                await self._loop.run_in_executor(None, proc.join, 5.0)
        receiver = self._receiver_thread
        if receiver is not None and receiver.is_alive():
            # the engine's end is closed now: the receiver sees EOF and returns. Closing the
            # pipe under a thread still reading it would race with that read.
            assert self._loop is not None
            await self._loop.run_in_executor(None, receiver.join, 5.0)
        for conn in (self._to_engine, self._from_engine):
            if conn is not None:
                conn.close()

    # ------------------------------------------------------------------ threads
    def _sender(self) -> None:
        conn = self._to_engine
        assert conn is not None
        while True:
            msg = self._send_q.get()
            if msg is None:
                return
            try:
                conn.send(msg)
            except (OSError, ValueError):  # the engine is gone; the receiver reports it
                return

    def _receiver(self) -> None:
        conn = self._from_engine
        loop = self._loop
        assert conn is not None and loop is not None
        while True:
            try:
                msg = conn.recv()
            except Exception:  # EOF, a closed pipe, a torn message: the engine is gone
                msg = ("failed", "the engine process exited")
            try:
                loop.call_soon_threadsafe(self._dispatch, msg)
            except RuntimeError:  # the event loop is closed
                return
            if msg[0] in ("failed", "stopped"):
                return

    # ------------------------------------------------------------------ messages
    def _dispatch(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "step":
            _, outputs, rejects, stats = msg
            self._stats = EngineStats(*stats)
            for rid, name, text in rejects:
                self.reject(rid, _ERRORS.get(name, EngineError)(text))
            self.deliver(decode_outputs(outputs))
        elif kind == "stopped":
            self._stats = EngineStats(*msg[1])
        elif kind == "failed" and not self._stopped:
            self._failure = str(msg[1])
            self._running = False
            self.fail_all(EngineError(f"the torch engine failed: {self._failure}"))

    def _flush(self) -> None:
        self._flush_pending = False
        if self._adds or self._aborts:
            self._send_q.put(("req", self._adds, self._aborts))
            self._adds, self._aborts = [], []

    def _schedule_flush(self) -> None:
        if not self._flush_pending and self._loop is not None:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    # ------------------------------------------------------------------ requests
    def submit(self, request: EngineRequest) -> None:
        """Queue the request for the next message to the engine."""
        if self._failure is not None:
            raise EngineError(f"the torch engine failed: {self._failure}")
        if not self._running:
            raise EngineError("the torch engine is not running")
        self._adds.append(encode_request(request, time.monotonic()))
        self._schedule_flush()

    def cancel(self, request_id: str) -> None:
        """Queue an abort for the next message (it frees the request's KV blocks)."""
        if self._running:
            self._aborts.append(request_id)
            self._schedule_flush()

    def stats(self) -> EngineStats:
        """The engine's gauges and counters as of its last step."""
        return self._stats


def torch_engine(config: ServeConfig) -> TorchEngine:
    """The torch engine of ``config`` (not started). The model's own tokenizer
    (``smollm2-135m``) is loaded here, converting its GGUF file into the cache the first
    time; torch itself is imported only in the engine process (or thread)."""
    if config.engine != "torch":
        raise ValueError(f"a config for the {config.engine} engine")
    return TorchEngine(config, tokenizer=load_tokenizer(config.shape))
