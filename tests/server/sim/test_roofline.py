"""The roofline step-time model: hand-computed anchors, monotonicity, TP, MoE, KV sizing."""

from __future__ import annotations

import pytest

from loadgen.errors import ConfigError, EngineError
from loadgen.server.config import ServeConfig, SimOptions
from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.interface import SamplingParams
from loadgen.server.engine.models import get_model
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner, sim_token

H100_FLOPS, H100_BW = 989e12, 3.35e12
# Llama-3.1-8B: 8,030,261,248 parameters of which 128256 x 4096 = 525,336,576 embedding
# and as many LM head; 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 131,072 B/token
PARAMS, EMBED, KV_PER_TOKEN = 8_030_261_248, 525_336_576, 131_072


def h100_8b(**kw: float) -> RooflineModel:
    return RooflineModel(get_gpu("h100"), get_model("llama-3.1-8b"), **kw)  # type: ignore[arg-type]


def test_decode_anchor_batch_1_context_1k() -> None:
    model = h100_8b()
    # weights without the embedding table (only its rows are gathered) + KV read and written
    nbytes = (PARAMS - EMBED) * 2 + (1024 + 1) * KV_PER_TOKEN
    expected = nbytes / (H100_BW * 0.8) + 0.5e-3
    assert model.decode_time(1, 1024) == pytest.approx(expected, rel=1e-6)  # RMSNorm weights aside
    assert 5e-3 <= expected <= 8e-3  # ≈ 16 GB / 3.35 TB/s plus efficiency and overhead
    cost = model.step_cost([(1, 1024, True)])
    assert cost.memory_s > cost.compute_s  # decode is bandwidth-bound


def test_prefill_anchor_2048_tokens() -> None:
    model = h100_8b()
    linear = 2 * (PARAMS - 2 * EMBED) * 2048
    attention = 4 * 32 * 4096 * (2048 * 2049 // 2)
    lm_head = 2 * 4096 * 128256
    expected = (linear + attention + lm_head) / (H100_FLOPS * 0.6) + 0.5e-3
    assert model.prefill_time(2048) == pytest.approx(expected, rel=1e-6)
    issue_anchor = 2 * 8e9 * 2048 / (H100_FLOPS * 0.6)
    assert expected == pytest.approx(issue_anchor, rel=0.3)
    assert expected == pytest.approx(0.050, rel=0.3)
    cost = model.step_cost([(2048, 0, True)])
    assert cost.compute_s > cost.memory_s  # prefill is compute-bound


def test_monotonic_in_batch_context_and_prompt() -> None:
    model = h100_8b()
    batches = [model.decode_time(b, 1024) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    contexts = [model.decode_time(32, c) for c in (0, 128, 512, 1024, 4096, 16384, 65536)]
    prompts = [model.prefill_time(n) for n in (1, 16, 128, 512, 2048, 8192, 32768)]
    chunks = [model.prefill_time(512, cached) for cached in (0, 512, 4096, 16384)]
    for series in (batches, contexts, prompts, chunks):
        assert all(a < b for a, b in zip(series, series[1:])), series


def test_knobs_scale_the_right_side_of_the_roofline() -> None:
    base = h100_8b()
    slow_compute = h100_8b(mfu=0.3)
    slow_memory = h100_8b(mbu=0.4)
    assert slow_compute.decode_time(1, 1024) == base.decode_time(1, 1024)
    assert slow_compute.prefill_time(4096) - 0.5e-3 == pytest.approx(2 * (base.prefill_time(4096) - 0.5e-3))
    assert slow_memory.decode_time(1, 1024) - 0.5e-3 == pytest.approx(2 * (base.decode_time(1, 1024) - 0.5e-3))
    assert h100_8b(overhead_s=0.0).decode_time(1, 0) == pytest.approx(base.decode_time(1, 0) - 0.5e-3)
    with pytest.raises(ConfigError, match="mfu"):  # checked once, in the server's config
        ServeConfig(sim=SimOptions(mfu=1.5))


def test_tensor_parallel_splits_work_and_adds_all_reduce() -> None:
    gpu, model = get_gpu("h100"), get_model("llama-3.1-70b")
    tp2 = RooflineModel(gpu, model, tp=2)
    tp4 = RooflineModel(gpu, model, tp=4)
    assert tp2.step_cost([(1, 0, True)]).comm_s > 0
    assert RooflineModel(gpu, get_model("llama-3.1-8b")).step_cost([(1, 0, True)]).comm_s == 0
    assert tp4.decode_time(1, 1024) < tp2.decode_time(1, 1024)
    assert tp4.prefill_time(4096) < tp2.prefill_time(4096)
    # hand check of the all-reduce term: 2 per layer, ring 2(tp-1)/tp of tokens*hidden*2 B
    cost = tp4.step_cost([(1000, 0, False)])
    volume = 2 * 3 / 4 * 1000 * 8192 * 2
    assert cost.comm_s == pytest.approx(2 * 80 * (5e-6 + volume / 450e9))


def test_moe_reads_only_the_experts_it_routes_to() -> None:
    mixtral = RooflineModel(get_gpu("h100"), get_model("mixtral-8x7b"), tp=2)
    m = mixtral.model
    one = mixtral.step_cost([(1, 0, True)])
    many = mixtral.step_cost([(1, 0, True)] * 256)
    dense = m.num_layers * m.shared_params_per_layer + m.lm_head_params
    expert = m.num_layers * m.expert_params_per_layer
    assert one.bytes == pytest.approx((dense + 2 * expert) * 2 / 2 + 1 * mixtral.kv_bytes_per_token_per_gpu)
    assert many.bytes == pytest.approx((dense + 8 * expert) * 2 / 2 + 256 * mixtral.kv_bytes_per_token_per_gpu,
                                       rel=1e-6)
    # FLOPs use the active parameters only: 2 of 8 experts per token
    assert one.flops == pytest.approx(2 * (dense - m.lm_head_params + 2 * expert + m.lm_head_params) / 2
                                      + 4 * 32 * 4096 / 2)


def test_kv_pool_is_memory_times_utilisation_minus_weights() -> None:
    model = h100_8b()
    weights = PARAMS * 2
    expected = int((80e9 * 0.9 - weights) // (KV_PER_TOKEN * 16))
    assert model.num_kv_blocks(16, 0.9) == expected == 26674
    gpu, big = get_gpu("h100"), get_model("llama-3.1-70b")
    with pytest.raises(EngineError, match="--tp"):
        RooflineModel(gpu, big).num_kv_blocks()
    tp4 = RooflineModel(gpu, big, tp=4)
    per_gpu = 80e9 * 0.9 - big.weight_bytes / 4
    assert tp4.num_kv_blocks() == int(per_gpu // (2 * 80 * 2 * 128 * 2 * 16))  # 2 KV heads per GPU


def test_kv_transfer_time() -> None:
    assert h100_8b().kv_transfer_s(1000, 50e9) == pytest.approx(1000 * KV_PER_TOKEN / 50e9)


def scheduled(seq_id: int, position: int, **params: object) -> ScheduledSeq:
    return ScheduledSeq(seq_id, f"r{seq_id}", [5], position - 1, [0], True, True,
                        SamplingParams(**params))  # type: ignore[arg-type]


def test_sim_tokens_are_deterministic_in_vocab_and_never_eos_or_stop() -> None:
    model = h100_8b()
    runner = SimRunner(model, min_token_id=4)
    eos = get_model("llama-3.1-8b").eos_token_id
    tokens = [runner._sample(scheduled(1, p, stop_token_ids=(7, 8))) for p in range(1, 3000)]
    assert all(4 <= t < 128256 and t not in (eos, 7, 8) for t in tokens)
    assert len(set(tokens)) > 2900
    again = SimRunner(model, seed=99, min_token_id=4)  # the runner seed only moves jitter
    assert tokens[:50] == [again._sample(scheduled(1, p, stop_token_ids=(7, 8))) for p in range(1, 51)]
    seeded = [runner._sample(scheduled(1, p, seed=5)) for p in range(1, 51)]
    assert seeded == [runner._sample(scheduled(9, p, seed=5)) for p in range(1, 51)]  # same seed
    assert seeded != tokens[:50]
    assert sim_token(1, 2, 10, avoid=range(9)) == 9


def test_eos_probability_and_jitter() -> None:
    model = h100_8b()
    eos = get_model("llama-3.1-8b").eos_token_id
    always = SimRunner(model, eos_probability=1.0)
    assert always._sample(scheduled(1, 10)) == eos
    sometimes = SimRunner(model, eos_probability=0.1)
    hits = sum(sometimes._sample(scheduled(1, p)) == eos for p in range(1, 5001))
    assert 350 < hits < 650
    batch = ScheduledBatch(step=0, seqs=[scheduled(1, 100)])
    plain = SimRunner(model).execute(batch)
    assert plain.duration_s == model.decode_time(1, 99) and list(plain.sampled) == [1]
    a = [SimRunner(model, seed=3, jitter=0.2).execute(batch).duration_s for _ in range(1)]
    r1, r2 = SimRunner(model, seed=3, jitter=0.2), SimRunner(model, seed=3, jitter=0.2)
    d1 = [r1.execute(batch).duration_s for _ in range(2000)]
    d2 = [r2.execute(batch).duration_s for _ in range(2000)]
    assert d1 == d2 and d1[0] == a[0] and len(set(d1)) == 2000
    assert sum(d1) / len(d1) == pytest.approx(plain.duration_s, rel=0.03)  # mean-one noise
    assert min(d1) > 0
