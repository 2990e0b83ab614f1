"""The torch runner: one real forward pass per engine step over a paged KV cache.

Each step's :class:`~loadgen.server.engine.batch.ScheduledBatch` is flattened into one
token batch (decode tokens and prefill chunks together) and run through
:class:`~loadgen.server.torch.model.LlamaModel` once. Attention is paged over one KV pool
tensor (plus a scratch block for padding): decodes attend together, grouped by context
length, prefill chunks one sequence at a time (cached prefixes read back from the pool,
never recomputed); logits only at the rows that sample, drawn from each request's own
seeded generator. On CUDA, decode-only steps replay CUDA graphs (:mod:`.cuda_graphs`,
captured by :meth:`TorchRunner.capture_graphs`); the padded path also runs on CPU.

Docs: docs/server.md, "The torch engine" (the pool's layout, the attention paths).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.runner import StepResult, request_seed
from loadgen.server.torch.cuda_graphs import DecodeGraphs, block_bucket, bucket
from loadgen.server.torch.model import LlamaModel

__all__ = ["StepInputs", "TorchRunner"]


@dataclass(slots=True)
class _Prefill:
    row: int  # first row of the chunk in the flat batch
    n: int
    start_pos: int
    blocks: torch.Tensor | None  # the context's blocks (None when start_pos == 0)


@dataclass(slots=True)
class _Decodes:
    """Decode tokens attending together: their rows, block tables (padded with the null
    block) and context lengths."""

    rows: slice | torch.Tensor
    tables: torch.Tensor  # [B, blocks]
    context_lens: torch.Tensor  # [B]


@dataclass(slots=True)
class StepInputs:
    """One step's tensors (on the runner's device) and attention metadata.

    Decodes are grouped by context length (power-of-two block buckets), so a long
    context in the batch does not pad every short one to its length. ``all_decode``:
    one group holds every row.
    """

    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    slots: torch.Tensor  # [T] flat KV slot of each token
    sample_rows: torch.Tensor  # [N] rows whose logits are needed
    decodes: list[_Decodes] = field(default_factory=list)
    prefills: list[_Prefill] = field(default_factory=list)
    all_decode: bool = False


class TorchRunner:
    """A :class:`~loadgen.server.engine.runner.ModelRunner` over a real model (see the
    module docstring). ``num_blocks`` blocks of ``block_size`` tokens make the KV pool.

    ``suppress_token_ids`` are never sampled (the word tokenizer's reserved ids for
    random-weight models); ``decode_batch_sizes`` are the padded batch sizes of the decode
    path (CUDA graphs, or ``pad_decodes`` for testing it on CPU).
    """

    def __init__(
        self,
        model: LlamaModel,
        *,
        num_blocks: int,
        block_size: int = 16,
        suppress_token_ids: Sequence[int] = (),
        cuda_graphs: bool = False,
        pad_decodes: bool = False,
        decode_batch_sizes: Sequence[int] = (),
        graph_memory_bytes: int = 2 << 30,
    ) -> None:
        cfg = model.cfg
        self.model = model
        self.cfg = cfg
        self.device = model.embed.device
        self.dtype = model.embed.dtype
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.null_block = num_blocks
        self.kv = torch.zeros(
            cfg.num_layers,
            2,
            cfg.num_kv_heads,
            num_blocks + 1,
            block_size,
            cfg.head_dim,
            device=self.device,
            dtype=self.dtype,
        )
        self._workspace = [torch.empty(0, dtype=self.dtype), torch.empty(0, dtype=self.dtype)]
        self.suppress = torch.tensor(sorted(suppress_token_ids), device=self.device) if suppress_token_ids else None
        self.decode_batch_sizes = sorted(decode_batch_sizes) or [1, 2, 4, 8, 16, 32, 64, 128, 256]
        self.pad_decodes = pad_decodes
        self.graphs: DecodeGraphs | None = None
        if cuda_graphs and self.device.type == "cuda":
            token_bytes = 2 * cfg.num_kv_heads * cfg.head_dim * self.kv.element_size()
            self.graphs = DecodeGraphs(self, self.decode_batch_sizes, graph_memory_bytes, token_bytes)
        self._generators: dict[int, torch.Generator] = {}
        self._group = cfg.num_heads // cfg.num_kv_heads
        self._step: StepInputs | None = None

    def capture_graphs(self, max_context_len: int) -> tuple[int, float]:
        """Capture the decode graphs for contexts up to ``max_context_len`` now (before
        serving); ``(graphs, seconds)``, ``(0, 0.0)`` without graphs."""
        if self.graphs is None:
            return 0, 0.0
        return self.graphs.capture_all(max_context_len)

    @property
    def kv_bytes(self) -> int:
        """Bytes of the KV pool."""
        return self.kv.numel() * self.kv.element_size()

    # ------------------------------------------------------------------ ModelRunner
    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepResult:
        """Run the step; sample one token for every sequence whose ``sample`` is true."""
        for seq_id in batch.finished_seq_ids:
            self._generators.pop(seq_id, None)
        sampled_seqs, logits = self.compute_logits(batch)
        if not sampled_seqs:
            return StepResult({})
        tokens = self._sample(sampled_seqs, logits)
        return StepResult({s.seq_id: [t] for s, t in zip(sampled_seqs, tokens)})

    @torch.inference_mode()
    def compute_logits(self, batch: ScheduledBatch) -> tuple[list[ScheduledSeq], torch.Tensor]:
        """The step's forward pass: the sampling sequences and their float32 logits."""
        sampled = [s for s in batch.seqs if s.sample]
        if self.graphs is not None or self.pad_decodes:
            if batch.seqs and all(s.is_decode for s in batch.seqs):
                logits = self._padded_decode(batch.seqs)
                if logits is not None:
                    return sampled, logits
        inputs = self.prepare(batch.seqs)
        hidden = self._forward(inputs)
        return sampled, self.model.compute_logits(hidden[inputs.sample_rows])

    # ------------------------------------------------------------------ inputs
    def _slots(self, seq: ScheduledSeq) -> np.ndarray:
        bs = self.block_size
        table = np.asarray(seq.block_table, dtype=np.int64)
        pos = np.arange(seq.start_pos, seq.start_pos + len(seq.token_ids), dtype=np.int64)
        return np.asarray(table[pos // bs] * bs + pos % bs)

    def prepare(self, seqs: Sequence[ScheduledSeq]) -> StepInputs:
        """Flatten the scheduled sequences into one batch of tensors."""
        ids: list[int] = []
        positions: list[np.ndarray] = []
        slots: list[np.ndarray] = []
        sample_rows: list[int] = []
        decode_rows: list[int] = []
        decode_seqs: list[ScheduledSeq] = []
        prefills: list[_Prefill] = []
        bs, dev = self.block_size, self.device
        row = 0
        for seq in seqs:
            n = len(seq.token_ids)
            ids.extend(seq.token_ids)
            positions.append(np.arange(seq.start_pos, seq.start_pos + n, dtype=np.int64))
            slots.append(self._slots(seq))
            if seq.sample:
                sample_rows.append(row + n - 1)
            if seq.is_decode and n == 1:
                decode_rows.append(row)
                decode_seqs.append(seq)
            else:
                blocks = None
                if seq.start_pos > 0:
                    nb = -(-seq.context_len // bs)
                    blocks = torch.tensor(seq.block_table[:nb], dtype=torch.long, device=dev)
                prefills.append(_Prefill(row, n, seq.start_pos, blocks))
            row += n
        inputs = StepInputs(
            input_ids=torch.tensor(ids, dtype=torch.long, device=dev),
            positions=torch.from_numpy(np.concatenate(positions)).to(dev),
            slots=torch.from_numpy(np.concatenate(slots)).to(dev),
            sample_rows=torch.tensor(sample_rows, dtype=torch.long, device=dev),
            prefills=prefills,
        )
        groups: dict[int, list[int]] = {}
        for i, seq in enumerate(decode_seqs):
            groups.setdefault(block_bucket(seq.context_len, bs), []).append(i)
        for members in groups.values():
            rows = [decode_rows[i] for i in members]
            first, k = rows[0], len(rows)
            tables, lens = self.decode_tables([decode_seqs[i] for i in members], k)
            inputs.decodes.append(
                _Decodes(
                    slice(first, first + k)
                    if rows == list(range(first, first + k))
                    else torch.tensor(rows, dtype=torch.long, device=dev),
                    tables.to(dev),
                    lens.to(dev),
                )
            )
        inputs.all_decode = not prefills and len(inputs.decodes) == 1
        return inputs

    def decode_tables(
        self, seqs: Sequence[ScheduledSeq], batch_size: int, num_blocks: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Block tables ``[batch_size, num_blocks]`` padded with the null block, and context
        lengths ``[batch_size]`` (1 for padded rows), on the CPU."""
        bs = self.block_size
        lens = [s.context_len for s in seqs]
        width = num_blocks if num_blocks is not None else -(-max(lens) // bs)
        tables = np.full((batch_size, width), self.null_block, dtype=np.int64)
        for i, seq in enumerate(seqs):
            nb = -(-lens[i] // bs)
            tables[i, :nb] = seq.block_table[:nb]
        ctx = np.ones(batch_size, dtype=np.int64)
        ctx[: len(seqs)] = lens
        return torch.from_numpy(tables), torch.from_numpy(ctx)

    # ------------------------------------------------------------------ forward
    def _forward(self, inputs: StepInputs) -> torch.Tensor:
        self._step = inputs
        try:
            hidden: torch.Tensor = self.model(inputs.input_ids, inputs.positions, self._attention)
            return hidden
        finally:
            self._step = None

    def _attention(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        step = self._step
        assert step is not None
        T, H, D = q.shape
        pool = self.kv[layer]  # [2, Hkv, blocks, block_size, D]
        Hkv = pool.shape[1]
        pool[0].view(Hkv, -1, D).index_copy_(1, step.slots, k.transpose(0, 1))
        pool[1].view(Hkv, -1, D).index_copy_(1, step.slots, v.transpose(0, 1))
        if step.all_decode:
            d = step.decodes[0]
            return self.decode_attention(pool, q, d.tables, d.context_lens)
        out = torch.empty(T, H * D, device=q.device, dtype=q.dtype)
        for d in step.decodes:
            out[d.rows] = self.decode_attention(pool, q[d.rows], d.tables, d.context_lens)
        for p in step.prefills:
            out[p.row : p.row + p.n] = self._prefill_attention(pool, p, q, k, v)
        return out

    def _gather(self, pool: torch.Tensor, which: int, blocks: torch.Tensor) -> torch.Tensor:
        """``pool[which]``'s blocks ``[Hkv, len(blocks), block_size, D]``; on CPU into a
        reused buffer (fresh large allocations page-fault: 4x slower than the copy)."""
        src = pool[which]
        if self.device.type != "cpu":
            return src.index_select(1, blocks)
        shape = (src.shape[0], blocks.shape[0], src.shape[2], src.shape[3])
        n = math.prod(shape)
        buf = self._workspace[which]
        if buf.numel() < n:
            buf = self._workspace[which] = torch.empty(n, dtype=src.dtype)
        out = buf[:n].view(shape)
        torch.index_select(src, 1, blocks, out=out)
        return out

    def decode_attention(self, pool: torch.Tensor, q: torch.Tensor, tables: Any, context_lens: Any) -> torch.Tensor:
        """One query token per sequence over its gathered blocks: ``[B, H * D]``.

        The query heads sharing a KV head form the query rows of one SDPA "head", so
        grouped-query attention needs no copies of K and V.
        """
        B, H, D = q.shape
        Hkv = pool.shape[1]
        L = tables.shape[1] * self.block_size
        flat = tables.reshape(-1)
        k = self._gather(pool, 0, flat).view(Hkv, B, L, D).transpose(0, 1)
        v = self._gather(pool, 1, flat).view(Hkv, B, L, D).transpose(0, 1)
        mask = torch.arange(L, device=q.device)[None, :] < context_lens[:, None]
        out = F.scaled_dot_product_attention(q.view(B, Hkv, self._group, D), k, v, attn_mask=mask[:, None, None, :])
        return out.reshape(B, H * D)

    def _prefill_attention(
        self, pool: torch.Tensor, p: _Prefill, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        # 4-D inputs throughout: with 3-D ones CPU SDPA falls back to its slow math path
        H, D = q.shape[1], q.shape[2]
        qs = q[p.row : p.row + p.n].transpose(0, 1)[None]  # [1, H, n, D]
        if p.blocks is None:  # the whole context is this chunk: plain causal attention
            ks = k[p.row : p.row + p.n].transpose(0, 1)[None]
            vs = v[p.row : p.row + p.n].transpose(0, 1)[None]
            out = self._gqa_attention(qs, ks, vs, None)
        else:
            ctx = p.start_pos + p.n
            Hkv = pool.shape[1]
            ks = self._gather(pool, 0, p.blocks).view(Hkv, -1, D)[None, :, :ctx]
            vs = self._gather(pool, 1, p.blocks).view(Hkv, -1, D)[None, :, :ctx]
            qpos = torch.arange(p.start_pos, ctx, device=q.device)
            mask = torch.arange(ctx, device=q.device)[None, :] <= qpos[:, None]
            out = self._gqa_attention(qs, ks, vs, mask)
        return out[0].transpose(0, 1).reshape(p.n, H * D)

    def _gqa_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """SDPA with fewer KV heads than query heads: causal when ``mask`` is None.

        CPU: ``enable_gqa`` (its flash kernel handles it without copies). CUDA: K and V
        are expanded to every query head first, so the flash (causal) and memory-efficient
        (masked) kernels apply — with ``enable_gqa`` the masked case would fall back to
        the math kernel, which materialises the whole score matrix.
        """
        causal = mask is None
        if self.device.type == "cpu" or self._group == 1:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=self._group > 1)
        k = k.repeat_interleave(self._group, dim=1)
        v = v.repeat_interleave(self._group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

    # ------------------------------------------------------------------ padded decode
    def decode_forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        tables: torch.Tensor,
        context_lens: torch.Tensor,
    ) -> torch.Tensor:
        """A decode-only step with static shapes (what CUDA graphs capture): the final
        hidden states of every row, ``[B, hidden]``. Padded rows write to the null block."""
        inputs = StepInputs(
            input_ids=input_ids,
            positions=positions,
            slots=slots,
            sample_rows=torch.empty(0),
            all_decode=True,
            decodes=[_Decodes(slice(None), tables, context_lens)],
        )
        return self._forward(inputs)

    def padded_inputs(self, seqs: Sequence[ScheduledSeq], batch_size: int, num_blocks: int) -> tuple[torch.Tensor, ...]:
        """CPU tensors of a decode-only step padded to ``batch_size`` rows and
        ``num_blocks`` blocks per row: ids, positions, slots, tables, context lengths."""
        n = len(seqs)
        ids = torch.zeros(batch_size, dtype=torch.long)
        pos = torch.zeros(batch_size, dtype=torch.long)
        slots = torch.full((batch_size,), self.null_block * self.block_size, dtype=torch.long)
        ids[:n] = torch.tensor([s.token_ids[0] for s in seqs])
        pos[:n] = torch.tensor([s.start_pos for s in seqs])
        slots[:n] = torch.from_numpy(np.concatenate([self._slots(s) for s in seqs]))
        tables, lens = self.decode_tables(seqs, batch_size, num_blocks)
        return ids, pos, slots, tables, lens

    def _padded_decode(self, seqs: Sequence[ScheduledSeq]) -> torch.Tensor | None:
        """Logits of a decode-only step run at padded shapes (None: not possible here)."""
        if self.graphs is not None:
            hidden = self.graphs.run(seqs)
        else:
            batch = bucket(len(seqs), self.decode_batch_sizes)
            tensors = [
                t.to(self.device)
                for t in self.padded_inputs(
                    seqs, batch, block_bucket(max(s.context_len for s in seqs), self.block_size)
                )
            ]
            hidden = self.decode_forward(*tensors)
        return None if hidden is None else self.model.compute_logits(hidden[: len(seqs)])

    # ------------------------------------------------------------------ sampling
    def _sample(self, seqs: Sequence[ScheduledSeq], logits: torch.Tensor) -> list[int]:
        """Greedy rows take the argmax; the others draw from softmax(logits / T) by inverse
        CDF with one uniform number from the request's own (CPU) generator, so a request's
        tokens do not depend on what else is in the batch."""
        if self.suppress is not None:
            logits.index_fill_(1, self.suppress, -math.inf)
        tokens: list[int] = logits.argmax(dim=-1).tolist()
        rows = [i for i, s in enumerate(seqs) if s.params.temperature > 0.0]
        if not rows:
            return tokens
        uniforms = []
        for i in rows:
            seq = seqs[i]
            gen = self._generators.get(seq.seq_id)
            if gen is None:
                gen = torch.Generator()
                gen.manual_seed(request_seed(seq) & 0xFFFF_FFFF_FFFF_FFFF)
                self._generators[seq.seq_id] = gen
            uniforms.append(torch.rand(1, generator=gen, dtype=torch.float64))
        dev = logits.device
        index = torch.tensor(rows, device=dev)
        temps = torch.tensor([seqs[i].params.temperature for i in rows], device=dev)
        cdf = torch.softmax(logits[index] / temps[:, None], dim=-1).cumsum_(dim=-1)
        u = torch.cat(uniforms).to(dev, torch.float32)[:, None] * cdf[:, -1:]
        picks = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[1] - 1)
        for i, token in zip(rows, picks[:, 0].tolist()):
            tokens[i] = token
        return tokens
