"""The async engine: drives an engine core from the server's event loop.

:class:`SimEngine` implements :class:`~loadgen.server.engine.interface.AsyncEngine`.
One task runs the step loop: poll the core (finish due steps, start the next ones),
deliver each request's new tokens to its ``asyncio.Queue``, then wait until the core's
next event — a step's absolute deadline — or until a request arrives or leaves. With
nothing to do it waits on an ``asyncio.Event``: no busy loop.

The clock defaults to ``time.monotonic``, which is what asyncio's default event loop
(and uvloop) use for ``loop.time()``; waits are ``loop.call_later`` timers.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncGenerator, Union

from loadgen.errors import EngineError
from loadgen.server.engine.core import Clock, Core
from loadgen.server.engine.interface import EngineRequest, EngineStats, TokenOutput

__all__ = ["SimEngine"]

_Item = Union[TokenOutput, BaseException]


class SimEngine:
    """An :class:`AsyncEngine` over a core (a single pool or a disaggregated pair)."""

    def __init__(self, core: Core, *, model_name: str, vocab_size: int, max_model_len: int,
                 clock: Clock = time.monotonic) -> None:
        self.core = core
        self.model_name = model_name
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self._clock = clock
        self._queues: dict[str, asyncio.Queue[_Item]] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._failure: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the step loop (idempotent)."""
        self._stopped = False
        self._ensure_running()

    async def stop(self) -> None:
        """Stop the step loop; requests in flight end with ``finish_reason="abort"``."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        for request_id, queue in list(self._queues.items()):
            self.core.abort(request_id)
            queue.put_nowait(TokenOutput(request_id, [], finish_reason="abort"))

    def _ensure_running(self) -> None:
        if self._failure is not None:
            raise EngineError(f"the engine's step loop failed: {self._failure!r}") from self._failure
        if self._stopped:
            raise EngineError("the engine is stopped")
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine-steps")

    # ------------------------------------------------------------------ requests
    async def generate(self, request: EngineRequest) -> AsyncGenerator[TokenOutput, None]:
        """Add the request and yield its outputs until one has a ``finish_reason``.

        Raises :class:`~loadgen.errors.PromptTooLong`, :class:`~loadgen.errors.QueueFull`
        or :class:`~loadgen.errors.EngineError` on the first iteration, before yielding.
        Closing the generator early (``aclose``, cancellation) aborts the request.
        """
        self._ensure_running()
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.core.add_request(request)
        request_id = request.request_id
        self._queues[request_id] = queue
        self._poke()
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise EngineError(f"the engine's step loop failed: {item!r}") from item
                finished = item.finish_reason is not None
                yield item
                if finished:
                    return
        finally:
            if self._queues.get(request_id) is queue:
                del self._queues[request_id]
            if not finished:
                self.core.abort(request_id)
                self._poke()

    def stats(self) -> EngineStats:
        """The core's gauges and counters (see ``EngineStats``)."""
        return self.core.stats()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------ step loop
    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                for out in self.core.poll(self._clock()):
                    queue = self._queues.get(out.request_id)
                    if queue is not None:
                        queue.put_nowait(out)
                deadline = self.core.next_event_time()
                timer = None
                if deadline is not None:
                    delay = deadline - self._clock()
                    if delay <= 0.0:
                        await asyncio.sleep(0)  # more is due: let consumers run first
                        continue
                    timer = loop.call_later(delay, wake.set)
                await wake.wait()
                wake.clear()
                if timer is not None:
                    timer.cancel()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail every request instead of hanging them
            self._failure = exc
            for queue in self._queues.values():
                queue.put_nowait(exc)
