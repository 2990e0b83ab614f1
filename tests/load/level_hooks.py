"""Run a hook beside a level of a worker pool (a kill, an interrupt) in the tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from loadgen.load.runner import LevelPlan, LevelResult


@contextlib.contextmanager
def beside_first_level(pool_class: Any, hook: Callable[[Any], Awaitable[None]]) -> Iterator[None]:
    """Run ``hook(pool)`` beside the first level any ``pool_class`` pool runs (cancelled at
    that level's end); later levels run untouched."""
    original = pool_class.run_level
    calls: list[int] = []

    async def run_level(self: Any, plan: LevelPlan) -> LevelResult:
        calls.append(plan.index)
        if len(calls) > 1:
            return await original(self, plan)  # type: ignore[no-any-return]
        task = asyncio.ensure_future(hook(self))
        try:
            return await original(self, plan)  # type: ignore[no-any-return]
        finally:
            task.cancel()

    pool_class.run_level = run_level
    try:
        yield
    finally:
        pool_class.run_level = original
