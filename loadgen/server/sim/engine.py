"""The sim engine in the server's event loop: a core stepped on its deadlines.

:class:`SimEngine` implements :class:`~loadgen.server.engine.interface.AsyncEngine`
(``generate`` and the per-request queues come from
:class:`~loadgen.server.engine.streams.OutputStreams`). One task runs the step loop: poll
the core (finish due steps, start the next ones), deliver each request's new tokens, then
wait until the core's next event — a step's absolute deadline — or until a request arrives
or leaves. With nothing to do it waits on an ``asyncio.Event``: no busy loop.

The clock defaults to ``time.monotonic``, which is what asyncio's default event loop
(and uvloop) use for ``loop.time()``; waits are ``loop.call_later`` timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from loadgen.errors import EngineError
from loadgen.server.engine.core import Clock, Core
from loadgen.server.engine.interface import EngineRequest, EngineStats
from loadgen.server.engine.streams import OutputStreams
from loadgen.server.sim.disagg import DisaggCore
from loadgen.server.sim.telemetry import GpuSample, GpuTelemetry

__all__ = ["SimEngine"]


class SimEngine(OutputStreams):
    """An :class:`AsyncEngine` over a core (a single pool or a disaggregated pair)."""

    def __init__(
        self,
        core: Core,
        *,
        model_name: str,
        vocab_size: int,
        max_model_len: int,
        clock: Clock = time.monotonic,
        telemetry: GpuTelemetry | None = None,
        supports_pooling: bool = True,
    ) -> None:
        super().__init__()
        self.supports_pooling = supports_pooling  # embeddings and scores (not disaggregated)
        self.telemetry = telemetry
        self.core = core
        self.model_name = model_name
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self._clock = clock
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
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for request_id in self.end_all():
            self.core.abort(request_id)

    def _ensure_running(self) -> None:
        if self._failure is not None:
            raise EngineError(f"the engine's step loop failed: {self._failure!r}") from self._failure
        if self._stopped:
            raise EngineError("the engine is stopped")
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine-steps")

    # ------------------------------------------------------------------ requests
    def submit(self, request: EngineRequest) -> None:
        """Queue the request in the core (rejections raise here) and wake the loop."""
        self._ensure_running()
        self.core.add_request(request)
        self._poke()

    def cancel(self, request_id: str) -> None:
        """Abort the request in the core and wake the loop."""
        self.core.abort(request_id)
        self._poke()

    def stats(self) -> EngineStats:
        """The core's gauges and counters (see ``EngineStats``)."""
        return self.core.stats()

    def gpu_telemetry(self) -> list[GpuSample]:
        """DCGM-style samples of every simulated GPU since the previous call
        (:mod:`loadgen.server.sim.telemetry`); none without telemetry."""
        if self.telemetry is None:
            return []
        core = self.core
        pools = core.cores if isinstance(core, DisaggCore) else [core]
        stats = [p.stats() for p in pools]
        return self.telemetry.sample(self._clock(), [s.busy_s for s in stats], [s.kv_usage for s in stats])

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
                self.deliver(self.core.poll(self._clock()))
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
            error = EngineError(f"the engine's step loop failed: {exc!r}")
            error.__cause__ = exc
            self.fail_all(error)
