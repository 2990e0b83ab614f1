"""The scheduler's output and the runner's input: one engine step's work.

A step is one *flattened* batch: every scheduled sequence contributes a run of tokens
(one for a decode, a chunk for a prefill) at consecutive positions, with the block
table telling where its KV lives. A real runner concatenates all tokens into one
forward pass; the sim runner only needs the shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.server.engine.interface import SamplingParams

__all__ = ["ScheduledBatch", "ScheduledSeq"]


@dataclass(slots=True)
class ScheduledSeq:
    """One sequence's work in a step: what a model runner needs to execute it.

    The runner feeds ``token_ids`` at positions ``start_pos .. start_pos + num_tokens - 1``,
    writes their K/V into the slots ``block_table[p // block_size] * block_size +
    p % block_size``, attends over the first ``context_len`` positions (causally), and,
    when ``sample`` is true, samples one token from the logits of the last position.
    ``block_table`` is the scheduler's live list: read it during ``execute`` only.
    ``encoder_patches`` is set on the step that admits a prompt with images (its vision
    encoder runs then, as vLLM runs a request's encoder inputs in its first prefill step);
    a pooling sequence (``params.pooling``) samples nothing, even when ``sample`` is true.
    ``num_draft_tokens`` (speculative decoding, a decode only): that many draft tokens are
    verified after the fed token, at the next positions, their KV slots already allocated;
    the step then samples at each of the ``1 + num_draft_tokens`` positions.
    """

    seq_id: int
    request_id: str
    token_ids: list[int]
    start_pos: int
    block_table: list[int]
    sample: bool
    is_decode: bool
    params: SamplingParams
    encoder_patches: int = 0  # vision-encoder patches to run in this step, before the prefill
    num_draft_tokens: int = 0  # speculative drafts verified with the fed token

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def context_len(self) -> int:
        """Tokens with KV after this step: cached context plus the tokens fed now."""
        return self.start_pos + len(self.token_ids)

    @property
    def positions(self) -> range:
        return range(self.start_pos, self.start_pos + len(self.token_ids))


@dataclass(slots=True)
class ScheduledBatch:
    """The work of one engine step (a flattened batch: decodes first, then prefills).

    ``finished_seq_ids`` lists sequences finished or aborted since the previous batch and
    ``preempted_seq_ids`` those preempted while building this one, for runners that keep
    per-sequence state.
    """

    step: int
    seqs: list[ScheduledSeq] = field(default_factory=list)
    scheduled_at: float = 0.0
    block_size: int = 16
    preempted_seq_ids: list[int] = field(default_factory=list)
    finished_seq_ids: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        """Tokens the step computes (drafts included): what it took from the budget."""
        return sum(len(s.token_ids) + s.num_draft_tokens for s in self.seqs)

    @property
    def num_decode_tokens(self) -> int:
        return sum(len(s.token_ids) + s.num_draft_tokens for s in self.seqs if s.is_decode)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.seqs if not s.is_decode)

    @property
    def is_empty(self) -> bool:
        return not self.seqs
