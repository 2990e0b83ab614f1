"""Hand-built records for the metrics tests: times in ms from a fixed origin."""

from __future__ import annotations

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
