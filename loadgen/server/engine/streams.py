"""The request side both engines share: one output queue per open request, one ``generate``.

An engine's step loop (the sim's task, or the torch engine's receiver) hands each
:class:`~loadgen.server.engine.interface.TokenOutput` to :meth:`OutputStreams.deliver`;
``generate`` drains the request's queue until an output carries a ``finish_reason``. An
exception in a queue (a rejected request, a failed engine) is raised from ``generate``
instead. The engine says how a request goes in and how it is taken back out
(:meth:`submit`, :meth:`cancel`); everything else about streaming is here.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Iterable

from loadgen.errors import EngineError
from loadgen.server.engine.interface import EngineRequest, TokenOutput

__all__ = ["OutputStreams"]

_Item = TokenOutput | BaseException


class OutputStreams(ABC):
    """Base class of the engines: per-request queues and :meth:`generate` (see the module
    docstring). Subclasses implement :meth:`submit` and :meth:`cancel`."""

    def __init__(self) -> None:
        self._queues: dict[str, asyncio.Queue[_Item]] = {}

    @abstractmethod
    def submit(self, request: EngineRequest) -> None:
        """Hand the request to the engine; raise ``EngineError`` subclasses to reject it."""

    @abstractmethod
    def cancel(self, request_id: str) -> None:
        """Abort a request whose consumer left before its last output."""

    async def generate(self, request: EngineRequest) -> AsyncGenerator[TokenOutput, None]:
        """Add the request and yield its outputs until one has a ``finish_reason``.

        Raises :class:`~loadgen.errors.PromptTooLong`, :class:`~loadgen.errors.QueueFull`
        or :class:`~loadgen.errors.EngineError` on the first iteration, before yielding.
        Closing the generator early (``aclose``, cancellation) aborts the request.
        """
        rid = request.request_id
        if rid in self._queues:
            raise EngineError(f"duplicate request id {rid!r}")
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.submit(request)
        self._queues[rid] = queue
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                finished = item.finish_reason is not None
                yield item
                if finished:
                    return
        finally:
            if self._queues.get(rid) is queue:
                del self._queues[rid]
            if not finished:
                self.cancel(rid)

    def deliver(self, outputs: Iterable[TokenOutput]) -> None:
        """Route outputs to their requests' queues (outputs of closed requests are dropped)."""
        for out in outputs:
            queue = self._queues.get(out.request_id)
            if queue is not None:
                queue.put_nowait(out)

    def reject(self, request_id: str, error: BaseException) -> None:
        """Raise ``error`` from the request's ``generate``."""
        queue = self._queues.get(request_id)
        if queue is not None:
            queue.put_nowait(error)

    def fail_all(self, error: BaseException) -> None:
        """Raise ``error`` from every open request's ``generate``."""
        for queue in self._queues.values():
            queue.put_nowait(error)

    def end_all(self) -> list[str]:
        """End every open request with ``finish_reason="abort"``; return their ids."""
        ids = list(self._queues)
        for rid in ids:
            self._queues[rid].put_nowait(TokenOutput(rid, [], finish_reason="abort"))
        return ids
