"""How loadgen writes a number on every surface: the console, the reports, the comparison,
the matrix, the dashboard (its script follows the same rule), load labels and prose lines.

The rule (docs/metrics.md, "How numbers are written"):

- a value: 3 significant digits (``0.842``, ``12.3``, ``152``), never an exponent
  (``0.000123``); from 1,000 up every whole digit, thousands separated (``1,450``); one that
  rounds up a decade is written there (``999.6`` → ``1,000``); trailing zeros dropped (``7.5``);
- a relative width or change (an interval's ``±``, a comparison's change) and an ``n_eff``
  (itself an estimate): 2 significant digits, whole from 10 up (``±6.2%``, ``±12%``, ``41``);
- a share (SLO attainment): a percentage of 3 significant digits (``98.5%``), never ``100%``
  short of all (``99.96%``);
- a unit after one space (``12.3 ms``, ``7.48 req/s``; from 10 s up a latency in seconds,
  ``10.8 s``), ``%`` against its number; a missing value ``–``.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["NONE", "fmt", "fmt_latency", "fmt_ms", "fmt_n_eff", "fmt_rel", "fmt_share", "is_number"]

NONE = "–"
"""How a missing value is written."""


def is_number(value: Any) -> bool:
    """A finite int or float (never a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits by the rule above; ``–`` for anything not a
    finite number (None, NaN, a string)."""
    if not is_number(value):
        return NONE
    v = float(value)
    if v == 0:
        return "0"
    exp = math.floor(math.log10(abs(v)))
    decimals = digits - 1 - exp
    rounded = round(v, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > exp:  # 9.996 -> 10.0: one decimal fewer
        decimals -= 1
    if decimals <= 0:
        text = f"{v:,.0f}"
    else:
        text = f"{v:.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def fmt_rel(rel: Any, signed: bool = False) -> str:
    """A relative width or change in percent, 2 significant digits (whole from 10% up):
    ``"6.2%"``; ``signed``: ``"+6.2%"``, ``"-12%"``, and ``"±0%"`` when under 0.005%."""
    if not is_number(rel):
        return NONE
    pct = 100 * float(rel)
    if abs(pct) < 0.005:
        return "±0%" if signed else "0%"
    text = fmt(abs(pct) if not signed else pct, 2)
    return f"{'+' if signed and pct > 0 else ''}{text}%"


def fmt_n_eff(n_eff: Any) -> str:
    """An effective sample size: 2 significant digits, whole from 10 up (``"41"``, ``"1.3"``)."""
    return fmt(n_eff, 2)


def fmt_share(share: Any) -> str:
    """A share (0 to 1) as a percentage of 3 significant digits, ``"98.5%"``; one short of
    1 is never ``"100%"`` and one above 0 never ``"0%"`` (more digits, up to 6)."""
    if not is_number(share):
        return NONE
    pct = 100 * float(share)
    text = fmt(pct)
    for digits in range(4, 7):
        if not ((text == "100" and share < 1) or (text == "0" and share > 0)):
            break
        text = fmt(pct, digits)
    return f"{text}%"


def fmt_ms(ms: Any) -> str:
    """A latency for a column headed "ms": ``"0.842"``, ``"12.3"``, ``"152"``; from 10 s on in
    seconds with its unit, ``"10.8 s"`` (``–``: none)."""
    if not is_number(ms):
        return NONE
    return f"{fmt(float(ms) / 1000)} s" if float(ms) >= 10_000 else fmt(ms)


def fmt_latency(ms: Any) -> str:
    """A latency with its unit: ``"0.842 ms"``, ``"12.3 ms"``, ``"1,450 ms"``, ``"10.8 s"`` (``–``: none)."""
    if not is_number(ms):
        return NONE
    return fmt_ms(ms) if float(ms) >= 10_000 else f"{fmt(ms)} ms"
