"""The run report's pieces for a non-streamed API (embeddings, rerank, score).

Such levels have no TTFT, ITL or TPOT and no output tokens (:mod:`loadgen.metrics.answers`):
their level table shows E2E percentiles, requests, inputs (documents for rerank and score)
and input tokens per second instead, and the report leaves out the sections about tokens
and inter-token gaps.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.metrics.results import LevelSummary
from loadgen.numfmt import fmt_share
from loadgen.report.console import fmt_ms, inputs_noun, unbounded_cells, unbounded_line
from loadgen.report.error_bars import pm_cell
from loadgen.report.page import esc, fmt

__all__ = ["answered", "answers_table_html", "verdict_html"]


def answered(levels: Sequence[LevelSummary]) -> bool:
    """Whether every level is a non-streamed API's (and there is one)."""
    return bool(levels) and all(lv.non_streamed is not None for lv in levels)


def verdict_html(verdict: str) -> str:
    """A level's SLO verdict (``pass``, ``fail``, ``undecided``; in parentheses when the
    capacity does not judge the level) as a level table's cell."""
    bare = verdict.strip("()")
    tone = "good" if bare == "pass" else "bad" if bare == "fail" else ""
    return f'<span class="verdict {tone}">{esc(verdict)}</span>'


def answers_table_html(levels: Sequence[LevelSummary], api: str = "", verdicts: Sequence[str] = ()) -> str:
    """One row per level of a non-streamed API: E2E, req/s, inputs/s, input tok/s, goodput,
    and each level's SLO verdict (``verdicts``, one per level) when given."""
    noun = inputs_noun(api)
    head = ["#", "load", "ok/fail", "req/s", "req/s ±", f"{noun}/s", "input tok/s", f"{noun}/request"]
    head += ["E2E p50", "E2E p90", "E2E p99", "E2E p99 ±", "attain", "goodput", "client"]
    if any(verdicts):
        head.insert(head.index("attain") + 1, "SLO verdict")
    rows = []
    for i, lv in enumerate(levels):
        req, thr, good, ns, verdict = lv.requests, lv.throughput, lv.goodput, lv.non_streamed, lv.client.verdict
        e2e = lv.e2e_ms
        cells = [
            str(i + 1),
            esc(lv.load.label()),
            f"{req.ok}/{req.failed}",
            fmt(thr.requests_per_s),
            pm_cell(thr.requests_per_s, (thr.intervals or {}).get("requests_per_s")),
            fmt(ns and ns.inputs_per_s),
            fmt(ns and ns.input_tokens_per_s),
            fmt(ns and ns.inputs.mean),
            fmt_ms(e2e.p50),
            fmt_ms(e2e.p90),
            fmt_ms(e2e.p99),
            pm_cell(e2e.p99, (e2e.intervals or {}).get("p99")),
            fmt_share(good.slo_attainment),
            fmt(good.requests_per_s),
            f'<span class="{"bad" if verdict != "ok" else "good"}">{esc(verdict)}</span>',
        ]
        if any(verdicts):
            cells.insert(13, verdict_html(verdicts[i]))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    ths = "".join(f"<th>{esc(h)}</th>" for h in head)
    named = [(str(i + 1), lv) for i, lv in enumerate(levels)]
    why = unbounded_line(unbounded_cells(named, [("E2E p99", "e2e_ms", "p99")]), noun="level")
    return (
        f'<div class="scroll"><table id="level-table"><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}'
        '</tbody></table></div><p class="note">One JSON answer per request (not streamed): no TTFT, ITL or TPOT. '
        f"E2E in ms from the send to the answer's last byte; {esc(noun)} and input tokens (the server's usage) "
        "per second over each level's window; goodput = requests meeting every SLO per second."
        + (f' <span id="unbounded-note">{esc(why)}.</span>' if why else "")
        + "</p>"
    )
