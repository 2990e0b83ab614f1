"""Speculative decoding as vLLM V1 schedules it, in virtual time: 1 + drafts per decode
against the token budget, draft slots allocated before the step (preempting), drafts
trimmed to the budget, rejected drafts rolled back, the n-gram proposer's draft lengths,
K + 1 LM-head rows per verify, and the counters."""

from __future__ import annotations

from collections import Counter

import pytest

from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.core import EngineCore, ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams, sum_stats
from loadgen.server.engine.models import get_model
from loadgen.server.engine.scheduler import EngineConfig, Scheduler
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner, Speculation


def scheduler(**kw: int) -> Scheduler:
    cfg = {"num_gpu_blocks": 1024, "max_num_batched_tokens": 100, "num_speculative_tokens": 4, "max_model_len": 4096}
    return Scheduler(EngineConfig(**(cfg | kw)), now=lambda: 0.0)  # type: ignore[arg-type]


def decoding(s: Scheduler, n: int, prompt: int = 10, drafts: int = 4, max_tokens: int = 50) -> None:
    """Admit ``n`` requests, prefill them in one step, sample one token each and propose
    ``drafts`` drafts for each."""
    for i in range(n):
        s.add_request(EngineRequest(f"r{i}", [5] * prompt, SamplingParams(max_tokens=max_tokens)))
    batch = s.schedule()
    assert [x.num_tokens for x in batch.seqs] == [prompt] * n
    s.update(batch, {x.seq_id: [9] for x in batch.seqs}, {x.seq_id: drafts for x in batch.seqs})


def test_each_decode_takes_one_plus_k_of_the_budget_and_the_prefill_chunk_gets_the_rest() -> None:
    s = scheduler()
    decoding(s, 4)
    s.add_request(EngineRequest("long", [6] * 500, SamplingParams(max_tokens=5)))
    batch = s.schedule()
    decodes = [x for x in batch.seqs if x.is_decode]
    assert [(x.num_tokens, x.num_draft_tokens) for x in decodes] == [(1, 4)] * 4
    (chunk,) = [x for x in batch.seqs if not x.is_decode]
    assert chunk.num_tokens == 100 - 4 * (1 + 4) == 80  # one token per decode would leave 96
    assert batch.num_tokens == 100 and batch.num_decode_tokens == 20


def test_drafts_are_trimmed_to_the_remaining_budget() -> None:
    s = scheduler(max_num_batched_tokens=12)
    for i in range(4):
        s.add_request(EngineRequest(f"r{i}", [5] * 3, SamplingParams(max_tokens=50)))
    batch = s.schedule()
    assert len(batch.seqs) == 4
    s.update(batch, {x.seq_id: [9] for x in batch.seqs}, {x.seq_id: 4 for x in batch.seqs})
    batch = s.schedule()
    assert [x.num_draft_tokens for x in batch.seqs] == [4, 4, 1]  # 5 + 5 + 2 = 12; the 4th waits
    assert batch.num_tokens == 12


def test_draft_slots_are_allocated_before_the_step_and_preempt_when_they_do_not_fit() -> None:
    s = scheduler(block_size=4, num_gpu_blocks=5)
    decoding(s, 2, prompt=7, max_tokens=10)  # 8 tokens each: two full blocks each, one block free
    assert s.kv.num_free_blocks == 1
    batch = s.schedule()
    first, second = (s.get(f"r{i}") for i in range(2))
    assert first is not None and second is not None
    # r0 feeds its last token and 4 drafts at positions 7..11: 3 blocks, taken now
    assert [(x.request_id, x.num_draft_tokens) for x in batch.seqs] == [("r0", 4)]
    assert len(s.kv.block_table(first.seq_id)) == 3
    assert batch.preempted_seq_ids == [second.seq_id] and s.num_preemptions == 1
    assert second.num_spec_tokens == 0  # its drafts are dropped with its KV


def test_rejected_drafts_are_rolled_back_and_their_slots_reused() -> None:
    s = scheduler(block_size=4)
    decoding(s, 1, prompt=7)
    seq = s.get("r0")
    assert seq is not None
    batch = s.schedule()
    assert batch.seqs[0].start_pos == 7 and len(s.kv.block_table(seq.seq_id)) == 3  # slots 7..11
    s.update(batch, {seq.seq_id: [11, 12]}, {seq.seq_id: 4})  # draft 1 accepted, 2..4 rejected
    assert seq.num_tokens == 10 and seq.num_computed_tokens == 9  # not 12: three slots rolled back
    assert seq.output_token_ids == [9, 11, 12]
    batch = s.schedule()
    (item,) = batch.seqs
    assert (item.start_pos, item.token_ids, item.num_draft_tokens) == (9, [12], 4)
    assert len(s.kv.block_table(seq.seq_id)) == 4  # positions 9..13 over the rejected slots 9..11
    stats = s.stats()
    assert (stats.spec_drafts, stats.spec_draft_tokens, stats.spec_accepted_tokens) == (1, 4, 1)
    assert stats.spec_accepted_per_position == (1, 0, 0, 0)


def test_counters_count_every_verify_and_sum_across_engines() -> None:
    s = scheduler()
    decoding(s, 2)
    batch = s.schedule()
    a, b = (x.seq_id for x in batch.seqs)
    s.update(batch, {a: [1, 2, 3, 4, 5], b: [1, 2, 3]}, {a: 2, b: 0})  # 4 and 2 accepted
    batch = s.schedule()
    assert [x.num_draft_tokens for x in batch.seqs] == [2, 0]  # b proposed none: a plain decode
    s.update(batch, {a: [7], b: [7]}, {})
    stats = s.stats()
    assert (stats.spec_drafts, stats.spec_draft_tokens, stats.spec_accepted_tokens) == (3, 10, 6)
    assert stats.spec_accepted_per_position == (2, 2, 1, 1)
    total = sum_stats([stats, stats])
    assert total.spec_accepted_per_position == (4, 4, 2, 2) and total.spec_draft_tokens == 20


def run_core(spec: Speculation, users: int = 8, tokens: int = 300) -> tuple[list[int], int, int]:
    """Run to completion; the draft counts of decode steps, accepted and draft tokens."""
    roofline = RooflineModel(get_gpu("h100"), get_model("llama-3.1-8b"), decode_query_len=1 + spec.tokens)
    drafts: list[int] = []
    clock = ManualClock()
    core = EngineCore(
        EngineConfig(num_gpu_blocks=4096, num_speculative_tokens=spec.tokens),
        SimRunner(roofline, speculation=spec),
        clock,
        on_step=lambda b, r, s, e: drafts.extend(x.num_draft_tokens for x in b.seqs if x.is_decode),
    )
    for u in range(users):
        core.add_request(EngineRequest(f"r{u}", [7] * (50 + u), SamplingParams(max_tokens=tokens)))
    for _ in range(10_000):
        t = core.next_event_time()
        if t is None:
            break
        clock.advance_to(t)
        core.process_event()
    assert not core.has_unfinished()
    stats = core.stats()
    return drafts, stats.spec_accepted_tokens, stats.spec_draft_tokens


def test_the_ngram_proposer_drafts_0_to_k_tokens_as_a_truncated_geometric_draw() -> None:
    k, m = 4, 0.6
    drafts, accepted, drafted = run_core(Speculation(k, 0.7, proposer="ngram", match_rate=m))
    assert drafts == run_core(Speculation(k, 0.7, proposer="ngram", match_rate=m))[0]  # seeded
    sizes, n = Counter(drafts), len(drafts)
    assert n > 500 and set(sizes) == set(range(k + 1))
    for length in range(k + 1):
        p = m**length * (1 - m) if length < k else m**k
        assert sizes[length] / n == pytest.approx(p, abs=0.04), sizes
    assert drafted == sum(drafts) and 0 < accepted < drafted
    fixed, _, fixed_drafted = run_core(Speculation(k, 0.7))
    assert set(fixed) == {k} and fixed_drafted == k * len(fixed)


def test_a_verify_step_prices_k_plus_1_lm_head_rows_per_sequence() -> None:
    k, n, ctx = 4, 256, 1024
    roofline = RooflineModel(get_gpu("h100"), get_model("llama-3.1-8b"), decode_query_len=1 + k)
    runner = SimRunner(roofline, speculation=Speculation(k, 0.7))
    batch = ScheduledBatch(step=0)
    for i in range(n):
        batch.seqs.append(ScheduledSeq(i, f"r{i}", [5], ctx, [], True, True, SamplingParams(), num_draft_tokens=k))
    duration = runner.execute(batch).duration_s
    verify = roofline.step_cost([(k + 1, ctx, k + 1)] * n)
    one_row = roofline.step_cost([(k + 1, ctx, 1)] * n)
    assert duration == pytest.approx(verify.total_s)
    head, head_one = verify.kernel("lm_head"), one_row.kernel("lm_head")
    assert head is not None and head_one is not None
    assert head.flops == pytest.approx((k + 1) * head_one.flops)
    # only the LM head differs: the step grows by its extra K rows' time
    assert verify.total_s - one_row.total_s == pytest.approx(head.time_s - head_one.time_s)
    assert verify.total_s / one_row.total_s > 1.01
