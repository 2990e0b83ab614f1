"""Seeded length distributions for prompt and output tokens.

A distribution is written as spec text, ``KIND:PARAM=VALUE,PARAM=VALUE`` (a bare integer
means ``fixed``), or as a TOML inline table ``{dist = "KIND", PARAM = VALUE, ...}``; the
kinds (``fixed``, ``uniform``, ``normal``, ``lognormal``, ``empirical``) register
themselves with ``@register``. **Truncation policy: resample, never clip**: ``normal`` and
``lognormal`` are conditioned on ``[min, max]`` (inverse-CDF inside the window), then
rounded. Every sample of every kind is an ``int64`` ``>= 1`` inside ``[min, max]``, and
no length exceeds :data:`MAX_LENGTH`.

Each kind's parameters and examples: workloads/README.md, "Length distributions".
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.inputs import open_input
from loadgen.workload._normal import mass, pdf, truncnorm
from loadgen.workload._params import NUMBER_RE, Ctx, Kind, Param, convert, parse_int, split_params

__all__ = [
    "MAX_LENGTH",
    "Distribution",
    "Empirical",
    "Fixed",
    "LogNormal",
    "Normal",
    "Uniform",
    "kinds",
    "parse_distribution",
    "register",
]

MAX_LENGTH = 1_000_000  # tokens: beyond any context window (and a prompt is built in memory)
_CAP = MAX_LENGTH  # upper bound when max is not given


class Distribution(Protocol):
    """A length distribution: integer samples ``>= 1``."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` samples as an ``int64`` array, every value ``>= 1`` and within bounds."""
        ...

    def describe(self) -> str:
        """Spec text that :func:`parse_distribution` turns back into an equal distribution."""
        ...

    def mean(self) -> float:
        """Mean of the (continuous, truncated) law; rounding to integers is ignored."""
        ...


class Buildable(Kind, Protocol):
    """A distribution's class as the registry holds it: parsed by :mod:`loadgen.workload._params`, built here."""

    @classmethod
    def build(cls, p: dict[str, Any], ctx: Ctx) -> Distribution: ...


_KINDS: dict[str, type[Buildable]] = {}
_T = TypeVar("_T")


def register(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: make a distribution kind available to :func:`parse_distribution`."""

    def deco(cls: type[_T]) -> type[_T]:
        cls.KIND = name  # type: ignore[attr-defined]
        _KINDS[name] = cls  # type: ignore[assignment]
        return cls

    return deco


def kinds() -> list[str]:
    """The registered kind names, in registration order."""
    return list(_KINDS)


def _to_int(x: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
    out: np.ndarray = np.clip(np.rint(x), lo, _CAP if hi is None else hi).astype(np.int64)
    return out


def _num(x: float) -> str:
    """Shortest text for a number that parses back to the same value."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else repr(float(x))


def _check_bounds(ctx: Ctx, cls: type[Kind], lo: int, hi: int | None) -> None:
    if lo < 1:
        raise ctx.error(f"{cls.KIND}: min must be >= 1, got {lo}", cls)
    if hi is not None and hi < lo:
        raise ctx.error(f"{cls.KIND}: min ({lo}) is greater than max ({hi})", cls)


def _bounds_text(lo: int, hi: int | None) -> str:
    return (f",min={lo}" if lo != 1 else "") + (f",max={hi}" if hi is not None else "")


# ---------------------------------------------------------------- the kinds


@register("fixed")
@dataclass(slots=True)
class Fixed:
    """Always ``value``."""

    value: int
    PARAMS: ClassVar[tuple[Param, ...]] = (Param("value", "int", True),)
    EXAMPLE: ClassVar[str] = "fixed:value=256"
    KIND: ClassVar[str]

    @classmethod
    def build(cls, p: dict[str, Any], ctx: Ctx) -> Fixed:
        if p["value"] < 1:
            raise ctx.error(f"fixed: value must be >= 1, got {p['value']}", cls)
        return cls(p["value"])

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    def describe(self) -> str:
        return str(self.value)

    def mean(self) -> float:
        return float(self.value)


@register("uniform")
@dataclass(slots=True)
class Uniform:
    """Every integer in ``[min, max]`` equally likely."""

    min: int
    max: int
    PARAMS: ClassVar[tuple[Param, ...]] = (Param("min", "int", True), Param("max", "int", True))
    EXAMPLE: ClassVar[str] = "uniform:min=128,max=1024"
    KIND: ClassVar[str]

    @classmethod
    def build(cls, p: dict[str, Any], ctx: Ctx) -> Uniform:
        _check_bounds(ctx, cls, p["min"], p["max"])
        return cls(p["min"], p["max"])

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.min, self.max + 1, size=n, dtype=np.int64)

    def describe(self) -> str:
        return f"uniform:min={self.min},max={self.max}"

    def mean(self) -> float:
        return (self.min + self.max) / 2.0


@register("normal")
@dataclass(slots=True)
class Normal:
    """N(mean, std) conditioned on ``[min, max]`` (resampled, not clipped), rounded."""

    mu: float
    std: float
    min: int = 1
    max: int | None = None
    PARAMS: ClassVar[tuple[Param, ...]] = (
        Param("mean", "float", True),
        Param("std", "float", True),
        Param("min", "int"),
        Param("max", "int"),
    )
    EXAMPLE: ClassVar[str] = "normal:mean=512,std=128,min=16"
    KIND: ClassVar[str]

    @classmethod
    def build(cls, p: dict[str, Any], ctx: Ctx) -> Normal:
        mu, sd, lo, hi = p["mean"], p["std"], p.get("min", 1), p.get("max")
        if sd < 0:
            raise ctx.error(f"normal: std must be >= 0, got {_num(sd)}", cls)
        _check_bounds(ctx, cls, lo, hi)
        if sd > 0 and mass((lo - mu) / sd, (math.inf if hi is None else hi - mu) / sd) < 1e-12:
            raise ctx.error(
                f"normal: the window [{lo}, {hi}] holds no probability of mean={_num(mu)}, std={_num(sd)}", cls
            )
        return cls(float(mu), float(sd), lo, hi)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        hi = math.inf if self.max is None else float(self.max)
        return _to_int(truncnorm(rng, n, self.mu, self.std, float(self.min), hi), self.min, self.max)

    def describe(self) -> str:
        return f"normal:mean={_num(self.mu)},std={_num(self.std)}{_bounds_text(self.min, self.max)}"

    def mean(self) -> float:
        hi = math.inf if self.max is None else float(self.max)
        if self.std == 0:
            return min(max(self.mu, self.min), hi)
        a, b = (self.min - self.mu) / self.std, (hi - self.mu) / self.std
        return self.mu + self.std * (pdf(a) - pdf(b)) / mass(a, b)


@register("lognormal")
@dataclass(slots=True)
class LogNormal:
    """exp(N(ln median, sigma)) conditioned on ``[min, max]`` (resampled), rounded."""

    median: float
    sigma: float
    min: int = 1
    max: int | None = None
    PARAMS: ClassVar[tuple[Param, ...]] = (
        Param("median", "float", True),
        Param("sigma", "float", True),
        Param("min", "int"),
        Param("max", "int"),
    )
    EXAMPLE: ClassVar[str] = "lognormal:median=800,sigma=0.9,max=8000"
    KIND: ClassVar[str]

    @classmethod
    def build(cls, p: dict[str, Any], ctx: Ctx) -> LogNormal:
        med, s, lo, hi = p["median"], p["sigma"], p.get("min", 1), p.get("max")
        if med <= 0:
            raise ctx.error(f"lognormal: median must be > 0, got {_num(med)}", cls)
        if s < 0:
            raise ctx.error(f"lognormal: sigma must be >= 0, got {_num(s)}", cls)
        _check_bounds(ctx, cls, lo, hi)
        dist = cls(float(med), float(s), lo, hi)
        if s > 0 and mass(*dist._window()) < 1e-12:
            raise ctx.error(
                f"lognormal: the window [{lo}, {hi}] holds no probability of median={_num(med)}, sigma={_num(s)}", cls
            )
        return dist

    def _window(self) -> tuple[float, float]:
        mu = math.log(self.median)
        hi = math.inf if self.max is None else (math.log(self.max) - mu) / self.sigma
        return (math.log(self.min) - mu) / self.sigma, hi

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        hi = math.inf if self.max is None else math.log(self.max)
        logs = truncnorm(rng, n, math.log(self.median), self.sigma, math.log(self.min), hi)
        return _to_int(np.exp(logs), self.min, self.max)

    def describe(self) -> str:
        return f"lognormal:median={_num(self.median)},sigma={_num(self.sigma)}{_bounds_text(self.min, self.max)}"

    def mean(self) -> float:
        if self.sigma == 0:
            return min(max(self.median, self.min), math.inf if self.max is None else self.max)
        a, b = self._window()
        s = self.sigma
        return self.median * math.exp(s * s / 2) * mass(a - s, b - s) / mass(a, b)


@register("empirical")
@dataclass(slots=True)
class Empirical:
    """Draws from a list of observed values (optionally weighted) or a CSV column."""

    values: tuple[int, ...]
    weights: tuple[float, ...] | None = None
    csv: str | None = None  # absolute path when loaded from a file
    column: str | None = None
    _vals: np.ndarray = field(init=False, repr=False, compare=False)
    _p: np.ndarray | None = field(init=False, repr=False, compare=False)
    PARAMS: ClassVar[tuple[Param, ...]] = (
        Param("values", "ints"),
        Param("weights", "floats"),
        Param("csv", "str"),
        Param("column", "str"),
    )
    EXAMPLE: ClassVar[str] = "empirical:values=12;40;77"
    KIND: ClassVar[str]

    def __post_init__(self) -> None:
        self._vals = np.asarray(self.values, dtype=np.int64)
        self._p = None
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=float)
            w = w / w.max()  # first to the largest: weights near 1e308 must not sum to inf
            self._p = w / w.sum()

    @classmethod
    def build(cls, p: dict[str, Any], ctx: Ctx) -> Empirical:
        if ("values" in p) == ("csv" in p):
            raise ctx.error("empirical: give either values or csv (with column)", cls)
        if "csv" in p:
            if "column" not in p or "weights" in p:
                raise ctx.error("empirical: csv needs column and takes no weights", cls)
            return _from_csv(cls, p["csv"], p["column"], ctx)
        if "column" in p:
            raise ctx.error("empirical: column only goes with csv", cls)
        values: list[int] = p["values"]
        if not values:
            raise ctx.error("empirical: values is empty", cls)
        if min(values) < 1:
            raise ctx.error(f"empirical: every value must be >= 1, got {min(values)}", cls)
        weights: list[float] | None = p.get("weights")
        if weights is not None:
            if len(weights) != len(values):
                raise ctx.error(f"empirical: {len(weights)} weights for {len(values)} values", cls)
            if min(weights) < 0 or not sum(weights) > 0 or not all(map(math.isfinite, weights)):
                raise ctx.error("empirical: weights must be finite, >= 0 and not all 0", cls)
            weights = [float(w) for w in weights]
        return cls(tuple(values), None if weights is None else tuple(weights))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self._vals[rng.choice(len(self._vals), size=n, p=self._p)]

    def describe(self) -> str:
        if self.csv is not None:
            return f"empirical:csv={self.csv},column={self.column}"
        text = "empirical:values=" + ";".join(map(str, self.values))
        if self.weights is not None:
            text += ",weights=" + ";".join(map(_num, self.weights))
        return text

    def mean(self) -> float:
        if self._p is None:
            return float(self._vals.mean())
        return float(np.dot(self._vals, self._p))


def _from_csv(cls: type[Empirical], name: str, column: str, ctx: Ctx) -> Empirical:
    path = Path(name)
    if not path.is_absolute():
        path = (ctx.base_dir or Path.cwd()) / path
    path = path.resolve()
    try:
        with io.TextIOWrapper(open_input(path), newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            if column not in header:
                raise ctx.error(f"empirical: {path} has no column {column!r}; columns: {', '.join(header) or '(none)'}")
            raw = [(i, row[column]) for i, row in enumerate(reader, start=2)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ctx.error(f"empirical: cannot read csv {path}: {reason}") from exc
    values = []
    for line, cell in raw:
        v = parse_int(cell)
        if v is None or v < 1:
            raise ctx.error(f"empirical: {path} line {line}: {column}={cell!r} is not a whole number >= 1")
        values.append(v)
    if not values:
        raise ctx.error(f"empirical: {path} has no rows")
    uniq, counts = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
    return cls(tuple(int(v) for v in uniq), tuple(float(c) for c in counts), str(path), column)


# ---------------------------------------------------------------- parsing


def _unknown_kind(kind: str, ctx: Ctx) -> WorkloadError:
    examples = "; ".join(f"'{c.EXAMPLE}'" for c in _KINDS.values())
    return ctx.error(f"unknown distribution kind {kind!r}; valid kinds: {', '.join(_KINDS)} (e.g. {examples})")


def parse_distribution(
    value: str | int | dict[str, Any],
    *,
    source: str = "--flag",
    key: str = "prompt_tokens",
    base_dir: Path | None = None,
) -> Distribution:
    """Parse spec text, an integer or a TOML table into a :class:`Distribution`.

    Raises :class:`~loadgen.errors.WorkloadError` naming ``source`` and ``key``, with the
    valid kinds or the kind's allowed parameters in the message. ``base_dir`` anchors a
    relative ``csv`` path (the workload file's folder).
    """
    ctx = Ctx(source, key, base_dir)
    raw: dict[str, Any]
    if isinstance(value, bool):
        raise _unknown_kind(repr(value), ctx)
    if isinstance(value, int):
        kind, raw = "fixed", {"value": value}
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ctx.error(f"empty distribution; valid kinds: {', '.join(_KINDS)}, or a whole number")
        if NUMBER_RE.fullmatch(text):
            kind, raw = "fixed", {"value": text}
        else:
            kind, _, rest = text.partition(":")
            kind = kind.strip().lower()
            known = _KINDS.get(kind)
            if known is None:
                raise _unknown_kind(kind, ctx)
            raw = split_params(rest, known, ctx)
    elif isinstance(value, dict):
        raw = dict(value)
        kind = raw.pop("dist", None)
        if not isinstance(kind, str):
            raise ctx.error(
                f"a distribution table needs dist = one of {', '.join(_KINDS)}, e.g. "
                '{dist = "lognormal", median = 800, sigma = 0.9}'
            )
        kind = kind.strip().lower()
    else:
        raise ctx.error(
            f"expected a whole number, spec text or a table with dist = one of {', '.join(_KINDS)}, "
            f"got {type(value).__name__}"
        )
    cls = _KINDS.get(kind)
    if cls is None:
        raise _unknown_kind(kind, ctx)
    declared = {p.name: p for p in cls.PARAMS}
    for name in raw:
        if name not in declared:
            raise ctx.error(f"{kind}: unknown parameter {name!r}", cls)
    for prm in cls.PARAMS:
        if prm.required and prm.name not in raw:
            raise ctx.error(f"{kind}: missing required parameter {prm.name!r}", cls)
    params = {name: convert(v, declared[name], cls, ctx) for name, v in raw.items()}
    dist = cls.build(params, ctx)
    _check_size(dist, cls, ctx)
    return dist


def _check_size(dist: Distribution, cls: type[Kind], ctx: Ctx) -> None:
    """Refuse lengths over MAX_LENGTH (a value, max or mean), before anything is sampled."""
    bounds = (
        list(dist.values) if isinstance(dist, Empirical) else [getattr(dist, "value", None), getattr(dist, "max", None)]
    )
    largest = max((b for b in bounds if b is not None), default=0)
    if largest > MAX_LENGTH or not dist.mean() <= MAX_LENGTH:
        raise ctx.error(f"{cls.KIND}: lengths must be at most {MAX_LENGTH:,} tokens, got {dist.describe()}")
