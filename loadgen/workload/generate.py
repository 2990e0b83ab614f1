"""Workload -> :class:`~loadgen.records.RequestSpec` stream, seeded and vectorised.

Requests are drawn in fixed blocks of :data:`BLOCK` indices; block ``b`` uses its own
generator seeded with ``(seed, b)``. A request therefore depends only on
``(workload, seed, index)`` and the synthesiser's calibration — never on how many
requests were asked for at once — so ``generate_specs(n)`` equals the first ``n`` of
``spec_stream`` and ``generate_specs(n, start_index=k)`` equals items ``k..k+n-1``.

Shared-prefix groups are numbered across the workload: the first class with a shared
prefix owns groups ``0..g1-1``, the next ``g1..g1+g2-1``, and so on, so two classes
never share a prefix by accident.

Give each load level of a run its own ``start_index`` range (or seed): the same index
with the same seed (and the synthesiser's salt) is the same prompt, which a prefix cache
would serve from memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np

from loadgen.records import RequestSpec
from loadgen.workload.images import request_images
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import Workload

__all__ = ["BLOCK", "generate_specs", "spec_stream", "specs_at"]

BLOCK = 1024
_M64 = (1 << 64) - 1


def _block(
    workload: Workload, seed: int, synth: PromptSynthesizer, block: int, pick: slice | np.ndarray
) -> list[RequestSpec]:
    """Specs for the indices ``block*BLOCK + r`` of the positions ``pick`` of the block (a
    slice or an ascending array); lengths are drawn for the whole block, texts only for
    the picked positions."""
    rng = np.random.default_rng([seed & _M64, block])
    classes = workload.classes
    weights = np.array([c.weight for c in classes], dtype=float)
    choice = rng.choice(len(classes), size=BLOCK, p=weights / weights.sum())
    prompt = np.empty(BLOCK, dtype=np.int64)
    output = np.empty(BLOCK, dtype=np.int64)
    group = np.full(BLOCK, -1, dtype=np.int64)
    shared = np.zeros(BLOCK, dtype=np.int64)
    first_group = 0
    for ci, cls in enumerate(classes):
        rows = np.flatnonzero(choice == ci)
        if cls.joint is not None:  # the pair drawn together
            prompt[rows], output[rows] = cls.joint.sample_pairs(rng, rows.size)
        else:
            prompt[rows] = cls.prompt_tokens.sample(rng, rows.size)
            output[rows] = cls.output_tokens.sample(rng, rows.size)
        if cls.shared_prefix_groups > 0:
            group[rows] = first_group + rng.integers(0, cls.shared_prefix_groups, size=rows.size)
            shared[rows] = cls.shared_prefix_tokens
            prompt[rows] += cls.shared_prefix_tokens
            first_group += cls.shared_prefix_groups
    sl = pick
    indices = block * BLOCK + np.arange(BLOCK, dtype=np.int64)[sl]
    grp = [None if g < 0 else g for g in group[sl].tolist()]
    if synth.counter is None:
        texts = synth.texts(prompt[sl], indices, grp, shared[sl])
    else:
        texts = [synth.text(int(n), int(i), g, int(s)) for n, i, g, s in zip(prompt[sl], indices, grp, shared[sl])]
    names = [classes[c].name for c in choice[sl].tolist()]
    specs = [
        RequestSpec(index=i, prompt=t, prompt_tokens=p, max_tokens=m, request_class=c, group=g)
        for i, t, p, m, c, g in zip(indices.tolist(), texts, prompt[sl].tolist(), output[sl].tolist(), names, grp)
    ]
    if workload.images is not None:  # their own generator per request: the texts and lengths are unchanged
        for spec in specs:
            spec.images = request_images(workload.images, seed, spec.index)
    return specs


def _specs_from(
    workload: Workload, seed: int, synth: PromptSynthesizer, start: int, stop: int | None
) -> Iterator[list[RequestSpec]]:
    if start < 0:
        raise ValueError(f"start_index must be >= 0, got {start}")
    b = start // BLOCK
    while stop is None or b * BLOCK < stop:
        lo = max(start - b * BLOCK, 0)
        hi = BLOCK if stop is None else min(stop - b * BLOCK, BLOCK)
        yield _block(workload, seed, synth, b, slice(lo, hi))
        b += 1


def generate_specs(
    workload: Workload, n: int, *, seed: int, synth: PromptSynthesizer, start_index: int = 0
) -> list[RequestSpec]:
    """``n`` request specs with indices ``start_index .. start_index + n - 1``.

    Same arguments, same specs. The class of each request is drawn by weight; its
    ``prompt_tokens`` is the target length (shared prefix included) and ``max_tokens``
    the drawn output length.
    """
    if n <= 0:
        return []
    return list(itertools.chain.from_iterable(_specs_from(workload, seed, synth, start_index, start_index + n)))


def spec_stream(
    workload: Workload, *, seed: int, synth: PromptSynthesizer, start_index: int = 0
) -> Iterator[RequestSpec]:
    """Endless specs from ``start_index`` on (for ``--duration`` runs), block by block."""
    for chunk in _specs_from(workload, seed, synth, start_index, None):
        yield from chunk


def specs_at(workload: Workload, indices: Sequence[int], *, seed: int, synth: PromptSynthesizer) -> list[RequestSpec]:
    """The specs of the given ``indices`` (ascending, no repeats) — the same ones
    :func:`generate_specs` gives for them — synthesising only their prompts (a worker
    process builds its share of an open-loop level this way)."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return []
    if idx.min() < 0 or (idx.size > 1 and (np.diff(idx) <= 0).any()):
        raise ValueError("specs_at needs ascending, non-negative, distinct indices")
    blocks = idx // BLOCK
    out: list[RequestSpec] = []
    for b in np.unique(blocks).tolist():
        out.extend(_block(workload, seed, synth, b, idx[blocks == b] - b * BLOCK))
    return out
