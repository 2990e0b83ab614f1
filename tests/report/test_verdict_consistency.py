"""No printed verdict contradicts a printed level (issue 37): the capacity, its interval and
"every level met" against the level tables, in the console and in the report's HTML.

Sweeps are generated (monotone, non-monotone, noisy around the target, one level, levels
without requests, non-stationary levels, a baseline of closed-loop levels before the rate
levels, a load run twice) as real :class:`LevelSummary` objects (the golden rate summary's
level with its attainment, interval, steady state and MLPerf checks replaced), summarised
by the real :func:`summarize_run`, and rendered by the real console and HTML code. The
checks read the printed text only: the table's attainment, verdict and load columns, the
capacity line and its notes, the interval, the non-stationary notes and MLPerf lines.
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from loadgen.metrics import summarize_run
from loadgen.metrics.mlperf import early_stopping_min_queries
from loadgen.metrics.results import LevelSummary, Load, Requests, RunSummary, StatInterval
from loadgen.report.answer_html import answers_table_html
from loadgen.report.console import show_summary
from loadgen.report.html import answer_cards, level_table_html, mlperf_notes, steady_banner
from loadgen.report.verdict_lines import level_verdict_cells
from tests.fuzz.strategies import budget

GOLDEN = Path(__file__).parents[1] / "metrics" / "golden" / "summary_rate.json"
BASE = RunSummary.from_json(json.loads(GOLDEN.read_text(encoding="utf-8"))).levels[0]
SLO = "ttft=500ms"


def make_level(
    mode: str,
    value: float,
    attainment: float | None,
    interval: tuple[float | None, float | None] | None = None,
    stationary: bool = True,
    mlperf: tuple[int, int] = (60, 0),
) -> LevelSummary:
    """The golden level at ``value`` with this attainment (None: no requests), attainment
    interval, steady state and one MLPerf check of ``(queries, over the bound)``."""
    ivs = None if interval is None else {"slo_attainment": StatInterval(interval[0], interval[1], 50.0, 0.95)}
    good = dataclasses.replace(BASE.goodput, slo_attainment=attainment, slos=[SLO], intervals=ivs)
    assert BASE.steady_state is not None and BASE.mlperf
    steady = dataclasses.replace(
        BASE.steady_state, stationary=stationary, reasons=[] if stationary else ["TTFT rises 80% over the level"]
    )
    n, over = mlperf
    need = early_stopping_min_queries(BASE.mlperf[0].percentile, BASE.mlperf[0].confidence, over)
    check = dataclasses.replace(
        BASE.mlperf[0], n=n, overlatency=over, passed=n >= need, min_queries=need, more_needed=max(0, need - n)
    )
    requests = Requests(total=0, ok=0, failed=0) if attainment is None else BASE.requests
    return dataclasses.replace(
        BASE,
        load=Load(mode, value),  # type: ignore[arg-type]
        goodput=good,
        steady_state=steady,
        mlperf=[check],
        requests=requests,
    )


# ---- the printed text, parsed ---------------------------------------------------------------


@dataclass
class Row:
    label: str
    attain: float | None  # as printed, in %
    verdict: str  # pass / fail / undecided
    judged: bool  # not in parentheses

    @property
    def load(self) -> float:
        return float(self.label.split()[0])


@dataclass
class View:
    rows: list[Row]
    status: str = ""  # ok / not_reached / never_met; "" when no capacity was printed
    value: float | None = None
    judged_count: int | None = None
    undecided: list[str] = field(default_factory=list)
    not_judged: list[str] = field(default_factory=list)
    again: list[str] = field(default_factory=list)
    shown_pass: float | None = None
    shown_fail: float | None = None
    nonstationary: set[str] = field(default_factory=set)
    mlperf: list[str] = field(default_factory=list)


def _labels(text: str) -> list[str]:
    """``"1 user, 3.625 req/s"`` -> its labels (a label is a number and a unit)."""
    return re.findall(r"\d[\d.e+-]* (?:users?|req/s)", text)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _row(label: str, attain: str, verdict: str) -> Row:
    attain = attain.removesuffix("%")
    judged = not verdict.startswith("(")
    return Row(label, None if attain == "–" else float(attain), verdict.strip("()"), judged)


def _capacity(view: View, value: str, verdict: str, notes: list[str]) -> None:
    if value == "never met":
        view.status = "never_met"
    elif value.startswith("≥ "):
        view.status, view.value = "not_reached", _number(value[2:].split()[0])
    else:
        view.status, view.value = "ok", _number(value.split()[0])
    m = re.search(r"each of the (\d+) ", verdict)
    view.judged_count = int(m.group(1)) if m else None
    for note in notes:
        head, _, rest = note.partition(": ")
        if head == "not judged":
            view.not_judged = _labels(rest)
        elif head.startswith("undecided"):
            view.undecided = _labels(rest)
        elif head.startswith("met ") and "again" in head:
            view.again = _labels(rest.split(" (")[0])


def console_view(summary: RunSummary) -> View:
    console = Console(width=500, record=True, color_system=None)
    show_summary(summary, console, Path("run"))
    text = console.export_text()
    lines = text.splitlines()
    heads = [[c.strip() for c in line.strip().strip("┃").split("┃")] for line in lines if line.startswith("┃")]
    names = [" ".join(parts).strip() for parts in zip(*heads)] if heads else []
    rows = []
    for line in lines if names[:1] == ["load"] else ():  # the level table (one level: its own table)
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip().strip("│").split("│")]
            got = dict(zip(names, cells))
            rows.append(_row(got["load"], got["attain %"], got["SLO verdict"]))
    view = View(rows)
    for i, line in enumerate(lines):
        m = re.match(r"capacity at .* \(\d+% attainment\): (.+?) — (.*)$", line)
        if m:
            notes = []
            for nxt in lines[i + 1 :]:
                if not nxt.startswith("  "):
                    break
                notes.append(nxt.strip())
            _capacity(view, m.group(1), m.group(2), notes)
        if line.startswith("capacity interval ("):
            _interval_line(view, line)
        m = re.match(r"(.+?): non-stationary: ", line)
        if m:
            view.nonstationary.add(m.group(1))
        if "MLPerf early stopping" in line:
            view.mlperf.append(line)
    return view


def _interval_line(view: View, line: str) -> None:
    m = re.search(r"shown to pass at (\S+) ", line)
    view.shown_pass = float(m.group(1)) if m else None
    m = re.search(r"shown to fail at (\S+) ", line)
    view.shown_fail = float(m.group(1)) if m else None


def _text(fragment: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def html_view(summary: RunSummary, answers: bool = False) -> View:
    """The report's headline and level table (``answers``: a non-streamed API's table)."""
    levels = summary.levels
    cells = level_verdict_cells(summary)
    table = answers_table_html(levels, "", cells) if answers else level_table_html(levels, cells)
    page = answer_cards(summary) + steady_banner(levels) + mlperf_notes(levels) + table
    table = page.split('id="level-table"')[1].split("</table>")[0]
    names = [_text(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1]):
        got = dict(zip(names, (_text(c) for c in re.findall(r"<td>(.*?)</td>", tr))))
        rows.append(_row(got["load"], got["attain"], got.get("SLO verdict", "")))
    view = View(rows)
    body = page.split('id="answer-capacity">')[1].split('<div class="card"')[0] if "answer-capacity" in page else ""
    if 'id="capacity-verdict"' in body:
        value = _text(re.search(r'<div class="v">(.*?)</div>', body).group(1))  # type: ignore[union-attr]
        verdict = _text(re.search(r'id="capacity-verdict">(.*?)</div>', body).group(1))  # type: ignore[union-attr]
        notes = [_text(n) for n in re.findall(r'class="s capacity-note">(.*?)</div>', body)]
        _capacity(view, value, verdict, notes)
        iv = re.search(r'id="capacity-interval"[^>]*>(.*?)</div>', body)
        if iv is not None:
            span = _text(iv.group(1)).split("interval", 1)[1]
            both = re.search(r"([\d.,]+)–([\d.,]+)", span)
            if both:
                view.shown_pass, view.shown_fail = _number(both.group(1)), _number(both.group(2))
            elif "≥" in span:
                view.shown_pass = _number(span.split("≥ ")[1].split()[0])
            elif "≤" in span:
                view.shown_fail = _number(span.split("≤ ")[1].split()[0])
    for m in re.finditer(r"<li>level \d+ \((.+?)\): non-stationary: ", page):
        view.nonstationary.add(_text(m.group(1)))
    banner = re.search(r'id="mlperf-verdict">(.*?)</div>$', page.split('<div class="scroll">')[0])
    if banner is not None:
        items = re.findall(r"<li>(.*?)</li>", banner.group(1))
        view.mlperf = [_text(li) for li in items] + [_text(re.sub(r"<ul>.*</ul>", "", banner.group(1)))]
    return view


# ---- the checks ---------------------------------------------------------------------------


def _close(a: float, b: float) -> bool:
    """Equal up to the 3 significant digits a page prints."""
    return abs(a - b) <= 5e-3 * max(abs(a), abs(b))


def check(view: View, target: float) -> None:
    tgt = 100 * target
    # the non-stationary notes name a level by its label: a load run twice has two rows of it
    twice = {label for label, n in Counter(r.label for r in view.rows).items() if n > 1}
    ns = view.nonstationary - twice

    def meets(r: Row) -> bool:  # as printed: attainment at the target (to its rounding), steady
        return r.attain is not None and r.attain >= tgt - 0.5 and r.label not in ns

    def misses(r: Row) -> bool:
        return r.attain is None or r.attain < tgt + 0.5 or r.label in view.nonstationary

    for r in view.rows:
        assert r.verdict in ("pass", "fail", "undecided"), r
        if r.verdict == "pass":
            assert meets(r), f"{r.label} printed as pass at {r.attain}% (target {tgt:g}%)"
        if r.verdict == "fail":
            assert misses(r), f"{r.label} printed as fail at {r.attain}% (target {tgt:g}%)"
    judged = [r for r in view.rows if r.judged]
    if not view.status:
        return
    fails = [r.load for r in judged if r.verdict == "fail"]
    assert judged, "a capacity with no level judged"
    if view.status == "not_reached":
        assert view.value is not None and _close(view.value, max(r.load for r in judged))
        for r in judged:
            assert meets(r) and r.verdict != "fail", f"'every level met' covers {r}"
        assert view.judged_count == len(judged)
    elif view.status == "ok":
        assert view.value is not None
        if fails:
            assert view.value <= min(fails) * (1 + 5e-3), f"capacity {view.value} above a level shown to fail"
        lo, hi = view.value * (1 - 5e-3), view.value * (1 + 5e-3)  # the printed value's rounding
        assert all(meets(r) for r in judged if r.load < lo), f"a level below the capacity {view.value} missed"
        assert any(meets(r) for r in judged if r.load <= hi), f"no level at or below the capacity {view.value} met"
        assert any(misses(r) for r in judged if r.load >= lo), f"no level above the capacity {view.value} missed"
        clear = [r for r in judged if r.attain is None or r.attain < tgt - 0.5 or r.label in ns]
        assert all(r.load >= lo for r in clear), f"the capacity {view.value} lies above a level that missed"
    else:
        assert misses(min(judged, key=lambda r: r.load)), "never met, yet the lowest level met"
    # the levels named are the levels printed so
    assert Counter(view.undecided) == Counter(r.label for r in judged if r.verdict == "undecided")
    assert Counter(view.not_judged) == Counter(r.label for r in view.rows if not r.judged)
    for label in view.again:
        (r,) = [r for r in judged if r.label == label]
        assert meets(r)
    # the interval: the lowest load shown to fail, the highest shown to pass below it
    if view.shown_fail is not None:
        assert fails and _close(view.shown_fail, min(fails))
        if view.value is not None:
            assert view.value <= view.shown_fail * (1 + 5e-3)
    if view.shown_pass is not None:
        passed = [r.load for r in judged if r.verdict == "pass" and (not fails or r.load < min(fails))]
        assert passed and _close(view.shown_pass, max(passed))
        if view.shown_fail is not None:
            assert view.shown_pass < view.shown_fail


def check_mlperf(view: View) -> None:
    for line in view.mlperf:
        assert "not shown" not in line, line
        if "confidence):" in line:  # a level's line: only checks that decide
            parts = line.split("confidence): ", 1)[1].split("; ")
            assert all(re.search(r": (met|failed) \(", p) for p in parts), line


# ---- the sweeps ---------------------------------------------------------------------------


@st.composite
def sweeps(draw: Any) -> tuple[list[tuple[Any, ...]], float]:
    """``make_level``'s arguments per level (a short repr when a case fails) and the target."""
    target = draw(st.sampled_from([0.9, 0.95, 0.5]))
    n = draw(st.integers(1, 7))
    loads = sorted(draw(st.lists(st.integers(1, 400), min_size=n, max_size=n, unique=True)))
    shape = draw(st.sampled_from(["monotone", "non-monotone", "noisy"]))
    atts: list[float] = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    if shape == "monotone":
        atts = sorted(atts, reverse=True)
    elif shape == "noisy":
        atts = [min(1.0, max(0.0, target + (a - 0.5) / 10)) for a in atts]
    levels = []
    for value, att in zip(loads, atts):
        empty = draw(st.integers(0, 9)) == 0
        kind = draw(st.sampled_from(["none", "tight", "wide", "unbounded"]))
        width = {"tight": 0.005, "wide": 0.2}.get(kind, 0.0)
        interval = (
            None
            if kind == "none" or empty
            else (None, None)
            if kind == "unbounded"
            else (max(0.0, att - width), min(1.0, att + width))
        )
        n_q = draw(st.integers(0, 3000))
        over = draw(st.one_of(st.just(0), st.integers(0, 10), st.integers(0, n_q)))
        stationary = draw(st.integers(0, 4)) > 0
        levels.append(("rate", value / 10, None if empty else att, interval, stationary, (n_q, min(over, n_q))))
    if draw(st.booleans()):  # a load run again (the capacity search's rerun)
        again = draw(st.sampled_from(levels))
        levels.append(("rate", again[1], draw(st.floats(0, 1)), (None, None)))
    if draw(st.booleans()):  # sweep-rate's baseline: 1 user, then the throughput level
        levels = [("concurrency", 1, draw(st.floats(0, 1))), ("concurrency", 256, 0.62), *levels]
    return levels, target


@budget(120)
@given(sweeps())
def test_no_printed_verdict_contradicts_a_printed_level(sweep: tuple[list[tuple[Any, ...]], float]) -> None:
    specs, target = sweep
    levels = [make_level(*spec) for spec in specs]
    summary = summarize_run(levels, mode="rate", mixed_modes=True, attainment_target=target)
    for view in (console_view(summary), html_view(summary), html_view(summary, answers=True)):
        check(view, target)
        check_mlperf(view)


# ---- issue 37's run ----------------------------------------------------------------------

RATES = (3.2, 6.41, 9.62, 12.8, 16.03, 19.2362)


def issue_37() -> RunSummary:
    """``sweep-rate`` as the user saw it: the 1-user baseline, 256 users at 62%, then six rates;
    12.8 req/s non-stationary (overloaded) though its attainment reads 100%, 16.03 at 95%
    (undecided), 19.2 at 100% shown to pass; few queries, so MLPerf decides nothing but at 256
    users."""
    levels = [
        make_level("concurrency", 1, 1.0, (0.92, 1.0), mlperf=(43, 0)),
        make_level("concurrency", 256, 0.62, (0.55, 0.69), mlperf=(393, 211)),
        make_level("rate", 3.2, 1.0, (0.85, 1.0), mlperf=(43, 0)),
        make_level("rate", 6.41, 1.0, (0.93, 1.0), mlperf=(90, 0)),
        make_level("rate", 9.62, 0.97, (0.88, 0.99), mlperf=(120, 0)),
        make_level("rate", 12.8, 1.0, (0.95, 1.0), stationary=False, mlperf=(150, 0)),
        make_level("rate", 16.03, 0.95, (0.85, 0.98), mlperf=(190, 0)),
        make_level("rate", 19.2362, 1.0, (0.96, 1.0), mlperf=(230, 0)),
    ]
    return summarize_run(levels, mode="concurrency", mixed_modes=True, attainment_target=0.9)


def test_issue_37_capacity_stops_at_the_level_shown_to_fail() -> None:
    summary = issue_37()
    cap = summary.capacity
    assert cap is not None and cap.mode == "rate"
    assert cap.status == "ok" and cap.between == [9.62, 12.8]
    assert cap.value == pytest.approx(9.62 + 0.07 / 0.97 * (12.8 - 9.62))
    assert cap.interval == [6.41, 12.8]  # 19.2 passed, but above a fail: not the low end
    for view in (console_view(summary), html_view(summary)):
        check(view, 0.9)
        check_mlperf(view)
        assert view.status == "ok" and view.value is not None and view.value < 12.8
        verdicts = ["pass", "fail", "undecided", "pass", "undecided", "fail", "undecided", "pass"]
        assert [r.verdict for r in view.rows] == verdicts
        assert [r.judged for r in view.rows] == [False, False] + [True] * 6
        assert view.not_judged == ["1 user", "256 users"]
        assert view.undecided == ["3.2 req/s", "9.62 req/s", "16 req/s"]
        assert view.again == ["16 req/s", "19.2 req/s"]
        assert view.nonstationary == {"12.8 req/s"}
        assert (view.shown_pass, view.shown_fail) == (pytest.approx(6.41), pytest.approx(12.8))


def test_issue_37_console_words() -> None:
    console = Console(width=500, record=True, color_system=None)
    show_summary(issue_37(), console, Path("run"))
    text = console.export_text()
    assert "not reached" not in text and "every level met" not in text
    assert (
        "capacity at ttft=500ms (90% attainment): 9.85 req/s — 9.62 req/s met 90%; 12.8 req/s is the first "
        "of the 6 rate levels to miss it (non-stationary: fail)"
    ) in text
    assert "  judged: 6 rate levels, 3.2 req/s to 19.2 req/s" in text
    # MLPerf: the one check that decides (256 users: 211 of 393 over p99), the rest in one line
    assert text.count("MLPerf early stopping") == 2
    assert "256 users: MLPerf early stopping (99% confidence): TTFT (queued) p99 ≤ 100 ms: failed (211 of 393" in text
    assert "MLPerf early stopping: undecided at every level but 256 users (needs ≥ 459 queries at p99)" in text
    assert "not shown" not in text


def test_issue_37_report_card() -> None:
    summary = issue_37()
    cards = answer_cards(summary)
    assert "≥" not in cards.split('id="answer-knee"')[0]
    card = _text(cards.split('id="answer-capacity">')[1].split('id="answer-knee"')[0])
    assert "9.85 req/s" in card and "95% interval 6.41–12.8 req/s" in card
    notes = mlperf_notes(summary.levels)
    assert notes.count("<li>") == 1 and "not shown" not in notes


def test_the_undecided_mlperf_line_names_the_open_checks_of_a_level_with_a_decided_one() -> None:
    """The demo's case: at 32 users the TTFT check failed and the TPOT check is still open;
    the one line must not say the whole level is undecided."""
    from loadgen.report.verdict_lines import mlperf_line, mlperf_undecided_line

    quiet = make_level("concurrency", 4, 1.0, (0.95, 1.0))
    busy = make_level("concurrency", 32, 0.27, (0.2, 0.35), mlperf=(93, 68))
    tpot = dataclasses.replace(quiet.mlperf[0], metric="tpot_ms") if quiet.mlperf else None
    assert tpot is not None and busy.mlperf
    busy = dataclasses.replace(busy, mlperf=[busy.mlperf[0], tpot])
    assert "failed (68 of 93" in mlperf_line(busy)
    line = mlperf_undecided_line([quiet, busy])
    assert line.startswith("MLPerf early stopping: undecided at 4 users; TPOT p99 at 32 users (needs ≥"), line


def test_the_capacity_words_write_shares_by_the_one_rule() -> None:
    """A target of 99.9% and a level at 99.6%: the words say so, as the capacity line's head and
    the level table do (fmt_share), never "missed 100% attainment (attainment 100%, fail)"."""
    levels = [
        make_level("rate", 1, 0.996, (0.99, 0.997)),
        make_level("rate", 2, 0.99, (0.98, 0.995)),
    ]
    summary = summarize_run(levels, mode="rate", attainment_target=0.999)
    console = Console(width=500, record=True, color_system=None)
    show_summary(summary, console, Path("run"))
    text = console.export_text()
    assert (
        "capacity at ttft=500ms (99.9% attainment): never met — the lowest of the 2 rate levels, 1 req/s, "
        "missed 99.9% attainment (attainment 99.6%, fail)"
    ) in text
    assert "undecided" not in text.split("capacity at")[1] and "100%" not in text
    card = _text(answer_cards(summary).split('id="answer-capacity">')[1].split('id="answer-knee"')[0])
    assert "missed 99.9% attainment (attainment 99.6%, fail)" in card and "100%" not in card
