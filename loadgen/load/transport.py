"""The seam between the load runner and the network (owned by the runner).

Concrete transports live in :mod:`loadgen.client`; the runner only knows this Protocol.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from loadgen.records import RequestRecord, RequestSpec

__all__ = ["Transport", "Warms"]


class Transport(Protocol):
    """Sends one request and fills in its record.

    ``send`` sets ``record.sent_ns`` right before the request leaves, appends one
    ``[t_ns, n_tokens]`` per output-carrying event, sets ``done_ns``, usage and status.
    It never raises for a failed request (the failure goes on the record), except
    ``asyncio.CancelledError``, which it re-raises after marking the record cancelled.
    """

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Warms(Protocol):
    """A transport that can open connections ahead of a level (the runner warms when
    the plan asks and the transport can)."""

    async def warm(self, n: int) -> int:
        """Open up to ``n`` connections and keep them for the requests to come; the number
        opened. Never raises for a failed connect."""
        ...
