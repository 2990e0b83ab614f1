"""One request's state inside the scheduler (prompt, output, progress, timings)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from loadgen.server.engine.interface import SamplingParams
from loadgen.server.engine.kv_cache import ROOT_HASH, chain_hash

__all__ = ["SeqStatus", "Sequence"]


class SeqStatus(enum.Enum):
    """Where a sequence is: the waiting queue, the running batch, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    """A request being served.

    ``token_ids`` holds the prompt followed by the generated tokens. Tokens
    ``[0, num_computed_tokens)`` have their KV in the cache; the scheduler feeds the rest
    (a prefill chunk, or the last sampled token when decoding). A step *samples* when
    it computes the last known token. All times are seconds on the scheduler's clock.
    """

    seq_id: int
    request_id: str
    params: SamplingParams
    token_ids: list[int]
    num_prompt_tokens: int
    arrival_s: float
    status: SeqStatus = SeqStatus.WAITING
    num_computed_tokens: int = 0
    num_external_tokens: int = 0  # KV delivered from elsewhere (disaggregated decode)
    num_cached_tokens: int = 0  # prefix-cache hit at first admission
    block_hashes: list[int] = field(default_factory=list)
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    decode_steps: int = 0
    preemptions: int = 0
    finish_reason: str | None = None
    encoder_patches: int = 0  # vision-encoder patches, run when the prompt is (re)admitted
    num_spec_tokens: int = 0  # drafts proposed for the next decode step (speculative decoding)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_decode(self) -> bool:
        """True when only the last sampled token is left to feed (a decode step)."""
        return self.num_output_tokens > 0 and self.num_computed_tokens == self.num_tokens - 1

    def update_block_hashes(self, block_size: int) -> list[int]:
        """Extend the chained hashes to every full block of ``token_ids``; return them."""
        hashes = self.block_hashes
        for i in range(len(hashes), len(self.token_ids) // block_size):
            parent = hashes[-1] if hashes else ROOT_HASH
            hashes.append(chain_hash(parent, self.token_ids[i * block_size : (i + 1) * block_size]))
        return hashes

    def timings(self) -> dict[str, float]:
        """Server-side timings for ``TokenOutput.timings`` (see interface.py)."""
        arrival = self.arrival_s
        scheduled = self.first_scheduled_s if self.first_scheduled_s is not None else arrival
        finish = self.finish_s if self.finish_s is not None else scheduled
        first = self.first_token_s if self.first_token_s is not None else finish
        return {
            "queue_s": scheduled - arrival,
            "prefill_s": first - scheduled,
            "decode_s": finish - first,
            "decode_steps": float(self.decode_steps),
            "preemptions": float(self.preemptions),
            "ttft_s": first - arrival,
            "e2e_s": finish - arrival,
        }
