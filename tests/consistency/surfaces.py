"""The map from every printed statistic back to its summary field, one table per surface.

Each checker takes the typed summary (``loadgen.api.read_summary``: summary.json as
:class:`~loadgen.metrics.results.RunSummary`) and what a surface printed, and returns the
mismatches as lines (``[]``: every number agrees to its printed precision). A header, a
card, a key or a line that no table here maps is itself a mismatch: a new number on a
surface must be added to its map.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from loadgen.metrics.results import LevelSummary, RunSummary
from tests.consistency.parse import DASHES, Table, cell, interval_agrees, number, numbers

Check = Callable[[LevelSummary, str], str | None]
DISTS = {"TTFT": "ttft_ms", "ITL": "itl_ms", "TPOT": "tpot_ms", "E2E": "e2e_ms"}


def _iv(obj: Any, key: str) -> Any:
    return (getattr(obj, "intervals", None) or {}).get(key)


def value_check(
    get: Callable[[LevelSummary], float | None],
    iv: Callable[[LevelSummary], Any] = lambda lv: None,
    scale: float = 1.0,
    suffix: str = "",
) -> Check:
    """A number (and its interval, if printed) against ``get(level) * scale``."""

    def check(lv: LevelSummary, text: str) -> str | None:
        text = text.strip().removesuffix(suffix).strip()
        truth = get(lv)
        try:
            c = cell(text)
        except ValueError:
            return f"{text!r} is not a number as the map expects"
        if c.value is None:
            return None if truth is None else f"{text!r} shown for {truth}"
        if not c.value.agrees(truth, scale):
            return f"{text!r} is not {truth} x {scale:g} to its precision"
        why = interval_agrees(c, truth, iv(lv), scale)
        return None if why is None else f"{text!r}: {why}"

    return check


def text_check(get: Callable[[LevelSummary], str]) -> Check:
    def check(lv: LevelSummary, text: str) -> str | None:
        want, text = get(lv), text.strip()
        if text.endswith("…") and want.startswith(text[:-1]):  # rich cut it to its column
            return None
        return None if text == want else f"{text!r} is not {want!r}"

    return check


def interval_only(get: Callable[[LevelSummary], float | None], iv: Callable[[LevelSummary], Any]) -> Check:
    """A column that shows only an interval (``±24%``, ``—``, ``–``)."""

    def check(lv: LevelSummary, text: str) -> str | None:
        try:
            c = cell(text.strip())
        except ValueError:
            return f"{text!r} is not an interval"
        if c.value is not None:
            return f"{text!r}: a value in an interval column"
        if text.strip() in DASHES - {"—"}:
            return None if iv(lv) is None else f"{text!r}: the summary has an interval"
        why = interval_agrees(c, get(lv), iv(lv))
        return None if why is None else f"{text!r}: {why}"

    return check


def n_eff(lv: LevelSummary) -> float | None:
    mean = _iv(lv.ttft_ms, "mean")
    return None if mean is None else float(mean.n_eff)


def dist_check(name: str, stat: str, scale: float = 1.0) -> Check:
    key = DISTS[name]
    return value_check(lambda lv: lv.dist(key).stat(stat), lambda lv: _iv(lv.dist(key), stat), scale)


def late_sends(lv: LevelSummary) -> str:
    return "–" if lv.schedule is None else f"{lv.schedule.late}/{lv.schedule.scheduled}"


def late_dropped(lv: LevelSummary) -> str:
    return "–" if lv.schedule is None else f"{lv.schedule.late}/{lv.schedule.dropped}"


def _throughput(key: str) -> Check:
    return value_check(lambda lv: getattr(lv.throughput, key))


def _goodput() -> Check:
    return value_check(lambda lv: lv.goodput.requests_per_s)


def _attain(suffix: str = "") -> Check:
    return value_check(lambda lv: lv.goodput.slo_attainment, scale=100.0, suffix=suffix)


# console: ``loadgen run``'s level table (report/console.py level_table)
CONSOLE_LEVEL_COLUMNS: dict[str, Check] = {
    "load": text_check(lambda lv: lv.load.label()),
    "requests ok/failed": text_check(lambda lv: f"{lv.requests.ok}/{lv.requests.failed}"),
    "req/s": _throughput("requests_per_s"),
    "out tok/s": _throughput("output_tokens_per_s"),
    "attain %": _attain(),
    "goodput req/s": _goodput(),
    "n_eff TTFT": value_check(n_eff),  # the level's one n_eff: its TTFT mean's
    "late sends": text_check(late_sends),
    "client": text_check(lambda lv: lv.client.verdict),
}

# the run report's level table (report/html.py level_table_html), as the browser shows it
REPORT_LEVEL_COLUMNS: dict[str, Check] = {
    "load": text_check(lambda lv: lv.load.label()),
    "ok/fail": text_check(lambda lv: f"{lv.requests.ok}/{lv.requests.failed}"),
    "req/s": _throughput("requests_per_s"),
    "out tok/s": _throughput("output_tokens_per_s"),
    "out tok/s ±": interval_only(
        lambda lv: lv.throughput.output_tokens_per_s, lambda lv: _iv(lv.throughput, "output_tokens_per_s")
    ),
    "TTFT p99 ±": interval_only(lambda lv: lv.ttft_ms.p99, lambda lv: _iv(lv.ttft_ms, "p99")),
    "attain": _attain("%"),
    "goodput": _goodput(),
    "client": text_check(lambda lv: lv.client.verdict),
    "late/dropped": text_check(late_dropped),
}

_LATENCY = re.compile(r"^(TTFT|ITL|TPOT|E2E) (mean|p50|p90|p95|p99|p99\.9|max)(?: (ms|s))?$")


def column_check(columns: dict[str, Check], header: str, summary: RunSummary | None = None) -> Check | None:
    """The checker of a column: from ``columns`` (or :data:`SUMMARY_COLUMNS`, given the run's
    ``summary``), or a latency column ``TTFT p99 ms`` (console: the unit under the name) /
    ``TTFT p99`` (report: ms, or a value ending in ``s``)."""
    if summary is not None and header in SUMMARY_COLUMNS:
        return SUMMARY_COLUMNS[header](summary)
    if header in columns:
        return columns[header]
    m = _LATENCY.match(header)
    if m is None:
        return None
    name, stat, unit = m.groups()
    if unit is not None:
        return dist_check(name, stat, 1e-3 if unit == "s" else 1.0)
    in_ms, in_s = dist_check(name, stat), dist_check(name, stat, 1e-3)
    return lambda lv, text: in_s(lv, text.strip().removesuffix("s")) if text.strip().endswith("s") else in_ms(lv, text)


def check_level_table(
    summary: RunSummary,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    columns: dict[str, Check],
    where: str,
    index_column: str | None = None,
) -> list[str]:
    """Every cell of a level table (one row per level, in order) against the summary."""
    bad: list[str] = []
    if len(rows) != len(summary.levels):
        return [f"{where}: {len(rows)} rows for {len(summary.levels)} levels"]
    for h in headers:
        if h != index_column and column_check(columns, h, summary) is None:
            bad.append(f"{where}: column {h!r} is not in the map")
    checks = {h: column_check(columns, h, summary) for h in headers}
    for i, (lv, row) in enumerate(zip(summary.levels, rows)):
        for h, text in zip(headers, row):
            if h == index_column:
                if text.strip() != str(i + 1):
                    bad.append(f"{where}: level {i + 1} numbered {text!r}")
                continue
            check = checks[h]
            why = None if check is None else check(lv, text)
            if why:
                bad.append(f"{where}: {lv.load.label()} {h}: {why}")
    return bad


# ---- console lines -------------------------------------------------------------------------

_SEGMENTS: list[tuple[re.Pattern[str], Callable[[LevelSummary, re.Match[str], str], str | None]]] = []


def _segment(pattern: str) -> Callable[[Callable[[LevelSummary, re.Match[str], str], str | None]], Any]:
    def add(f: Callable[[LevelSummary, re.Match[str], str], str | None]) -> Any:
        _SEGMENTS.append((re.compile(pattern + "$"), f))
        return f

    return add


@_segment(r"(?P<v>\S+) req/s")
def _rps(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    return _throughput("requests_per_s")(lv, m["v"])


@_segment(r"(?P<v>\S+) out tok/s")
def _tps(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    return _throughput("output_tokens_per_s")(lv, m["v"])


@_segment(r"(?P<v>\S+) inputs/s")
def _ips(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    return value_check(lambda lv: None if lv.non_streamed is None else lv.non_streamed.inputs_per_s)(lv, m["v"])


@_segment(r"(?:(?P<name>TTFT|ITL|TPOT|E2E) )?(?P<stat>mean|p50|p90|p99|p99\.9|max) (?P<v>\S+) (?P<unit>ms|s)(?P<iv>.*)")
def _latency(lv: LevelSummary, m: re.Match[str], name: str) -> str | None:
    return dist_check(m["name"] or name, m["stat"], 1e-3 if m["unit"] == "s" else 1.0)(lv, m["v"] + m["iv"])


@_segment(r"attainment (?P<v>\S+?)%?")
def _attainment(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    return _attain()(lv, m["v"])


@_segment(r"n_eff (?P<v>\S+) of (?P<n>\d+) \(TTFT mean\)")
def _neff(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    if int(m["n"]) != lv.ttft_ms.count:
        return f"n_eff of {m['n']}, TTFT count {lv.ttft_ms.count}"
    return value_check(n_eff)(lv, m["v"])


@_segment(r"(?P<late>\d+) of (?P<n>\d+) sends late")
def _late(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    sch = lv.schedule
    ok = sch is not None and (sch.late, sch.scheduled) == (int(m["late"]), int(m["n"]))
    return None if ok else f"{m[0]!r} vs {sch}"


@_segment(r"(?P<d>\d+) dropped")
def _dropped(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    return None if lv.schedule is not None and lv.schedule.dropped == int(m["d"]) else f"{m[0]!r}"


@_segment(r"(?P<n>\d+) sent again on a new connection")
def _retried(lv: LevelSummary, m: re.Match[str], _: str) -> str | None:
    return None if lv.requests.retried == int(m["n"]) else f"{m[0]!r}"


_LEVEL_LINE = re.compile(r"^level (?P<label>.+?): (?P<ok>\d+) ok / (?P<failed>\d+) failed, (?P<rest>.*)$")


def check_level_line(lv: LevelSummary, line: str) -> list[str]:
    """``level 4 users: 12 ok / 0 failed, 237.73 req/s, …, attainment 100%, n_eff 4 of 12``:
    each comma-separated statistic by :data:`_SEGMENTS`; after ``;`` the summary's own words
    (client reasons, why it stopped, the steady-state reasons)."""
    m = _LEVEL_LINE.match(line)
    if m is None:
        return [f"not a level line: {line!r}"]
    bad = []
    if m["label"] != lv.load.label() or (int(m["ok"]), int(m["failed"])) != (lv.requests.ok, lv.requests.failed):
        bad.append(f"{line!r}: label or counts differ from {lv.load.label()} {lv.requests}")
    main, *tails = m["rest"].split("; ")
    name = ""
    for seg in re.split(r", (?![^\[]*\])", main):  # not inside [low, high]
        for pattern, f in _SEGMENTS:
            s = pattern.match(seg)
            if s is not None:
                name = s.groupdict().get("name") or name
                why = f(lv, s, name)
                if why:
                    bad.append(f"level {lv.load.label()}: {seg!r}: {why}")
                break
        else:
            bad.append(f"level {lv.load.label()}: {seg!r} is not in the map")
    tail = "; ".join(tails)  # a verdict's reasons are joined by "; " too: the tail is read whole
    bad += [f"level {lv.load.label()}: {tail!r}"] if tail and not summary_words(lv, tail) else []
    return bad


def summary_words(lv: LevelSummary, text: str) -> bool:
    """Is ``text`` made of the summary's own words for ``lv`` (every number in it is in one of
    the level's reasons, notes or its stop reason)?"""
    words = [
        *lv.client.reasons,
        *(lv.client.notes or ()),
        *(lv.steady_state.reasons if lv.steady_state else ()),
        lv.stopped or "",
    ]
    rest = text
    for w in sorted(filter(None, words), key=len, reverse=True):
        rest = rest.replace(w, "")
    return not numbers(rest)


def numbers_among(text: str, truths: Sequence[float | None], scales: Sequence[float] = (1.0,)) -> list[str]:
    """The numbers in ``text`` that none of ``truths`` (times any of ``scales``) rounds to."""
    out = []
    for raw in numbers(text):
        shown = number(raw)
        if not any(shown.agrees(t, s) for t in truths if t is not None for s in scales):
            out.append(raw)
    return out


def mlperf_truths(lv: LevelSummary) -> list[float | None]:
    vals: list[float | None] = []
    for v in lv.mlperf or ():
        vals += [
            v.bound_ms,
            v.n,
            v.overlatency,
            v.min_queries,
            v.more_needed,
            v.estimate_ms,
            100 * v.percentile,
            100 * v.confidence,
            v.bound_ms / 1e3,
            v.percentile,
            *(float(x) for x in numbers(v.slo)),
        ]
        if v.estimate_ms is not None:
            vals.append(v.estimate_ms / 1e3)
    return vals


def capacity_truths(summary: RunSummary) -> list[float | None]:
    cap = summary.capacity
    if cap is None:
        return []
    vals: list[float | None] = [cap.value, 100 * cap.target, *(cap.between or ()), *(cap.interval or ())]
    vals += [float(x.replace(",", "")) for s in cap.slos for x in numbers(s)]
    return vals


def saturation_truths(summary: RunSummary) -> list[float | None]:
    sat = summary.saturation
    if sat is None:
        return []
    return [
        sat.load,
        None if sat.throughput_gain is None else 100 * sat.throughput_gain,
        None if sat.latency_growth is None else 100 * sat.latency_growth,
        99.0,
        50.0,
        90.0,
    ]


def confidence_truths(summary: RunSummary) -> list[float | None]:
    return [
        100 * iv.confidence
        for lv in summary.levels
        for d in (lv.ttft_ms, lv.goodput)
        for iv in (getattr(d, "intervals", None) or {}).values()
    ]


def is_close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def table_by_title(tables: Sequence[Table], title: str) -> Table:
    found = [t for t in tables if t.title.startswith(title)]
    assert len(found) == 1, [t.title for t in tables]
    return found[0]


# ---- the verdicts: each level's SLO verdict, the capacity in words, the unbounded line ----


def slo_verdict_of(summary: RunSummary) -> Callable[[LevelSummary], str]:
    """A level's SLO verdict as the level tables show it: ``pass``/``fail``/``undecided`` by
    the capacity's own judge (``level_verdict`` at the capacity's target), in parentheses for
    a level the capacity does not judge (``judged_levels``); "" without a capacity at SLOs."""
    from loadgen.metrics.capacity import judged_levels, level_verdict

    cap = summary.capacity
    if cap is None or not cap.slos:
        return lambda lv: ""
    judged = {id(lv) for lv in judged_levels(summary.levels, cap.mode)}

    def get(lv: LevelSummary) -> str:
        verdict = level_verdict(lv, cap.target).verdict
        return verdict if id(lv) in judged else f"({verdict})"

    return get


# columns whose check needs the whole run (the capacity's target and the levels it judges)
SUMMARY_COLUMNS: dict[str, Callable[[RunSummary], Check]] = {
    "SLO verdict": lambda s: text_check(slo_verdict_of(s)),
}


def labelled(summary: RunSummary, text: str) -> list[LevelSummary] | None:
    """The levels a list of load labels names (``"1 user, 4 users"``), None when one is not a level's."""
    by_label = {lv.load.label(): lv for lv in summary.levels}
    found = [by_label.get(t.strip()) for t in text.split(", ")]
    return None if any(lv is None for lv in found) else [lv for lv in found if lv is not None]


_SHARE = r"(?P<t>[\d.]+)%"
_LEVELS = r"(?P<n>\d+) (?:\w+ )?levels?"
WORD_FORMS = {
    "first miss": rf"(?P<a>.+?) met {_SHARE}; (?P<b>.+?) is the first of the {_LEVELS} to miss it \((?P<why>.+)\)",
    "not reached": rf"not reached: each of the {_LEVELS} met {_SHARE} attainment",
    "never met": rf"the lowest of the {_LEVELS}, (?P<b>.+?), missed {_SHARE} attainment \((?P<why>.+)\)",
    "judged": rf"judged: {_LEVELS}, (?P<first>.+?) to (?P<last>.+)",
    "not judged": r"not judged: (?P<list>.+) \(another load mode or a load run again\)",
    "undecided": rf"undecided \(attainment interval on both sides of {_SHARE}, or no requests\): (?P<list>.+)",
    "met again": rf"met {_SHARE} again above the first miss: (?P<list>.+) \(not monotone in load: .*\)",
}
"""The capacity's words (report/verdict_lines.py capacity_words): its verdict and its notes."""


def check_capacity_words(summary: RunSummary, text: str) -> list[str]:
    """One sentence of the capacity's words: each load label names a level (the loads: the
    summary's), the level count is the number of levels the capacity judged, the share its
    target, and each level named is where the sentence puts it (the first to miss, the
    undecided ones, ...) by each level's SLO verdict; an attainment is the level's."""
    from loadgen.metrics.capacity import judged_levels, level_verdict

    cap = summary.capacity
    if cap is None:
        return [f"{text!r}: capacity words without a capacity"]
    judged = judged_levels(summary.levels, cap.mode)
    verdicts = [level_verdict(lv, cap.target) for lv in judged]
    miss = next((i for i, v in enumerate(verdicts) if not v.meets), None)
    found = [(form, m) for form, p in WORD_FORMS.items() if (m := re.fullmatch(p, text.strip())) is not None]
    if not found:
        return [] if not numbers(text) else [f"capacity words {text!r} are not in the map"]
    form, m = found[0]
    bad: list[str] = []
    parts = m.groupdict()
    if parts.get("t") is not None and not number(parts["t"]).agrees(cap.target, 100.0):
        bad.append(f"{text!r}: the target is {cap.target}")
    if parts.get("n") is not None and int(parts["n"]) != len(judged):
        bad.append(f"{text!r}: the capacity judged {len(judged)} levels")

    def names(key: str, want: Sequence[LevelSummary]) -> None:
        found = labelled(summary, parts[key])
        if found is None or [id(x) for x in found] != [id(x) for x in want]:
            bad.append(f"{text!r}: {parts[key]!r} is not {[lv.load.label() for lv in want]}")

    if form == "first miss":
        if miss is None or miss == 0:
            return [f"{text!r}: no judged level above the first misses the target"]
        names("a", [judged[miss - 1]])
        names("b", [judged[miss]])
    elif form == "never met":
        names("b", judged[:1])
    elif form == "not reached" and miss is not None:
        bad.append(f"{text!r}: {judged[miss].load.label()} misses the target")
    elif form == "judged":
        names("first", judged[:1])
        names("last", judged[-1:])
    elif form == "not judged":
        names("list", [lv for lv in summary.levels if all(lv is not j for j in judged)])
    elif form == "undecided":
        names("list", [lv for lv, v in zip(judged, verdicts) if v.verdict == "undecided"])
    elif form == "met again":
        names("list", [lv for lv, v in zip(judged[(miss or 0) + 1 :], verdicts[(miss or 0) + 1 :]) if v.meets])
    if parts.get("why") is not None:
        lv = judged[miss if form == "first miss" and miss is not None else 0]
        v = level_verdict(lv, cap.target)
        why = re.fullmatch(r"attainment (?P<att>\S+?)%?, (?P<verdict>\w+)", parts["why"])
        if why is not None:
            att = why["att"]
            ok = (lv.goodput.slo_attainment is None and att == "–") or (
                att != "–" and number(att).agrees(lv.goodput.slo_attainment, 100.0)
            )
            if not ok or why["verdict"] != v.verdict:
                bad.append(f"{text!r}: {lv.load.label()}: attainment {lv.goodput.slo_attainment}, {v.verdict}")
        elif parts["why"] != f"{v.reason}: {v.verdict}":
            bad.append(f"{text!r}: {lv.load.label()} is {v.reason}: {v.verdict}")
    return bad


def check_capacity_value(summary: RunSummary, text: str) -> list[str]:
    """The capacity as its value is written: ``17.6 users``, ``≥ 4 users`` (not reached), ``never met``."""
    cap = summary.capacity
    assert cap is not None
    m = re.fullmatch(r"(≥ )?(\S+) (\S+(?: \S+)?)|never met", text.strip())
    if m is None or (m.group(2) is None) != (cap.status not in ("ok", "not_reached")):
        return [f"capacity {text!r} vs {cap.value} ({cap.status})"]
    if m.group(2) is not None:
        from loadgen.metrics.results import unit_label

        if not number(m.group(2)).agrees(cap.value) or m.group(3) != unit_label(cap.mode):
            return [f"capacity {text!r} is not {cap.value} {unit_label(cap.mode)}"]
        if bool(m.group(1)) != (cap.status == "not_reached"):
            return [f"capacity {text!r} vs status {cap.status}"]
    return []


def _dist_names() -> dict[str, str]:
    """The console's names of the distributions (``TTFT``) -> summary keys (``ttft_ms``)."""
    from loadgen.metrics.catalog import metrics

    return {m.console: m.name for m in metrics() if m.console is not None}


def check_unbounded_line(levels: Sequence[tuple[str, LevelSummary]], text: str, noun: str = "") -> list[str]:
    """``±— not bounded: TTFT p50 at 1 user, 4 users; ITL p99 at 1 user (too few effective values;
    e.g. TTFT p50 at 1 user: p50 needs n_eff ≥ 6 for a 95% interval, its n_eff 2.5)``: every
    statistic named at a level is unbounded there in the summary and every level (of
    ``levels``: its name on this surface, a label or a number) where it is unbounded is named;
    the reason is the first one's summary reason, its ``n_eff`` that interval's."""
    m = re.fullmatch(
        r"±— not bounded: (?P<which>.+) \(too few effective values; (?P<eg>e\.g\. )?(?P<stat>\S+ \S+?)"
        r"(?: at (?P<where>.+?))?: (?P<reason>.+?)(?:, its n_eff (?P<neff>\S+?))?\)\.?",
        text.strip(),
    )
    if m is None:
        return [f"{text!r}: not an unbounded line"]
    dists, by_name = _dist_names(), dict(levels)
    plural = f"{noun}s " if noun else ""
    single = f"{noun} " if noun else ""

    def places(at: str | None) -> list[LevelSummary] | None:
        if at is None:
            return [lv for _, lv in levels] if len(levels) == 1 else None
        at = at.removeprefix(plural).removeprefix(single)
        found = [by_name.get(w.strip()) for w in at.split(", ")]
        return None if any(x is None for x in found) else [x for x in found if x is not None]

    def interval(stat: str, lv: LevelSummary) -> Any:
        name, _, which = stat.partition(" ")
        key = dists.get(name)
        return None if key is None else _iv(lv.dist(key), which)

    bad: list[str] = []
    count = 0
    for part in m["which"].split("; "):
        s = re.fullmatch(r"(?P<stat>\S+ \S+)(?: at (?P<where>.+))?", part)
        named = None if s is None else places(s["where"])
        if s is None or named is None:
            bad.append(f"{text!r}: {part!r} names no statistic at the levels")
            continue
        want = [lv for _, lv in levels if (iv := interval(s["stat"], lv)) is not None and not iv.bounded]
        count += len(named)
        if [id(x) for x in named] != [id(x) for x in want]:
            bad.append(f"{text!r}: {s['stat']} is unbounded at {[lv.load.label() for lv in want]}")
    first = places(m["where"])
    iv = None if not first or len(first) != 1 else interval(m["stat"], first[0])
    if iv is None or iv.bounded:
        return [*bad, f"{text!r}: its example names no unbounded interval"]
    core = re.sub(r"\s*\(n_eff = [0-9.,]+\)", "", iv.reason or "").replace(">=", "≥")
    if m["reason"] != core:
        bad.append(f"{text!r}: the reason is {iv.reason!r}")
    if (m["neff"] is None) != (core == (iv.reason or "").replace(">=", "≥")) or (
        m["neff"] is not None and not number(m["neff"]).agrees(iv.n_eff)
    ):
        bad.append(f"{text!r}: its n_eff is {iv.n_eff}")
    if bool(m["eg"]) != (count > 1):
        bad.append(f"{text!r}: 'e.g.' for {count} unbounded values")
    return bad


def check_mlperf_undecided(levels: Sequence[LevelSummary], text: str) -> list[str]:
    """``MLPerf early stopping: undecided at every level (needs ≥ 459 queries at p99)``: the
    levels named are those with a check that decided nothing (a level where another check
    decided names its open ones: ``...; TPOT p99 at 32 users``), the count the fewest queries
    such a check needs, the percentiles theirs."""
    m = re.fullmatch(
        r"MLPerf early stopping: undecided (?P<where>at every level|at its level|at every level but .+|at .+) "
        r"\(needs ≥ (?P<need>\S+) queries at (?P<pcts>.+)\)",
        text.strip(),
    )
    if m is None:
        return [f"{text!r}: not MLPerf's undecided line"]
    checked = [lv for lv in levels if lv.mlperf]
    open_ = [(lv, [c for c in lv.mlperf or () if c.outcome == "undecided"]) for lv in checked]
    open_ = [(lv, cs) for lv, cs in open_ if cs]
    if not open_:
        return [f"{text!r}: no check is undecided"]
    checks = [c for _, cs in open_ for c in cs]
    bad = []
    if not number(m["need"]).agrees(min(c.min_queries for c in checks)):
        bad.append(f"{text!r}: the fewest queries needed is {min(c.min_queries for c in checks)}")
    pcts = list(dict.fromkeys(f"p{100 * c.percentile:.10g}" for c in checks))
    if m["pcts"] != ", ".join(pcts):
        bad.append(f"{text!r}: the percentiles are {pcts}")
    where = m["where"]
    every = len(open_) == len(checked) and all(len(cs) == len(lv.mlperf or ()) for lv, cs in open_)
    labels = [lv.load.label() for lv, _ in open_]
    if where in ("at every level", "at its level"):
        ok = every and (where == "at every level") == (len(checked) > 1)
    elif where.startswith("at every level but "):
        decided = [lv.load.label() for lv in checked if all(lv is not o for o, _ in open_)]
        ok = where.removeprefix("at every level but ") == ", ".join(decided)
    elif "; " in where or not where.startswith("at "):  # levels with a decided check name their open ones
        whole = [lv.load.label() for lv, cs in open_ if len(cs) == len(lv.mlperf or ())]
        parts = where.split("; ")
        listed = parts[0].removeprefix("at ").split(", ") if parts[0].startswith("at ") else []
        ok = listed == whole
        partial = {lv.load.label(): cs for lv, cs in open_ if len(cs) < len(lv.mlperf or ())}
        named = parts[1:] if listed else parts
        ok = ok and len(named) == len(partial)
        for part in named:
            names, _, label = part.rpartition(" at ")
            cs = partial.get(label)
            pct = [n.rsplit(" ", 1)[-1] for n in names.split(", ")]
            ok = ok and cs is not None and pct == [f"p{100 * c.percentile:.10g}" for c in cs]
    else:
        ok = where.removeprefix("at ") == ", ".join(labels)
    if not ok:
        bad.append(f"{text!r}: undecided at {labels} of {[lv.load.label() for lv in checked]}")
    return bad


def check_window_line(lv: LevelSummary, text: str) -> list[str]:
    """``rates over 0–0.164 s of 0.164 s (every user busy, ...); whole window 73.3 req/s, 1,174
    out tok/s``: the held window's bounds (``throughput.window``), the level's duration and
    the whole window's rates (``throughput.whole``); or ``rates over the whole window: NOTE``."""
    win, whole = lv.throughput.window, lv.throughput.whole_rates(lv.duration_s)
    if win is None:
        return [f"{text!r}: the summary has no throughput window"]
    m = re.fullmatch(r"rates over the whole window: (?P<note>.+)", text.strip())
    if m is not None:
        ok = win.rule == "whole" and m["note"] == (win.note or "no load was held")
        return [] if ok else [f"{text!r}: the window is {win}"]
    m = re.fullmatch(
        r"rates over (?P<a>\S+)–(?P<b>\S+) s of (?P<d>\S+) s \((?P<why>[^)]+)\); "
        r"whole window (?P<rps>\S+) req/s(?:, (?P<tps>\S+) out tok/s)?",
        text.strip(),
    )
    if m is None:
        return [f"{text!r}: not a window line"]
    shown = [
        ("start", m["a"], win.start_s),
        ("end", m["b"], win.end_s),
        ("duration", m["d"], lv.duration_s),
        ("whole req/s", m["rps"], whole.requests_per_s),
        ("whole out tok/s", m["tps"], whole.output_tokens_per_s),
    ]
    bad = [f"{text!r}: {k} is {v}" for k, t, v in shown if t is not None and not number(t).agrees(v)]
    if (m["tps"] is None) != (whole.output_tokens_per_s is None) or win.rule == "whole" or numbers(m["why"]):
        bad.append(f"{text!r}: the window is {win}, the whole rates {whole}")
    return bad
