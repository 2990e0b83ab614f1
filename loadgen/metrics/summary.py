"""One load level's records -> the level entry of ``summary.json`` (a public contract).

Warm-up records are dropped first; ``requests`` counts every other record; latency, token
and event statistics come from the ``ok`` ones only. The whole window runs from the first
``sent_ns`` to the last ``done_ns`` of all measured records; the headline rates are over
the window in which the load was held (:mod:`loadgen.metrics.held`), the whole window's
beside them; the ``steady`` window trims the whole one by the profile's ``trim``. Multi-turn and reasoning levels add ``by_turn``,
``sessions`` and ``reasoning`` (:mod:`loadgen.metrics.turns`), non-streamed ones
``non_streamed`` (:mod:`loadgen.metrics.answers`).

Every key and what it counts: docs/metrics.md, "Per level".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.errors import ConfigError
from loadgen.metrics.answers import non_streamed
from loadgen.metrics.capacity import windows_of
from loadgen.metrics.catalog import metrics, per_request
from loadgen.metrics.client import LATE_NS, WorkerStats, lag_over_time, late_sends
from loadgen.metrics.held import HeldWindow, held_window
from loadgen.metrics.level_intervals import proportion, rate_interval, with_intervals
from loadgen.metrics.per_request import EventArrays, frame_and_events, frame_and_events_from_columns
from loadgen.metrics.results import (
    ClassSummary,
    ClientHealth,
    Connections,
    Distribution,
    Events,
    Goodput,
    Lengths,
    LevelSummary,
    Load,
    RateWindow,
    Requests,
    Schedule,
    Steady,
    Throughput,
    WholeRates,
    WorkerHealth,
    load_mode,
)
from loadgen.metrics.slo import SLO, level_checks, mlperf_bounds, slo_attainment, slo_scores
from loadgen.metrics.stats import distribution, distribution_of_counts
from loadgen.metrics.tasks import with_tasks
from loadgen.metrics.turns import by_turn, images_of, reasoning_of, sessions_of
from loadgen.metrics.verdicts import auto_cut, level_verdicts
from loadgen.numfmt import fmt_latency
from loadgen.records import RequestRecord

__all__ = ["level_window_ns", "summarize_level"]

_RUNQUEUE_BOUND = 0.05  # a sender runnable but without a CPU more than this share of the time stamps late
CLOCK_NOTE_MS = 1.0  # workers' clock offsets less certain than this: the level says so
_FIELDS = frozenset(f.name for f in dataclasses.fields(LevelSummary))


def level_window_ns(frame: pd.DataFrame) -> tuple[int, int] | None:
    """``(first sent_ns, last done_ns)`` of a per-request frame; None if it has none."""
    sent = frame["sent_ns"].to_numpy()
    done = frame["done_ns"].to_numpy()
    sent, done = sent[sent != 0], done[done != 0]
    if sent.size == 0 or done.size == 0:
        return None
    start, end = int(sent.min()), int(done.max())
    return (start, end) if end >= start else None


def _rate(amount: float, seconds: float) -> float | None:
    return amount / seconds if seconds > 0 else None


def _prompt_tokens(frame: pd.DataFrame) -> npt.NDArray[np.float64]:
    reported = frame["prompt_tokens"].to_numpy(dtype=np.float64)
    target = frame["target_prompt_tokens"].to_numpy(dtype=np.float64)
    return np.asarray(np.where(np.isnan(reported), target, reported), dtype=np.float64)


def _rates(
    frame: pd.DataFrame,
    ok: npt.NDArray[np.bool_],
    chunks: tuple[npt.NDArray[np.int64], npt.NDArray[np.integer[Any]]],
    window: tuple[int, int],
    whole: bool,
    confidence: float,
) -> WholeRates:
    """The ok requests completed, and their chunks streamed, in ``window`` (all of them
    when ``whole``; else in ``(start, end]``) per second, with their intervals."""
    prompt = _prompt_tokens(frame)
    done = frame["done_ns"].to_numpy()
    t, n = chunks
    if whole:
        inside, out_sum = ok, float(frame["output_tokens"].to_numpy(dtype=np.float64)[ok].sum())
    else:
        inside = ok & (done > window[0]) & (done <= window[1])
        streamed = (t > window[0]) & (t <= window[1])
        t, n = t[streamed], n[streamed]
        out_sum = float(n.sum())
    seconds = (window[1] - window[0]) / 1e9
    rps, out_rate = _rate(float(inside.sum()), seconds), _rate(out_sum, seconds)
    intervals = {
        "requests_per_s": rate_interval(done[inside], None, window, rps, confidence),
        "output_tokens_per_s": rate_interval(t, n, window, out_rate, confidence),
    }
    return WholeRates(
        window_s=seconds,
        requests_per_s=rps,
        output_tokens_per_s=out_rate,
        total_tokens_per_s=_rate(out_sum + float(prompt[inside].sum()), seconds),
        intervals={k: v for k, v in intervals.items() if v is not None} or None,
    )


def _throughput(
    frame: pd.DataFrame,
    ev: EventArrays,
    ok: npt.NDArray[np.bool_],
    window: tuple[int, int] | None,
    held: HeldWindow | None,
    trim: tuple[float, float],
    confidence: float,
) -> tuple[float, Throughput]:
    """The whole window's length in seconds and the throughput: over the ``held`` window
    (the headline), over the whole ``window``, and over its steady part."""
    prompt = _prompt_tokens(frame)
    duration = (window[1] - window[0]) / 1e9 if window else 0.0
    if not window or held is None:
        empty = _rate(float(ok.sum()), duration)
        return duration, Throughput(requests_per_s=empty, whole=WholeRates(window_s=duration, requests_per_s=empty))
    ok_chunks = ev.chunk_mask(ok)
    chunks = (ev.ch_t, ev.ch_n) if ok_chunks.all() else (ev.ch_t[ok_chunks], ev.ch_n[ok_chunks])
    del ok_chunks
    whole = _rates(frame, ok, chunks, window, True, confidence)
    start, end, rule, note = held
    head = whole if rule == "whole" else _rates(frame, ok, chunks, (start, end), False, confidence)
    span_ns = window[1] - window[0]
    lo = window[0] + round(span_ns * trim[0])
    hi = window[1] - round(span_ns * trim[1])
    done = frame["done_ns"].to_numpy()
    inside = ok & (done >= lo) & (done <= hi)
    ok_t, ok_n = chunks
    ch_in = ok_t >= lo  # of the ok chunks (a chunk's events share its time)
    ch_in &= ok_t <= hi
    in_t, in_n = ok_t[ch_in], ok_n[ch_in]
    span = (hi - lo) / 1e9
    steady_out = float(in_n.sum())
    steady = Steady(
        window_s=span,
        requests_per_s=_rate(float(inside.sum()), span),
        output_tokens_per_s=_rate(steady_out, span),
        total_tokens_per_s=_rate(steady_out + float(prompt[inside].sum()), span),
    )
    return duration, Throughput(
        requests_per_s=head.requests_per_s,
        output_tokens_per_s=head.output_tokens_per_s,
        total_tokens_per_s=head.total_tokens_per_s,
        steady=steady,
        output_tokens_per_s_se=_rate_noise(in_t, in_n, (lo, hi)),
        intervals=head.intervals,
        window=RateWindow(rule=rule, start_s=(start - window[0]) / 1e9, end_s=(end - window[0]) / 1e9, note=note),
        whole=whole,
    )


NOISE_BLOCKS = 10


def _rate_noise(
    t_ns: npt.NDArray[np.int64], tokens: npt.NDArray[np.integer[Any]], window: tuple[int, int]
) -> float | None:
    """The standard error of a token rate: ``window`` (the steady one: ramp-up and drain
    are no noise) cut into :data:`NOISE_BLOCKS` equal blocks, the rate in each (the
    ``tokens`` of the chunks whose time ``t_ns`` falls in it, over its length), their
    standard deviation over sqrt(blocks)."""
    span = window[1] - window[0]
    if span <= 0:
        return None
    ids = t_ns - window[0]  # a new array: the steps below work in place
    ids *= NOISE_BLOCKS
    ids //= span
    np.minimum(ids, NOISE_BLOCKS - 1, out=ids)
    sums = np.bincount(ids, weights=tokens.astype(np.float64), minlength=NOISE_BLOCKS)
    rates = sums / (span / 1e9 / NOISE_BLOCKS)
    return float(rates.std(ddof=1) / np.sqrt(NOISE_BLOCKS))


def _by_class(
    frame: pd.DataFrame,
    ev: EventArrays,
    ok: npt.NDArray[np.bool_],
    itl: npt.NDArray[np.float64],
    level: dict[str, Distribution],
) -> dict[str, ClassSummary]:
    """Per request class; ``itl`` are the level's ITL samples (``ev.itl_ms(ok)``) and
    ``level`` the level's own ttft/tpot/itl/e2e distributions, which a level of one class
    shares (the same samples: not described twice)."""
    names, codes = np.unique(frame["request_class"].to_numpy(dtype=str), return_inverse=True)
    if len(names) == 1:
        return {
            str(names[0]): ClassSummary(
                requests=len(frame),
                ttft_ms=level["ttft_ms"],
                tpot_ms=level["tpot_ms"],
                itl_ms=level["itl_ms"],
                e2e_ms=level["e2e_ms"],
            )
        }
    itl_codes = ev.like_itl(np.repeat(codes.astype(np.int32), ev.n_chunks), ok)
    out: dict[str, ClassSummary] = {}
    for c, name in enumerate(names.tolist()):
        rows = codes == c
        sel = frame[rows & ok]
        out[str(name)] = ClassSummary(
            requests=int(rows.sum()),
            ttft_ms=distribution(sel["ttft_ms"].to_numpy()),
            tpot_ms=distribution(sel["tpot_ms"].to_numpy()),
            itl_ms=distribution(itl[itl_codes == c]),
            e2e_ms=distribution(sel["e2e_ms"].to_numpy()),
        )
    return out


def _events(ev: EventArrays, ok: npt.NDArray[np.bool_], okf: pd.DataFrame) -> Events:
    counts = np.bincount(ev.ev_n[ev.event_mask(ok)])  # token counts are small integers
    token_source = okf["token_source"].value_counts()
    return Events(
        tokens_per_event=distribution_of_counts(np.arange(counts.size), counts),
        coalesced_events=int(okf["coalesced_events"].sum()),
        token_source={str(k): int(v) for k, v in sorted(token_source.items())},
    )


def _bound(lag: Distribution, late: Distribution, client_bound_ms: float) -> list[str]:
    reasons = []
    if lag.p99 is not None and lag.p99 > client_bound_ms:
        reasons.append(f"event-loop lag p99 {fmt_latency(lag.p99)} > {fmt_latency(client_bound_ms)}")
    if late.p99 is not None and late.p99 > client_bound_ms:
        reasons.append(f"send lateness p99 {fmt_latency(late.p99)} > {fmt_latency(client_bound_ms)}")
    return reasons


def _silence(seconds: float) -> str:
    return (
        f"sent nothing for {seconds:.1f} s during the level (no report, no heartbeat: its process was stopped "
        "or starved of CPU, so its requests' times are suspect)"
    )


def _worker(
    ws: WorkerStats,
    frame: pd.DataFrame,
    users: npt.NDArray[np.int64],
    client_bound_ms: float,
    anchor_ns: int | None,
    silent_s: float | None = None,
) -> WorkerHealth:
    mine = users % max(ws.n_shares, 1) == ws.share
    lag = distribution(np.asarray(ws.loop_lag_ms, dtype=np.float64))
    late = distribution(frame["send_lateness_ms"].to_numpy()[mine])
    reasons = _bound(lag, late, client_bound_ms)
    if ws.runqueue_s is not None and ws.wall_s > 0 and ws.runqueue_s / ws.wall_s > _RUNQUEUE_BOUND:
        reasons.append(f"waited for a CPU {100 * ws.runqueue_s / ws.wall_s:.0f}% of the time")
    if silent_s is not None:
        reasons.append(_silence(silent_s))
    return WorkerHealth(
        worker=ws.worker,
        loop_lag_ms=lag,
        send_lateness_ms=late,
        cpu_percent=100 * ws.cpu_s / ws.wall_s if ws.wall_s > 0 else None,
        runqueue_wait_percent=None if ws.runqueue_s is None or ws.wall_s <= 0 else 100 * ws.runqueue_s / ws.wall_s,
        verdict="client-bound" if reasons else "ok",
        reasons=reasons,
        loop_lag_over_time=None if anchor_ns is None else lag_over_time(ws.loop_lag_t_ns, ws.loop_lag_ms, anchor_ns),
    )


def _client(
    frame: pd.DataFrame,
    loop_lag_ms: Sequence[float],
    client_bound_ms: float,
    lag_series: tuple[Sequence[int], int] | None,
    workers: Sequence[WorkerStats] | None,
    lost_workers: Sequence[int] | None,
    users: npt.NDArray[np.int64],
    clock_uncertainty_ms: float | None,
    retried: int = 0,
    silent_workers: Mapping[int, float] | None = None,
) -> ClientHealth:
    """The level's client health; with worker processes, each one's too, and the level
    is client-bound when any of them is (or was silent: ``silent_workers``)."""
    per_worker = None
    silent = dict(silent_workers or {})
    if workers:
        anchor = None if lag_series is None else lag_series[1]
        per_worker = [_worker(ws, frame, users, client_bound_ms, anchor, silent.get(ws.worker)) for ws in workers]
        loop_lag_ms = [x for ws in workers for x in ws.loop_lag_ms]
    lag = distribution(np.asarray(loop_lag_ms, dtype=np.float64))
    late = distribution(frame["send_lateness_ms"].to_numpy())
    reasons = _bound(lag, late, client_bound_ms)
    if per_worker and len(per_worker) == 1:  # one sending process: its reasons are the level's
        reasons.extend(r for r in per_worker[0].reasons if r not in reasons)
    else:
        for wh in per_worker or ():
            reasons.extend(f"worker {wh.worker}: {r}" for r in wh.reasons)
    with_health = {wh.worker for wh in per_worker or ()}
    reasons.extend(f"worker {w}: {_silence(s)}" for w, s in sorted(silent.items()) if w not in with_health)
    if lost_workers:
        reasons.append(
            f"worker(s) {', '.join(map(str, lost_workers))} died or stopped answering during the level: "
            "it is partial, their in-flight requests are worker_lost records"
        )
    notes = None
    if clock_uncertainty_ms is not None and clock_uncertainty_ms > CLOCK_NOTE_MS:
        notes = [
            f"worker clock offsets are known to ±{fmt_latency(clock_uncertainty_ms)} only (> {fmt_latency(CLOCK_NOTE_MS)}): "
            "the workers' common start and the level's time window are that uncertain; per-request "
            "latencies are not"
        ]
    if retried:
        notes = (notes or []) + [
            f"{retried} request(s) were sent again on a new connection: the server closed a kept-alive connection "
            "before answering them (the stale keep-alive race; their latency includes the failed try)"
        ]
    series = None if lag_series is None else lag_over_time(lag_series[0], loop_lag_ms, lag_series[1])
    return ClientHealth(
        loop_lag_ms=lag,
        send_lateness_ms=late,
        verdict="client-bound" if reasons else "ok",
        reasons=reasons,
        loop_lag_over_time=series,
        workers=per_worker,
        lost_workers=list(lost_workers) if lost_workers else None,
        clock_uncertainty_ms=clock_uncertainty_ms,
        notes=notes,
    )


def _first_errors(measured: Sequence[RequestRecord]) -> dict[str, str] | None:
    """The message of the first-sent failed request of each error kind (None: none failed)."""
    first: dict[str, RequestRecord] = {}
    for r in measured:
        kind = r.status.value
        if not r.ok and r.error and (kind not in first or r.sent_ns < first[kind].sent_ns):
            first[kind] = r
    return {k: str(first[k].error) for k in sorted(first)} or None


def _load(load: Load | Mapping[str, Any]) -> Load:
    return load if isinstance(load, Load) else Load(mode=load_mode(load["mode"]), value=load["value"])


def summarize_level(
    records: Sequence[RequestRecord],
    *,
    load: Load | Mapping[str, Any],
    slos: Sequence[SLO] = (),
    loop_lag_ms: Sequence[float] = (),
    loop_lag_t_ns: Sequence[int] | None = None,
    anchor_ns: int = 0,
    scheduled: int | None = None,
    dropped: int = 0,
    interrupted: bool = False,
    window_s: float | None = None,
    trim: tuple[float, float] = (0.0, 0.0),
    client_bound_ms: float = 10.0,
    workers: Sequence[WorkerStats] | None = None,
    lost_workers: Sequence[int] | None = None,
    clock_uncertainty_ms: float | None = None,
    events: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike] | None = None,
    silent_workers: Mapping[int, float] | None = None,
    confidence: float = 0.95,
    auto_warmup: bool = False,
    mlperf: tuple[float, float] = (0.99, 0.99),
) -> LevelSummary:
    """Summarise one level (see the module docstring and ``summary.json``'s contract).

    ``load`` is the offered load (``Load("concurrency", 16)``); ``slos`` are
    per-request limits (attainment, goodput) and level-wide checks; ``loop_lag_ms`` the
    runner's event-loop lag samples, taken at ``loop_lag_t_ns`` (given: the summary
    carries the worst lag per second, in seconds from ``anchor_ns``). The verdict is
    ``"client-bound"`` when the p99 of loop lag or of send lateness exceeds
    ``client_bound_ms``. An open-loop level passes ``scheduled`` (requests the schedule
    asked for) and ``dropped`` (never sent); ``window_s`` adds metrics per time window
    (soak, ramp); ``interrupted`` says the level was cut short. ``workers`` (worker
    processes' own measurements) adds a health entry per worker, and the level is
    client-bound when any worker is; ``lost_workers`` names workers that died (the level
    is partial and says so: their in-flight requests are ``worker_lost`` records, what
    they finished or sent since their last report is missing); ``silent_workers`` maps a
    worker to its longest silence in seconds, when the coordinator flagged one (the level
    is client-bound and names it with how long). ``clock_uncertainty_ms``
    (workers on other machines: the worst uncertainty of their clock offsets) is kept,
    with a note above ``CLOCK_NOTE_MS``. ``events``, when given,
    holds the records' events apart, ``(n_events, t_ns, n_tokens)`` as
    :func:`~loadgen.metrics.per_request.frame_and_events_from_columns` takes them (what
    a columnar reader gives; no Python list per event), and the records' own are ignored.
    ``confidence`` is the level of every interval (:mod:`loadgen.metrics.level_intervals`).
    ``auto_warmup`` drops MSER-5's warm-up cut from the statistics, and ``mlperf`` is the
    percentile and confidence of the MLPerf verdicts (:mod:`loadgen.metrics.verdicts`).
    """
    lo_trim, hi_trim = trim
    if not (lo_trim >= 0.0 and hi_trim >= 0.0 and lo_trim + hi_trim < 1.0):
        raise ConfigError(f"trim fractions {trim!r} must be >= 0 and sum to < 1", key="trim")
    if not 0.5 < confidence < 1.0:
        raise ConfigError(f"confidence {confidence!r} must be between 0.5 and 1 (0.95 for 95%)", key="confidence")
    frame, ev = _frame(records, events)
    cut, uncut = None, frame  # where MSER-5 found no steady state the trend tests see the uncut level
    if auto_warmup:
        records, cut = auto_cut(records, frame, open_loop=scheduled is not None)
        frame, ev = _frame(records, events) if cut else (frame, ev)
    measured = [r for r in records if not r.warmup]
    ok = frame["ok"].to_numpy(dtype=bool)
    retried = sum(1 for r in measured if r.retries)
    window = level_window_ns(frame)
    failed = frame.loc[~ok, "status"].value_counts()
    level_load = _load(load)
    users = np.fromiter((r.worker for r in measured), dtype=np.int64, count=len(measured))
    warm_done = max((r.done_ns for r in records if r.warmup), default=0)
    held = held_window(frame, level_load.mode, float(level_load.value), window, users, warm_done)
    duration, throughput = _throughput(frame, ev, ok, window, held, trim, confidence)

    attained, attainment = slo_attainment(frame, slos)
    gaps, itl, itl_t = _itl_samples(ev, ok)
    one_token_chunks = itl is gaps
    okf = frame[ok]
    # each SLO metric's samples under its --slo spelling ("ttft"), as level_checks reads them
    samples: dict[str, Any] = {
        m.slo: per_request(m, okf) for m in metrics() if m.slo and not (m.per_token or m.per_task)
    }
    samples["itl"] = itl
    itl_stats = distribution(itl)
    plain = {
        "ttft_ms": distribution(samples["ttft"]),
        "tpot_ms": distribution(samples["tpot"]),
        "itl_ms": itl_stats,
        "e2e_ms": distribution(samples["e2e"]),
    }
    sent_ok = okf["sent_ns"].to_numpy()  # per-request series in send order, ITL in arrival order
    latency = {
        k: with_intervals(d, itl, itl_t, confidence)
        if k == "itl_ms"
        else with_intervals(d, samples[k.removesuffix("_ms")], sent_ok, confidence)
        for k, d in plain.items()
    }
    level = LevelSummary(
        load=level_load,
        requests=Requests(
            total=len(frame),
            ok=int(ok.sum()),
            failed=int((~ok).sum()),
            by_error={str(k): int(v) for k, v in sorted(failed.items())},
            retried=retried,
            first_error=_first_errors(measured),
        ),
        duration_s=duration,
        throughput=throughput,
        goodput=_goodput(frame, slos, samples, attained, attainment, duration, window, held, confidence),
        ttft_ms=latency["ttft_ms"],
        ttft_queued_ms=distribution(samples["ttft_queued"]),
        itl_ms=latency["itl_ms"],
        inter_chunk_ms=itl_stats if one_token_chunks else distribution(gaps),
        tpot_ms=latency["tpot_ms"],
        e2e_ms=latency["e2e_ms"],
        e2e_queued_ms=distribution(samples["e2e_queued"]),
        prompt_tokens=distribution(_prompt_tokens(okf)),
        output_tokens=distribution(okf["output_tokens"].to_numpy()),
        lengths=_lengths(okf),
        events=_events(ev, ok, okf),
        by_class=_by_class(frame, ev, ok, itl, plain),
        client=_client(
            frame,
            loop_lag_ms,
            client_bound_ms,
            None if loop_lag_t_ns is None else (loop_lag_t_ns, anchor_ns),
            workers,
            lost_workers,
            users,
            clock_uncertainty_ms,
            retried,
            silent_workers,
        ),
        schedule=None if scheduled is None else _schedule(frame, measured, scheduled, dropped),
        interrupted=interrupted,
        windows=None if window_s is None else windows_of(frame, ev, window_s),
        sessions=sessions_of(frame, ok, _turns(records, frame)),
        by_turn=by_turn(frame, ev, ok, itl, _prompt_tokens(frame)),
        reasoning=reasoning_of(okf),
        connect=_connections(measured),
        images=images_of(measured),
        **level_verdicts(frame, ok, mlperf_bounds(slos), scheduled is not None, cut, mlperf, attained, uncut),
        extra=_extra(okf, sent_ok, confidence),
    )
    level = with_tasks(level, measured, frame, ev, ok, itl, slos, confidence)  # agentic levels: tasks
    return non_streamed(level, measured, ok)  # embeddings, rerank: inputs/s instead of tokens


def _itl_samples(
    ev: EventArrays, ok: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The ok requests' gaps between chunks (``ev.inter_chunk_ms(ok)``), their ITL samples
    (``ev.itl_ms(ok)``, from the gaps at hand: the gaps themselves, the same object, when
    every chunk has one token) and each sample's arrival time."""
    with_gap = ev.gap_mask(ok)
    gaps = ev.masked_gap_ms(with_gap)
    tokens = ev.ch_n[with_gap]
    if bool((tokens == 1).all()):
        return gaps, gaps, ev.ch_t[with_gap]
    return gaps, np.repeat(gaps / tokens, tokens), np.repeat(ev.ch_t[with_gap], tokens)


def _goodput(
    frame: pd.DataFrame,
    slos: Sequence[SLO],
    samples: Mapping[str, Any],
    attained: npt.NDArray[np.bool_],
    attainment: float | None,
    duration: float,
    window: tuple[int, int] | None,
    held: HeldWindow | None,
    confidence: float,
) -> Goodput:
    """SLO attainment and goodput (over the ``held`` window, and over the whole one), with
    their intervals (attainment in send order)."""
    whole_rate = _rate(float(attained.sum()), duration)
    done = frame["done_ns"].to_numpy()
    rate, span, done_in = whole_rate, window, done[attained]
    if held is not None and held[2] != "whole":
        span = held[0], held[1]
        done_in = done_in[(done_in > span[0]) & (done_in <= span[1])]
        rate = _rate(float(done_in.size), (span[1] - span[0]) / 1e9)
    by_send = np.argsort(frame["sent_ns"].to_numpy(), kind="stable")
    intervals = {
        "slo_attainment": proportion(attained[by_send], confidence, slo_scores(frame, slos)[by_send]),
        "requests_per_s": rate_interval(done_in, None, span, rate, confidence),
    }
    return Goodput(
        whole_requests_per_s=whole_rate,
        requests_per_s=rate,
        slo_attainment=attainment,
        slos=[str(s) for s in slos if s.stat is None],
        checks=level_checks(samples, slos),
        intervals={k: v for k, v in intervals.items() if v is not None} or None,
    )


def _schedule(frame: pd.DataFrame, measured: Sequence[RequestRecord], scheduled: int, dropped: int) -> Schedule:
    """An open-loop level's schedule: sent late, dropped, waits for an in-flight credit."""
    waits = frame["credit_wait_ms"].to_numpy()
    return Schedule(
        scheduled=scheduled,
        late=late_sends(measured),
        late_threshold_ms=LATE_NS / 1e6,
        dropped=dropped,
        credit_wait_ms=distribution(waits) if (~np.isnan(waits)).any() else None,
    )


def _lengths(okf: pd.DataFrame) -> Lengths:
    """Prompt and output lengths asked for against those the server reported (means)."""
    return Lengths(
        prompt_target_mean=distribution(okf["target_prompt_tokens"].to_numpy()).mean,
        prompt_achieved_mean=distribution(okf["prompt_tokens"].to_numpy(dtype=np.float64)).mean,
        output_target_mean=distribution(okf["target_output_tokens"].to_numpy()).mean,
        output_achieved_mean=distribution(okf["output_tokens"].to_numpy()).mean,
    )


def _extra(okf: pd.DataFrame, sent_ok: npt.NDArray[np.int64], confidence: float) -> dict[str, Distribution] | None:
    """The distributions, with intervals, of the registered per-request metrics that have no
    field of their own in a level (docs/metrics.md, "Adding a metric"); None when there are none."""
    out = {}
    for m in metrics():
        if m.kind == "latency" and m.json_key is None and m.name not in _FIELDS and not m.per_task:
            x = per_request(m, okf)
            out[m.name] = with_intervals(distribution(x), x, sent_ok, confidence)
    return out or None


def _connections(measured: Sequence[RequestRecord]) -> Connections | None:
    """The measured requests' connections (None: not known, records of older files)."""
    known = [r for r in measured if r.new_connection is not None]
    if not known:
        return None
    times = [r.connect_ms for r in known if r.new_connection and r.connect_ms is not None]
    return Connections(
        new=sum(1 for r in known if r.new_connection),
        known=len(known),
        connect_ms=distribution(np.asarray(times, dtype=np.float64)),
    )


def _frame(
    records: Sequence[RequestRecord], events: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike] | None
) -> tuple[pd.DataFrame, EventArrays]:
    if events is None:
        return frame_and_events([r for r in records if not r.warmup])
    return frame_and_events_from_columns(records, *events)


def _turns(records: Sequence[RequestRecord], frame: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Each frame row's session length (the measured records, in the frame's order)."""
    measured = [r for r in records if not r.warmup]
    return np.fromiter((r.turns for r in measured), dtype=np.int64, count=len(measured))
