"""Speculative decoding in the sim, in virtual time: verify steps priced at K + 1 tokens per
sequence, accepted tokens drawn from the geometric model, several tokens per output."""

from __future__ import annotations

from collections import Counter

import pytest

from loadgen.server.config import ServeConfig, SimOptions
from loadgen.server.engine.core import EngineCore, ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams, TokenOutput
from loadgen.server.engine.models import get_model
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.sim.build import sim_engine
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner, Speculation

Step = tuple[list[tuple[int, int, bool, int, bool]], float]  # (fed, start, decode, drafts, sample)


def run(
    k: int, rate: float, *, users: int = 8, tokens: int = 200, draft: RooflineModel | None = None
) -> tuple[dict[str, list[TokenOutput]], list[Step], RooflineModel]:
    """``users`` requests of ``tokens`` output tokens to completion; outputs per request and
    the steps (their (new, context, sample) shapes and modelled durations)."""
    roofline = RooflineModel(get_gpu("h100"), get_model("llama-3.1-8b"), decode_query_len=1 + k)
    runner = SimRunner(roofline, speculation=Speculation(k, rate, draft) if k else None)
    clock = ManualClock()
    steps: list[Step] = []
    core = EngineCore(
        EngineConfig(num_gpu_blocks=4096, max_model_len=8192, num_speculative_tokens=k),
        runner,
        clock,
        on_step=lambda b, r, s, e: steps.append(
            ([(x.num_tokens, x.start_pos, x.is_decode, x.num_draft_tokens, x.sample) for x in b.seqs], e - s)
        ),
    )
    for u in range(users):
        core.add_request(EngineRequest(f"r{u}", [7] * (100 + u), SamplingParams(max_tokens=tokens)))
    outputs: dict[str, list[TokenOutput]] = {}
    for _ in range(20_000):
        t = core.next_event_time()
        if t is None:
            break
        clock.advance_to(t)
        for out in core.process_event():
            outputs.setdefault(out.request_id, []).append(out)
    assert not core.has_unfinished()
    return outputs, steps, roofline


def test_accepted_tokens_follow_the_geometric_model_and_the_text_is_unchanged() -> None:
    k, rate = 3, 0.7
    spec, spec_steps, _ = run(k, rate)
    plain, plain_steps, _ = run(0, 0.0)
    for rid, outs in spec.items():  # same tokens (a function of seed and position), fewer steps
        assert [t for o in outs for t in o.token_ids] == [t for o in plain[rid] for t in o.token_ids]
        assert sum(len(o.token_ids) for o in outs) == 200 and outs[-1].finish_reason == "length"
    sizes = Counter(len(o.token_ids) for outs in spec.values() for o in outs[1:-1])  # decodes
    n = sum(sizes.values())
    # P(1 + a tokens) = A^a (1 - A) for a < K, A^K for a = K
    for a, p in enumerate([0.3, 0.21, 0.147, 0.343]):
        assert sizes[a + 1] / n == pytest.approx(p, abs=0.035), sizes
    mean = (1 - rate ** (k + 1)) / (1 - rate)  # 2.53 tokens per verify step
    assert Speculation(k, rate).expected_tokens_per_step == pytest.approx(mean)
    assert sum(s * c for s, c in sizes.items()) / n == pytest.approx(mean, rel=0.05)
    assert len(spec_steps) < 0.5 * len(plain_steps)


def test_a_verify_step_costs_k_plus_1_query_tokens_and_lm_head_rows_per_sequence() -> None:
    k = 4
    _, steps, roofline = run(k, 0.6)
    decode_steps = [(shape, d) for shape, d in steps if shape and all(x[2] for x in shape)]
    assert len(decode_steps) > 20
    for shape, duration in decode_steps:
        assert all(drafts == k for _, _, _, drafts, _ in shape)  # the fixed-K proposer
        priced = [(k + 1, start, k + 1) for _, start, *_ in shape]
        assert duration == pytest.approx(roofline.step_time(priced))
        assert duration > roofline.step_time([(k + 1, start, 1) for _, start, *_ in shape])


def test_a_draft_model_adds_k_of_its_decode_steps() -> None:
    h100 = get_gpu("h100")
    draft = RooflineModel(h100, get_model("llama-3.2-1b"))
    _, ngram_steps, _ = run(3, 0.7, users=4, tokens=60)
    _, draft_steps, _ = run(3, 0.7, users=4, tokens=60, draft=draft)
    assert [s for s, _ in ngram_steps] == [s for s, _ in draft_steps]  # same draws, same steps
    for (shape, free), (_, paid) in zip(ngram_steps, draft_steps):
        # it drafts after every step that samples, for the next one
        drafting = [(1, start + fed, True) for fed, start, _, _, sample in shape if sample]
        extra = draft.step_cost(drafting) if drafting else None
        expected = free + (3 * (extra.kernel_s + extra.latency_s + extra.comm_s) if extra else 0.0)
        assert paid == pytest.approx(expected)


def test_acceptance_zero_is_plain_decoding_and_one_takes_every_draft() -> None:
    never, _, _ = run(3, 0.0, users=2, tokens=40)
    always, _, _ = run(3, 1.0, users=2, tokens=41)
    assert all(len(o.token_ids) == 1 for outs in never.values() for o in outs)
    assert [len(o.token_ids) for o in always["r0"]] == [1] + [4] * 10


def test_the_server_config_builds_speculation_and_sizes_the_draft_in_memory() -> None:
    plain = sim_engine(ServeConfig())
    ngram = sim_engine(ServeConfig(sim=SimOptions(speculative_tokens=3)))
    drafted = sim_engine(ServeConfig(sim=SimOptions(speculative_tokens=3, draft_model="llama-3.2-1b")))
    blocks = [e.core.scheduler.config.num_gpu_blocks for e in (plain, ngram, drafted)]  # type: ignore[attr-defined]
    assert blocks[0] == blocks[1] > blocks[2]  # the draft's weights and KV take room
    runner = drafted.core.runner  # type: ignore[attr-defined]
    assert runner.speculation.tokens == 3 and runner.speculation.draft.model.name == "llama-3.2-1b"
    assert runner.roofline.decode_query_len == 4
    assert runner.speculation.proposer == "draft" and ngram.core.runner.speculation.proposer == "ngram"  # type: ignore[attr-defined]
    assert drafted.core.scheduler.config.num_speculative_tokens == 3  # type: ignore[attr-defined]
