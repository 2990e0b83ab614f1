"""The console text of ``loadgen run`` (and of each run inside ``loadgen demo``), line by line.

Every line is claimed by one rule of :data:`LINE_RULES` (a pattern and its check); a line
that no rule claims and that holds a number is a mismatch. Rules whose lines carry no
statistic say so (``None`` check: the worker plan, paths, section rules).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.report.console import error_line
from tests.consistency.parse import number, numbers, rich_tables
from tests.consistency.surfaces import (
    CONSOLE_LEVEL_COLUMNS,
    Check,
    capacity_truths,
    check_capacity_value,
    check_capacity_words,
    check_level_line,
    check_level_table,
    check_mlperf_undecided,
    check_unbounded_line,
    check_window_line,
    confidence_truths,
    mlperf_truths,
    numbers_among,
    saturation_truths,
    summary_words,
    value_check,
)

LineCheck = Callable[[RunSummary, LevelSummary | None, re.Match[str]], list[str]]


def _among(truths: Callable[[RunSummary, LevelSummary | None], list[float | None]]) -> LineCheck:
    def check(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
        left = numbers_among(m[0], truths(s, lv))
        return [f"{m[0]!r}: {left} not in the summary"] if left else []

    return check


def _capacity(s: RunSummary, _: LevelSummary | None, m: re.Match[str]) -> list[str]:
    """``capacity at SLOS (90% attainment): VALUE — VERDICT``: the SLOs, target and value are
    the capacity's, the verdict its words (:func:`check_capacity_words`)."""
    cap = s.capacity
    if cap is None:
        return [f"{m[0]!r}: the summary has no capacity"]
    bad = [] if m["slos"] == ", ".join(cap.slos) else [f"{m[0]!r}: the SLOs are {cap.slos}"]
    if not number(m["t"]).agrees(cap.target, 100.0):
        bad.append(f"{m[0]!r}: the target is {cap.target}")
    return bad + check_capacity_value(s, m["value"]) + check_capacity_words(s, m["verdict"])


def steady_truths(lv: LevelSummary) -> list[float | None]:
    """The numbers a steady-state verdict may print: the warm-up cut, each trend's drift and t."""
    st = lv.steady_state
    truths: list[float | None] = [5.0]  # MSER-5, the method's name
    if st is not None:
        truths.append(st.warmup_cut)
        truths += [
            x for t in (st.ttft, st.e2e) if t is not None for x in (None if t.drift is None else 100 * t.drift, t.t)
        ]
    return truths


def _steady(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    """A steady-state note: the summary's reasons (each trend found: a level may rise in its
    batch medians and its 10th percentiles, only one of them in ``steady_state.ttft``) and
    the warm-up cut or a trend's drift and t."""
    assert lv is not None
    rest = m["rest"]
    for reason in sorted(lv.steady_state.reasons if lv.steady_state else (), key=len, reverse=True):
        rest = rest.replace(reason, "")
    left = numbers_among(rest, steady_truths(lv))
    return [f"{m[0]!r}: {left} not in the steady-state verdict"] if left else []


def _unbounded(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    """One level's ``±— not bounded: TTFT p99; ITL p99 (…; e.g. TTFT p99: REASON, its n_eff 7.1)``."""
    assert lv is not None
    return check_unbounded_line([("", lv)], m["rest"])


def _unbounded_table(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    """The level table's ``±— not bounded: TTFT p99 at 1 user, 4 users (…)``: levels by their labels."""
    return check_unbounded_line([(x.load.label(), x) for x in s.levels], m[0])


def _intervals_table(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    """``±: 95% intervals (…); n_eff: each level's TTFT mean, …``: the levels' confidences."""
    confs = sorted({iv.confidence for x in s.levels if (iv := (x.ttft_ms.intervals or {}).get("mean")) is not None})
    shown = m["conf"].split(" / ")
    ok = len(shown) == len(confs) and all(number(t.removesuffix("%")).agrees(c, 100.0) for t, c in zip(shown, confs))
    return [] if ok else [f"{m[0]!r}: the confidences are {confs}"]


def _words(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    assert lv is not None
    return [] if summary_words(lv, m["rest"]) else [f"{m[0]!r}: not the summary's words"]


def _no_numbers(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    return [f"{m[0]!r}: a number in a line that should have none"] if numbers(m[0]) else []


def _schedule(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    assert lv is not None and lv.schedule is not None
    sch = lv.schedule
    truths = [
        sch.late,
        sch.scheduled,
        sch.dropped,
        sch.late_threshold_ms,
        None if sch.credit_wait_ms is None else sch.credit_wait_ms.p99,
    ]
    return _among(lambda s, lv: truths)(s, lv, m)


def _first_error(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    """The server's own first message of an error kind: the summary's words, quoted, no statistic."""
    assert lv is not None
    said = (lv.requests.first_error or {}).get(m["kind"])
    return (
        [] if said is not None and error_line(said) == m["msg"] else [f"{m[0]!r}: not the summary's first {m['kind']}"]
    )


# a level's note: "LABEL: ..." (report/console.py level_notes)
NOTE_RULES: list[tuple[str, LineCheck]] = [
    (r"MLPerf early stopping.*", _among(lambda s, lv: mlperf_truths(lv) if lv else [])),
    (r"client-bound: .*", _words),
    (r"(?:non-stationary|warm-up): .*", _steady),
    (r"note: .*", _words),
    (r"sends: .*", _schedule),
    (r"first (?P<kind>\S+): (?P<msg>.*)", _first_error),
]

# whole lines (None: no statistic on it, by design)
LINE_RULES: list[tuple[str, LineCheck | None]] = [
    (r"workers: .*", None),  # the worker plan: estimates for sizing, not measurements
    (r"(?:dataset )?prompts (?:salted per run|repeated across runs|sent as they are)\b.*", None),  # a salt: an id
    (r"(?:run folder|report|result|comparison): .*", None),  # paths
    (r"─+ .* ─+", None),  # the demo's section rules (server flags)
    (r"capacity at (?P<slos>.+) \((?P<t>\S+)% attainment\): (?P<value>.+?) — (?P<verdict>.+)", _capacity),
    # the capacity's notes, indented under it
    (r"(?:judged|not judged|undecided|met \S+ again).*", lambda s, lv, m: check_capacity_words(s, m[0])),
    (r"MLPerf early stopping: undecided .*", lambda s, lv, m: check_mlperf_undecided(s.levels, m[0])),
    (r"±— not bounded: .*", _unbounded_table),
    (r"±: (?P<conf>.+?) intervals \(.*\); n_eff: each level's TTFT mean, requests in send order", _intervals_table),
    (r"capacity interval .*", _among(lambda s, lv: capacity_truths(s) + confidence_truths(s))),
    (r"saturation.*", _among(lambda s, lv: saturation_truths(s))),
    (r"output tokens .*", _no_numbers),
    (r"stopped early: .*", lambda s, lv, m: [] if s.stopped and s.stopped in m[0] else [f"{m[0]!r}"]),
    (r"interrupted: .*", _no_numbers),
]


def check_run_console(summary: RunSummary, text: str) -> list[str]:
    """Every table and line ``loadgen run`` printed for ``summary`` (the level lines of
    ``--quiet``, the level table, its notes and the answers)."""
    tables, lines = rich_tables(text)
    bad: list[str] = []
    for t in tables:
        if t.title.startswith("Results per load level"):
            bad += check_level_table(summary, t.headers, t.rows, CONSOLE_LEVEL_COLUMNS, "console level table")
        else:
            bad.append(f"console: table {t.title!r} is not in the map")
    if not tables:
        bad.append("console: no level table")
    labels = {lv.load.label(): lv for lv in summary.levels}
    last: LevelSummary | None = None
    seen_lines = 0
    for line in lines:
        if not line.strip():
            continue
        if line.startswith("level "):
            label = line.removeprefix("level ").split(":", 1)[0]
            last = labels.get(label)
            seen_lines += 1
            bad += check_level_line(last, line) if last else [f"console: {line!r}: no such level"]
            continue
        if line.startswith("  MLPerf early stopping"):
            left = numbers_among(line, mlperf_truths(last) if last else [])
            bad += [f"console: {line!r}: {left} not in the level's MLPerf verdict"] if left else []
            continue
        head, sep, rest = line.partition(": ")
        if sep and head in labels:
            for pattern, check in NOTE_RULES:
                m = re.fullmatch(f"(?P<rest>{pattern})", rest)
                if m is not None:
                    bad += [f"console note: {x}" for x in check(summary, labels[head], m)]
                    break
            else:
                bad.append(f"console: note {line!r} is not in the map")
            continue
        for pattern, line_check in LINE_RULES:
            m = re.fullmatch(pattern, line.strip())
            if m is not None:
                bad += [] if line_check is None else [f"console: {x}" for x in line_check(summary, last, m)]
                break
        else:
            if numbers(line):
                bad.append(f"console: line {line!r} is not in the map")
    if seen_lines and seen_lines != len(summary.levels):
        bad.append(f"console: {seen_lines} level lines for {len(summary.levels)} levels")
    return bad


# ---- one level: ``Results — 2 users`` (report/console.py metrics_table) ---------------------

_UNIT = re.compile(r"^(?P<v>\S+) (?P<unit>ms|s)(?P<iv>.*)$")


def _console_dists() -> dict[str, str]:
    """The metrics table's row names (the catalogue's console labels) -> summary distributions."""
    from loadgen.metrics.catalog import metrics

    return {m.console: m.name for m in metrics() if m.console is not None}


def dist_value_check(key: str, stat: str, scale: float) -> Check:
    """The check of one statistic of the distribution ``key`` (its interval too)."""
    return value_check(lambda lv: lv.dist(key).stat(stat), lambda lv: (lv.dist(key).intervals or {}).get(stat), scale)


def check_metrics_table(lv: LevelSummary, headers: list[str], rows: list[list[str]]) -> list[str]:
    bad: list[str] = []
    names = _console_dists()
    if headers[0] != "latency" or [
        h for h in headers[1:] if h not in ("mean", "p50", "p90", "p95", "p99", "p99.9", "max", "min", "std")
    ]:
        bad.append(f"console metrics table: headers {headers} are not in the map")
    for row in rows:
        key = names.get(row[0])
        if key is None:
            bad.append(f"console metrics table: row {row[0]!r} is not in the map")
            continue
        for stat, text in zip(headers[1:], row[1:]):
            m = _UNIT.match(text)
            if m is None:
                if text.strip() != "–" or lv.dist(key).stat(stat) is not None:
                    bad.append(f"console metrics table: {row[0]} {stat}: {text!r}")
                continue
            scale = 1e-3 if m["unit"] == "s" else 1.0
            why = dist_value_check(key, stat, scale)(lv, m["v"] + m["iv"])
            if why:
                bad.append(f"console metrics table: {row[0]} {stat}: {why}")
    return bad


def _const(value: Any) -> Callable[[LevelSummary], Any]:
    return lambda _: value


def _requests_line(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    assert lv is not None
    thr, req = lv.throughput, lv.requests
    bad = []
    if (int(m["ok"]), int(m["failed"])) != (req.ok, req.failed):
        bad.append(f"{m[0]!r}: counts are {req}")
    ivs = thr.intervals or {}
    shown = (
        ("dur", lv.duration_s, None),
        ("rps", thr.requests_per_s, "requests_per_s"),
        ("tps", thr.output_tokens_per_s, "output_tokens_per_s"),
        ("total", thr.total_tokens_per_s, None),
    )
    for part, value, iv in shown:
        why = value_check(_const(value), _const(None if iv is None else ivs.get(iv)))(lv, m[part])
        if why:
            bad.append(f"{m[0]!r}: {part}: {why}")
    return bad


def _slo_line(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    assert lv is not None
    good = lv.goodput
    bad = []
    if m["slos"] != ", ".join(good.slos):
        bad.append(f"{m[0]!r}: the SLOs are {good.slos}")
    att = (good.intervals or {}).get("slo_attainment")
    if not number(m["att"]).agrees(good.slo_attainment, 100.0):
        bad.append(f"{m[0]!r}: attainment is {good.slo_attainment}")
    if m["lo"] is not None and not (
        att is not None and number(m["lo"]).agrees(att.low, 100.0) and number(m["hi"]).agrees(att.high, 100.0)
    ):
        bad.append(f"{m[0]!r}: attainment interval is {att}")
    why = value_check(lambda lv: good.requests_per_s, lambda lv: (good.intervals or {}).get("requests_per_s"))(
        lv, m["good"]
    )
    return bad + ([f"{m[0]!r}: goodput: {why}"] if why else [])


def _pm_line(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    assert lv is not None
    iv = (lv.ttft_ms.intervals or {}).get("mean")
    ok = (
        iv is not None
        and number(m["conf"]).agrees(100 * iv.confidence)
        and number(m["neff"]).agrees(iv.n_eff)
        and int(m["n"]) == lv.ttft_ms.count
    )
    return [] if ok else [f"{m[0]!r}: TTFT mean's interval is {iv}"]


def _check_line(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    assert lv is not None
    found = [c for c in lv.goodput.checks if c.slo == m["slo"]]
    scale = 1e-3 if m["unit"] == "s" else 1.0
    ok = (
        len(found) == 1
        and number(m["v"]).agrees(found[0].value_ms, scale)
        and (m["verdict"] == "pass") == found[0].passed
    )
    return [] if ok else [f"{m[0]!r}: the check is {found}"]


def _client_ok(s: RunSummary, lv: LevelSummary | None, m: re.Match[str]) -> list[str]:
    assert lv is not None
    scale = 1e-3 if m["unit"] == "s" else 1.0
    ok = m["verdict"] == lv.client.verdict and number(m["v"]).agrees(lv.client.loop_lag_ms.p99, scale)
    return [] if ok else [f"{m[0]!r}: client {lv.client.verdict}, lag p99 {lv.client.loop_lag_ms.p99}"]


_V = r"\S+(?: ±\S+| \[\S+, \S+\])?"
ONE_LEVEL_RULES: list[tuple[str, LineCheck | None]] = [
    (
        rf"requests (?P<ok>\d+) ok / (?P<failed>\d+) failed in (?P<dur>\S+) s\s+(?P<rps>{_V}) req/s\s+"
        rf"(?P<tps>{_V}) out tok/s\s+(?P<total>\S+) total tok/s",
        _requests_line,
    ),
    (
        rf"SLO (?P<slos>.+): attainment (?P<att>\S+)%(?: \[(?P<lo>[\d.]+)%, (?P<hi>[\d.]+)%\])?\s+goodput (?P<good>{_V}) req/s",
        _slo_line,
    ),
    (
        r"±: (?P<conf>\S+)% intervals .*; n_eff (?P<neff>\S+) of (?P<n>\d+) \(TTFT mean\), requests in send order",
        _pm_line,
    ),
    (r"rates over .*", lambda s, lv, m: [] if lv is None else check_window_line(lv, m[0])),
    (r"check (?P<slo>\S+): (?P<v>\S+) (?P<unit>ms|s) (?P<verdict>pass|FAIL)", _check_line),
    (r"client: (?P<verdict>\S+) \(event-loop lag p99 (?P<v>\S+) (?P<unit>ms|s)\)", _client_ok),
    (r"MLPerf early stopping: undecided .*", lambda s, lv, m: check_mlperf_undecided(s.levels, m[0])),
    (r"(?P<rest>MLPerf early stopping.*)", _among(lambda s, lv: mlperf_truths(lv) if lv else [])),
    (r"(?P<rest>±— not bounded: .*)", _unbounded),
    (r"(?P<rest>client-bound: .*)", _words),
    (r"(?P<rest>(?:non-stationary|warm-up): .*)", _steady),
    (r"(?P<rest>note: .*)", _words),
    (r"(?P<rest>sends: .*)", _schedule),
    (r"(?P<rest>failures: .*)", _words),
]


def check_one_level_console(summary: RunSummary, text: str) -> list[str]:
    """``loadgen run`` of one level: its level line, the metrics table and the lines under it
    (a line rich wrapped at the console's width is joined to the one it continues)."""
    tables, lines = rich_tables(text)
    (lv,) = summary.levels
    bad: list[str] = []
    if [t.title for t in tables] != [f"Results — {lv.load.label()}"]:
        return [f"console: tables {[t.title for t in tables]}"]
    bad += check_metrics_table(lv, tables[0].headers, tables[0].rows)
    rules = [*ONE_LEVEL_RULES, *LINE_RULES]
    joined: list[str] = []
    for line in lines:
        starts = (
            line.startswith(("level ", "  MLPerf"))
            or any(
                re.match(p.split("(?P<", 1)[0] or p, line.strip()) for p, _ in rules if not p.startswith("(?P<rest>")
            )
            or any(
                re.match(p[len("(?P<rest>") : -1].split(".*")[0], line.strip())
                for p, _ in rules
                if p.startswith("(?P<rest>")
            )
        )
        if joined and line.strip() and not starts:
            joined[-1] = joined[-1].rstrip() + " " + line.strip()
        else:
            joined.append(line)
    for line in joined:
        if not line.strip():
            continue
        if line.startswith("level "):
            bad += check_level_line(lv, line)
            continue
        if line.startswith("  MLPerf early stopping"):
            left = numbers_among(line, mlperf_truths(lv))
            bad += [f"console: {line!r}: {left}"] if left else []
            continue
        for pattern, check in rules:
            m = re.fullmatch(pattern, line.strip())
            if m is not None:
                bad += [] if check is None else [f"console: {x}" for x in check(summary, lv, m)]
                break
        else:
            if numbers(line):
                bad.append(f"console: line {line!r} is not in the map")
    return bad
