"""Hand-built records for the metrics tests: times in ms from a fixed origin."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadgen.records import ErrorKind, RequestRecord, TokenSource

MS = 1_000_000
T0 = 10**12  # an arbitrary monotonic origin (ns)


def ns(ms: float) -> int:
    return T0 + round(ms * MS)


def rec(
    index: int = 0,
    events: Sequence[tuple[float, int]] = (),
    *,
    sent: float = 0.0,
    done: float | None = None,
    scheduled: float | None = None,
    status: ErrorKind = ErrorKind.OK,
    warmup: bool = False,
    request_class: str = "default",
    prompt_tokens: int | None = None,
    target_prompt: int = 0,
    target_output: int = 0,
    token_source: TokenSource = TokenSource.EVENTS,
) -> RequestRecord:
    """A record sent at ``sent`` ms with ``events`` as (ms, tokens); done at ``done`` ms
    (default: the last event, else ``sent``); scheduled at ``scheduled`` (default: sent)."""
    if done is None:
        done = events[-1][0] if events else sent
    return RequestRecord(
        index=index,
        request_class=request_class,
        target_prompt_tokens=target_prompt,
        target_output_tokens=target_output,
        scheduled_ns=ns(sent if scheduled is None else scheduled),
        sent_ns=ns(sent),
        done_ns=ns(done),
        events=[[ns(t), n] for t, n in events],
        status=status,
        prompt_tokens=prompt_tokens,
        warmup=warmup,
        token_source=token_source,
    )


def call(
    task: int,
    step: int,
    steps: int,
    sent: float,
    done: float,
    *,
    branch: int = 0,
    tool: float = 0.0,
    status: ErrorKind = ErrorKind.OK,
) -> RequestRecord:
    """An agent call: its first token 5 ms per step after the send, its last at ``done``
    (none when it failed); its target prompt 1000 * step**2 tokens."""
    first = sent + 5 * step
    events = [] if status is not ErrorKind.OK else [(first, 1)] + ([(done, 1)] if done > first else [])
    r = rec(task * 100 + step * 10 + branch, events, sent=sent, done=done, status=status, target_prompt=1000 * step**2)
    return dataclasses.replace(r, task=task, step=step, branch=branch, steps=steps, tool_ms=tool)


def agent_level() -> list[RequestRecord]:
    return [
        # task 0, completed: a fan-out at step 2 whose branch-0 tool overlaps branch 1's call
        call(0, 1, 3, 0, 30, tool=20),  # LLM [0, 30], tool [30, 50]
        call(0, 2, 3, 50, 70, tool=40),  # LLM [50, 70], tool [70, 110]: [70, 100] is branch 1's LLM time
        call(0, 2, 3, 50, 100, branch=1),  # LLM [50, 100]
        call(0, 3, 3, 120, 140),  # waited [110, 120]
        # task 1, completed in 200 ms: LLM 40 + 145, tool 10, waiting 5
        call(1, 1, 2, 0, 40, tool=10),
        call(1, 2, 2, 55, 200),
        # task 2 failed at step 2
        call(2, 1, 3, 10, 50),
        call(2, 2, 3, 60, 65, status=ErrorKind.HTTP_ERROR),
        # task 3 cut by the level's end after its step 2
        call(3, 1, 4, 150, 300),
        call(3, 2, 4, 320, 400, tool=50),
        # task 4 stopped after step 1 with every call ok: cut by the loop (a closed loop's
        # budget, or a step dropped at --max-in-flight), incomplete, not failed
        call(4, 1, 3, 0, 20),
        # task 5 cut by the level's end: its call in flight cancelled
        call(5, 1, 2, 100, 150),
        call(5, 2, 2, 200, 250, status=ErrorKind.CANCELLED),
        # not an agent's call
        rec(999, [(10, 1), (50, 1)], sent=0, target_prompt=50_000),
    ]


def fanned_tasks(n: int, level: int = 0, start: float = 1000.0) -> list[RequestRecord]:
    """``n`` completed three-step tasks 10 ms apart, a two-branch fan-out at step 2 and a
    30 ms tool after step 1 and after branch 0 of step 2 (four calls, two tools each)."""
    out = []
    for k in range(n):
        s = start + 10 * k
        for r in (
            call(k, 1, 3, s, s + 40, tool=30),
            call(k, 2, 3, s + 70, s + 120, tool=30),
            call(k, 2, 3, s + 70, s + 150, branch=1),
            call(k, 3, 3, s + 160, s + 200),
        ):
            out.append(dataclasses.replace(r, level=level, index=level * 10**6 + r.index))
    return out
