"""One load level's records -> the level entry of ``summary.json`` (a public contract).

Rules: warm-up records are dropped first. ``requests`` counts every other record;
latency, token and event statistics come from the successful (``ok``) ones only. The
level window runs from the first ``sent_ns`` to the last ``done_ns`` of all measured
records; throughput is the ok requests' requests and tokens over it (total tokens =
prompt + output, prompt tokens as reported by the server, else the target). The
``steady`` window trims the first ``trim[0]`` and last ``trim[1]`` fractions of that
window by time: requests (and their prompt tokens) count when they completed inside it,
output tokens when their event arrived inside it.

``events`` (tokens per event, coalesced events, token sources) covers ok requests;
``by_class[name]["requests"]`` counts every measured request of the class, its
statistics its ok ones; ``client.send_lateness_ms`` covers every sent request. When every
chunk carries one token, ``itl_ms`` and ``inter_chunk_ms`` are the same samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.errors import ConfigError
from loadgen.metrics.per_request import EventArrays, frame_and_events
from loadgen.metrics.slo import SLO, level_checks, slo_attainment
from loadgen.metrics.stats import describe, describe_counts, jsonable
from loadgen.records import RequestRecord

__all__ = ["summarize_level", "level_window_ns"]

_LATENCY_COLUMNS = ("ttft_ms", "ttft_queued_ms", "tpot_ms", "e2e_ms", "e2e_queued_ms")


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


def _throughput(
    frame: pd.DataFrame, ev: EventArrays, ok: npt.NDArray[np.bool_], window: tuple[int, int] | None,
    trim: tuple[float, float],
) -> dict[str, Any]:  # fmt: skip
    prompt = _prompt_tokens(frame)
    out_tok = frame["output_tokens"].to_numpy(dtype=np.float64)
    duration = (window[1] - window[0]) / 1e9 if window else 0.0
    n_ok = int(ok.sum())
    out_sum, prompt_sum = float(out_tok[ok].sum()), float(prompt[ok].sum())
    steady: dict[str, Any] = {"window_s": 0.0, "requests_per_s": None, "output_tokens_per_s": None,
                              "total_tokens_per_s": None}  # fmt: skip
    if window:
        span_ns = window[1] - window[0]
        lo = window[0] + round(span_ns * trim[0])
        hi = window[1] - round(span_ns * trim[1])
        done = frame["done_ns"].to_numpy()
        inside = ok & (done >= lo) & (done <= hi)
        ev_in = ev.event_mask(ok) & (ev.ev_t >= lo) & (ev.ev_t <= hi)
        span = (hi - lo) / 1e9
        steady_out = float(ev.ev_n[ev_in].sum())
        steady = {
            "window_s": span,
            "requests_per_s": _rate(float(inside.sum()), span),
            "output_tokens_per_s": _rate(steady_out, span),
            "total_tokens_per_s": _rate(steady_out + float(prompt[inside].sum()), span),
        }
    return {
        "duration_s": duration,
        "throughput": {
            "requests_per_s": _rate(n_ok, duration),
            "output_tokens_per_s": _rate(out_sum, duration),
            "total_tokens_per_s": _rate(out_sum + prompt_sum, duration),
            "steady": steady,
        },
    }


def _by_class(
    frame: pd.DataFrame, ev: EventArrays, ok: npt.NDArray[np.bool_], itl: npt.NDArray[np.float64],
    itl_stats: Mapping[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """Per request class. ``itl`` are the level's ITL samples (``ev.itl_ms(ok)``) in
    their original order; ``itl_stats`` their statistics, used when there is one class."""
    names, codes = np.unique(frame["request_class"].to_numpy(dtype=str), return_inverse=True)
    if len(names) > 1:
        itl_codes = ev.like_itl(np.repeat(codes.astype(np.int32), ev.n_chunks), ok)
    out: dict[str, Any] = {}
    for c, name in enumerate(names.tolist()):
        rows = codes == c
        sel = frame[rows & ok]
        out[str(name)] = {
            "requests": int(rows.sum()),
            "ttft_ms": describe(sel["ttft_ms"].to_numpy()),
            "tpot_ms": describe(sel["tpot_ms"].to_numpy()),
            "itl_ms": describe(itl[itl_codes == c], overwrite=True) if len(names) > 1 else itl_stats,
            "e2e_ms": describe(sel["e2e_ms"].to_numpy()),
        }
    return out


def _tokens_per_event(ev: EventArrays, ok: npt.NDArray[np.bool_]) -> dict[str, Any]:
    counts = np.bincount(ev.ev_n[ev.event_mask(ok)])  # token counts are small integers
    return describe_counts(np.arange(counts.size), counts)


def _client(
    frame: pd.DataFrame, loop_lag_ms: Sequence[float], client_bound_ms: float
) -> dict[str, Any]:
    lag = describe(np.asarray(loop_lag_ms, dtype=np.float64))
    late = describe(frame["send_lateness_ms"].to_numpy())
    reasons = []
    if lag["p99"] is not None and lag["p99"] > client_bound_ms:
        reasons.append(f"event-loop lag p99 {lag['p99']:.3g} ms > {client_bound_ms:g} ms")
    if late["p99"] is not None and late["p99"] > client_bound_ms:
        reasons.append(f"send lateness p99 {late['p99']:.3g} ms > {client_bound_ms:g} ms")
    return {
        "loop_lag_ms": lag,
        "send_lateness_ms": late,
        "verdict": "client-bound" if reasons else "ok",
        "reasons": reasons,
    }


def summarize_level(
    records: Sequence[RequestRecord],
    *,
    load: Mapping[str, Any],
    slos: Sequence[SLO] = (),
    loop_lag_ms: Sequence[float] = (),
    trim: tuple[float, float] = (0.0, 0.0),
    client_bound_ms: float = 10.0,
) -> dict[str, Any]:
    """Summarise one level (see the module docstring and ``summary.json``'s contract).

    ``load`` is passed through (e.g. ``{"mode": "concurrency", "value": 16}``);
    ``slos`` are per-request limits (attainment, goodput) and level-wide checks;
    ``loop_lag_ms`` the runner's event-loop lag samples; the verdict is
    ``"client-bound"`` when the p99 of loop lag or of send lateness exceeds
    ``client_bound_ms``. The result is JSON-ready (no numpy types, NaN as ``None``).
    """
    lo_trim, hi_trim = trim
    if not (0.0 <= lo_trim and 0.0 <= hi_trim and lo_trim + hi_trim < 1.0):
        raise ConfigError(f"trim fractions {trim!r} must be >= 0 and sum to < 1", key="trim")
    frame, ev = frame_and_events(records)
    ok = frame["ok"].to_numpy(dtype=bool)
    window = level_window_ns(frame)
    failed = frame.loc[~ok, "status"].value_counts()
    thr = _throughput(frame, ev, ok, window, trim)

    attained, attainment = slo_attainment(frame, slos)
    gaps = ev.inter_chunk_ms(ok)
    one_token_chunks = bool((ev.ch_n == 1).all())
    itl = gaps if one_token_chunks else ev.itl_ms(ok)  # the same samples when every chunk has one token
    okf = frame[ok]
    token_source = okf["token_source"].value_counts()
    samples: dict[str, Any] = {c.removesuffix("_ms"): okf[c].to_numpy() for c in _LATENCY_COLUMNS}
    samples["itl"] = itl
    prompt_ok = okf["prompt_tokens"].to_numpy(dtype=np.float64)

    summary: dict[str, Any] = {
        "load": dict(load),
        "requests": {
            "total": len(frame),
            "ok": int(ok.sum()),
            "failed": int((~ok).sum()),
            "by_error": {str(k): int(v) for k, v in sorted(failed.items())},
        },
        **thr,
        "goodput": {
            "requests_per_s": _rate(float(attained.sum()), thr["duration_s"]),
            "slo_attainment": attainment,
            "slos": [str(s) for s in slos if s.stat is None],
            "checks": level_checks(samples, slos),
        },
    }
    if frame["request_class"].nunique() > 1:
        by_class = _by_class(frame, ev, ok, itl, None)  # needs itl in order: before the next line
        itl_stats = describe(itl, overwrite=True)
    else:
        itl_stats = describe(itl, overwrite=True)
        by_class = _by_class(frame, ev, ok, itl, itl_stats)
    summary["ttft_ms"] = describe(samples["ttft"])
    summary["ttft_queued_ms"] = describe(samples["ttft_queued"])
    summary["itl_ms"] = itl_stats
    summary["inter_chunk_ms"] = itl_stats if one_token_chunks else describe(gaps, overwrite=True)
    summary["tpot_ms"] = describe(samples["tpot"])
    summary["e2e_ms"] = describe(samples["e2e"])
    summary["e2e_queued_ms"] = describe(samples["e2e_queued"])
    summary["prompt_tokens"] = describe(_prompt_tokens(okf))
    summary["output_tokens"] = describe(okf["output_tokens"].to_numpy())
    summary["lengths"] = {
        "prompt_target_mean": describe(okf["target_prompt_tokens"].to_numpy())["mean"],
        "prompt_achieved_mean": describe(prompt_ok)["mean"],
        "output_target_mean": describe(okf["target_output_tokens"].to_numpy())["mean"],
        "output_achieved_mean": describe(okf["output_tokens"].to_numpy())["mean"],
    }
    summary["events"] = {
        "tokens_per_event": _tokens_per_event(ev, ok),
        "coalesced_events": int(okf["coalesced_events"].sum()),
        "token_source": {str(k): int(v) for k, v in sorted(token_source.items())},
    }
    summary["by_class"] = by_class
    summary["client"] = _client(frame, loop_lag_ms, client_bound_ms)
    return jsonable(summary)  # type: ignore[no-any-return]
