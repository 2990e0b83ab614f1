"""Shared by the simulator benchmarks: feed requests into an engine core in virtual time.

``drive`` sends ``work`` (prompt tokens, max tokens) at the ``arrivals`` heap's times, each
send to the user it pops; closed loop, a user's next send is pushed when its request
finishes. Prompts are deterministic token ids. It returns each request's send time, its
outputs as ``(time, tokens)`` and the finish order. Request ids are ``u{user}-r{index}``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from loadgen.server.engine import ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams


@dataclass
class Driven:
    sent_at: dict[str, float] = field(default_factory=dict)
    times: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)  # request id -> its position in ``work``


def drive(
    core: Any,
    clock: ManualClock,
    work: list[tuple[int, int]],
    arrivals: list[tuple[float, int]],
    *,
    closed: bool,
    ignore_eos: bool = False,
    max_events: int = 50_000_000,
) -> Driven:
    heapq.heapify(arrivals)
    out = Driven()
    sent = 0
    for _ in range(max_events):
        t_core = core.next_event_time()
        t_arr = arrivals[0][0] if arrivals and sent < len(work) else None
        if t_core is None and t_arr is None:
            break
        if t_arr is not None and (t_core is None or t_arr <= t_core):
            clock.advance_to(t_arr)
            _, user = heapq.heappop(arrivals)
            prompt, max_tokens = work[sent]
            rid = f"u{user}-r{sent}"
            out.index[rid] = sent
            sent += 1
            core.add_request(
                EngineRequest(
                    rid,
                    [1000 + (sent * 7 + i) % 5000 for i in range(prompt)],
                    SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos),
                )
            )
            out.sent_at[rid], out.times[rid] = clock.t, []
            continue
        assert t_core is not None
        clock.advance_to(t_core)
        for o in core.poll(t_core):
            out.times[o.request_id].append((t_core, len(o.token_ids)))
            if o.finish_reason is not None:
                out.finished.append(o.request_id)
                if closed:
                    heapq.heappush(arrivals, (t_core, int(o.request_id[1 : o.request_id.index("-")])))
    return out
