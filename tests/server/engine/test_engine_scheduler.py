"""The scheduler in virtual time: budgets, chunking, stops, preemption, aborts, prefix hits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loadgen.errors import EngineError, PromptTooLong, QueueFull
from loadgen.server.engine.batch import ScheduledBatch
from loadgen.server.engine.core import ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams, TokenOutput
from loadgen.server.engine.scheduler import EngineConfig, Scheduler

EOS = 2


def make(**overrides: object) -> tuple[Scheduler, ManualClock]:
    args: dict = {
        "block_size": 4,
        "num_gpu_blocks": 256,
        "max_num_batched_tokens": 64,
        "max_num_seqs": 8,
        "max_model_len": 1024,
        "eos_token_id": EOS,
    }
    args.update(overrides)
    clock = ManualClock()
    return Scheduler(EngineConfig(**args), now=clock), clock


def req(rid: str, n: int, max_tokens: int = 4, first: int = 100, **params: Any) -> EngineRequest:
    return EngineRequest(rid, list(range(first, first + n)), SamplingParams(max_tokens=max_tokens, **params))


def position_token(batch: ScheduledBatch) -> dict[int, list[int]]:
    """Token = 1000 + its position: deterministic, so recomputation gives the same tokens."""
    return {s.seq_id: [1000 + s.context_len] for s in batch.seqs if s.sample}


def step(
    s: Scheduler,
    clock: ManualClock,
    dt: float = 0.01,
    sample: Callable[[ScheduledBatch], dict[int, list[int]]] = position_token,
) -> tuple[ScheduledBatch, list[TokenOutput]]:
    batch = s.schedule()
    clock.t += dt
    return batch, (s.update(batch, sample(batch)) if batch.seqs else [])


def run_all(s: Scheduler, clock: ManualClock, max_steps: int = 10_000) -> dict[str, list[TokenOutput]]:
    outs: dict[str, list[TokenOutput]] = {}
    for _ in range(max_steps):
        if not s.has_unfinished():
            return outs
        for out in step(s, clock)[1]:
            outs.setdefault(out.request_id, []).append(out)
    raise AssertionError("did not finish")


def test_prefill_then_decodes_until_max_tokens_with_timings() -> None:
    s, clock = make()
    clock.t = 1.0
    s.add_request(req("a", 10, max_tokens=3))
    clock.t = 1.5
    batch, outs = step(s, clock, dt=0.1)
    (item,) = batch.seqs
    assert (item.start_pos, item.num_tokens, item.sample, item.is_decode) == (0, 10, True, False)
    assert item.token_ids == list(range(100, 110)) and len(item.block_table) == 3
    assert outs == [TokenOutput("a", [1010])]
    batch, outs = step(s, clock, dt=0.1)
    assert (batch.seqs[0].start_pos, batch.seqs[0].token_ids, batch.seqs[0].is_decode) == (10, [1010], True)
    assert batch.seqs[0].context_len == 11
    batch, outs = step(s, clock, dt=0.1)
    (last,) = outs
    assert last.token_ids == [1012] and last.finish_reason == "length"
    assert last.timings == pytest.approx(
        {
            "queue_s": 0.5,
            "prefill_s": 0.1,
            "decode_s": 0.2,
            "decode_steps": 2,
            "preemptions": 0,
            "ttft_s": 0.6,
            "e2e_s": 0.8,
        }
    )
    assert not s.has_unfinished() and s.kv.num_free_blocks == 256
    st = s.stats()
    assert (st.prompt_tokens, st.generation_tokens, st.steps, st.running, st.waiting) == (10, 3, 3, 0, 0)


def eos_at(k: int) -> Callable[[ScheduledBatch], dict[int, list[int]]]:
    """EOS as the k-th output token (1-based) and every token after it."""

    def sample(batch: ScheduledBatch) -> dict[int, list[int]]:
        return {s.seq_id: [EOS if s.context_len - 10 >= k - 1 else 7] for s in batch.seqs if s.sample}

    return sample


@pytest.mark.parametrize(
    ("params", "expected_tokens", "reason"),
    [
        ({}, 2, "stop"),  # EOS ends it, and is returned
        ({"ignore_eos": True}, 6, "length"),  # EOS is just a token
        ({"min_tokens": 4}, 4, "stop"),  # EOS before min_tokens does not stop
        ({"stop_token_ids": (7,)}, 1, "stop"),  # a stop token ends it
        ({"stop_token_ids": (7,), "min_tokens": 2}, 2, "stop"),
    ],
)
def test_stop_conditions(params: dict, expected_tokens: int, reason: str) -> None:
    s, clock = make()
    s.add_request(req("a", 10, max_tokens=6, **params))
    tokens: list[int] = []
    last = None
    for _ in range(10):
        for out in step(s, clock, sample=eos_at(2))[1]:
            tokens += out.token_ids
            last = out
        if not s.has_unfinished():
            break
    assert last is not None and last.finish_reason == reason and len(tokens) == expected_tokens
    assert s.kv.num_free_blocks == 256


def test_tokens_after_a_stop_in_one_step_are_dropped() -> None:
    s, _clock = make()
    s.add_request(req("a", 10, max_tokens=6))
    batch = s.schedule()
    (out,) = s.update(batch, {batch.seqs[0].seq_id: [5, EOS, 9]})
    assert out.token_ids == [5, EOS] and out.finish_reason == "stop"


def test_rejections() -> None:
    s, _ = make(max_model_len=100, max_waiting=2, num_gpu_blocks=20)
    with pytest.raises(PromptTooLong, match="context length of 100"):
        s.add_request(req("long", 90, max_tokens=11))
    s2, _ = make(num_gpu_blocks=20)  # 80 tokens of KV
    with pytest.raises(PromptTooLong, match="KV cache"):
        s2.add_request(req("huge", 70, max_tokens=11))
    with pytest.raises(EngineError, match="empty"):
        s.add_request(req("empty", 0))
    with pytest.raises(EngineError, match="max_tokens"):
        s.add_request(req("zero", 5, max_tokens=0))
    s.add_request(req("a", 5))
    with pytest.raises(EngineError, match="duplicate"):
        s.add_request(req("a", 5))
    s.add_request(req("b", 5))
    with pytest.raises(QueueFull):
        s.add_request(req("c", 5))
    assert s.stats().waiting == 2


def test_chunked_prefill_fills_the_budget_after_decodes() -> None:
    s, clock = make(max_num_batched_tokens=64)
    s.add_request(req("d1", 8, max_tokens=50))
    s.add_request(req("d2", 8, max_tokens=50))
    step(s, clock)  # both prompts in one step
    s.add_request(req("long", 150, max_tokens=2))
    sizes = []
    for _ in range(3):
        batch, _ = step(s, clock)
        assert [x.is_decode for x in batch.seqs] == [True, True, False]  # decodes first
        assert batch.num_tokens <= 64
        sizes.append((batch.seqs[2].start_pos, batch.seqs[2].num_tokens, batch.seqs[2].sample))
    assert sizes == [(0, 62, False), (62, 62, False), (124, 26, True)]


def test_long_prefill_token_threshold_caps_each_chunk() -> None:
    s, clock = make(max_num_batched_tokens=64, long_prefill_token_threshold=16)
    s.add_request(req("a", 40))
    s.add_request(req("b", 40))
    batch, _ = step(s, clock)
    assert [(x.request_id, x.num_tokens) for x in batch.seqs] == [("a", 16), ("b", 16)]


def test_without_chunking_whole_prompts_share_a_step_and_never_exceed_the_budget() -> None:
    s, clock = make(max_num_batched_tokens=64, max_model_len=64, enable_chunked_prefill=False)
    s.add_request(req("d", 8, max_tokens=50))
    step(s, clock)
    s.add_request(req("p1", 34))
    s.add_request(req("p2", 30))
    s.add_request(req("p3", 10))
    batch, _ = step(s, clock)  # 1 + 34 fit; p2 does not fit the 29 left and stops admission:
    # p3 would fit, but does not overtake it
    assert [(x.request_id, x.num_tokens) for x in batch.seqs] == [("d", 1), ("p1", 34)]
    batch, _ = step(s, clock)  # p2 and p3 whole, in one step with the decodes
    assert [(x.request_id, x.num_tokens) for x in batch.seqs] == [("d", 1), ("p1", 1), ("p2", 30), ("p3", 10)]
    assert batch.num_tokens == 42 and all(x.sample for x in batch.seqs)


def test_without_chunking_a_prompt_longer_than_the_budget_is_rejected() -> None:
    s, _ = make(max_num_batched_tokens=64, enable_chunked_prefill=False)
    with pytest.raises(PromptTooLong, match="max_num_batched_tokens"):
        s.add_request(req("huge", 60, max_tokens=5))
    s.add_request(req("fits", 60, max_tokens=4))


def test_max_num_seqs_limits_running() -> None:
    s, clock = make(max_num_seqs=2)
    for i in range(4):
        s.add_request(req(f"r{i}", 4, max_tokens=3))
    batch, _ = step(s, clock)
    assert [x.request_id for x in batch.seqs] == ["r0", "r1"]
    assert s.stats().running == 2 and s.stats().waiting == 2


def test_preemption_recomputes_the_newest_and_keeps_its_tokens() -> None:
    # 10 blocks of 4 tokens; two requests that each grow to 20 tokens cannot both fit
    def tokens_of(num_blocks: int) -> tuple[dict[str, list[int]], int]:
        s, clock = make(num_gpu_blocks=num_blocks)
        s.add_request(req("old", 8, max_tokens=12))
        s.add_request(req("new", 8, max_tokens=12, first=500))
        outs = run_all(s, clock)
        assert s.kv.num_free_blocks == num_blocks
        return {k: [t for o in v for t in o.token_ids] for k, v in outs.items()}, s.stats().preemptions

    roomy, p0 = tokens_of(64)
    tight, p1 = tokens_of(8)
    assert p0 == 0 and p1 >= 1
    assert tight == roomy and len(tight["new"]) == 12


def test_preempted_request_goes_to_the_front_and_is_recomputed_whole() -> None:
    s, clock = make(num_gpu_blocks=6, max_num_batched_tokens=64)
    s.add_request(req("old", 8, max_tokens=10))
    s.add_request(req("new", 8, max_tokens=10, first=500))
    step(s, clock)  # 4 blocks used
    for _ in range(8):
        batch, _ = step(s, clock)
        if batch.preempted_seq_ids:
            break
    seq = s.get("new")
    assert seq is not None and seq.preemptions == 1 and s.waiting[0] is seq
    assert [x.request_id for x in batch.seqs] == ["old"]
    generated = seq.num_output_tokens
    assert generated >= 1
    s.add_request(req("later", 4))
    out = run_all(s, clock)
    assert out["new"][-1].timings is not None and out["new"][-1].timings["preemptions"] == 1
    assert s.num_computed_prompt_tokens >= 8 + 8 + 4 + 8 + generated  # recomputed prompt + output


def test_abort_frees_blocks_and_skips_the_in_flight_step() -> None:
    s, clock = make()
    s.add_request(req("a", 10, max_tokens=5))
    s.add_request(req("b", 10, max_tokens=5))
    step(s, clock)
    s.add_request(req("w", 10))
    batch = s.schedule()
    assert s.abort("a") and s.abort("w") and not s.abort("nope")
    outs = s.update(batch, position_token(batch))
    assert [o.request_id for o in outs] == ["b"]
    assert len(s.kv.block_table(batch.seqs[0].seq_id)) == 0
    run_all(s, clock)
    assert s.kv.num_free_blocks == 256
    batch = s.schedule()
    assert batch.is_empty


def test_finished_and_aborted_sequences_are_reported_to_the_runner() -> None:
    s, clock = make()
    s.add_request(req("a", 4, max_tokens=1))
    s.add_request(req("b", 4, max_tokens=5))
    first, _ = step(s, clock)
    s.abort("b")
    s.add_request(req("c", 4))
    batch, _ = step(s, clock)
    assert sorted(batch.finished_seq_ids) == sorted(x.seq_id for x in first.seqs)


def test_update_rejects_a_stale_batch() -> None:
    s, clock = make()
    s.add_request(req("a", 4, max_tokens=5))
    batch, _ = step(s, clock)
    with pytest.raises(EngineError):
        s.update(batch, {})


def test_prefix_hits_are_counted_and_save_prefill() -> None:
    s, clock = make(enable_prefix_caching=True)
    shared = list(range(100, 164))  # 16 blocks of 4
    s.add_request(EngineRequest("a", [*shared, 1, 2, 3], SamplingParams(max_tokens=2)))
    run_all(s, clock)
    computed_a = s.num_computed_prompt_tokens
    s.add_request(EngineRequest("b", [*shared, 7, 8, 9, 10, 11], SamplingParams(max_tokens=2)))
    batch, outs = step(s, clock)
    assert batch.seqs[0].start_pos == 64 and batch.seqs[0].num_tokens == 5
    assert outs[0].num_cached_tokens == 64
    run_all(s, clock)
    assert computed_a == 67 and s.num_computed_prompt_tokens - computed_a == 5
    st = s.stats()
    assert (st.prefix_cache_queries, st.prefix_cache_hits) == (67 + 69, 64)


def test_a_request_admitted_later_in_the_same_step_hits_the_blocks_cached_in_it() -> None:
    # vLLM caches a block when it is allocated for the step that computes it, so the
    # second of two requests sharing a prefix, admitted in the same step, reuses it
    s, clock = make(enable_prefix_caching=True, max_num_batched_tokens=256)
    shared = list(range(100, 164))  # 16 blocks of 4
    s.add_request(EngineRequest("a", [*shared, 1, 2, 3], SamplingParams(max_tokens=2)))
    s.add_request(EngineRequest("b", [*shared, 7, 8, 9, 10, 11], SamplingParams(max_tokens=2)))
    batch, outs = step(s, clock)
    assert [(x.request_id, x.start_pos, x.num_tokens) for x in batch.seqs] == [("a", 0, 67), ("b", 64, 5)]
    assert batch.seqs[1].block_table[:16] == batch.seqs[0].block_table[:16]
    assert [o.num_cached_tokens for o in outs] == [0, 64]
    st = s.stats()
    assert (st.prefix_cache_queries, st.prefix_cache_hits) == (67 + 69, 64)
    assert s.num_computed_prompt_tokens == 67 + 5


def test_prefix_lookups_of_preempted_requests_are_counted_apart() -> None:
    s, clock = make(num_gpu_blocks=6, max_num_batched_tokens=64, enable_prefix_caching=True)
    s.add_request(req("old", 8, max_tokens=10))
    s.add_request(req("new", 8, max_tokens=10, first=500))
    for _ in range(10):
        batch, _ = step(s, clock)
        if batch.preempted_seq_ids:
            break
    seq = s.get("new")
    assert seq is not None and seq.preemptions == 1
    length_at_preemption = seq.num_tokens
    run_all(s, clock)
    st = s.stats()
    # the first admissions: 8 + 8 prompt tokens looked up, nothing cached
    assert (st.prefix_cache_queries, st.prefix_cache_hits) == (16, 0)
    # the victim's second admission, apart: it looks up its prompt and output so far (13
    # tokens) and finds its own first block again. By hand: "new" held blocks [2, 3, 5],
    # freed tail first (queue [5, 3, 2]); "old" grew to 18 tokens and took 5 and 3 from
    # the head before "new" could come back, so only block 2 (4 tokens) is still cached
    assert st.prefix_cache_preempted_queries == length_at_preemption == 13
    assert st.prefix_cache_preempted_hits == 4


def test_a_fully_cached_prompt_still_computes_its_last_block() -> None:
    s, clock = make(enable_prefix_caching=True)
    prompt = list(range(100, 164))
    s.add_request(EngineRequest("a", prompt, SamplingParams(max_tokens=1)))
    run_all(s, clock)
    s.add_request(EngineRequest("b", prompt, SamplingParams(max_tokens=1)))
    batch, outs = step(s, clock)
    assert (batch.seqs[0].start_pos, batch.seqs[0].num_tokens) == (60, 4)
    assert outs[0].num_cached_tokens == 60 and outs[0].token_ids == [1064]


def test_without_prefix_caching_nothing_is_reused() -> None:
    s, clock = make()
    prompt = list(range(100, 164))
    for rid in ("a", "b"):
        s.add_request(EngineRequest(rid, prompt, SamplingParams(max_tokens=1)))
        run_all(s, clock)
    assert s.num_computed_prompt_tokens == 128 and s.stats().prefix_cache_hits == 0
