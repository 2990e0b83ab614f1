"""A pure continuous-batching scheduler after vLLM V1's (no I/O, no sleeps).

One engine step is ``batch = schedule()`` → a runner executes it →
``update(batch, sampled)``. The scheduler takes a clock (``now() -> seconds``) only to
timestamp requests, so tests drive it in virtual time. With a budget of
``max_num_batched_tokens`` a step takes decodes first, then partial prefills, then waiting
requests in FIFO order; it never exceeds the budget. A request that needs a block when none
is free preempts the newest running one by recompute. Speculative decoding
(``num_speculative_tokens``) follows vLLM V1's scheduler; disaggregation adds ``hold_kv``,
:meth:`Scheduler.release`, :meth:`Scheduler.reserve` and :meth:`Scheduler.kv_received`;
pooling requests finish in the step that computes their last prompt token.

Docs: docs/server.md ("The scheduler", "The cost of a step" for speculative decoding,
"Where it departs from vLLM").
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from loadgen.errors import EngineError, PromptTooLong, QueueFull
from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.interface import EngineRequest, EngineStats, TokenOutput
from loadgen.server.engine.kv_cache import CachedPrefix, KVCacheManager
from loadgen.server.engine.sequence import SeqStatus, Sequence

__all__ = ["EngineConfig", "ScheduledBatch", "ScheduledSeq", "Scheduler"]  # the last two re-exported

Clock = Callable[[], float]


@dataclass(slots=True)
class EngineConfig:
    """Scheduler and KV-cache settings (names follow vLLM's engine arguments).

    Every count is >= 1: ``loadgen serve`` checks the user's values once, in
    :class:`~loadgen.server.config.SchedulerLimits`, which builds this.
    """

    block_size: int = 16
    num_gpu_blocks: int = 8192
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int | None = None
    enable_prefix_caching: bool = False
    max_model_len: int = 131072
    max_waiting: int = 10_000
    eos_token_id: int | None = None
    num_speculative_tokens: int = 0  # K: the most drafts a decode verifies per step


class Scheduler:
    """Waiting and running queues over a :class:`KVCacheManager`; see the module doc."""

    def __init__(self, config: EngineConfig, now: Clock) -> None:
        self.config = config
        self._now = now
        self.kv = KVCacheManager(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._by_request: dict[str, Sequence] = {}
        self._by_seq: dict[int, Sequence] = {}
        self._seq_ids = itertools.count()
        self._step = 0
        self._last_batch_step = -1
        self._finished_since_batch: list[int] = []
        self._receiving: dict[str, Sequence] = {}  # blocks reserved, KV on its way
        self._delay_free: set[str] = set()  # hold_kv requests not finished yet
        self._held: dict[str, int] = {}  # finished hold_kv requests: request id -> seq id
        self.num_preemptions = 0
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_computed_prompt_tokens = 0  # prefill work done (excludes cache hits)
        self.num_spec_drafts = self.num_spec_draft_tokens = self.num_spec_accepted_tokens = 0
        self.spec_accepted_per_position = [0] * config.num_speculative_tokens

    # ------------------------------------------------------------------ requests
    def add_request(self, request: EngineRequest, *, num_external_tokens: int = 0, hold_kv: bool = False) -> None:
        """Queue a request. Raises :class:`PromptTooLong`, :class:`QueueFull` or
        :class:`EngineError` (empty prompt, bad ``max_tokens``, duplicate id).

        ``num_external_tokens`` leading tokens arrive with their KV already computed
        (a disaggregated decode pool receiving the prefill pool's KV). With ``hold_kv``
        the request's blocks outlive it until :meth:`release`.
        """
        seq = self._new_seq(request, num_external_tokens)
        if len(self.waiting) >= self.config.max_waiting:
            raise QueueFull(f"the waiting queue is full ({self.config.max_waiting} requests)")
        self._register(seq)
        if hold_kv:
            self._delay_free.add(seq.request_id)
        self.waiting.append(seq)

    def _new_seq(self, request: EngineRequest, num_external_tokens: int) -> Sequence:
        cfg = self.config
        prompt, params = request.prompt_token_ids, request.params
        if request.request_id in self._by_request:
            raise EngineError(f"duplicate request id {request.request_id!r}")
        if not prompt:
            raise EngineError("the prompt is empty")
        if params.max_tokens < 1:
            raise EngineError(f"max_tokens must be >= 1, got {params.max_tokens}")
        total = len(prompt) + (0 if params.pooling else params.max_tokens)
        if total > cfg.max_model_len:
            raise PromptTooLong(
                f"prompt ({len(prompt)} tokens) + max_tokens ({params.max_tokens}) = {total} "
                f"exceeds the context length of {cfg.max_model_len} tokens"
            )
        if not cfg.enable_chunked_prefill and total > cfg.max_num_batched_tokens:
            raise PromptTooLong(
                f"prompt ({len(prompt)} tokens) + max_tokens ({params.max_tokens}) = {total} "
                f"exceeds max_num_batched_tokens ({cfg.max_num_batched_tokens}), the longest "
                f"sequence an engine without chunked prefill can recompute in one step"
            )
        if self.kv.blocks_for(total) > cfg.num_gpu_blocks:
            raise PromptTooLong(
                f"prompt + max_tokens = {total} tokens exceeds the KV cache "
                f"({cfg.num_gpu_blocks * cfg.block_size} tokens)"
            )
        return Sequence(
            seq_id=next(self._seq_ids),
            request_id=request.request_id,
            params=params,
            token_ids=list(prompt),
            num_prompt_tokens=len(prompt),
            arrival_s=self._now(),
            num_external_tokens=min(num_external_tokens, len(prompt) - 1),
            encoder_patches=request.encoder_patches,
        )

    def _register(self, seq: Sequence) -> None:
        self._by_request[seq.request_id] = seq
        self._by_seq[seq.seq_id] = seq

    # ------------------------------------------------------------------ KV transfer
    def reserve(self, request: EngineRequest, *, num_external_tokens: int) -> int | None:
        """Allocate the blocks of a request whose first ``num_external_tokens`` tokens'
        KV is about to arrive, after matching this engine's own prefix cache (as vLLM's
        scheduler asks its KV connector only for the tokens past the local hit). Returns
        the prompt tokens found cached here (only the rest must be transferred), or None
        (nothing changed) when blocks or ``max_num_seqs`` are short. Raises like
        :meth:`add_request` for a request that can never fit."""
        seq = self._new_seq(request, num_external_tokens)
        if len(self.running) + len(self._receiving) >= self.config.max_num_seqs:
            return None
        prefix = self._lookup_prefix(seq)
        if prefix.num_tokens > seq.num_external_tokens:
            prefix = CachedPrefix(block_size=self.config.block_size)
        if not self.kv.allocate(seq.seq_id, seq.num_external_tokens, prefix):
            return None
        self._register(seq)
        self._receiving[seq.request_id] = seq
        return prefix.num_tokens

    def kv_received(self, request_id: str) -> None:
        """The reserved request's KV is in place: queue it (its blocks kept)."""
        seq = self._receiving.pop(request_id)
        self.waiting.append(seq)

    def release(self, request_id: str) -> None:
        """Free the blocks a finished ``hold_kv`` request kept (no-op if none)."""
        seq_id = self._held.pop(request_id, None)
        if seq_id is not None:
            self.kv.free(seq_id)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is and free its blocks; False if unknown."""
        self._delay_free.discard(request_id)
        if request_id in self._held:
            self.release(request_id)
            return True
        seq = self._by_request.get(request_id)
        if seq is None:
            return False
        if self._receiving.pop(request_id, None) is not None:
            pass  # blocks reserved, KV in flight: only the blocks to free
        elif seq.status is SeqStatus.WAITING:
            self.waiting.remove(seq)
        else:
            self.running.remove(seq)
        self._finish(seq, "abort")
        return True

    def get(self, request_id: str) -> Sequence | None:
        """The request's sequence while it is waiting or running."""
        return self._by_request.get(request_id)

    @property
    def num_receiving(self) -> int:
        """Requests with blocks reserved whose KV has not arrived yet."""
        return len(self._receiving)

    def has_unfinished(self) -> bool:
        """Whether any request is waiting or running."""
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------------ scheduling
    def schedule(self) -> ScheduledBatch:
        """Choose the work of the next step (see the module docstring)."""
        cfg = self.config
        now = self._now()
        batch = ScheduledBatch(step=self._step, scheduled_at=now, block_size=cfg.block_size)
        budget = cfg.max_num_batched_tokens
        limit = cfg.long_prefill_token_threshold or cfg.max_num_batched_tokens
        chunked = cfg.enable_chunked_prefill
        scheduled: set[int] = set()

        decodes: list[Sequence] = []
        prefills: list[Sequence] = []
        for seq in self.running:
            (decodes if seq.is_decode else prefills).append(seq)
        for group, decode_pass in ((decodes, True), (prefills, False)):
            for seq in group:
                if budget <= 0:
                    break
                if seq.status is not SeqStatus.RUNNING:  # preempted in this step
                    continue
                remaining = len(seq.token_ids) - seq.num_computed_tokens
                n = self._decode_tokens(seq, budget, limit) if decode_pass else min(remaining, budget, limit)
                if not decode_pass and not chunked:
                    n = remaining
                if n > budget:
                    continue
                if not self._allocate_running(seq, n, scheduled, batch):
                    continue
                self._cache_blocks(seq, min(seq.num_computed_tokens + n, seq.num_tokens))
                self._add_to_batch(batch, seq, n, now, decode_pass)
                scheduled.add(seq.seq_id)
                budget -= n

        while not batch.preempted_seq_ids and self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting[0]
            received = self.kv.has_seq(seq.seq_id)  # its KV arrived into reserved blocks
            prefix = CachedPrefix(block_size=cfg.block_size) if received else self._lookup_prefix(seq)
            computed = max(prefix.num_tokens, seq.num_external_tokens)
            if seq.num_external_tokens > prefix.num_tokens:
                prefix = CachedPrefix(block_size=cfg.block_size)
            n = seq.num_tokens - computed
            if chunked:
                n = min(n, budget, limit)
            elif n > budget:
                break  # whole prompts only; FIFO: nobody overtakes it
            if not self.kv.allocate(seq.seq_id, computed + n, prefix):
                break
            self.waiting.popleft()
            self.kv.record_lookup(seq.num_tokens, prefix.num_tokens, preempted=seq.preemptions > 0)
            seq.status = SeqStatus.RUNNING
            seq.num_computed_tokens = computed
            if seq.first_scheduled_s is None:
                seq.num_cached_tokens = prefix.num_tokens
            self.running.append(seq)
            self._cache_blocks(seq, computed + n)
            self._add_to_batch(batch, seq, n, now, False)
            batch.seqs[-1].encoder_patches = seq.encoder_patches
            budget -= n

        if batch.seqs:
            batch.finished_seq_ids, self._finished_since_batch = self._finished_since_batch, []
            self._step += 1
            self._last_batch_step = batch.step
        return batch

    def _decode_tokens(self, seq: Sequence, budget: int, limit: int) -> int:
        """A decode's tokens this step: the fed token and its drafts, trimmed to the budget,
        the threshold, the context length and the KV cache (vLLM's ``num_tokens_with_spec
        - num_computed_tokens``, capped)."""
        cfg = self.config
        room = min(cfg.max_model_len - seq.num_tokens, cfg.num_gpu_blocks * cfg.block_size - seq.num_tokens)
        return max(1, min(1 + seq.num_spec_tokens, budget, limit, 1 + max(0, room)))

    def _lookup_prefix(self, seq: Sequence) -> CachedPrefix:
        if not self.config.enable_prefix_caching:
            return CachedPrefix(block_size=self.config.block_size)
        hashes = seq.update_block_hashes(self.config.block_size)
        # at least one token must be computed to sample from, so never hit the last one
        usable = (seq.num_tokens - 1) // self.config.block_size
        return self.kv.find_cached_prefix(hashes[:usable])

    def _cache_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Register the full blocks of the first ``num_tokens`` tokens (those this step
        computes included), so a request admitted later in the step hits them."""
        if self.config.enable_prefix_caching:
            hashes = seq.update_block_hashes(self.config.block_size)
            self.kv.cache_full_blocks(seq.seq_id, hashes, num_tokens)

    def _allocate_running(self, seq: Sequence, n: int, scheduled: set[int], batch: ScheduledBatch) -> bool:
        """Make room for ``n`` more tokens, preempting newer requests; False if ``seq``
        itself had to be preempted."""
        while not self.kv.allocate(seq.seq_id, seq.num_computed_tokens + n):
            victim = next(v for v in reversed(self.running) if v.seq_id not in scheduled)
            self._preempt(victim)
            batch.preempted_seq_ids.append(victim.seq_id)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq.seq_id)
        seq.status = SeqStatus.WAITING
        seq.num_computed_tokens = 0
        seq.num_external_tokens = 0
        seq.num_spec_tokens = 0
        seq.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _add_to_batch(self, batch: ScheduledBatch, seq: Sequence, n: int, now: float, is_decode: bool) -> None:
        start = seq.num_computed_tokens
        if seq.first_scheduled_s is None:
            seq.first_scheduled_s = now
        tokens = seq.token_ids
        fed = min(n, len(tokens) - start)  # a decode's other tokens are drafts
        batch.seqs.append(
            ScheduledSeq(
                seq.seq_id,
                seq.request_id,
                tokens[start : start + fed],
                start,
                self.kv.block_table(seq.seq_id),
                start + fed == len(tokens),
                is_decode,
                seq.params,
                num_draft_tokens=n - fed,
            )
        )

    # ------------------------------------------------------------------ results
    def update(
        self, batch: ScheduledBatch, sampled: dict[int, list[int]], drafts: dict[int, int] | None = None
    ) -> list[TokenOutput]:
        """Apply a step's results; return the new tokens (and finishes) per request.

        Sequences aborted while the step ran are skipped. Tokens after a stop are dropped.
        A decode with drafts gets ``1 + accepted`` tokens; its rejected drafts are rolled
        back. ``drafts``: the proposer's draft counts for each sequence's next step.
        """
        if batch.step != self._last_batch_step:
            raise EngineError(f"update() got step {batch.step}, expected {self._last_batch_step}")
        self._last_batch_step = -1
        now = self._now()
        outputs: list[TokenOutput] = []
        for item in batch.seqs:
            seq = self._by_seq.get(item.seq_id)
            if seq is None or seq.status is not SeqStatus.RUNNING:
                continue
            seq.num_computed_tokens = item.start_pos + len(item.token_ids) + item.num_draft_tokens
            if not item.is_decode:
                self.num_computed_prompt_tokens += len(item.token_ids)
            if not item.sample:
                continue
            if seq.params.pooling:
                outputs.append(self._finish_pooling(seq, now))
                continue
            new = sampled.get(item.seq_id)
            if not new:
                raise EngineError(f"the runner returned no token for sequence {item.seq_id}")
            if item.num_draft_tokens:
                self._verified(seq, item.num_draft_tokens, len(new) - 1)
            outputs.append(self._append_tokens(seq, new, now))
            if self.config.num_speculative_tokens and seq.status is SeqStatus.RUNNING:
                proposed = (drafts or {}).get(item.seq_id, 0)
                seq.num_spec_tokens = max(0, min(proposed, self.config.num_speculative_tokens))
        return outputs

    def _verified(self, seq: Sequence, num_drafts: int, accepted: int) -> None:
        """Count a verify pass and roll back its rejected drafts (their slots are written
        over by the next step)."""
        if not 0 <= accepted <= num_drafts:
            raise EngineError(f"sequence {seq.seq_id}: {accepted} drafts accepted of {num_drafts}")
        seq.num_computed_tokens -= num_drafts - accepted
        self.num_spec_drafts += 1
        self.num_spec_draft_tokens += num_drafts
        self.num_spec_accepted_tokens += accepted
        for i in range(accepted):
            self.spec_accepted_per_position[i] += 1

    def _finish_pooling(self, seq: Sequence, now: float) -> TokenOutput:
        """A pooling request's prompt is done: it ends here, with no token."""
        seq.first_token_s = now
        self.num_prompt_tokens += seq.num_prompt_tokens
        self.running.remove(seq)
        self._finish(seq, "stop")
        return TokenOutput(
            seq.request_id, [], finish_reason="stop", num_cached_tokens=seq.num_cached_tokens, timings=seq.timings()
        )

    def _append_tokens(self, seq: Sequence, new: Iterable[int], now: float) -> TokenOutput:
        if seq.first_token_s is None:
            seq.first_token_s = now
            self.num_prompt_tokens += seq.num_prompt_tokens
        else:
            seq.decode_steps += 1
        accepted: list[int] = []
        reason = None
        for token in new:
            seq.token_ids.append(token)
            accepted.append(token)
            self.num_generation_tokens += 1
            reason = self._stop_reason(seq, token)
            if reason is not None:
                break
        out = TokenOutput(seq.request_id, accepted, num_cached_tokens=seq.num_cached_tokens)
        if reason is not None:
            self.running.remove(seq)
            self._finish(seq, reason)
            out.finish_reason = reason
            out.timings = seq.timings()
        return out

    def _stop_reason(self, seq: Sequence, token: int) -> str | None:
        params = seq.params
        num_tokens = len(seq.token_ids)
        n_out = num_tokens - seq.num_prompt_tokens
        if n_out >= params.min_tokens:
            if token == self.config.eos_token_id and not params.ignore_eos:
                return "stop"
            if params.stop_token_ids and token in params.stop_token_ids:
                return "stop"
        if n_out >= params.max_tokens or num_tokens >= self.config.max_model_len:
            return "length"
        return None

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason
        seq.finish_s = self._now()
        if seq.request_id in self._delay_free and reason != "abort":
            self._delay_free.discard(seq.request_id)
            self._held[seq.request_id] = seq.seq_id  # read by the decode side; release() frees
        else:
            self.kv.free(seq.seq_id)
        del self._by_request[seq.request_id]
        del self._by_seq[seq.seq_id]
        self._finished_since_batch.append(seq.seq_id)

    # ------------------------------------------------------------------ stats
    def stats(self) -> EngineStats:
        """Gauges and counters (token counters as in vLLM: prompt tokens counted when a
        request's first token is produced)."""
        return EngineStats(
            running=len(self.running),
            waiting=len(self.waiting) + len(self._receiving),
            kv_usage=self.kv.usage,
            prefix_cache_queries=self.kv.prefix_cache_queries,
            prefix_cache_hits=self.kv.prefix_cache_hits,
            prefix_cache_preempted_queries=self.kv.prefix_cache_preempted_queries,
            prefix_cache_preempted_hits=self.kv.prefix_cache_preempted_hits,
            preemptions=self.num_preemptions,
            prompt_tokens=self.num_prompt_tokens,
            generation_tokens=self.num_generation_tokens,
            steps=self._step,
            spec_drafts=self.num_spec_drafts,
            spec_draft_tokens=self.num_spec_draft_tokens,
            spec_accepted_tokens=self.num_spec_accepted_tokens,
            spec_accepted_per_position=tuple(self.spec_accepted_per_position),
        )
