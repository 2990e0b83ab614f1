"""Property-style runs: 1,000 random requests, random aborts, a tiny KV pool.

Every step: the token budget and ``max_num_seqs`` hold (without chunking too: there the
budget is ``max_model_len``, as vLLM requires), reference counts match the block tables. At the end: every block is free, every request ended exactly once.
"""

from __future__ import annotations

import random

import pytest

from loadgen.errors import PromptTooLong, QueueFull
from loadgen.server.engine.batch import ScheduledBatch
from loadgen.server.engine.core import ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams
from loadgen.server.engine.scheduler import EngineConfig, Scheduler

EOS = 2
BUDGET = 96
WHOLE_BUDGET = 256  # without chunking: max_model_len, the longest prompt + output fits
MAX_SEQS = 6


def check_batch(batch: ScheduledBatch, chunked: bool) -> None:
    ids = [x.seq_id for x in batch.seqs]
    assert len(ids) == len(set(ids)) <= MAX_SEQS
    assert all(x.num_tokens >= 1 for x in batch.seqs)
    assert batch.num_tokens <= (BUDGET if chunked else WHOLE_BUDGET)
    if not chunked:  # every prefill is a whole prompt (or the rest of one after a hit)
        assert all(x.sample for x in batch.seqs)
    decodes_done = False
    for x in batch.seqs:  # decodes come first
        if not x.is_decode:
            decodes_done = True
        assert not (x.is_decode and decodes_done)


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "whole-prompts"])
def test_random_workload_never_leaks_blocks(prefix_caching: bool, chunked: bool) -> None:
    rng = random.Random(1234)
    clock = ManualClock()
    num_blocks = 48  # 384 tokens of KV with blocks of 8: forces preemption
    cfg = EngineConfig(
        block_size=8,
        num_gpu_blocks=num_blocks,
        max_num_batched_tokens=BUDGET if chunked else WHOLE_BUDGET,
        max_num_seqs=MAX_SEQS,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix_caching,
        max_model_len=4096 if chunked else WHOLE_BUDGET,
        max_waiting=40,
        eos_token_id=EOS,
    )
    s = Scheduler(cfg, now=clock)
    prefixes = [[rng.randrange(10, 1000) for _ in range(rng.choice([8, 24, 40]))] for _ in range(5)]
    live: set[str] = set()
    ended: dict[str, str] = {}
    produced: dict[str, int] = {}
    max_tokens: dict[str, int] = {}
    added = rejected = 0
    for _ in range(50_000):
        if added < 1000 and rng.random() < 0.25:
            for _ in range(min(rng.choice([1, 1, 2]), 1000 - added)):
                n = rng.randint(1, 150)
                prompt = (rng.choice(prefixes) if rng.random() < 0.5 else []) + [
                    rng.randrange(10, 1000) for _ in range(n)
                ]
                rid = f"r{added}"
                params = SamplingParams(
                    max_tokens=rng.randint(1, 40), ignore_eos=rng.random() < 0.5, min_tokens=rng.choice([0, 3])
                )
                added += 1
                try:
                    s.add_request(EngineRequest(rid, prompt, params))
                except (QueueFull, PromptTooLong):  # counted, not served
                    rejected += 1
                    continue
                live.add(rid)
                max_tokens[rid] = params.max_tokens
        if live and rng.random() < 0.05:  # a client disconnects
            rid = rng.choice(sorted(live))
            assert s.abort(rid)
            live.discard(rid)
            ended[rid] = "abort"
        batch = s.schedule()
        check_batch(batch, chunked)
        clock.t += 0.01
        if batch.is_empty:
            assert not s.has_unfinished()
        else:
            sampled = {
                x.seq_id: [EOS if rng.random() < 0.03 else rng.randrange(10, 1000)] for x in batch.seqs if x.sample
            }
            if live and rng.random() < 0.05:  # disconnect while the step runs
                rid = rng.choice(sorted(live))
                s.abort(rid)
                live.discard(rid)
                ended[rid] = "abort"
            for out in s.update(batch, sampled):
                assert out.request_id in live
                produced[out.request_id] = produced.get(out.request_id, 0) + len(out.token_ids)
                if out.finish_reason is not None:
                    assert out.timings is not None and out.timings["e2e_s"] >= out.timings["ttft_s"] >= 0
                    live.discard(out.request_id)
                    ended[out.request_id] = out.finish_reason
        s.kv.check_consistency()
        assert s.kv.num_used_blocks <= num_blocks
        if added >= 1000 and not s.has_unfinished():
            break
    else:
        raise AssertionError("the workload did not drain")

    assert not live and len(ended) + rejected == 1000 and rejected < 300
    assert s.kv.num_free_blocks == num_blocks and s.kv.usage == 0.0
    assert s.stats().preemptions > 0  # the pool was small enough to exercise preemption
    for rid, reason in ended.items():
        if reason == "length":
            assert produced[rid] == max_tokens[rid]
        elif reason == "stop":
            assert produced[rid] <= max_tokens[rid]
    if prefix_caching:
        assert s.stats().prefix_cache_hits > 0
