"""The shared KV link in virtual time: processor sharing, re-planned on start and cancel."""

from __future__ import annotations

import pytest

from loadgen.server.sim.kv_link import SharedLink


def drain(link: SharedLink) -> dict[str, float]:
    done: dict[str, float] = {}
    for _ in range(100):
        t = link.next_done()
        if t is None:
            return done
        done.update(dict.fromkeys(link.pop_done(t), t))
    raise AssertionError("the link did not empty")


def test_equal_transfers_started_together_both_take_twice_as_long() -> None:
    link = SharedLink()
    link.start("a", 1.0, at=10.0)
    link.start("b", 1.0, at=10.0)
    assert len(link) == 2
    assert drain(link) == {"a": pytest.approx(12.0), "b": pytest.approx(12.0)}


def test_a_later_transfer_shares_from_its_start() -> None:
    link = SharedLink()
    link.start("a", 1.0, at=0.0)
    link.start("b", 1.0, at=0.4)  # a has 0.6 left; both at half speed
    done = drain(link)
    assert done["a"] == pytest.approx(0.4 + 2 * 0.6)  # 1.6
    assert done["b"] == pytest.approx(2.0)  # 0.6 done by 1.6, then 0.4 alone: work-conserving


def test_a_cancelled_transfer_gives_its_share_back() -> None:
    link = SharedLink()
    link.start("a", 1.0, at=0.0)
    link.start("b", 1.0, at=0.0)
    assert link.cancel("b", at=0.5)  # a did 0.25 by then
    assert not link.cancel("b", at=0.5) and "b" not in link
    assert drain(link) == {"a": pytest.approx(1.25)}
    assert link.next_done() is None
