"""A joint (prompt, output) length distribution: a 2-D empirical histogram.

Real traffic's prompt and output lengths are correlated (a long document asks for a long
summary; a short question gets a short answer). Two independent marginals lose that;
this kind samples the pair together. In a workload file::

    [joint_tokens]
    prompt_edges = [1, 64, 256, 1024, 4097]   # bin i holds the lengths edges[i] .. edges[i+1]-1
    output_edges = [1, 32, 128, 513]
    cells = [[0, 0, 40], [1, 1, 25], [3, 2, 5]]   # [prompt bin, output bin, weight]

A draw picks a cell with probability weight / total, then each length uniformly among
the whole numbers of its bin. ``loadgen workload fit`` writes this table from a dataset or
trace. It replaces ``prompt_tokens`` and ``output_tokens`` in a class.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.workload.distributions import MAX_LENGTH

__all__ = ["JointLengths", "Marginal", "fit_joint", "parse_joint"]

_KEYS = ("prompt_edges", "output_edges", "cells")


@dataclass(slots=True)
class JointLengths:
    prompt_edges: tuple[int, ...]
    output_edges: tuple[int, ...]
    cells: tuple[tuple[int, int, float], ...]
    _pe: np.ndarray = field(init=False, repr=False, compare=False)
    _oe: np.ndarray = field(init=False, repr=False, compare=False)
    _ci: np.ndarray = field(init=False, repr=False, compare=False)
    _p: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._pe = np.asarray(self.prompt_edges, dtype=np.int64)
        self._oe = np.asarray(self.output_edges, dtype=np.int64)
        self._ci = np.array([(i, j) for i, j, _ in self.cells], dtype=np.int64).reshape(-1, 2)
        w = np.array([c[2] for c in self.cells], dtype=float)
        self._p = w / w.sum()

    def sample_pairs(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` (prompt, output) pairs as two ``int64`` arrays, drawn together."""
        cell = rng.choice(len(self.cells), size=n, p=self._p)
        i, j = self._ci[cell, 0], self._ci[cell, 1]
        p = rng.integers(self._pe[i], self._pe[i + 1])
        o = rng.integers(self._oe[j], self._oe[j + 1])
        return p.astype(np.int64), o.astype(np.int64)

    def mean(self, axis: int) -> float:
        edges = self._pe if axis == 0 else self._oe
        b = self._ci[:, axis]
        mids = (edges[b] + edges[b + 1] - 1) / 2.0
        return float(np.dot(mids, self._p))

    def describe(self) -> str:
        return (
            f"joint histogram: {len(self.cells)} cells, prompt {self.prompt_edges[0]}..{self.prompt_edges[-1] - 1}, "
            f"output {self.output_edges[0]}..{self.output_edges[-1] - 1}"
        )

    def to_toml(self) -> str:
        cells = ",\n    ".join(f"[{i}, {j}, {_num(w)}]" for i, j, w in self.cells)
        return (
            f"[joint_tokens]\nprompt_edges = {list(self.prompt_edges)}\noutput_edges = {list(self.output_edges)}\n"
            f"cells = [\n    {cells},\n]\n"
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(slots=True)
class Marginal:
    """One side of a :class:`JointLengths`, as a plain length distribution (for the
    workload's description; the generator samples the pair through the joint)."""

    joint: JointLengths
    axis: int  # 0 prompt, 1 output

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.joint.sample_pairs(rng, n)[self.axis]

    def describe(self) -> str:
        return f"{self.joint.describe()} ({'prompt' if self.axis == 0 else 'output'} side)"

    def mean(self) -> float:
        return self.joint.mean(self.axis)


def _edges(v: Any, source: str, key: str) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) < 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise WorkloadError("expected an array of at least 2 whole numbers", source=source, key=key)
    if v[0] < 1 or any(b <= a for a, b in itertools.pairwise(v)) or v[-1] - 1 > MAX_LENGTH:
        raise WorkloadError(f"edges must rise strictly from >= 1 to at most {MAX_LENGTH + 1}", source=source, key=key)
    return tuple(v)


def parse_joint(table: Any, source: str, key: str) -> JointLengths:
    """The ``[joint_tokens]`` table; errors name ``source`` and ``key``."""
    if not isinstance(table, dict):
        raise WorkloadError(f"expected a table with {', '.join(_KEYS)}", source=source, key=key)
    for k in table:
        if k not in _KEYS:
            raise WorkloadError(f"unknown key {k!r}; allowed keys: {', '.join(_KEYS)}", source=source, key=f"{key}.{k}")
    for k in _KEYS:
        if k not in table:
            raise WorkloadError("missing; it is required", source=source, key=f"{key}.{k}")
    pe = _edges(table["prompt_edges"], source, f"{key}.prompt_edges")
    oe = _edges(table["output_edges"], source, f"{key}.output_edges")
    raw = table["cells"]
    if not isinstance(raw, list) or not raw:
        raise WorkloadError(
            "expected a non-empty array of [prompt bin, output bin, weight]", source=source, key=f"{key}.cells"
        )
    cells = []
    for n, c in enumerate(raw):
        ok = (
            isinstance(c, list)
            and len(c) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) for x in c[:2])
            and isinstance(c[2], (int, float))
            and not isinstance(c[2], bool)
        )
        if not ok or not (0 <= c[0] < len(pe) - 1 and 0 <= c[1] < len(oe) - 1) or not 0 < c[2] < float("inf"):
            raise WorkloadError(
                f"expected [prompt bin 0..{len(pe) - 2}, output bin 0..{len(oe) - 2}, weight > 0], got {c!r}",
                source=source,
                key=f"{key}.cells[{n}]",
            )
        cells.append((int(c[0]), int(c[1]), float(c[2])))
    return JointLengths(pe, oe, tuple(cells))


def _quantile_edges(x: np.ndarray, bins: int) -> tuple[int, ...]:
    q = np.quantile(x, np.linspace(0, 1, bins + 1))
    edges = np.unique(np.concatenate(([x.min()], np.floor(q[1:-1]) + 1, [x.max() + 1])).astype(np.int64))
    return tuple(int(e) for e in edges)


def fit_joint(prompt: Sequence[int] | np.ndarray, output: Sequence[int] | np.ndarray, bins: int = 32) -> JointLengths:
    """The 2-D histogram of observed pairs, on quantile bins (``bins`` per axis at most)."""
    p = np.maximum(np.asarray(prompt, dtype=np.int64), 1)
    o = np.maximum(np.asarray(output, dtype=np.int64), 1)
    pe, oe = _quantile_edges(p, bins), _quantile_edges(o, bins)
    i = np.searchsorted(np.asarray(pe), p, side="right") - 1
    j = np.searchsorted(np.asarray(oe), o, side="right") - 1
    pairs, counts = np.unique(np.stack([i, j], axis=1), axis=0, return_counts=True)
    cells = tuple((int(a), int(b), float(c)) for (a, b), c in zip(pairs.tolist(), counts.tolist()))
    return JointLengths(pe, oe, cells)
