"""Synthetic finished records for the benchmarks that time the metrics, comparisons and writers."""

from __future__ import annotations

import numpy as np

from loadgen.records import ErrorKind, RequestRecord


def synthetic_records(
    n: int,
    e: int,
    seed: int = 0,
    *,
    gap_ns: float = 1e6,
    correlated: bool = False,
    two_tokens: float = 0.0,
    classes: tuple[str, ...] = ("chat", "rag"),
    as_run: bool = False,
) -> list[RequestRecord]:
    """``n`` requests of ``e`` output events, sent ``gap_ns`` apart on average (exponential):
    TTFT lognormal around 50 ms, in send order an AR(1) when ``correlated`` (neighbours share a
    queue); gaps gamma around 20 ms with 2% coalesced reads and ``two_tokens`` of the events
    carrying two tokens; every 97th request failed. ``as_run``: as a run writes them (level 0,
    HTTP 200, first answer, connection reused; the failures HTTP 503, no warm-up requests);
    otherwise the first 16 are warm-up and the failures time-outs. Events are lists of two
    Python ints, as the client builds them."""
    rng = np.random.default_rng(seed)
    sent = 10**12 + np.cumsum(rng.exponential(gap_ns, n)).astype(np.int64)
    if correlated:
        noise = np.empty(n)
        steps = rng.normal(0.0, 0.3, n)
        noise[0] = steps[0]
        for i in range(1, n):
            noise[i] = 0.8 * noise[i - 1] + 0.6 * steps[i]
        ttft = (50e6 * np.exp(noise)).astype(np.int64)
    else:
        ttft = rng.lognormal(np.log(50e6), 0.5, n).astype(np.int64)
    gaps = rng.gamma(4.0, 5e6, (n, e)).astype(np.int64)
    gaps[:, 0] = 0
    gaps[rng.random((n, e)) < 0.02] = 0  # coalesced reads...
    tokens = np.where(rng.random((n, e)) < two_tokens, 2, 1) if two_tokens else np.ones((n, e), dtype=np.int64)
    times = sent[:, None] + ttft[:, None] + np.cumsum(gaps, axis=1)
    recs = []
    for i in range(n):
        t, k = times[i].tolist(), tokens[i].tolist()
        rec = RequestRecord(
            index=i,
            request_class=classes[i % len(classes)],
            target_prompt_tokens=512,
            target_output_tokens=e,
            scheduled_ns=int(sent[i]),
            sent_ns=int(sent[i]) + 50_000,
            done_ns=t[-1] + 1_000_000,
            events=[[a, b] for a, b in zip(t, k, strict=True)],
            prompt_tokens=500,
            completion_tokens=sum(k),
        )
        if as_run:
            rec.level, rec.http_status, rec.first_answer_ns, rec.new_connection = 0, 200, t[0], False
            if i % 97 == 0:
                rec.fail(ErrorKind.HTTP_ERROR, "HTTP 503: overloaded", t[-1], 503)
        else:
            rec.warmup = i < 16
            if i % 97 == 0:
                rec.status = ErrorKind.TIMEOUT
        recs.append(rec)
    return recs
