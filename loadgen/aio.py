"""The event loop every loadgen process runs on: uvloop where it exists, else asyncio's."""

from __future__ import annotations

import asyncio
import sys

__all__ = ["new_event_loop"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    if sys.platform != "win32":
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
