"""CUDA graphs for decode-only steps of the torch runner (CUDA only, never used on CPU).

A decode step of a small batch is a few hundred short kernels; launching them one by one
costs more than running them. A CUDA graph records the whole forward once and replays
it with one launch. Graphs need static shapes, so a decode-only step is padded to a
batch size of ``batch_sizes`` (1, 2, 4, ... 256 by default, ``--cuda-graph-sizes``) and
to a power-of-two number of KV blocks per row (:func:`block_bucket`), with padded rows
writing to the runner's null block and masked out of attention. Every (batch, blocks)
shape of :func:`capture_plan` is captured at start-up, before the server takes requests,
into one shared memory pool (as vLLM does: capturing lazily would put capture stalls
into the first requests' ITL); a shape outside the plan — its gathered K/V would exceed
``memory_bytes`` — runs eagerly.
The graph covers the decoder up to the final norm; the LM head and sampling run eagerly
(so the pool never holds ``[batch, vocab]`` logits per graph).

If a capture fails, graphs are switched off for the rest of the run (eager fallback)
and the reason is logged once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from loadgen.server.engine.batch import ScheduledSeq

__all__ = ["DecodeGraphs", "PaddedDecoder", "block_bucket", "bucket", "capture_plan"]

log = logging.getLogger(__name__)


def bucket(n: int, sizes: Sequence[int]) -> int:
    """The smallest of ``sizes`` (ascending) that is >= ``n``; ``n`` if none is."""
    for size in sizes:
        if size >= n:
            return size
    return n


def block_bucket(context_len: int, block_size: int) -> int:
    """Blocks per row of a padded decode batch: the context's blocks, rounded up to a
    power of two (so few shapes, hence few CUDA graphs, cover all contexts)."""
    blocks = -(-context_len // block_size)
    return 1 << (blocks - 1).bit_length()


def capture_plan(
    batch_sizes: Sequence[int], block_size: int, max_context_len: int, memory_bytes: int, token_bytes: int
) -> list[tuple[int, int]]:
    """The (batch, blocks) shapes captured at start-up: every batch size times every
    power-of-two block count up to the longest context's, less those whose gathered K and V
    of one layer (``batch * blocks * block_size * token_bytes``) exceed ``memory_bytes``."""
    top = block_bucket(max(1, max_context_len), block_size)
    shapes = []
    for batch in sorted(set(batch_sizes)):
        blocks = 1
        while blocks <= top:
            if batch * blocks * block_size * token_bytes <= memory_bytes:
                shapes.append((batch, blocks))
            blocks *= 2
    return shapes


class PaddedDecoder(Protocol):
    """What the graphs need of a runner: its decode path at static, padded shapes."""

    device: torch.device
    block_size: int
    null_block: int  # padded rows write their K/V here

    def padded_inputs(self, seqs: Sequence[ScheduledSeq], batch_size: int, num_blocks: int) -> tuple[torch.Tensor, ...]:
        """CPU tensors: ids, positions, slots, block tables, context lengths."""
        ...

    def decode_forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        tables: torch.Tensor,
        context_lens: torch.Tensor,
    ) -> torch.Tensor:
        """Final hidden states ``[batch, hidden]`` of a padded decode-only step."""
        ...


@dataclass(slots=True)
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # ids, positions, slots, tables, context lengths
    hidden: torch.Tensor  # [batch, hidden]


class DecodeGraphs:
    """The decode graphs of one runner, captured by :meth:`capture_all` (see the module
    docstring).

    ``token_bytes``: K and V of one token in one layer, to bound a shape's gathered K/V.
    """

    def __init__(self, runner: PaddedDecoder, batch_sizes: Sequence[int], memory_bytes: int, token_bytes: int) -> None:
        self.runner = runner
        self.batch_sizes = sorted(batch_sizes)
        self.memory_bytes = memory_bytes
        self.token_bytes = token_bytes
        self.graphs: dict[tuple[int, int], _Graph] = {}
        self.pool: Any = None
        self.disabled_reason: str | None = None
        self.replays = 0

    def gathered_bytes(self, batch: int, blocks: int) -> int:
        """Bytes of one layer's gathered K and V at a padded shape."""
        return batch * blocks * self.runner.block_size * self.token_bytes

    def run(self, seqs: Sequence[ScheduledSeq]) -> torch.Tensor | None:
        """Hidden states ``[padded batch, hidden]`` of a decode-only step, or None when
        no graph applies (then the runner runs the step eagerly)."""
        if self.disabled_reason is not None or len(seqs) > self.batch_sizes[-1]:
            return None
        r = self.runner
        batch = bucket(len(seqs), self.batch_sizes)
        blocks = block_bucket(max(s.context_len for s in seqs), r.block_size)
        if self.gathered_bytes(batch, blocks) > self.memory_bytes:
            return None
        g = self.graphs.get((batch, blocks))
        if g is None:  # not in the start-up plan: eager, never a capture mid-serving
            return None
        for static, new in zip(g.inputs, r.padded_inputs(seqs, batch, blocks)):
            static.copy_(new, non_blocking=True)
        g.graph.replay()
        self.replays += 1
        return g.hidden

    def capture_all(self, max_context_len: int) -> tuple[int, float]:
        """Capture every shape of :func:`capture_plan`; ``(graphs, seconds)``. A failed
        capture switches graphs off (the reason is logged once): decodes run eagerly."""
        started = time.perf_counter()
        plan = capture_plan(
            self.batch_sizes, self.runner.block_size, max_context_len, self.memory_bytes, self.token_bytes
        )
        for batch, blocks in plan:
            try:
                self.graphs[(batch, blocks)] = self._capture(batch, blocks)
            except Exception as exc:  # out of memory, an op that cannot be captured...
                self.disabled_reason = f"{type(exc).__name__}: {exc}"
                log.warning("CUDA graph capture failed, decoding eagerly: %s", self.disabled_reason)
                self.graphs.clear()
                torch.cuda.synchronize()
                break
        return len(self.graphs), time.perf_counter() - started

    def _capture(self, batch: int, blocks: int) -> _Graph:
        r = self.runner
        dev = r.device
        null_slot = r.null_block * r.block_size
        inputs = (
            torch.zeros(batch, dtype=torch.long, device=dev),
            torch.zeros(batch, dtype=torch.long, device=dev),
            torch.full((batch,), null_slot, dtype=torch.long, device=dev),
            torch.full((batch, blocks), r.null_block, dtype=torch.long, device=dev),
            torch.ones(batch, dtype=torch.long, device=dev),
        )
        side = torch.cuda.Stream(device=dev)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm-up runs (kernel selection, workspaces)
            for _ in range(2):
                r.decode_forward(*inputs)
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            hidden = r.decode_forward(*inputs)
        if self.pool is None:
            self.pool = graph.pool()
        return _Graph(graph, inputs, hidden)
