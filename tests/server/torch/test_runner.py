"""The torch runner driven by the real scheduler: paged, chunked, batched == plain forward."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch

from loadgen.server.engine.interface import EngineRequest, SamplingParams
from loadgen.server.engine.scheduler import EngineConfig, Scheduler
from loadgen.server.torch.cuda_graphs import block_bucket, bucket
from loadgen.server.torch.model import LlamaModel
from loadgen.server.torch.runner import TorchRunner

BLOCK = 16


def random_prompts(n: int, seed: int, *, shared: int = 0, max_len: int = 90) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(4, 8192) for _ in range(shared)]
    lengths = [1, 2, 17, max_len] + [rng.randint(1, max_len) for _ in range(n)]
    return [prefix + [rng.randrange(4, 8192) for _ in range(k)] for k in lengths[:n]]


@dataclass
class Run:
    outputs: dict[str, list[int]] = field(default_factory=dict)
    worst_rel_err: float = 0.0
    checked: int = 0
    steps: int = 0
    scheduler: Scheduler | None = None


def serve(
    model: LlamaModel,
    prompts: list[list[int]],
    *,
    budget: int = 2048,
    chunked: bool = True,
    prefix_caching: bool = False,
    num_blocks: int = 256,
    max_tokens: int = 6,
    temperature: float = 0.0,
    seed: int | None = None,
    check: bool = False,
    runner: TorchRunner | None = None,
    staggered: bool = False,
) -> Run:
    """Serve ``prompts`` to completion through a Scheduler and a TorchRunner.

    ``check``: compare every sampled logits row with the plain full-sequence forward.
    ``staggered``: each request is added only after the previous one finished.
    """
    config = EngineConfig(
        block_size=BLOCK,
        num_gpu_blocks=num_blocks,
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix_caching,
        max_model_len=4096,
    )
    sched = Scheduler(config, now=lambda: 0.0)
    runner = runner or TorchRunner(model, num_blocks=num_blocks, block_size=BLOCK)
    run = Run(scheduler=sched)
    pending = [
        EngineRequest(f"r{i}", p, SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed))
        for i, p in enumerate(prompts)
    ]
    for _ in range(10_000):
        while pending and (not staggered or not sched.has_unfinished()):
            sched.add_request(pending.pop(0))
        if not sched.has_unfinished():
            break
        batch = sched.schedule()
        assert batch.num_tokens <= budget or not chunked
        if check:
            seqs, logits = runner.compute_logits(batch)
            sampled = {}
            for seq, row in zip(seqs, logits):
                live = sched.get(seq.request_id)
                assert live is not None
                ref = model.reference_logits(live.token_ids)[-1]
                err = float((row - ref).abs().max() / ref.abs().max())
                run.worst_rel_err = max(run.worst_rel_err, err)
                run.checked += 1
                sampled[seq.seq_id] = [int(row.argmax())]
        else:
            sampled = runner.execute(batch).sampled
        for out in sched.update(batch, sampled):
            run.outputs.setdefault(out.request_id, []).extend(out.token_ids)
        run.steps += 1
    assert not sched.has_unfinished() and not pending
    assert sched.kv.num_used_blocks == 0
    return run


@pytest.mark.parametrize("budget", [1, 7, 64, None], ids=["chunk1", "chunk7", "chunk64", "whole"])
def test_paged_chunked_batched_logits_equal_full_forward(tiny: LlamaModel, budget: int | None) -> None:
    prompts = random_prompts(5, seed=1)
    run = serve(tiny, prompts, budget=budget or 2048, chunked=budget is not None, check=True)
    assert run.checked == 5 * 6
    assert run.worst_rel_err <= 1e-4


def test_greedy_tokens_identical_for_every_chunk_size(tiny: LlamaModel) -> None:
    prompts = random_prompts(6, seed=2, max_len=150)
    results = {
        budget: serve(tiny, prompts, budget=budget or 2048, chunked=budget is not None, max_tokens=8).outputs
        for budget in (1, 7, 64, None)
    }
    reference = results[None]
    assert len(reference) == 6 and all(len(v) == 8 for v in reference.values())
    for budget, outputs in results.items():
        assert outputs == reference, f"chunk size {budget} differs"
    # and the first token of each is the argmax of the plain forward
    for i, prompt in enumerate(prompts):
        assert reference[f"r{i}"][0] == int(tiny.reference_logits(prompt)[-1].argmax())


def test_a_same_step_prefix_hit_reads_the_kv_written_in_that_step(tiny: LlamaModel) -> None:
    # all four arrive together: requests 2..4 hit the shared blocks that request 1 is
    # computing in the same step (its K and V are written before any attention reads them)
    prompts = list(random_prompts(4, seed=3, shared=3 * BLOCK + 5))
    miss = serve(tiny, prompts)
    hit = serve(tiny, prompts, prefix_caching=True, check=True)
    assert hit.scheduler is not None and hit.scheduler.kv.prefix_cache_hits == 3 * 3 * BLOCK
    assert hit.outputs == miss.outputs and hit.worst_rel_err <= 1e-4


def test_prefix_cache_hit_gives_the_same_tokens_and_is_counted(tiny: LlamaModel) -> None:
    prompts = list(random_prompts(4, seed=3, shared=3 * BLOCK + 5))
    miss = serve(tiny, prompts, staggered=True)
    hit = serve(tiny, prompts, staggered=True, prefix_caching=True, check=True)
    assert hit.outputs == miss.outputs
    assert hit.worst_rel_err <= 1e-4
    assert hit.scheduler is not None and miss.scheduler is not None
    # requests 2..4 find the 3 shared blocks cached: 48 tokens each
    assert hit.scheduler.kv.prefix_cache_hits == 3 * 3 * BLOCK
    assert (miss.scheduler.num_computed_prompt_tokens - hit.scheduler.num_computed_prompt_tokens) == 3 * 3 * BLOCK


def test_prefix_cache_hit_reads_the_cached_kv(tiny: LlamaModel) -> None:
    """The hit is real: wiping the cached blocks' K/V changes the answer."""
    prompt = random_prompts(1, seed=4, shared=4 * BLOCK, max_len=1)[0] + [7, 8, 9]
    runner = TorchRunner(tiny, num_blocks=64, block_size=BLOCK)
    first = serve(tiny, [prompt], prefix_caching=True, runner=runner, max_tokens=3)
    # same runner and KV pool, a fresh scheduler: nothing is cached there, so recompute
    again = serve(tiny, [prompt], prefix_caching=True, runner=runner, max_tokens=3)
    assert again.outputs == first.outputs

    # a scheduler that has the prefix cached, whose blocks we then wipe
    config = EngineConfig(block_size=BLOCK, num_gpu_blocks=64, enable_prefix_caching=True, max_model_len=4096)
    sched = Scheduler(config, now=lambda: 0.0)
    outputs: dict[str, list[int]] = {}

    def finish(rid: str, wipe: bool) -> None:
        sched.add_request(EngineRequest(rid, prompt, SamplingParams(max_tokens=3, temperature=0.0)))
        while sched.has_unfinished():
            batch = sched.schedule()
            if wipe and not batch.seqs[0].is_decode:
                assert batch.seqs[0].start_pos == 4 * BLOCK  # the cached prefix is not fed
                runner.kv[:, :, :, batch.seqs[0].block_table[:4]] = 0.0
            for out in sched.update(batch, runner.execute(batch).sampled):
                outputs.setdefault(out.request_id, []).extend(out.token_ids)

    finish("a", wipe=False)
    finish("b", wipe=True)
    assert outputs["a"] == first.outputs["r0"]
    assert outputs["b"] != outputs["a"]


def test_decodes_are_grouped_by_context_length(tiny: LlamaModel) -> None:
    from loadgen.server.engine.batch import ScheduledSeq

    runner = TorchRunner(tiny, num_blocks=64, block_size=BLOCK)
    greedy = SamplingParams(temperature=0.0)
    seqs = [
        ScheduledSeq(i, f"r{i}", [5], ctx - 1, list(range(4 * i, 4 * i + 4)), True, True, greedy)
        for i, ctx in enumerate((20, 2, 40, 3))
    ]
    groups = runner.prepare(seqs).decodes
    assert [d.tables.shape[1] for d in groups] == [2, 1, 3]  # padded to the group's longest
    assert isinstance(groups[1].rows, torch.Tensor) and groups[1].rows.tolist() == [1, 3]
    assert groups[1].context_lens.tolist() == [2, 3]
    # interleaved context lengths decoding together, next to prefill chunks: still exact
    rng = random.Random(9)
    prompts = [[rng.randrange(4, 8192) for _ in range(n)] for n in (20, 2, 40, 3, 150, 90)]
    run = serve(tiny, prompts, budget=24, max_tokens=12, check=True)
    assert run.worst_rel_err <= 1e-4


def test_padded_decode_path_equals_eager(tiny: LlamaModel) -> None:
    """The static-shape decode path that CUDA graphs capture, run eagerly on the CPU."""
    prompts = random_prompts(5, seed=5)
    eager = serve(tiny, prompts, budget=64, max_tokens=7)
    padded_runner = TorchRunner(tiny, num_blocks=256, block_size=BLOCK, pad_decodes=True, decode_batch_sizes=[4, 8])
    padded = serve(tiny, prompts, budget=64, max_tokens=7, runner=padded_runner, check=True)
    assert padded.outputs == eager.outputs
    assert padded.worst_rel_err <= 1e-4
    assert bucket(3, [4, 8]) == 4 and bucket(9, [4, 8]) == 9
    assert [block_bucket(n, 16) for n in (1, 16, 17, 33, 64, 65)] == [1, 1, 2, 4, 4, 8]


def test_seeded_sampling_does_not_depend_on_the_batch(tiny: LlamaModel) -> None:
    prompts = random_prompts(4, seed=6)
    together = serve(tiny, prompts, temperature=0.8, seed=123, max_tokens=10).outputs
    alone = serve(tiny, prompts[2:3], temperature=0.8, seed=123, max_tokens=10).outputs
    assert alone["r0"] == together["r2"]
    other_seed = serve(tiny, prompts[2:3], temperature=0.8, seed=124, max_tokens=10).outputs
    assert other_seed["r0"] != alone["r0"]
    greedy = serve(tiny, prompts[2:3], temperature=0.0, max_tokens=10).outputs
    assert greedy["r0"] != alone["r0"]


def test_preemption_by_recompute_gives_the_same_tokens(tiny: LlamaModel) -> None:
    prompts = random_prompts(6, seed=7, max_len=60)
    roomy = serve(tiny, prompts, max_tokens=24)
    tight = serve(tiny, prompts, max_tokens=24, num_blocks=9, budget=64)
    assert tight.scheduler is not None and tight.scheduler.num_preemptions > 0
    assert tight.outputs == roomy.outputs


def test_reserved_ids_are_never_sampled_and_generators_are_dropped(tiny: LlamaModel) -> None:
    from loadgen.server.engine.batch import ScheduledSeq

    runner = TorchRunner(tiny, num_blocks=64, block_size=BLOCK, suppress_token_ids=range(4))
    seqs = [
        ScheduledSeq(i, f"r{i}", [5], 0, [i], True, False, SamplingParams(temperature=t, seed=i))
        for i, t in enumerate((0.0, 1.0))
    ]
    logits = torch.zeros(2, tiny.cfg.vocab_size)
    logits[:, :4] = 100.0  # the reserved ids would win by far
    logits[:, 9] = 1.0
    assert runner._sample(seqs, logits)[0] == 9
    assert runner._sample(seqs, logits)[1] >= 4
    assert set(runner._generators) == {1}  # greedy rows need none
    runner._generators.clear()
    run = serve(tiny, random_prompts(3, seed=8), runner=runner, temperature=1.0, seed=1, max_tokens=5, staggered=True)
    assert len(run.outputs) == 3
    # finished sequences' generators are dropped with the next batch: only the last is left
    assert len(runner._generators) == 1


def test_model_weights_are_seeded(tiny: LlamaModel) -> None:
    from loadgen.server.engine.models import get_model
    from loadgen.server.torch.loader import build_model

    cfg = get_model("tiny")
    same = build_model(cfg, device="cpu", dtype=torch.float32, seed=0)
    other = build_model(cfg, device="cpu", dtype=torch.float32, seed=1)
    assert torch.equal(same.layers[2].qkv, tiny.layers[2].qkv)
    assert not torch.equal(other.layers[2].qkv, tiny.layers[2].qkv)
    assert float(tiny.layers[0].attn_norm.min()) == 1.0
    assert sum(p.numel() for p in tiny.parameters()) == cfg.num_params
