"""Distribution parameters: declarations, parsing context, and text/TOML value coercion."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from loadgen.errors import WorkloadError

__all__ = ["INT_LIMIT", "NUMBER_RE", "Ctx", "Kind", "Param", "convert", "parse_int", "shown", "split_params", "usage"]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str  # "int" | "float" | "ints" | "floats" | "str"
    required: bool = False


class Kind(Protocol):
    """What parsing needs of a distribution's class (its ``build`` is
    :class:`loadgen.workload.distributions.Buildable`'s)."""

    KIND: ClassVar[str]
    PARAMS: ClassVar[tuple[Param, ...]]
    EXAMPLE: ClassVar[str]


def usage(cls: type[Kind]) -> str:
    req = [p.name for p in cls.PARAMS if p.required]
    opt = [p.name for p in cls.PARAMS if not p.required]
    text = f"{cls.KIND} takes {', '.join(req) or 'no required parameters'} (required)"
    if opt:
        text += f", {', '.join(opt)} (optional)"
    return f"{text}, e.g. '{cls.EXAMPLE}'"


@dataclass(slots=True)
class Ctx:
    source: str
    key: str
    base_dir: Path | None

    def error(self, message: str, cls: type[Kind] | None = None) -> WorkloadError:
        if cls is not None:
            message = f"{message}; {usage(cls)}"
        return WorkloadError(message, source=self.source, key=self.key)


INT_RE = re.compile(r"[+-]?\d+")
NUMBER_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


INT_LIMIT = 2**53  # no parameter is near: larger numbers are refused before any arithmetic


def shown(value: Any) -> str:
    """``repr(value)`` cut to 60 characters (an int too long for ``repr`` is named so)."""
    try:
        text = repr(value)
    except ValueError:  # Python refuses int -> str beyond 4,300 digits
        return "a whole number of over 4,300 digits"
    return text if len(text) <= 60 else text[:57] + "..."


def parse_int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    try:
        if INT_RE.fullmatch(text):
            return int(text)
        f = float(text)
    except ValueError:  # not a number, or more digits than int() takes
        return None
    return int(f) if f.is_integer() else None


TYPE_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "ints": "a list of whole numbers",
    "floats": "a list of numbers",
    "str": "a string",
}


def convert(raw: Any, prm: Param, cls: type[Kind], ctx: Ctx) -> Any:
    """Coerce one parameter (spec-text string or TOML value) to its declared type."""
    bad = ctx.error(f"{cls.KIND}: parameter {prm.name!r} must be {TYPE_WORDS[prm.type]}, got {shown(raw)}", cls)
    if prm.type == "str":
        if not isinstance(raw, str) or not raw.strip():
            raise bad
        return raw.strip()
    if prm.type in ("ints", "floats"):
        items = raw.split(";") if isinstance(raw, str) else raw
        if not isinstance(items, list):
            raise bad
        one = Param(prm.name, prm.type[:-1])
        try:
            return [convert(x, one, cls, ctx) for x in items]
        except WorkloadError:
            raise bad from None
    if isinstance(raw, bool):
        raise bad
    if isinstance(raw, str):
        value: float | int | None
        if prm.type == "int":
            value = parse_int(raw)
        else:
            try:
                value = float(raw)
            except ValueError:
                value = None
        if value is None:
            raise bad
        raw = value
    too_large = ctx.error(
        f"{cls.KIND}: parameter {prm.name!r} must be at most {INT_LIMIT:,} in size, got {shown(raw)}", cls
    )
    if isinstance(raw, int) and abs(raw) > INT_LIMIT:  # before any float(): 10**400 has none
        raise too_large
    if not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise bad
    if prm.type == "int":
        if not float(raw).is_integer():
            raise bad
        if abs(raw) > INT_LIMIT:
            raise too_large
        return int(raw)
    return float(raw)


def split_params(rest: str, cls: type[Kind], ctx: Ctx) -> dict[str, str]:
    params: dict[str, str] = {}
    if not rest.strip():
        return params
    for part in rest.split(","):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or not name:
            raise ctx.error(f"{cls.KIND}: expected PARAM=VALUE, got {part.strip()!r}", cls)
        if name in params:
            raise ctx.error(f"{cls.KIND}: parameter {name!r} given twice", cls)
        params[name] = value.strip()
    return params
