"""Prefill/decode disaggregation in virtual time: the KV transfer is the only difference."""

from __future__ import annotations

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
    args: dict = dict(num_gpu_blocks=4096, max_model_len=32768,
                      eos_token_id=get_model("llama-3.1-8b").eos_token_id)
    args.update(kw)
    return EngineConfig(**args)


def colocated(eos_probability: float = 0.0) -> tuple[EngineCore, ManualClock]:
    clock = ManualClock()
    return EngineCore(config(), SimRunner(roofline(), eos_probability=eos_probability), clock), clock


def disaggregated(link: float = 50e9, eos_probability: float = 0.0,
                  decode_blocks: int = 4096) -> tuple[DisaggCore, ManualClock]:
    clock = ManualClock()
    model = roofline()
    prefill = EngineCore(config(), SimRunner(model, eos_probability=eos_probability), clock)
    decode = EngineCore(config(num_gpu_blocks=decode_blocks), SimRunner(model), clock)
    return DisaggCore(prefill, decode, lambda n: model.kv_transfer_s(n, link), clock), clock


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


def test_disaggregation_adds_exactly_the_kv_transfer_time() -> None:
    co, clock1 = colocated()
    co.add_request(req("a", 1000, 4))
    base = run(co, clock1)
    dis, clock2 = disaggregated(link=50e9)
    dis.add_request(req("a", 1000, 4))
    split = run(dis, clock2)
    transfer = 1000 * KV_PER_TOKEN / 50e9
    assert [o.token_ids for _, o in split] == [o.token_ids for _, o in base]
    assert [o.finish_reason for _, o in split] == [None, None, None, "length"]
    assert split[0][0] == pytest.approx(base[0][0])  # same TTFT: the prefill pool samples it
    for (t_dis, _), (t_co, _) in zip(split[1:], base[1:]):
        assert t_dis - t_co == pytest.approx(transfer, abs=1e-12)
    timings, base_timings = split[-1][1].timings, base[-1][1].timings
    assert timings is not None and base_timings is not None
    assert timings["kv_transfer_s"] == pytest.approx(transfer)
    assert timings["ttft_s"] == pytest.approx(base_timings["ttft_s"])
    assert timings["e2e_s"] == pytest.approx(base_timings["e2e_s"] + transfer)
    assert timings["decode_steps"] == base_timings["decode_steps"] == 3
    faster, clock3 = disaggregated(link=450e9)
    faster.add_request(req("a", 1000, 4))
    nvlink = run(faster, clock3)
    assert nvlink[1][0] - base[1][0] == pytest.approx(1000 * KV_PER_TOKEN / 450e9, abs=1e-12)


def test_the_link_carries_one_transfer_at_a_time() -> None:
    dis, clock = disaggregated(link=50e9)
    dis.add_request(req("a", 800, 2))
    dis.add_request(req("b", 800, 2))  # both prefilled in the same step
    out = {o.request_id: o for _, o in run(dis, clock) if o.finish_reason}
    one = 800 * KV_PER_TOKEN / 50e9
    assert out["a"].timings is not None and out["b"].timings is not None
    assert out["a"].timings["kv_transfer_s"] == pytest.approx(one)
    assert out["b"].timings["kv_transfer_s"] == pytest.approx(2 * one)
    assert dis.num_transfers == 2


def test_a_request_ending_at_its_first_token_never_reaches_the_decode_pool() -> None:
    dis, clock = disaggregated()
    dis.add_request(req("one", 100, 1))
    dis.add_request(req("ten", 100, 10))
    got = [(o.request_id, o.finish_reason) for _, o in run(dis, clock)]
    assert got == [("one", "length")] + [("ten", None)] * 9 + [("ten", "length")]
    assert dis.num_transfers == 1
    dis2, clock2 = disaggregated(eos_probability=1.0)
    dis2.add_request(req("eos", 100, 10))
    (only,) = [o for _, o in run(dis2, clock2)]
    assert only.finish_reason == "stop" and only.timings is not None
    assert only.timings["kv_transfer_s"] == 0.0
    assert dis2.decode.stats().steps == 0 and dis2.num_transfers == 0


def test_ignore_eos_and_min_tokens_carry_over_to_the_decode_pool() -> None:
    dis, clock = disaggregated(eos_probability=1.0)  # the prefill pool always samples EOS
    dis.add_request(req("a", 100, 5, ignore_eos=True))
    tokens = [t for _, o in run(dis, clock) for t in o.token_ids]
    assert len(tokens) == 5


def test_abort_while_the_kv_is_in_flight_or_decoding_frees_everything() -> None:
    dis, clock = disaggregated()
    dis.add_request(req("a", 1000, 50))
    dis.add_request(req("b", 1000, 50))
    first = []
    for _ in range(10):
        t = dis.next_event_time()
        assert t is not None
        clock.advance_to(t)
        first += dis.poll()
        if len(first) == 2:
            break
    assert dis.abort("a")  # its KV is crossing the link
    rest = run(dis, clock)
    assert [o.request_id for _, o in rest] == ["b"] * 49
    assert dis.num_transfers == 1
    dis.add_request(req("c", 100, 50))
    for _ in range(6):
        t = dis.next_event_time()
        assert t is not None
        clock.advance_to(t)
        dis.poll()
    assert dis.decode.has_request("c") and dis.abort("c") and not dis.abort("c")
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
