"""The HTML surfaces as a browser shows them: the run report's level table and answer cards,
the comparison page's table, tally, headline bullets and per-run cards (:data:`PAGE_TEXT`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from loadgen.metrics.results import LevelSummary, RunSummary, unit_label
from loadgen.numfmt import NONE
from tests.consistency.parse import cell, number, numbers
from tests.consistency.surfaces import (
    REPORT_LEVEL_COLUMNS,
    check_capacity_value,
    check_capacity_words,
    check_level_table,
    check_mlperf_undecided,
    check_unbounded_line,
    confidence_truths,
    numbers_among,
    saturation_truths,
)

PAGE_TEXT = """() => ({
  tables: Array.from(document.querySelectorAll('table')).map(t => ({
    id: t.id, rows: Array.from(t.rows).map(r => ({data: Object.assign({}, r.dataset),
      cells: Array.from(r.cells).map(c => c.innerText)}))})),
  cards: Array.from(document.querySelectorAll('.card')).map(c => ({
    id: c.id, value: c.querySelector('.v').innerText,
    subs: Array.from(c.querySelectorAll('.s')).map(s => s.innerText)})),
  banners: Array.from(document.querySelectorAll('.banner[id]')).map(b => ({id: b.id,
    head: Array.from(b.childNodes).filter(n => n.nodeName !== 'UL').map(n => n.textContent).join(''),
    items: Array.from(b.querySelectorAll('li')).map(li => li.innerText)})),
  notes: Object.fromEntries(Array.from(document.querySelectorAll('p.note[id]')).map(n => [n.id, n.innerText])),
  tally: Array.from(document.querySelectorAll('p.tally')).map(c => c.innerText),
  bullets: Array.from(document.querySelectorAll('ul.lead li, ul.headline li')).map(li => ({
    metric: li.dataset.metric || '', verdict: li.dataset.verdict || '', text: li.innerText})),
})"""
"""What a page shows, as a reader sees it (innerText): tables (with each row's data-*), cards,
the comparison's tally and bullets."""

CARD_IDS = ("answer-capacity", "answer-knee", "answer-goodput", "answer-throughput")


def _peak(levels: Sequence[LevelSummary], get: Any) -> tuple[LevelSummary, float] | None:
    best = None
    for lv in levels:
        v = get(lv)
        if v is not None and (best is None or v > best[1]):
            best = (lv, v)
    return best


def check_cards(summary: RunSummary, cards: Sequence[dict[str, Any]], where: str) -> list[str]:
    """The answer cards: capacity (its value, ``between`` and interval), the knee, the peak
    goodput and peak output throughput (the highest level's value, and at which level)."""
    bad: list[str] = []
    ids = [c["id"] for c in cards]
    if [i for i in ids if i not in CARD_IDS]:
        bad.append(f"{where}: cards {ids} are not all in the map")
    for c in cards:
        text = " ".join([c["value"], *c["subs"]])
        if c["id"] == "answer-capacity":
            bad += [f"{where}: {x}" for x in check_capacity_card(summary, c["value"], c["subs"])]
            continue
        elif c["id"] == "answer-knee":
            left = numbers_among(text, saturation_truths(summary))
        else:
            get = (
                (lambda lv: lv.goodput.requests_per_s)
                if c["id"] == "answer-goodput"
                else (lambda lv: lv.throughput.output_tokens_per_s)
            )
            peak = _peak(summary.levels, get)
            assert peak is not None
            lv, v = peak
            shown = re.match(r"(\S+) (?:req|tok)/s$", c["value"].strip())
            if shown is None or not number(shown.group(1)).agrees(v):
                bad.append(f"{where}: {c['id']} {c['value']!r} is not {v}")
            at = f"at {lv.load.label()}{_held(lv)}"
            if not any(s.endswith(at) for s in c["subs"]):
                bad.append(f"{where}: {c['id']} not {at!r}: {c['subs']}")
            slo_numbers = [float(x) for s in lv.goodput.slos for x in numbers(s)]
            left = numbers_among(" ".join(c["subs"]).replace(at, ""), slo_numbers)
        if left:
            bad.append(f"{where}: {c['id']}: {left} in {text!r} not in the summary")
    return bad


def _held(lv: LevelSummary) -> str:
    """A headline card's window, as the level's ``throughput.window`` has it: its held window
    (closed loop), its arrival window (open loop), or nothing (the whole window)."""
    win = lv.throughput.window
    if win is None or win.rule == "whole":
        return ""
    return ", over its held window" if win.rule == "held" else ", over its arrival window"


def check_capacity_card(summary: RunSummary, value: str, subs: Sequence[str]) -> list[str]:
    """The capacity card: its value, the SLOs and target (and the levels it lies between),
    its verdict and notes in words, and its interval."""
    cap = summary.capacity
    assert cap is not None
    if value.strip() == "no SLO given":
        return [] if not cap.slos else [f"capacity card: 'no SLO given' for {cap.slos}"]
    bad = [f"capacity card: {x}" for x in check_capacity_value(summary, value)]
    unit = unit_label(cap.mode)
    head = re.fullmatch(
        rf"(?P<slos>.+) for (?P<t>\S+)% of requests(?:; between (?P<a>\S+) and (?P<b>\S+) {re.escape(unit)})?",
        subs[0].strip(),
    )
    if head is None or head["slos"] != ", ".join(cap.slos) or not number(head["t"]).agrees(cap.target, 100.0):
        bad.append(f"capacity card: {subs[0]!r} is not {cap.slos} at {cap.target}")
    elif (head["a"] is None) != (cap.status != "ok" or cap.between is None) or (
        head["a"] is not None
        and cap.between is not None
        and not (number(head["a"]).agrees(cap.between[0]) and number(head["b"]).agrees(cap.between[1]))
    ):
        bad.append(f"capacity card: {subs[0]!r}: between {cap.between} ({cap.status})")
    conf = [c / 100 for c in confidence_truths(summary) if c is not None]
    for sub in subs[1:]:
        iv = re.fullmatch(r"(?:(?P<conf>\S+)% )?interval(?P<span>.*)", sub.strip())
        if iv is None:
            bad += [f"capacity card: {x}" for x in check_capacity_words(summary, sub)]
            continue
        if iv["conf"] is not None and not any(number(iv["conf"]).agrees(c, 100.0) for c in conf):
            bad.append(f"capacity card: {sub!r}: confidence not the levels'")
        left = numbers_among(iv["span"], [*(cap.interval or ())])
        if left or cap.interval is None:
            bad.append(f"capacity card: {sub!r}: {left} not the capacity interval {cap.interval}")
    return bad


def check_energy(summary: RunSummary, rows: Sequence[dict[str, Any]]) -> list[str]:
    """The GPU energy table: a row per level (its label), its mean power and energy per
    output token equal to the level's ``energy`` in the summary."""
    cells = [r["cells"] for r in rows]
    if cells[0] != ["level", "mean power (W)", "energy per output token (J)"]:
        return [f"report energy table: header {cells[0]} is not in the map"]
    bad = []
    by_label = {lv.load.label(): lv for lv in summary.levels}
    for label, watts, joules in cells[1:]:
        lv = by_label.get(label)
        if lv is None:
            bad.append(f"report energy table: level {label!r} is not in the summary")
            continue
        e = lv.energy
        if e is None:
            bad.append(f"report energy table: {label} has no energy in the summary")
            continue
        if not _shows(watts, e.mean_power_w):
            bad.append(f"report energy table: {label} mean power {watts} is not {e.mean_power_w}")
        if not _shows(joules, e.joules_per_output_token):
            bad.append(f"report energy table: {label} energy per token {joules} is not {e.joules_per_output_token}")
    return bad


def check_errors_table(summary: RunSummary, rows: Sequence[Sequence[str]]) -> list[str]:
    """kind, count, message (the five most frequent per kind): a kind's counts add up to the
    summary's failures of that kind over all levels (at most, when five messages are shown)."""
    if rows[0] != ["kind", "count", "message (most frequent, first 200 characters)"]:
        return [f"report error table: header {rows[0]} is not in the map"]
    shown: dict[str, list[int]] = {}
    for kind, n, _ in rows[1:]:
        shown.setdefault(kind, []).append(int(n))
    bad = []
    for kind, counts in shown.items():
        total = sum(lv.requests.by_error.get(kind, 0) for lv in summary.levels)
        if sum(counts) > total or (len(counts) < 5 and sum(counts) != total):
            bad.append(f"report error table: {kind} counts {counts}, the summary {total}")
    return bad


def check_server_latency(summary: RunSummary, rows: Sequence[Sequence[str]]) -> list[str]:
    """The server's own latency means (scraped histograms, not the client's measurement, so
    not in the summary): a row per level of the summary, by its label, each cell a number
    of ms (numfmt.fmt_ms) or numfmt's NONE. Their values are the scrape's (sum delta over count delta), checked by
    tests/report/test_scrape.py against the histograms themselves (a known gap here: this
    map reads the summary, not the run folder's server_metrics.jsonl)."""
    if not rows or rows[0][0] != "level" or not all(h.startswith("server ") for h in rows[0][1:]):
        return [f"report server-latency table: header {rows[0] if rows else []} is not in the map"]
    labels = [lv.load.label() for lv in summary.levels]
    shown = [r[0] for r in rows[1:]]
    bad = [] if shown == labels else [f"report server-latency table: levels {shown}, the summary's {labels}"]
    for r in rows[1:]:
        for value in r[1:]:
            if value != NONE and not re.fullmatch(r"[0-9][0-9.,]*", value):
                bad.append(f"report server-latency table: {r[0]} value {value!r} is not a number of ms")
    return bad


def check_report(summary: RunSummary, page: dict[str, Any]) -> list[str]:
    bad: list[str] = []
    tables = {t["id"]: t["rows"] for t in page["tables"]}
    if set(tables) - {"level-table", "energy", "error-messages", "server-latency"}:
        bad.append(f"report: tables {sorted(tables)} are not all in the map")
    if "error-messages" in tables:
        bad += check_errors_table(summary, [r["cells"] for r in tables["error-messages"]])
    if "server-latency" in tables:
        bad += check_server_latency(summary, [r["cells"] for r in tables["server-latency"]])
    # the energy table: test_pages.py's test_the_energy_table_reads_the_summary (a known gap)
    rows = tables.get("level-table", [])
    headers, body = rows[0]["cells"], [r["cells"] for r in rows[1:]]
    bad += check_level_table(summary, headers, body, REPORT_LEVEL_COLUMNS, "report level table", index_column="#")
    bad += check_cards(summary, page["cards"], "report")
    bad += check_banners(summary, page["banners"])
    for note_id, text in page["notes"].items():
        if note_id == "interval-note":
            bad += check_interval_note(summary, text)
        elif note_id == "token-source":
            bad += [f"report token-source: {numbers(text)}"] if numbers(text) else []
        elif numbers(text):
            bad.append(f"report: note {note_id!r} is not in the map")
    return bad


def check_banners(summary: RunSummary, banners: Sequence[dict[str, Any]]) -> list[str]:
    """The verdict banners: each item ``level 2 (4 users): …`` holds its level's own words
    (client reasons, MLPerf verdict numbers, steady-state numbers); the head counts levels."""
    from tests.consistency.console import steady_truths
    from tests.consistency.surfaces import mlperf_truths, summary_words

    bad = []
    levels = summary.levels
    flagged = {
        "client-verdict": sum(lv.client.client_bound for lv in levels),
        "steady-verdict": sum(not lv.stationary for lv in levels),
        "mlperf-verdict": sum(bool(lv.mlperf) for lv in levels),
    }
    for b in banners:
        if b["id"] not in flagged:
            if numbers(b["head"] + " ".join(b["items"])):
                bad.append(f"report: banner {b['id']!r} is not in the map")
            continue
        head = b["head"]
        if b["id"] == "mlperf-verdict" and "MLPerf early stopping: undecided" in head:
            undecided = head[head.index("MLPerf early stopping: undecided") :]
            bad += [f"report mlperf-verdict: {x}" for x in check_mlperf_undecided(levels, undecided)]
            head = head.removesuffix(undecided)
        left = numbers_among(head, [flagged[b["id"]], len(levels)])
        if left:
            bad.append(f"report {b['id']}: {left} in {b['head']!r}")
        for item in b["items"]:
            m = re.fullmatch(r"level (\d+) \((.+?)\): (.*)", item, flags=re.S)
            if m is None or levels[int(m.group(1)) - 1].load.label() != m.group(2):
                bad.append(f"report {b['id']}: item {item!r} names no level")
                continue
            lv, rest = levels[int(m.group(1)) - 1], m.group(3)
            if b["id"] == "client-verdict":
                ok = summary_words(lv, rest)
            elif b["id"] == "mlperf-verdict":
                ok = not numbers_among(rest, mlperf_truths(lv))
            else:
                ok = summary_words(lv, rest) or not numbers_among(rest, steady_truths(lv))
            if not ok:
                bad.append(f"report {b['id']}: {item!r} is not the summary's")
    return bad


def check_interval_note(summary: RunSummary, text: str) -> list[str]:
    """``±: 95% intervals … n_eff of each level's TTFT series, in send order — 1: 6 of 12, 2: 4
    of 12. —: TTFT p99 cannot be bounded at level 1, 2 (level 1: REASON).``"""
    bad = []
    shown = re.findall(r"(\d+): (\S+) of (\d+)", text)
    for i, lv in enumerate(summary.levels):
        iv = (lv.ttft_ms.intervals or {}).get("mean")
        want = [x for x in shown if x[0] == str(i + 1)]
        if (
            iv is None
            or len(want) != 1
            or not number(want[0][1]).agrees(iv.n_eff)
            or int(want[0][2]) != lv.ttft_ms.count
        ):
            bad.append(f"report interval note: level {i + 1}: {want} vs {iv} of {lv.ttft_ms.count}")
    rest = re.sub(r"(\d+): (\S+) of (\d+)", "", text)
    unbounded = re.search(r"±— not bounded: .*\.$", rest)
    if unbounded is not None:
        named = [(str(i + 1), lv) for i, lv in enumerate(summary.levels)]
        bad += [f"report interval note: {x}" for x in check_unbounded_line(named, unbounded[0], noun="level")]
        rest = rest[: unbounded.start()]
    for lv in summary.levels:
        for iv in (lv.ttft_ms.intervals or {}).values():
            if iv.reason:
                rest = rest.replace(iv.reason, "")
    left = numbers_among(re.sub(r"level [\d, ]+", "", rest), confidence_truths(summary))
    return bad + ([f"report interval note: {left} in {text!r}"] if left else [])


def _value_of(lv: LevelSummary, metric: str, stat: str) -> tuple[float | None, float]:
    """A comparison row's statistic in a run's summary, and the printed scale."""
    if stat == "rate":
        obj = lv.goodput if metric == "goodput" else lv.throughput
        return getattr(obj, "requests_per_s" if metric == "goodput" else metric), 1.0
    if metric == "slo_attainment":
        return lv.goodput.slo_attainment, 100.0
    return lv.dist(metric).stat(stat), 1.0


def _shows(text: str, truth: float | None, scale: float = 1.0) -> bool:
    """Is ``text`` ``truth * scale`` to its precision (a dash for ``None``)?"""
    try:
        shown = cell(text).value
    except ValueError:
        return False
    return shown is None if truth is None else shown is not None and shown.agrees(truth, scale)


def check_comparison_table(
    summaries: Sequence[RunSummary],
    labels: Sequence[str],
    rows: Sequence[dict[str, Any]],
    expected: Sequence[Sequence[Any]],
) -> list[str]:
    """Each run's value is its summary's; Δ is their difference and the relative change Δ over
    the baseline; the interval of Δ and the verdict are the comparison's own (``expected``:
    :func:`loadgen.metrics.compare.compare_level`'s rows, per run after the baseline)."""
    bad: list[str] = []
    head = rows[0]["cells"]
    want = ["level", "metric", "stat", f"{labels[0]}\n(baseline)"]
    for label in labels[1:]:
        want += [label, "Δ vs baseline", "95% CI of Δ", "verdict"]
    if head != want:
        bad.append(f"comparison table: header {head} is not {want}")
    labels_at: dict[int, dict[str, int]] = {}
    for s in summaries:
        for i, lv in enumerate(s.levels):
            labels_at.setdefault(id(s), {})[lv.load.label()] = i
    for r, row in enumerate(rows[1:]):
        cells, metric, stat = row["cells"], row["data"]["metric"], row["data"]["stat"]
        level = cells[0]
        lvs = [s.levels[labels_at[id(s)][level]] for s in summaries]
        a, scale = _value_of(lvs[0], metric, stat)
        where = f"comparison {level} {metric} {stat}"
        if not _shows(cells[3], a, scale):
            bad.append(f"{where}: baseline {cells[3]!r} is not {a}")
        for k, lv in enumerate(lvs[1:]):
            b, _ = _value_of(lv, metric, stat)
            exp = expected[k][r]
            if (exp.metric, exp.stat) != (metric, stat):
                bad.append(f"{where}: row order differs from the comparison's ({exp.metric} {exp.stat})")
                continue
            bad += _check_diff(cells[4 + 4 * k : 8 + 4 * k], a, b, scale, exp, f"{where} {labels[k + 1]}")
    return bad


def _check_diff(
    cells: Sequence[str], a: float | None, b: float | None, scale: float, exp: Any, where: str
) -> list[str]:
    """One run's four cells of a comparison row (its value, Δ with the relative change, the
    interval of Δ and the verdict): ``a`` and ``b`` the summaries' values, the rest ``exp``'s."""
    bad: list[str] = []
    shown_b, delta, ci, verdict = cells
    if not _shows(shown_b, b, scale):
        bad.append(f"{where}: {shown_b!r} is not {b}")
    if exp.diff.diff is None or exp.diff.ci is None:  # nothing to compare: dashes
        if (delta, ci) != ("–", "–") or verdict.split("\n")[0] != exp.diff.verdict:
            bad.append(f"{where}: {delta!r} {ci!r} {verdict!r} for a difference the comparison lacks")
        return bad
    m = re.fullmatch(r"(\S+) \((\S+)%\)", delta)
    if a is None or b is None or m is None:
        return [*bad, f"{where}: Δ {delta!r} unparsed"]
    d = (b - a) * scale
    if not number(m.group(1)).agrees(d):
        bad.append(f"{where}: Δ {m.group(1)!r} is not the run's value - the baseline's = {d}")
    rel = 100 * (b - a) / a if a else None
    if not number(m.group(2)).agrees(rel):
        bad.append(f"{where}: relative change {m.group(2)!r}% is not {rel}%")
    ci_m = re.fullmatch(r"\[(\S+), (\S+)\]", ci)
    if (
        exp.diff.ci is None
        or ci_m is None
        or not (number(ci_m.group(1)).agrees(exp.diff.ci[0]) and number(ci_m.group(2)).agrees(exp.diff.ci[1]))
    ):
        bad.append(f"{where}: CI {ci!r} is not the comparison's {exp.diff.ci}")
    if verdict.split("\n")[0] != exp.diff.verdict:
        bad.append(f"{where}: verdict {verdict!r} is not {exp.diff.verdict!r}")
    return bad


def _class_value(lv: LevelSummary, request_class: str, metric: str, stat: str) -> float | None:
    """A per-class row's statistic in a level's ``by_class``."""
    dist = getattr(lv.by_class[request_class], metric)
    return dist.stat(stat)  # type: ignore[no-any-return]


def check_class_table(
    summaries: Sequence[RunSummary],
    labels: Sequence[str],
    rows: Sequence[dict[str, Any]],
    classes: Sequence[Sequence[Any]],
) -> list[str]:
    """The per-class table: each run's value is its level's ``by_class`` one; Δ, its
    relative change, interval and verdict as :func:`check_comparison_table` checks them,
    against ``classes`` (:func:`class_rows`); a class a run lacks shows dashes."""
    bad: list[str] = []
    want = ["level", "class", "metric", "stat", f"{labels[0]}\n(baseline)"]
    for label in labels[1:]:
        want += [label, "Δ vs baseline", "95% CI of Δ", "verdict"]
    if rows[0]["cells"] != want:
        bad.append(f"class table: header {rows[0]['cells']} is not {want}")
    keyed = [
        {(_level_label(summaries, r.row), r.request_class, r.row.metric, r.row.stat): r.row for r in run}
        for run in classes
    ]
    seen = 0
    for row in rows[1:]:
        cells, data = row["cells"], row["data"]
        key = (cells[0], data["class"], data["metric"], data["stat"])
        where = "class table " + " ".join(key)
        if cells[1] != data["class"]:
            bad.append(f"{where}: class cell {cells[1]!r}")
        a = _class_value(_level_at(summaries[0], key[0]), *key[1:])
        if not _shows(cells[4], a):
            bad.append(f"{where}: baseline {cells[4]!r} is not {a}")
        for k, run in enumerate(summaries[1:]):
            four = cells[5 + 4 * k : 9 + 4 * k]
            exp = keyed[k].get(key)
            if exp is None:
                if four != ["–", "–", "–", "not in this run"]:
                    bad.append(f"{where}: {four} for a class {labels[k + 1]} did not run")
                continue
            seen += 1
            b = _class_value(_level_at(run, key[0]), *key[1:])
            bad += _check_diff(four, a, b, 1.0, exp, f"{where} {labels[k + 1]}")
    if seen != sum(len(run) for run in classes):
        bad.append(f"class table: {seen} cells for {sum(len(run) for run in classes)} per-class rows")
    return bad


def comparison_rows(folders: Sequence[Any]) -> list[list[Any]]:
    """The comparison's own rows (the interval of each difference and its verdict), computed
    as ``loadgen compare`` does: per run after the first, every common level."""
    from loadgen.metrics.compare import common_levels, compare_level
    from loadgen.report.rundata import load_run

    runs = [load_run(f) for f in folders]
    levels = common_levels([r.summary for r in runs])
    return [
        [
            row
            for pos, (_, _, idx) in enumerate(levels)
            for row in compare_level(runs[0].level_samples(idx[0]), other.level_samples(idx[k]), pos)
        ]
        for k, other in enumerate(runs[1:], start=1)
    ]


def class_rows(folders: Sequence[Any]) -> list[list[Any]]:
    """The comparison's per-class rows (:class:`loadgen.metrics.compare.ClassRow`), per run
    after the first, every common level, when ``loadgen compare`` shows them (a level of
    either side with more than one class); empty lists otherwise."""
    from loadgen.metrics.compare import common_levels, compare_classes, several_classes
    from loadgen.report.rundata import load_run

    runs = [load_run(f) for f in folders]
    levels = common_levels([r.summary for r in runs])
    pairs = [
        [(runs[0].level_samples(idx[0]), other.level_samples(idx[k])) for _, _, idx in levels]
        for k, other in enumerate(runs[1:], start=1)
    ]
    if not any(several_classes(a, b) for pair in pairs for a, b in pair):
        return [[] for _ in pairs]
    return [[r for pos, (a, b) in enumerate(pair) for r in compare_classes(a, b, pos).rows] for pair in pairs]


_BULLET = re.compile(
    r"(?:(?P<verdict>[a-z ]+): )?(?P<name>.+?) at (?P<level>.+?): (?P<a>\S+) → (?P<b>\S+) (?P<unit>\S*) ?"
    r"(?:\((?P<rel>\S+)%\))?(?:, 95% CI of Δ \[(?P<lo>\S+), (?P<hi>\S+)\])?(?P<note>.*)"
)


def _row_name(row: Any) -> str:
    return str(row.label) + ("" if row.stat in ("rate", "value") else f" {row.stat}")


def check_bullet(
    summaries: Sequence[RunSummary],
    k: int,
    rows: Sequence[Any],
    text: str,
    where: str,
    request_class: str | None = None,
) -> list[str]:
    """``better: TTFT p99 at 1 user: 3.72 → 2.56 ms (-31%), 95% CI of Δ [-1.53, -0.31]``: the
    two values are the runs' summaries' (a class's ``by_class`` ones for ``request_class``),
    the rest the comparison's row."""
    m = _BULLET.fullmatch(text.strip())
    if m is None:
        return [f"{where}: bullet {text!r} unparsed"]
    found = [r for r in rows if _row_name(r) == m["name"] and _level_label(summaries, r) == m["level"]]
    if len(found) != 1:
        return [f"{where}: bullet {text!r} names no row"]
    r = found[0]
    bad = []
    for run, shown in ((summaries[0], m["a"]), (summaries[k + 1], m["b"])):
        lv = _level_at(run, _level_label(summaries, r))
        v, scale = (
            _value_of(lv, r.metric, r.stat)
            if request_class is None
            else (_class_value(lv, request_class, r.metric, r.stat), 1.0)
        )
        if lv is None or not number(shown).agrees(v, scale):
            bad.append(f"{where}: {text!r}: {shown} is not {v}")
    if m["rel"] is not None and not number(m["rel"]).agrees(None if r.diff.rel is None else 100 * r.diff.rel):
        bad.append(f"{where}: {text!r}: relative change is {r.diff.rel}")
    if m["lo"] is not None and not (number(m["lo"]).agrees(r.diff.ci[0]) and number(m["hi"]).agrees(r.diff.ci[1])):
        bad.append(f"{where}: {text!r}: CI is {r.diff.ci}")
    if m["verdict"] is not None and m["verdict"] != r.diff.verdict:
        bad.append(f"{where}: {text!r}: verdict is {r.diff.verdict}")
    if numbers(m["note"]) and not any(x for x in [r.diff.note or ""] if m["note"].strip() in x or x in m["note"]):
        bad.append(f"{where}: {text!r}: note not the comparison's ({r.diff.note!r})")
    return bad


def _level_label(summaries: Sequence[RunSummary], row: Any) -> str:
    """The label of the row's level (its position among the runs' common levels)."""
    from loadgen.metrics.compare import common_levels

    _, _, idx = common_levels(list(summaries))[row.level]
    return str(summaries[0].levels[idx[0]].load.label())


def _level_at(run: RunSummary, label: str) -> LevelSummary:
    return next(lv for lv in run.levels if lv.load.label() == label)


def tally_of(rows: Sequence[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.diff.verdict] = out.get(r.diff.verdict, 0) + 1
    return out


def check_tally(rows: Sequence[Any], text: str, where: str) -> list[str]:
    """``0 worse, 8 better, 20 inconclusive, 4 no significant change``: the rows' verdicts, counted."""
    counts = tally_of(rows)
    bad = []
    for n, verdict in re.findall(r"(\d+) (worse|better|inconclusive|no significant change|n/a)", text):
        if int(n) != counts.get(verdict if verdict != "n/a" else "not available", 0):
            bad.append(f"{where}: {n} {verdict} but {counts.get(verdict, 0)} rows say so")
    m = re.search(r"(\d+) cells", text)
    if m is not None and int(m.group(1)) != len(rows):
        bad.append(f"{where}: {m.group(1)} cells for {len(rows)} rows")
    return bad


def _check_class_line(
    summaries: Sequence[RunSummary], k: int, rows: Sequence[Any], line: str, name: str | None
) -> tuple[list[str], str | None]:
    """One line of ``loadgen compare``'s per-class lines (``rows``: the run's class rows);
    returns what is wrong and the class the next bullets belong to."""
    where = "compare console by class"
    head = re.match(r"  (\S+): (?:(\d+) significant change\(s\), the largest first|no significant change); (.*)", line)
    if head is not None:
        name = head.group(1)
        mine = [r.row for r in rows if r.request_class == name]
        changes = sum(r.diff.verdict in ("better", "worse") for r in mine)
        bad = [] if mine else [f"{where}: {line!r}: no class {name!r} compared"]
        if int(head.group(2) or 0) != changes:
            bad.append(f"{where}: {line!r}: {changes} significant changes")
        bad += check_tally(mine, head.group(3), where)
        m = re.match(r"all (\d+) cells across (\d+) common", head.group(3))
        if m is None or int(m.group(1)) != len(mine):
            bad.append(f"{where}: {line!r}: {len(mine)} cells")
        return bad, name
    mine = [r.row for r in rows if r.request_class == name]
    if line.startswith("    … and "):
        changes = sum(r.diff.verdict in ("better", "worse") for r in mine)
        m = re.match(r"    … and (\d+) more", line)
        return ([] if m is not None and int(m.group(1)) == changes - 5 else [f"{where}: {line!r}"]), name
    if line.startswith("    ") and name is not None:
        return check_bullet(summaries, k, mine, line, f"{where} {name}", request_class=name), name
    if line.startswith(("by class, ", "  only in ")):
        return [], None
    return ([f"{where}: line {line!r} is not in the map"] if numbers(line) else []), name


def check_comparison_console(
    summaries: Sequence[RunSummary],
    labels: Sequence[str],
    expected: Sequence[Sequence[Any]],
    text: str,
    classes: Sequence[Sequence[Any]] | None = None,
) -> list[str]:
    """``loadgen compare``'s verdict lines: per run, a head line, the largest changes, the tally;
    then, when it compares classes (``classes``: :func:`class_rows`), per class a head line
    with its tally and its largest changes."""
    bad: list[str] = []
    k = -1
    by_class: str | None = None  # in a run's per-class lines: the class of the bullets below
    in_classes = False
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("by class, "):
            in_classes = True
            if classes is None or not classes[k]:
                bad.append(f"compare console: {line!r}: per-class lines the comparison does not show")
        if in_classes and "(baseline) → " not in line and not line.startswith("comparison: "):
            more, by_class = _check_class_line(summaries, k, classes[k] if classes else [], line, by_class)
            bad += more
            continue
        in_classes = False
        if "(baseline) → " in line:
            k += 1
            m = re.search(r"(\d+) significant change", line)
            changes = sum(r.diff.verdict in ("better", "worse") for r in expected[k])
            if m is not None and int(m.group(1)) != changes:
                bad.append(f"compare console: {line!r}: {changes} significant changes")
        elif line.startswith("  all "):
            bad += check_tally(expected[k], line, "compare console")
            m = re.match(r"  all (\d+) cells across (\d+) common", line)
            if m is None or int(m.group(1)) != len(expected[k]):
                bad.append(f"compare console: {line!r}: {len(expected[k])} cells")
        elif line.startswith("  … and "):
            changes = sum(r.diff.verdict in ("better", "worse") for r in expected[k])
            m = re.match(r"  … and (\d+) more", line)
            if m is None or int(m.group(1)) != changes - 5:
                bad.append(f"compare console: {line!r}: {changes} changes in all")
        elif line.startswith("  "):
            bad += check_bullet(summaries, k, expected[k], line, "compare console")
        elif line.startswith("comparison: "):
            continue
        elif numbers(line):
            bad.append(f"compare console: line {line!r} is not in the map")
    if classes and any(classes) and "\nby class, " not in "\n" + text:
        bad.append("compare console: no per-class lines although the comparison compares classes")
    return bad


def check_comparison_page(
    summaries: Sequence[RunSummary],
    labels: Sequence[str],
    expected: Sequence[Sequence[Any]],
    page: dict[str, Any],
    classes: Sequence[Sequence[Any]] | None = None,
) -> list[str]:
    """The comparison page: its table, tally, bullets and each run's answer cards; its
    per-class table when it has one (``classes``: :func:`class_rows`)."""
    bad: list[str] = []
    tables = {t["id"]: t["rows"] for t in page["tables"]}
    shows_classes = any(classes or [])
    if set(tables) != {"comparison-table"} | ({"class-comparison-table"} if shows_classes else set()):
        bad.append(f"comparison: tables {sorted(tables)} are not all in the map")
    bad += check_comparison_table(summaries, labels, tables["comparison-table"], expected)
    if classes is not None and shows_classes and "class-comparison-table" in tables:
        bad += check_class_table(summaries, labels, tables["class-comparison-table"], classes)
    if len(page["tally"]) != len(expected):
        bad.append(f"comparison: {len(page['tally'])} tallies for {len(expected)} runs")
    for k, text in enumerate(page["tally"]):
        bad += check_tally(expected[k], text, f"comparison tally {labels[k + 1]}")
    # the bullets follow each run's tally in page order: assign them to runs by their lead paragraph
    per_run = _split_bullets(page["bullets"], len(expected))
    for k, bullets in enumerate(per_run):
        for b in bullets:
            if b["text"].startswith("… and "):
                continue
            bad += check_bullet(
                summaries,
                k,
                expected[k],
                f"{b['verdict']}: {b['text']}" if b["verdict"] else b["text"],
                f"comparison bullet {labels[k + 1]}",
            )
    cards = page["cards"]
    n = len(cards) // len(summaries) if summaries else 0
    for i, s in enumerate(summaries):
        bad += check_cards(s, cards[i * n : (i + 1) * n], f"comparison cards {labels[i]}")
    return bad


def _split_bullets(bullets: Sequence[dict[str, Any]], runs: int) -> list[list[dict[str, Any]]]:
    if runs == 1:
        return [list(bullets)]
    raise NotImplementedError("bullets of several runs: checked per run in the matrix test")
