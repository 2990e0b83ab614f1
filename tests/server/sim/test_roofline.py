"""The per-kernel roofline: hand-computed kernel groups, mixed-step interference, fp8, TP, MoE,
KV sizing."""

from __future__ import annotations

import itertools

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


def test_decode_at_batch_1_is_bandwidth_bound_on_the_weights() -> None:
    model = h100_8b()
    cost = model.step_cost([(1, 1024, True)])
    assert all(k.memory_s > k.compute_s for k in cost.kernels)  # every group bandwidth-bound
    # weights without the embedding table (only its rows are gathered) over the bandwidth;
    # KV (1025 x 128 KiB), activations and logits add ~1 %
    weights_s = (PARAMS - EMBED) * 2 / (H100_BW * 0.8)
    assert cost.kernel_s == pytest.approx(weights_s, rel=0.015) and cost.kernel_s > weights_s
    # plus 30 µs of kernel latencies per layer and the step's overhead
    assert model.decode_time(1, 1024) == pytest.approx(cost.kernel_s + 32 * 30e-6 + 0.5e-3)
    assert 6e-3 <= model.decode_time(1, 1024) <= 8e-3  # published: 6-7.5 ms per token


def test_one_kernel_group_by_hand_mlp_of_256_tokens() -> None:
    mlp = h100_8b().step_cost([(1, 100, True)] * 256).kernel("mlp")
    assert mlp is not None
    params = 32 * 3 * 4096 * 14336  # gate, up, down of 32 layers: 5.64e9
    flops = 2 * params * 256  # 2.89e12
    efficiency = 0.6 * 256 / (256 + 128)  # 0.4 of the peak at 256 rows
    assert mlp.flops == pytest.approx(flops)
    assert mlp.compute_s == pytest.approx(flops / (H100_FLOPS * efficiency))  # 7.3 ms
    act = 256 * 32 * 2 * (2 * 4096 + 3 * 14336)  # in/out of gate_up and down, bf16
    assert mlp.bytes == pytest.approx(params * 2 + act)  # 11.3 GB + 0.84 GB
    assert mlp.memory_s == pytest.approx((params * 2 + act) / (H100_BW * 0.8))  # 4.52 ms
    assert mlp.time_s == mlp.compute_s == pytest.approx(7.29e-3, rel=0.01)  # compute-bound


def test_prefill_of_2048_tokens_is_compute_bound_near_50_ms() -> None:
    model = h100_8b()
    cost = model.step_cost([(2048, 0, True)])
    gemm = cost.kernel("projections"), cost.kernel("mlp")
    assert all(k is not None and k.compute_s > k.memory_s for k in gemm)
    linear = 2 * (PARAMS - 2 * EMBED) * 2048
    eff = 0.6 * 2048 / (2048 + 128)
    assert sum(k.flops for k in gemm if k) == pytest.approx(linear, rel=1e-4)  # norms aside
    assert model.prefill_time(2048) == pytest.approx(0.055, rel=0.1)
    assert model.prefill_time(2048) > linear / (H100_FLOPS * eff)


def test_a_mixed_step_costs_its_decode_attention_on_top_of_the_prefill() -> None:
    """Prefill-decode interference: the decodes' KV reads no longer hide under the GEMMs."""
    model = h100_8b()
    chunk, decodes = [(512, 0, False)], [(1, 1024, True)] * 32
    mixed, prefill, decode = (model.step_cost(x) for x in (chunk + decodes, chunk, decodes))
    one_roofline = max(mixed.compute_s, mixed.memory_s) + mixed.latency_s + mixed.overhead_s
    assert mixed.total_s > max(prefill.total_s, decode.total_s)
    assert mixed.total_s > one_roofline * 1.05  # the old max(all FLOPs, all bytes) model
    # by hand: GEMMs compute-bound on 544 rows, attention of the chunk compute-bound,
    # decode attention bandwidth-bound on 32 x 1025 tokens of KV, the LM head on its weights
    eff = 0.6 * 544 / (544 + 128)
    gemm_flops = 2 * (PARAMS - 2 * EMBED) * 544
    prefill_attn = 4 * 32 * 4096 * (512 * 513 // 2) / (H100_FLOPS * 0.6 * 512 / 640)
    decode_attn = (32 * 1025 * KV_PER_TOKEN + 32 * 2 * 32 * 2 * 4096) / (H100_BW * 0.8)
    lm_head = (EMBED * 2 + 32 * (4096 * 2 + 128256 * 4)) / (H100_BW * 0.8)
    expected = gemm_flops / (H100_FLOPS * eff) + prefill_attn + decode_attn + lm_head + 32 * 30e-6 + 0.5e-3
    assert mixed.total_s == pytest.approx(expected, rel=1e-3)
    interference = mixed.total_s - prefill.total_s
    assert interference > decode_attn  # at least the KV read the decodes add


def test_monotonic_in_batch_context_and_prompt() -> None:
    model = h100_8b()
    batches = [model.decode_time(b, 1024) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    contexts = [model.decode_time(32, c) for c in (0, 128, 512, 1024, 4096, 16384, 65536)]
    prompts = [model.prefill_time(n) for n in (1, 16, 128, 512, 2048, 8192, 32768)]
    chunks = [model.prefill_time(512, cached) for cached in (0, 512, 4096, 16384)]
    for series in (batches, contexts, prompts, chunks):
        assert all(a < b for a, b in itertools.pairwise(series)), series
    # per token, big batches and long prompts are cheaper: the efficiency curve rises
    assert model.prefill_time(4096) / 4096 < model.prefill_time(256) / 256


def test_knobs_scale_the_right_side_of_the_roofline() -> None:
    base = h100_8b()
    slow_compute = h100_8b(mfu=0.45)
    slow_memory = h100_8b(mbu=0.4)
    assert slow_compute.decode_time(1, 1024) == base.decode_time(1, 1024)
    fixed = 0.5e-3 + 32 * 30e-6  # overhead and kernel latencies
    assert slow_compute.prefill_time(4096) - fixed == pytest.approx(4 / 3 * (base.prefill_time(4096) - fixed), rel=0.01)
    assert slow_memory.decode_time(1, 1024) - fixed == pytest.approx(2 * (base.decode_time(1, 1024) - fixed))
    assert h100_8b(layer_latency_s=0.0).decode_time(1, 0) == pytest.approx(base.decode_time(1, 0) - 32 * 30e-6)
    assert h100_8b(overhead_s=0.0).decode_time(1, 0) == pytest.approx(base.decode_time(1, 0) - 0.5e-3)
    with pytest.raises(ConfigError, match="mfu"):  # checked once, in the server's config
        ServeConfig(sim=SimOptions(mfu=1.5))


def test_fp8_weights_halve_the_bytes_and_double_the_gemm_peak() -> None:
    gpu, model = get_gpu("h100"), get_model("llama-3.1-8b")
    bf16, fp8 = RooflineModel(gpu, model), RooflineModel(gpu, model, dtype="fp8")
    linear = PARAMS - 2 * EMBED
    assert fp8.weight_bytes == pytest.approx(linear + 2 * EMBED * 2, rel=1e-4)  # head, embedding bf16
    d16, d8 = bf16.step_cost([(1, 1024, True)]), fp8.step_cost([(1, 1024, True)])
    for name in ("projections", "mlp"):
        k16, k8 = d16.kernel(name), d8.kernel(name)
        assert k16 and k8 and k8.memory_s == pytest.approx(k16.memory_s / 2, rel=0.01)
    assert 1.8 < d16.kernel_s / d8.kernel_s < 2.0  # the bf16 LM head and the KV stay
    assert 1.5 < bf16.decode_time(1, 1024) / fp8.decode_time(1, 1024) < d16.kernel_s / d8.kernel_s
    p16, p8 = bf16.step_cost([(4096, 0, True)]), fp8.step_cost([(4096, 0, True)])
    assert p8.kernel("mlp").compute_s == pytest.approx(p16.kernel("mlp").compute_s * 989 / 1979)  # type: ignore[union-attr]
    assert p8.kernel("attention_prefill") == p16.kernel("attention_prefill")  # attention stays bf16
    a100 = RooflineModel(get_gpu("a100-80gb"), model, dtype="fp8")  # no fp8 tensor cores
    a100_bf16 = RooflineModel(get_gpu("a100-80gb"), model)
    m8, m16 = a100.step_cost([(4096, 0, True)]).kernel("mlp"), a100_bf16.step_cost([(4096, 0, True)]).kernel("mlp")
    assert m8 and m16 and m8.compute_s == m16.compute_s and m8.memory_s < m16.memory_s


def test_fp8_kv_cache_halves_kv_bytes_and_fits_twice_the_tokens() -> None:
    gpu, model = get_gpu("h100"), get_model("llama-3.1-8b")
    auto, fp8 = RooflineModel(gpu, model), RooflineModel(gpu, model, kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token == KV_PER_TOKEN // 2
    assert fp8.num_kv_blocks() == int((80e9 * 0.9 - PARAMS * 2) // (KV_PER_TOKEN // 2 * 16))
    a, f = (r.step_cost([(1, 8192, True)] * 64).kernel("attention_decode") for r in (auto, fp8))
    assert a and f and f.memory_s == pytest.approx(a.memory_s / 2, rel=0.02)
    assert fp8.kv_transfer_s(1000, 50e9) == pytest.approx(auto.kv_transfer_s(1000, 50e9) / 2)


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
    assert cost.comm_s == pytest.approx(2 * 80 * (20e-6 + volume / 450e9))


def test_moe_reads_only_the_experts_it_routes_to() -> None:
    mixtral = RooflineModel(get_gpu("h100"), get_model("mixtral-8x7b"), tp=2)
    m = mixtral.model
    router = m.num_layers * m.hidden_size * 8
    expert = m.num_layers * m.expert_params_per_layer
    act = m.num_layers * 2 * 2 * (2 * 4096 + 3 * 14336)  # per token: 2 experts, bf16
    one = mixtral.step_cost([(1, 0, True)]).kernel("mlp")
    many = mixtral.step_cost([(1, 0, True)] * 256).kernel("mlp")
    assert one and many
    assert one.bytes == pytest.approx(((router + 2 * expert) * 2 + act) / 2)
    assert many.bytes == pytest.approx(((router + 8 * expert) * 2 + 256 * act) / 2, rel=1e-6)
    # FLOPs use the active parameters only: 2 of 8 experts per token
    assert one.flops == pytest.approx(2 * (router + 2 * expert) / 2)
    # each expert's GEMM sees a quarter of the tokens: rows = tokens * 2 / 8
    assert many.compute_s == pytest.approx(many.flops / (989e12 * mixtral.gemm_efficiency(64)))


def test_kv_pool_is_memory_times_utilisation_minus_weights() -> None:
    model = h100_8b()
    weights = PARAMS * 2
    expected = int((80e9 * 0.9 - weights) // (KV_PER_TOKEN * 16))
    assert model.num_kv_blocks(16, 0.9) == expected == 26674
    draft = 1e9, 32768.0  # a draft model's weights per GPU and KV per token
    assert model.num_kv_blocks(16, 0.9, *draft) == int((80e9 * 0.9 - weights - 1e9) // ((KV_PER_TOKEN + 32768) * 16))
    gpu, big = get_gpu("h100"), get_model("llama-3.1-70b")
    with pytest.raises(EngineError, match="--tp"):
        RooflineModel(gpu, big).num_kv_blocks()
    tp4 = RooflineModel(gpu, big, tp=4)
    per_gpu = 80e9 * 0.9 - big.weight_bytes / 4
    assert tp4.num_kv_blocks() == int(per_gpu // (2 * 80 * 2 * 128 * 2 * 16))  # 2 KV heads per GPU


def test_kv_transfer_time() -> None:
    assert h100_8b().kv_transfer_s(1000, 50e9) == pytest.approx(1000 * KV_PER_TOKEN / 50e9)


def scheduled(seq_id: int, position: int, **params: object) -> ScheduledSeq:
    return ScheduledSeq(seq_id, f"r{seq_id}", [5], position - 1, [0], True, True, SamplingParams(**params))  # type: ignore[arg-type]


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


def test_serve_config_dtypes_reach_the_cost_model_and_the_kv_pool() -> None:
    from loadgen.server.sim.build import kv_blocks, sim_engine

    base = kv_blocks(ServeConfig())
    assert kv_blocks(ServeConfig(sim=SimOptions(kv_cache_dtype="fp8"))) in (2 * base, 2 * base + 1)
    fp8 = ServeConfig(sim=SimOptions(dtype="fp8"))
    saved = (PARAMS - 2 * EMBED) * 1  # one byte per linear weight saved
    assert kv_blocks(fp8) == int((80e9 * 0.9 - PARAMS * 2 + saved) // (KV_PER_TOKEN * 16))
    runner = sim_engine(fp8).core.runner  # type: ignore[attr-defined]
    assert runner.roofline.dtype == "fp8" and runner.roofline.gemm_peak == 1979e12
