"""The engine core in virtual time: absolute deadlines, arrivals, real runners, and the
stall a long prompt causes with and without chunked prefill (through the roofline)."""

from __future__ import annotations

import itertools

import pytest

from loadgen.server.engine.batch import ScheduledBatch
from loadgen.server.engine.core import EngineCore, ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams, TokenOutput
from loadgen.server.engine.models import get_model
from loadgen.server.engine.runner import StepResult
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner

Step = tuple[ScheduledBatch, StepResult, float, float]


def sim_core(**cfg: object) -> tuple[EngineCore, ManualClock, RooflineModel, list[Step]]:
    clock = ManualClock()
    roofline = RooflineModel(get_gpu("h100"), get_model("llama-3.1-8b"))
    steps: list[Step] = []
    args: dict = {"num_gpu_blocks": 4096, "max_model_len": 32768}
    args.update(cfg)
    core = EngineCore(
        EngineConfig(**args), SimRunner(roofline), clock, on_step=lambda b, r, s, e: steps.append((b, r, s, e))
    )
    return core, clock, roofline, steps


def req(rid: str, n: int, max_tokens: int) -> EngineRequest:
    return EngineRequest(rid, [5] * n, SamplingParams(max_tokens=max_tokens))


def run_events(
    core: EngineCore, clock: ManualClock, max_events: int = 100_000, stop: str | None = None, must_end: bool = True
) -> list[tuple[float, TokenOutput]]:
    """Process events one by one at their exact times; (time, output) pairs."""
    got: list[tuple[float, TokenOutput]] = []
    for _ in range(max_events):
        t = core.next_event_time()
        if t is None:
            return got
        clock.advance_to(t)
        outs = core.process_event()
        got += [(core.last_step_end, o) for o in outs]
        if stop is not None and any(o.request_id == stop for o in outs):
            return got
    if must_end:
        raise AssertionError("too many events")
    return got


def test_steps_run_back_to_back_however_late_the_driver_polls() -> None:
    exact, clock1, roofline, _ = sim_core()
    exact.add_request(req("a", 100, 5))
    on_time = run_events(exact, clock1)
    late, clock2, _, steps = sim_core()
    late.add_request(req("a", 100, 5))
    clock2.t = 0.0031
    first = late.poll()  # the prefill is not done yet
    clock2.t = 1.0
    rest = late.poll()  # a very late wake-up: every step is still on its own deadline
    assert first == [] and len(rest) == 5
    timings = rest[-1].timings
    assert timings == on_time[-1][1].timings
    assert timings is not None
    assert timings["ttft_s"] == pytest.approx(roofline.prefill_time(100))
    assert timings["decode_s"] == pytest.approx(sum(roofline.decode_time(1, c) for c in range(100, 104)))
    assert [s[2] for s in steps[1:]] == [s[3] for s in steps[:-1]]  # start = previous end
    assert late.next_event_time() is None


def test_a_step_never_starts_before_the_request_it_schedules_arrived() -> None:
    core, clock, _, steps = sim_core()
    core.add_request(req("a", 10, 2))
    core.poll()
    end1 = core.next_event_time()
    assert end1 is not None
    clock.t = end1 + 0.002
    core.add_request(req("b", 10, 2))  # arrives after the step ended, before the poll
    clock.t = end1 + 0.003
    core.poll()
    assert steps[1][2] == pytest.approx(end1 + 0.002)
    outs = run_events(core, clock)
    b_last = [o for _, o in outs if o.request_id == "b"][-1]
    assert b_last.timings is not None and b_last.timings["queue_s"] == 0.0


def test_idle_core_starts_at_arrival_and_has_no_event() -> None:
    core, clock, roofline, steps = sim_core()
    assert core.next_event_time() is None and core.poll() == []
    clock.t = 5.0
    core.add_request(req("a", 10, 1))
    assert core.next_event_time() == 5.0
    clock.t = 7.0
    (out,) = core.poll()
    assert steps[0][2] == 5.0 and out.timings is not None
    assert out.timings["e2e_s"] == pytest.approx(roofline.prefill_time(10))


def test_poll_bounds_the_catch_up_work() -> None:
    core, clock, _, steps = sim_core()
    core.max_steps_per_poll = 3
    core.add_request(req("a", 10, 50))
    clock.t = 100.0
    core.poll()
    assert len(steps) == 3


class MeasuredRunner:
    """A "real" runner: the time passes inside execute and it reports 0 ("elapsed")."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def execute(self, batch: ScheduledBatch) -> StepResult:
        self.clock.t += 0.01
        return StepResult({s.seq_id: [9] for s in batch.seqs if s.sample}, 0.0)


def test_a_real_runner_step_ends_when_execute_returns() -> None:
    clock = ManualClock()
    core = EngineCore(EngineConfig(num_gpu_blocks=64), MeasuredRunner(clock), clock)
    core.add_request(req("a", 10, 3))
    outs = []
    for _ in range(10):
        outs += core.poll()
    assert [o.token_ids for o in outs] == [[9], [9], [9]]
    timings = outs[-1].timings
    assert timings is not None
    assert timings["ttft_s"] == pytest.approx(0.01) and timings["e2e_s"] == pytest.approx(0.03)


def test_in_real_time_one_poll_runs_one_step_and_returns_its_outputs() -> None:
    """The torch engine's loop: a step starts at the clock, its tokens come back at once."""
    clock = ManualClock(10.0)
    core = EngineCore(EngineConfig(num_gpu_blocks=64), MeasuredRunner(clock), clock, realtime=True)
    core.add_request(req("a", 10, 3), at=9.0)  # sent a second before the engine saw it
    assert [o.token_ids for o in core.poll()] == [[9]] and clock.t == pytest.approx(10.01)
    assert core.next_event_time() == pytest.approx(10.01)
    assert [o.token_ids for o in core.poll()] == [[9]]
    last = core.poll()
    assert last[-1].finish_reason == "length" and core.next_event_time() is None
    timings = last[-1].timings
    assert timings is not None
    assert timings["queue_s"] == pytest.approx(1.0)  # scheduled when the engine got it
    assert timings["ttft_s"] == pytest.approx(1.01) and timings["e2e_s"] == pytest.approx(1.03)
    core.add_request(req("b", 10, 100))
    core.abort_all()
    assert not core.has_unfinished() and core.poll() == []


def stall(chunked: bool) -> tuple[float, float, EngineCore, RooflineModel, list[Step]]:
    """32 chat users decoding when a 16k-token prompt arrives; returns the longest gap
    between two tokens of a decoding user while the long prompt prefills, and its TTFT."""
    # unchunked, the budget is max_model_len (vLLM's rule, see SchedulerLimits)
    core, clock, roofline, steps = sim_core(
        max_num_batched_tokens=2048 if chunked else 32768, enable_chunked_prefill=chunked
    )
    for i in range(32):
        core.add_request(req(f"chat{i}", 128, 400))
    for _ in range(10):  # until a step of 32 decodes is in flight
        run_events(core, clock, max_events=1, must_end=False)
        if len(steps[-1][0].seqs) == 32 and all(s.is_decode for s in steps[-1][0].seqs):
            break
    else:
        raise AssertionError("the chat users never all decoded")
    core.add_request(req("long", 16384, 1))
    first = len(steps)
    got = run_events(core, clock, stop="long")
    long_steps = steps[first - 1 :]  # the step in flight when it arrived, and the rest
    times = [t for t, o in got if o.request_id == "chat0"]
    worst_gap = max(b - a for a, b in itertools.pairwise(times))
    assert worst_gap == pytest.approx(max(e - s for _, _, s, e in long_steps[1:]))
    ttft = next(o for _, o in got if o.request_id == "long").timings["ttft_s"]  # type: ignore[index]
    return worst_gap, ttft, core, roofline, long_steps


def test_chunked_prefill_bounds_the_stall_of_a_long_prompt() -> None:
    worst, ttft, _, roofline, steps = stall(chunked=True)
    chunks = [s.num_tokens for b, _, _, _ in steps for s in b.seqs if s.request_id == "long"]
    assert sum(chunks) == 16384 and max(chunks) == 2048 - 32 and len(chunks) == 9
    # bound: one step of max_num_batched_tokens tokens, the chunk at the deepest context
    contexts = max(s.start_pos for b, _, _, _ in steps for s in b.seqs if s.is_decode)
    bound = roofline.step_time([(1, contexts, True)] * 32 + [(2048 - 32, 16384 - (2048 - 32), False)])
    assert worst <= bound
    assert ttft > roofline.prefill_time(16384)  # the price: the long prompt waits longer


def test_without_chunking_the_stall_is_the_whole_prefill() -> None:
    worst, _ttft, _, roofline, steps = stall(chunked=False)
    (big,) = [(b, s, e) for b, _, s, e in steps if any(x.request_id == "long" for x in b.seqs)]
    batch, start, end = big
    assert [x.num_tokens for x in batch.seqs if x.request_id == "long"] == [16384]
    assert sum(x.is_decode for x in batch.seqs) == 32  # decodes wait inside the long step
    whole = roofline.step_time((x.num_tokens, x.start_pos, x.sample) for x in batch.seqs)
    assert worst == pytest.approx(end - start) == pytest.approx(whole)
    assert roofline.prefill_time(16384) <= worst <= roofline.prefill_time(16384) + roofline.decode_time(32, 600)
    chunked_worst, *_ = stall(chunked=True)
    assert worst > 5 * chunked_worst


def test_without_chunking_eight_1k_prompts_run_in_one_8k_step() -> None:
    # vLLM V1 without chunked prefill: whole prompts share a step up to the budget (which
    # is max_model_len), so eight simultaneous 1k-token prompts are one long step
    core, clock, roofline, steps = sim_core(max_num_batched_tokens=32768, enable_chunked_prefill=False)
    for i in range(8):
        core.add_request(req(f"p{i}", 1024, 2))
    got = run_events(core, clock)
    first = steps[0]
    assert [(s.request_id, s.num_tokens, s.start_pos) for s in first[0].seqs] == [(f"p{i}", 1024, 0) for i in range(8)]
    assert first[0].num_tokens == 8192
    eight = roofline.step_time([(1024, 0, True)] * 8)
    assert first[3] - first[2] == pytest.approx(eight)
    # the step's time is that of an 8k-token prefill: the GEMMs of 8,192 tokens, one read
    # of the weights; attention is over 1k contexts, so a bit less than one 8k prompt
    assert roofline.prefill_time(1024) * 6 < eight <= roofline.prefill_time(8192)
    ttfts = [o.timings["ttft_s"] for _, o in got if o.timings]  # type: ignore[index]
    assert len(ttfts) == 8 and ttfts == [pytest.approx(eight)] * 8
    assert len(steps) == 2  # the prefill step, then one decode step of all eight


def test_without_chunking_admission_stops_at_the_first_prompt_that_does_not_fit() -> None:
    core, clock, _, steps = sim_core(max_num_batched_tokens=4096, max_model_len=4096, enable_chunked_prefill=False)
    for i, n in enumerate((1500, 1500, 1500, 100)):
        core.add_request(req(f"p{i}", n, 1))
    run_events(core, clock)
    # 1500 + 1500 fit in 4096; the third does not, and the 100-token prompt behind it
    # does not overtake it (FIFO)
    assert [[s.request_id for s in b.seqs] for b, *_ in steps] == [["p0", "p1"], ["p2", "p3"]]
    assert all(b.num_tokens <= 4096 for b, *_ in steps)
