"""The in-flight cap as credits: one process's, and shared by processes through a semaphore."""

from __future__ import annotations

import asyncio
import multiprocessing as mp

from loadgen.load.credits import LocalCredits, SharedCredits


def test_local_credits_wait_and_time_out() -> None:
    async def main() -> list[bool]:
        cr = LocalCredits(1)
        first = await cr.acquire(1.0)
        late = await cr.acquire(0.01)  # none free, none released in time
        waiter = asyncio.ensure_future(cr.acquire(5.0))
        await asyncio.sleep(0)
        cr.release()
        return [first, late, await waiter]

    assert asyncio.run(main()) == [True, False, True]


def test_shared_credits_hand_over_in_order_and_drop_at_the_deadline() -> None:
    sem = mp.get_context("spawn").BoundedSemaphore(2)

    async def main() -> tuple[list[bool], int]:
        cr = SharedCredits(sem)
        got = [await cr.acquire(1.0), await cr.acquire(1.0)]  # the two free ones
        w1 = asyncio.ensure_future(cr.acquire(5.0))
        w2 = asyncio.ensure_future(cr.acquire(5.0))
        dropped = await cr.acquire(0.05)  # behind w1 and w2, and nothing is released in time
        cr.release()
        cr.release()
        got += [await w1, await w2, dropped]
        cr.release()
        cr.release()
        return got, sum(sem.acquire(False) for _ in range(3))

    got, free_after = asyncio.run(main())
    assert got == [True, True, True, True, False]
    assert free_after == 2  # every credit came back; none leaked to the dropped waiter
