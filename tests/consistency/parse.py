"""Parsers for every surface a run prints its statistics on, and the check that a printed
number is its summary's value to the printed precision.

A printed number is read as :class:`Shown`: its value and half of its last digit's place
(``1,321`` → 1321 ± 0.5; ``1.32e+03`` → 1320 ± 5; ``6.8`` → 6.8 ± 0.05). It agrees with a
true value when the true value rounds to it, whatever the formatting (thousands separators,
significant or fixed digits, exponent). Cells carry an interval as ``±6%``, ``±—`` or
``[low, high]`` (docs/metrics.md); :func:`cell` splits them off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NUMBER = r"[-+±]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
_ONE = re.compile(rf"^\s*({NUMBER})\s*$")
_ANY = re.compile(r"(?<![\w.])" + NUMBER)
DASHES = frozenset({"–", "—", "-", ""})
"""A cell that shows no value: the summary's value is ``None``."""


@dataclass(frozen=True, slots=True)
class Shown:
    """A number as printed: its ``text``, ``value`` and ``tol`` (half its last digit's place)."""

    text: str
    value: float
    tol: float

    def agrees(self, truth: float | None, scale: float = 1.0) -> bool:
        """Does ``truth * scale`` round to what is shown?"""
        if truth is None:
            return False
        want = float(truth) * scale
        return abs(self.value - want) <= self.tol * (1 + 1e-9) + 1e-12 * max(1.0, abs(want))


def number(text: str) -> Shown:
    """The one number in ``text`` (``ValueError`` when it is not exactly one number)."""
    m = _ONE.match(text)
    if m is None:
        raise ValueError(f"not a number: {text!r}")
    raw = m.group(1)
    body = raw.replace(",", "").replace("±", "")
    mantissa, _, exp = body.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    scale = 10.0 ** int(exp) if exp else 1.0
    return Shown(raw, float(body), 0.5 * 10.0**-decimals * scale)


def numbers(text: str) -> list[str]:
    """Every number written in ``text`` (to find one no check accounts for)."""
    return _ANY.findall(text)


@dataclass(frozen=True, slots=True)
class Cell:
    """A printed statistic: the value (``None`` for a dash), and its interval as printed:
    ``pm`` (``±N%``), ``unbounded`` (``±—`` or a lone ``—`` in an interval column) or ``bounds``."""

    value: Shown | None
    pm: Shown | None = None
    unbounded: bool = False
    bounds: tuple[Shown, Shown] | None = None


_PM = re.compile(r"\s*±\s*(—|" + NUMBER.removeprefix("[-+±]?") + r")\s*%?\s*$")
_BOUNDS = re.compile(rf"\s*\[\s*({NUMBER})\s*,\s*({NUMBER})\s*\]\s*$")


def cell(text: str) -> Cell:
    """``"2.74 ±39%"``, ``"3.72 ±—"``, ``"24.9 [0.51, 413]"``, ``"1,178"``, ``"–"``, ``"±5%"``, ``"—"``."""
    text = text.strip()
    pm: Shown | None = None
    unbounded = False
    bounds: tuple[Shown, Shown] | None = None
    m = _PM.search(text)
    if m is not None:
        if m.group(1) == "—":
            unbounded = True
        else:
            pm = number(m.group(1))
        text = text[: m.start()]
    else:
        b = _BOUNDS.search(text)
        if b is not None:
            bounds = (number(b.group(1)), number(b.group(2)))
            text = text[: b.start()]
    text = text.strip()
    if text == "—" and pm is None and bounds is None:
        return Cell(None, unbounded=True)
    return Cell(None if text in DASHES else number(text), pm, unbounded, bounds)


def interval_agrees(c: Cell, value: float | None, iv: Any, scale: float = 1.0) -> str | None:
    """Why ``c``'s interval is not the summary's interval ``iv`` (a ``StatInterval``) of ``value``
    (None: it is). ``±N%`` is the larger side relative to the value; ``[low, high]`` the bounds
    (in the value's printed unit: ``scale``); ``—`` unbounded."""
    if c.pm is None and not c.unbounded and c.bounds is None:
        return None  # no interval printed beside this value: only the value is checked
    if iv is None or value is None:
        return "an interval the summary lacks"
    low, high = iv.low, iv.high
    if low is None or high is None:
        return None if c.unbounded else f"shown as bounded, the summary's is not ({iv.reason})"
    if c.unbounded:
        return "shown as unbounded, the summary's is bounded"
    rel = max(value - low, high - value, 0.0) / abs(value) if value else None
    if c.pm is not None:
        return None if c.pm.agrees(rel, 100.0) else f"±{c.pm.text}% vs {rel}"
    if c.bounds is not None:
        ok = c.bounds[0].agrees(low, scale) and c.bounds[1].agrees(high, scale)
        return None if ok else f"[{c.bounds[0].text}, {c.bounds[1].text}] vs [{low}, {high}]"
    return None  # no interval printed beside this value: only the value is checked


# ---- rich tables ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Table:
    """A rich table as printed: its title (the line above it), headers (multi-line headers
    joined with a space) and rows of cell texts."""

    title: str
    headers: list[str]
    rows: list[list[str]]


def _split(line: str, sep: str) -> list[str]:
    return [part.strip() for part in line.strip()[1:-1].split(sep)]


def rich_tables(text: str) -> tuple[list[Table], list[str]]:
    """The rich tables in console ``text`` (heavy-head box style) and the other lines."""
    tables: list[Table] = []
    rest: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("┏"):
            title = rest.pop().strip() if rest and rest[-1].strip() and "│" not in rest[-1] else ""
            head_lines: list[list[str]] = []
            i += 1
            while not lines[i].lstrip().startswith("┡"):
                head_lines.append(_split(lines[i], "┃"))
                i += 1
            headers = [" ".join(p for p in parts if p) for parts in zip(*head_lines)]
            rows: list[list[str]] = []
            i += 1
            while not lines[i].lstrip().startswith("└"):
                if lines[i].lstrip().startswith("│"):
                    parts = _split(lines[i], "│")
                    if rows and not parts[0]:  # a cell wrapped onto the next line: one row still
                        rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], parts)]
                    else:
                        rows.append(parts)
                i += 1
            tables.append(Table(title, headers, rows))
        else:
            rest.append(line)
        i += 1
    return tables, rest
