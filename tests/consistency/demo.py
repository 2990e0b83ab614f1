"""``loadgen demo``'s own lines after its two runs: the lesson table (chat requests' ITL and
TTFT per level, both runs), the paragraph under it and one line per run."""

from __future__ import annotations

import re
from collections.abc import Mapping

from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.orchestrate.demo import CHUNK_BUDGET, DEMO_MAX_SEQS
from tests.consistency.parse import number, numbers, rich_tables
from tests.consistency.surfaces import numbers_among

_COLUMN = re.compile(r"(ITL|TTFT) (p99|max) (\w+)")


def _chat(lv: LevelSummary, key: str, stat: str) -> float | None:
    cls = lv.by_class.get("chat")
    return None if cls is None else getattr(cls, key).stat(stat)


def check_lesson(summaries: Mapping[str, RunSummary], text: str) -> list[str]:
    bad: list[str] = []
    tables, lines = rich_tables(text)
    if len(tables) != 1:
        return [f"demo: {len(tables)} lesson tables"]
    t = tables[0]
    first = next(iter(summaries.values()))
    for i, row in enumerate(t.rows):
        for h, shown in zip(t.headers, row):
            if h == "users":
                ok = shown == f"{first.levels[i].load.value:g}"
            else:
                m = _COLUMN.fullmatch(h)
                if m is None or m.group(3) not in summaries:
                    bad.append(f"demo lesson: column {h!r} is not in the map")
                    continue
                truth = _chat(summaries[m.group(3)].levels[i], m.group(1).lower() + "_ms", m.group(2))
                ok = number(shown).agrees(truth)
            if not ok:
                bad.append(f"demo lesson {i} {h}: {shown!r}")
    prose = " ".join(line.strip() for line in lines)
    worst = {n: max(_chat(lv, "itl_ms", "max") or 0 for lv in s.levels) for n, s in summaries.items()}
    p99 = {n: max(_chat(lv, "itl_ms", "p99") or 0 for lv in s.levels) for n, s in summaries.items()}
    for name, pattern in (
        ("unchunked", r"worst chat ITL (\S+) ms \(p99 up to (\S+) ms\)"),
        ("chunked", r"With chunking .*?worst (\S+) ms \(p99 up to (\S+) ms\)"),
    ):
        m = re.search(pattern, prose)
        if m is None or not (number(m.group(1)).agrees(worst[name]) and number(m.group(2)).agrees(p99[name])):
            bad.append(f"demo lesson: {name}'s worst and p99 ITL are {worst[name]}, {p99[name]}: {prose!r}")
    for name, s in summaries.items():
        m = re.search(rf"{name}: (.*?)\.(?: |$)", prose)
        truths = [DEMO_MAX_SEQS, None if s.capacity is None else s.capacity.value]
        if s.saturation is not None and s.saturation.found:
            truths += [
                s.saturation.load,
                100 * (s.saturation.throughput_gain or 0),
                100 * (s.saturation.latency_growth or 0),
            ]
        left = numbers_among(m.group(1), truths) if m else ["(no line)"]
        if left:
            bad.append(f"demo: {name}'s line: {left} not in its summary")
    rest = re.sub(r"(report|comparison): \S+", "", prose)
    for name in summaries:
        rest = re.sub(rf"{name}: .*?\.(?: |$)", "", rest)
    rest = re.sub(r"worst (chat ITL )?\S+ ms \(p99 up to \S+ ms\)", "", rest).replace(f"{CHUNK_BUDGET}-token", "")
    if numbers(rest):
        bad.append(f"demo: numbers {numbers(rest)} in {rest!r} are not in the map")
    return bad
