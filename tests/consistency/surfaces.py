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
    "n_eff": value_check(n_eff),
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


def column_check(columns: dict[str, Check], header: str) -> Check | None:
    """The checker of a column: from ``columns``, or a latency column ``TTFT p99 ms``
    (console: the unit under the name) / ``TTFT p99`` (report: ms, or a value ending in ``s``)."""
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
        if h != index_column and column_check(columns, h) is None:
            bad.append(f"{where}: column {h!r} is not in the map")
    for i, (lv, row) in enumerate(zip(summary.levels, rows)):
        for h, text in zip(headers, row):
            if h == index_column:
                if text.strip() != str(i + 1):
                    bad.append(f"{where}: level {i + 1} numbered {text!r}")
                continue
            check = column_check(columns, h)
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


@_segment(r"n_eff (?P<v>\S+) of (?P<n>\d+)")
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
    bad += [f"level {lv.load.label()}: {t!r}" for t in tails if not summary_words(lv, t)]
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
