"""Prefill/decode disaggregation as deployed, in virtual time: TTFT from the decode side,
KV held until transferred, decode blocks reserved first, one link per rank, xPyD."""

from __future__ import annotations

import itertools

import pytest

from loadgen.errors import PromptTooLong
from loadgen.server.engine.core import EngineCore, ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams, TokenOutput
from loadgen.server.engine.models import get_model
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.sim.disagg import DisaggCore
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner

KV_PER_TOKEN = 131_072  # Llama-3.1-8B, bf16


def roofline() -> RooflineModel:
    return RooflineModel(get_gpu("h100"), get_model("llama-3.1-8b"))


def config(**kw: object) -> EngineConfig:
    args: dict = {
        "num_gpu_blocks": 4096,
        "max_model_len": 32768,
        "eos_token_id": get_model("llama-3.1-8b").eos_token_id,
    }
    args.update(kw)
    return EngineConfig(**args)


def colocated(eos_probability: float = 0.0) -> tuple[EngineCore, ManualClock]:
    clock = ManualClock()
    return EngineCore(config(), SimRunner(roofline(), eos_probability=eos_probability), clock), clock


def disaggregated(
    link: float = 50e9,
    eos_probability: float = 0.0,
    decode_blocks: int = 4096,
    prefills: int = 1,
    decodes: int = 1,
    **limits: object,
) -> tuple[DisaggCore, ManualClock]:
    clock = ManualClock()
    model = roofline()
    pre = [
        EngineCore(config(**limits), SimRunner(model, eos_probability=eos_probability), clock) for _ in range(prefills)
    ]
    dec = [EngineCore(config(num_gpu_blocks=decode_blocks, **limits), SimRunner(model), clock) for _ in range(decodes)]
    return DisaggCore(pre, dec, lambda n, p, d: model.kv_transfer_s(n, link), clock), clock


def run(core: EngineCore | DisaggCore, clock: ManualClock) -> list[tuple[float, TokenOutput]]:
    got: list[tuple[float, TokenOutput]] = []
    for _ in range(10_000):
        t = core.next_event_time()
        if t is None:
            return got
        clock.advance_to(t)
        got += [(t, o) for o in core.poll()]
    raise AssertionError("did not finish")


def req(rid: str, n: int, max_tokens: int, **params: object) -> EngineRequest:
    return EngineRequest(rid, [7] * n, SamplingParams(max_tokens=max_tokens, **params))  # type: ignore[arg-type]


def test_ttft_includes_the_transfer_and_the_decode_sides_first_step() -> None:
    co, clock1 = colocated()
    co.add_request(req("a", 1000, 4))
    base = run(co, clock1)
    dis, clock2 = disaggregated(link=50e9)
    dis.add_request(req("a", 1000, 4))
    split = run(dis, clock2)
    transfer = 1000 * KV_PER_TOKEN / 50e9
    last_token = roofline().step_time([(1, 999, True)])  # the decode side computes the last prompt token
    assert [o.finish_reason for _, o in split] == [None, None, None, "length"]
    # the prefill pool's step is the colocated prefill; then the link, then one short step
    assert split[0][0] == pytest.approx(base[0][0] + transfer + last_token, abs=1e-12)
    # later tokens: the same decode steps as colocated
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(split)]
    base_gaps = [b - a for (a, _), (b, _) in itertools.pairwise(base)]
    assert gaps == pytest.approx(base_gaps, abs=1e-12)
    timings = split[-1][1].timings
    assert timings is not None
    assert timings["kv_transfer_s"] == pytest.approx(transfer)
    assert timings["ttft_s"] == pytest.approx(split[0][0])  # arrival at t = 0
    assert timings["e2e_s"] == pytest.approx(split[-1][0])
    assert timings["decode_steps"] == 3
    faster, clock3 = disaggregated(link=450e9)
    faster.add_request(req("a", 1000, 4))
    nvlink = run(faster, clock3)
    assert split[0][0] - nvlink[0][0] == pytest.approx(transfer - 1000 * KV_PER_TOKEN / 450e9, abs=1e-12)


def test_the_prefill_pool_holds_the_kv_until_it_is_transferred() -> None:
    dis, clock = disaggregated(link=5e9)  # slow link: 26 ms for 1000 tokens
    dis.add_request(req("a", 1000, 4))
    blocks = -(-1000 // 16)
    prefill_end = roofline().prefill_time(1000)
    clock.advance_to(dis.next_event_time() or 0.0)
    dis.poll()  # the prefill step starts
    clock.advance_to(prefill_end)
    assert dis.poll() == []  # its token is not streamed
    assert dis.prefill.scheduler.kv.num_used_blocks == blocks  # held while the link reads it
    assert dis.decode.scheduler.kv.num_used_blocks == -(-999 // 16)  # reserved before the transfer
    assert dis.stats().waiting == 1  # reserved, KV in flight: waiting, as in vLLM
    clock.advance_to(prefill_end + 1000 * KV_PER_TOKEN / 5e9)
    dis.poll()
    assert dis.prefill.scheduler.kv.num_used_blocks == 0  # freed once transferred
    assert dis.num_transfers == 1


def test_transfers_share_the_link_equally() -> None:
    dis, clock = disaggregated(link=50e9)
    dis.add_request(req("a", 800, 2))
    dis.add_request(req("b", 800, 2))  # both prefilled in the same step: on the link together
    out = {o.request_id: o for _, o in run(dis, clock) if o.finish_reason}
    one = 800 * KV_PER_TOKEN / 50e9
    assert out["a"].timings is not None and out["b"].timings is not None
    assert out["a"].timings["kv_transfer_s"] == pytest.approx(2 * one)  # half the bandwidth each
    assert out["b"].timings["kv_transfer_s"] == pytest.approx(2 * one)
    assert dis.num_transfers == 2 and dis.transferred_tokens == 1600


def test_a_transfer_started_later_finishes_as_processor_sharing_predicts() -> None:
    dis, clock = disaggregated(link=5e9)  # slow: a's 800 tokens take 21 ms
    dis.add_request(req("a", 800, 2))
    prefill_a = roofline().prefill_time(800)
    t = 0.0
    while t < prefill_a:  # run up to a's prefill end: its transfer starts then
        nxt = dis.next_event_time()
        assert nxt is not None
        t = nxt
        clock.advance_to(t)
        dis.poll()
    assert t == pytest.approx(prefill_a)
    dis.add_request(req("b", 160, 2), at=t)  # b's prefill ends while a's KV is on the link
    out = {o.request_id: o for _, o in run(dis, clock) if o.finish_reason}
    work_a, work_b = 800 * KV_PER_TOKEN / 5e9, 160 * KV_PER_TOKEN / 5e9
    prefill_b = roofline().prefill_time(160)
    assert prefill_b + work_b < work_a  # a is alone, then shares until b is done
    ta, tb = out["a"].timings, out["b"].timings
    assert ta is not None and tb is not None
    assert tb["kv_transfer_s"] == pytest.approx(2 * work_b)  # half speed all along
    assert ta["kv_transfer_s"] == pytest.approx(work_a + work_b)  # the link never idles


def test_the_decode_sides_own_prefix_cache_cuts_the_transfer() -> None:
    dis, clock = disaggregated(link=5e9, enable_prefix_caching=True)
    shared = [11] * 960  # 60 blocks
    dis.add_request(EngineRequest("a", [*shared, *[1] * 40], SamplingParams(max_tokens=2)))
    first = {o.request_id: o for _, o in run(dis, clock) if o.finish_reason}
    assert dis.transferred_tokens == 1000
    start = clock()
    dis.add_request(EngineRequest("b", [*shared, *[2] * 40], SamplingParams(max_tokens=2)), at=start)
    got = run(dis, clock)
    second = {o.request_id: o for _, o in got if o.finish_reason}
    assert dis.transferred_tokens == 1000 + 40  # the decode engine held the 960 shared tokens
    ta, tb = first["a"].timings, second["b"].timings
    assert ta is not None and tb is not None
    assert ta["kv_transfer_s"] == pytest.approx(1000 * KV_PER_TOKEN / 5e9)
    assert tb["kv_transfer_s"] == pytest.approx(40 * KV_PER_TOKEN / 5e9)
    assert tb["ttft_s"] < ta["ttft_s"] - 0.9 * 960 * KV_PER_TOKEN / 5e9  # the saved transfer shows in TTFT


def test_a_transfer_waits_for_decode_blocks() -> None:
    # 100 decode blocks (1600 tokens): a (1000 + 400) fits, b (1000 + 4) must wait for a
    dis, clock = disaggregated(decode_blocks=100)
    dis.add_request(req("a", 1000, 400))
    dis.add_request(req("b", 1000, 4))
    got = run(dis, clock)
    a_done = max(t for t, o in got if o.request_id == "a")
    b_first = min(t for t, o in got if o.request_id == "b")
    assert b_first > a_done  # b's KV could only move once a's decode blocks were free
    timings = {o.request_id: o.timings for _, o in got if o.finish_reason}
    b = timings["b"]
    assert b is not None and b["kv_transfer_s"] > a_done - roofline().prefill_time(2000)
    assert dis.decode.scheduler.kv.num_used_blocks == 0


def test_the_prefill_engines_token_is_discarded_and_params_carry_over() -> None:
    dis, clock = disaggregated(eos_probability=1.0)  # the prefill pool always samples EOS
    dis.add_request(req("a", 100, 5))
    dis.add_request(req("b", 100, 5, min_tokens=5))
    out = run(dis, clock)
    assert [o.request_id for _, o in out].count("a") == 5  # the decode side's tokens only
    assert sum(len(o.token_ids) for _, o in out if o.request_id == "b") == 5
    one, clock2 = disaggregated()
    one.add_request(req("one", 100, 1))
    (only,) = [o for _, o in run(one, clock2)]
    assert only.finish_reason == "length" and one.num_transfers == 1  # through the decode side too


def test_per_rank_links_and_xpyd_from_the_config() -> None:
    from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
    from loadgen.server.sim.build import sim_engine

    def transfer(**sim: object) -> tuple[float, DisaggCore]:
        clock = ManualClock()
        cfg = ServeConfig(
            tp=2,
            scheduler=SchedulerLimits(max_model_len=8192),
            sim=SimOptions(disaggregate=True, kv_link_gbps=400.0, **sim),  # 400 Gbit/s = 50 GB/s
        )  # type: ignore[arg-type]
        engine = sim_engine(cfg, clock=clock)
        core = engine.core
        assert isinstance(core, DisaggCore)
        core.add_request(req("a", 1000, 2))
        out = run(core, clock)  # type: ignore[arg-type]
        timings = out[-1][1].timings
        assert timings is not None
        return timings["kv_transfer_s"], core

    one_link = 1000 * KV_PER_TOKEN / 50e9
    two, core = transfer()
    assert two == pytest.approx(one_link / 2)  # tp 2 on both sides: two links
    assert len(core.prefills) == len(core.decodes) == 1
    mixed, core = transfer(prefill_tp=4, decode_tp=1, prefill_replicas=2, decode_replicas=3)
    assert mixed == pytest.approx(one_link)  # one decode rank: one link
    assert (len(core.prefills), len(core.decodes)) == (2, 3)
    assert [c.runner.roofline.tp for c in core.cores] == [4, 4, 1, 1, 1]  # type: ignore[attr-defined]
    fp8, _ = transfer(kv_cache_dtype="fp8")
    assert fp8 == pytest.approx(two / 2)  # an fp8 KV cache moves half the bytes


def test_prefills_spread_over_engines_and_their_links_run_in_parallel() -> None:
    dis, clock = disaggregated(prefills=2, decodes=2)
    dis.add_request(req("a", 800, 2))
    dis.add_request(req("b", 800, 2))
    out = {o.request_id: o for _, o in run(dis, clock) if o.finish_reason}
    one = 800 * KV_PER_TOKEN / 50e9
    assert out["a"].timings is not None and out["b"].timings is not None
    assert out["a"].timings["kv_transfer_s"] == pytest.approx(one)
    assert out["b"].timings["kv_transfer_s"] == pytest.approx(one)  # its own prefill engine's link
    assert [c.stats().steps for c in dis.prefills] == [1, 1]
    assert all(c.stats().generation_tokens == 2 for c in dis.decodes)  # round-robin: one each


@pytest.mark.parametrize(("router", "c_on"), [("round-robin", 0), ("least-loaded", 1)])
def test_decode_routing_round_robin_by_default_least_loaded_as_an_option(router: str, c_on: int) -> None:
    clock = ManualClock()
    model = roofline()
    pre = [EngineCore(config(), SimRunner(model), clock)]
    dec = [EngineCore(config(), SimRunner(model), clock) for _ in range(2)]
    dis = DisaggCore(pre, dec, lambda n, p, d: model.kv_transfer_s(n, 50e9), clock, router=router)
    dis.add_request(req("a", 100, 200))  # long: still decoding on engine 0 when c arrives
    dis.add_request(req("b", 100, 1))  # engine 1, done at once
    while dec[1].stats().generation_tokens < 1 or dis.decodes[1].has_unfinished():
        t = dis.next_event_time()
        assert t is not None
        clock.advance_to(t)
        dis.poll()
    dis.add_request(req("c", 100, 3), at=clock())
    run(dis, clock)
    tokens = [c.stats().generation_tokens for c in dec]
    assert tokens[c_on] == (200 if c_on == 0 else 1) + 3  # round-robin: engine 0 again; least-loaded: the idle one
    with pytest.raises(ValueError, match="P/D router"):
        DisaggCore(pre, dec, lambda n, p, d: 0.0, clock, router="random")


def test_abort_while_the_kv_is_in_flight_or_decoding_frees_everything() -> None:
    dis, clock = disaggregated(link=5e9)
    dis.add_request(req("a", 1000, 50))
    dis.add_request(req("b", 1000, 50))
    clock.advance_to(dis.next_event_time() or 0.0)
    dis.poll()
    clock.advance_to(roofline().step_time([(1000, 0, True), (1000, 0, True)]))
    assert dis.poll() == []  # both prefilled: a's KV on the link, b's queued behind it
    assert dis.abort("a")
    rest = run(dis, clock)
    assert [o.request_id for _, o in rest] == ["b"] * 50
    assert dis.num_transfers == 1
    dis.add_request(req("c", 100, 50))
    while not dis.decode.has_request("c"):
        t = dis.next_event_time()
        assert t is not None
        clock.advance_to(t)
        dis.poll()
    assert dis.abort("c") and not dis.abort("c")
    assert not dis.has_unfinished() and run(dis, clock) == []  # the step in flight ends
    assert dis.next_event_time() is None
    for pool in (dis.prefill, dis.decode):
        assert pool.scheduler.kv.num_free_blocks == 4096
    st = dis.stats()
    assert st.running == st.waiting == 0 and st.kv_usage == 0.0


def test_rejections_cover_the_decode_pool() -> None:
    dis, _ = disaggregated(decode_blocks=10)  # 160 tokens of KV in the decode pool
    with pytest.raises(PromptTooLong, match="decode pool"):
        dis.add_request(req("a", 100, 100))
    with pytest.raises(PromptTooLong, match="context length"):
        dis.add_request(req("b", 32768, 1))
    assert not dis.has_unfinished()


def test_the_start_up_line_names_the_links_unit_both_ways_and_the_router() -> None:
    from loadgen.cli.serve_cmd import _describe
    from loadgen.errors import ConfigError
    from loadgen.server.config import ServeConfig, SimOptions
    from loadgen.server.sim.build import sim_engine

    cfg = ServeConfig(sim=SimOptions(disaggregate=True))
    assert cfg.sim.kv_link_gbps == 400.0 and cfg.sim.kv_link_bytes_per_s == 50e9  # a 400 Gbps NIC
    line = _describe(cfg, sim_engine(cfg, clock=ManualClock()))
    assert "KV links 400 Gbit/s = 50 GB/s per rank, round-robin routing" in line
    cfg = ServeConfig(sim=SimOptions(decode_replicas=2, kv_link_gbps=100, pd_router="least-loaded"))
    assert "100 Gbit/s = 12.5 GB/s per rank, least-loaded routing" in _describe(cfg, sim_engine(cfg))
    with pytest.raises(ConfigError, match="P/D router") as err:
        ServeConfig(sim=SimOptions(disaggregate=True, pd_router="random"))
    assert err.value.key == "--pd-router"
