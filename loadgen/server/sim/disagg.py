"""Prefill/decode disaggregation as deployed: prefill pools, decode pools, KV links.

The flow follows vLLM's P/D proxy and KV connectors (xPyD: ``P`` prefill engines and ``D``
decode engines, each its own scheduler, KV cache and GPUs): the proxy picks a prefill and a
decode engine (:data:`PD_ROUTERS`); the prefill engine runs the request with
``max_tokens = 1`` and holds its KV; the decode engine matches its own prefix cache and
reserves blocks; only the missing tokens cross the links (shared fairly:
:class:`~loadgen.server.sim.kv_link.SharedLink`); the decode engine computes the last prompt
token and streams every token, so **TTFT is the decode side's first token**. Timings merge
both sides (``kv_transfer_s`` in between).

Docs: docs/server.md, "Disaggregation, replicas and routing".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loadgen.errors import PromptTooLong
from loadgen.server.engine.core import Clock, EngineCore, poll_due
from loadgen.server.engine.interface import EngineRequest, EngineStats, TokenOutput, sum_stats
from loadgen.server.sim.kv_link import SharedLink

__all__ = ["PD_ROUTERS", "DisaggCore"]

PD_ROUTERS = ("round-robin", "least-loaded")


@dataclass(slots=True)
class _Pending:
    request: EngineRequest
    arrival_s: float
    prefill: int  # index of its prefill engine
    target: int  # round-robin: the decode engine chosen on arrival (least-loaded: -1)
    decode: int = -1  # index of its decode engine, once reserved
    transfer_tokens: int = 0  # prompt tokens whose KV crosses the link
    prefill_done_s: float = math.nan
    reserved_s: float = math.nan
    kv_arrived_s: float = math.nan
    prefill_timings: dict[str, float] | None = None


class DisaggCore:
    """Implements :class:`~loadgen.server.engine.core.Core` over prefill and decode
    :class:`EngineCore` lists (see the module docstring).

    ``kv_transfer_s(num_tokens, prefill_index, decode_index)`` gives the modelled
    time of a transfer of ``num_tokens`` tokens' KV between two engines alone on the
    link; it is multiplied by ``time_scale`` like step times. ``router``: one of
    :data:`PD_ROUTERS`. ``num_transfers``, ``transferred_tokens`` and
    ``transfer_seconds`` (prefill end to KV arrival, summed) count finished transfers.
    """

    def __init__(
        self,
        prefill: EngineCore | Sequence[EngineCore],
        decode: EngineCore | Sequence[EngineCore],
        kv_transfer_s: Callable[[int, int, int], float],
        clock: Clock,
        *,
        time_scale: float = 1.0,
        max_events_per_poll: int = 128,
        router: str = "round-robin",
    ) -> None:
        if router not in PD_ROUTERS:
            raise ValueError(f"unknown P/D router {router!r}; valid: {', '.join(PD_ROUTERS)}")
        self.prefills = [prefill] if isinstance(prefill, EngineCore) else list(prefill)
        self.decodes = [decode] if isinstance(decode, EngineCore) else list(decode)
        self.kv_transfer_s = kv_transfer_s
        self.clock = clock
        self.time_scale = time_scale
        self.max_events_per_poll = max_events_per_poll
        self._pending: dict[str, _Pending] = {}
        self._to_reserve: deque[str] = deque()  # prefilled, waiting for decode blocks (FIFO)
        self.router = router
        self._links = [SharedLink() for _ in self.prefills]  # each prefill engine's links
        self._next_prefill = 0
        self._next_decode = 0
        self.num_transfers = 0
        self.transferred_tokens = 0
        self.transfer_seconds = 0.0

    @property
    def prefill(self) -> EngineCore:
        """The first prefill engine (1P1D: the only one)."""
        return self.prefills[0]

    @property
    def decode(self) -> EngineCore:
        """The first decode engine (1P1D: the only one)."""
        return self.decodes[0]

    @property
    def cores(self) -> list[EngineCore]:
        """Every engine, prefill ones first."""
        return [*self.prefills, *self.decodes]

    # ------------------------------------------------------------------ inputs
    def add_request(self, request: EngineRequest, *, at: float | None = None) -> None:
        """Queue a request in a prefill engine (checked against the decode pool too)."""
        now = self.clock() if at is None else at
        total = len(request.prompt_token_ids) + request.params.max_tokens
        dec = self.decode.scheduler
        if total > dec.config.max_model_len:
            raise PromptTooLong(
                f"prompt ({len(request.prompt_token_ids)} tokens) + max_tokens "
                f"({request.params.max_tokens}) = {total} exceeds the context length of "
                f"{dec.config.max_model_len} tokens"
            )
        if dec.kv.blocks_for(total) > dec.config.num_gpu_blocks:
            raise PromptTooLong(
                f"prompt + max_tokens = {total} tokens exceeds the decode "
                f"pool's KV cache ({dec.config.num_gpu_blocks * dec.config.block_size} tokens)"
            )
        target = -1
        if self.router == "round-robin":
            index = self._next_prefill
            target = self._next_decode
        else:
            index = min(range(len(self.prefills)), key=lambda p: self._prefill_load(p))
        params = replace(request.params, max_tokens=1, min_tokens=0)
        self.prefills[index].add_request(
            EngineRequest(request.request_id, request.prompt_token_ids, params), at=now, hold_kv=True
        )
        if target >= 0:  # advance the round-robin pointers only once the request is accepted
            self._next_prefill = (index + 1) % len(self.prefills)
            self._next_decode = (target + 1) % len(self.decodes)
        self._pending[request.request_id] = _Pending(request, now, index, target)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is (either side, the link) and free its blocks."""
        record = self._pending.pop(request_id, None)
        if record is None:
            return False
        if request_id in self._to_reserve:
            self._to_reserve.remove(request_id)
        self._links[record.prefill].cancel(request_id, self.clock())  # its share goes to the others
        self.prefills[record.prefill].abort(request_id)  # queued, running or holding its KV
        if record.decode >= 0:
            self.decodes[record.decode].abort(request_id)  # reserved or running
        return True

    def has_unfinished(self) -> bool:
        """Whether any request is in a pool, waiting for blocks, or on a link."""
        return bool(self._pending)

    # ------------------------------------------------------------------ events
    def next_event_time(self) -> float | None:
        """The earliest of the engines' next events and the next transfer's end."""
        times = [t for t in (c.next_event_time() for c in self.cores) if t is not None]
        times += [t for t in (link.next_done() for link in self._links) if t is not None]
        return min(times) if times else None

    def poll(self, now: float | None = None) -> list[TokenOutput]:
        """Process every event due at ``now`` in time order (bounded); return outputs."""
        return poll_due(self, self.clock() if now is None else now, self.max_events_per_poll)

    def process_event(self) -> list[TokenOutput]:
        """The earliest event: a transfer that ends, else a decode step, else a prefill step."""
        t = self.next_event_time()
        for p, link in enumerate(self._links):
            if t is not None and link.next_done() == t:
                self._finish_transfers(p, t)
                return []
        for core in self.decodes:
            if core.next_event_time() == t:
                return self._from_decode(core.process_event(), core.last_step_end)
        for core in self.prefills:
            if core.next_event_time() == t:
                return self._from_prefill(core.process_event(), core.last_step_end)
        return []

    def _from_prefill(self, outs: list[TokenOutput], t: float) -> list[TokenOutput]:
        for out in outs:
            record = self._pending.get(out.request_id)
            if record is None or out.finish_reason is None:
                continue
            if out.finish_reason == "abort":
                self._pending.pop(out.request_id, None)
                continue
            record.prefill_done_s = t
            record.prefill_timings = out.timings
            self._to_reserve.append(out.request_id)
        self._reserve(t)
        return []  # the proxy discards the prefill engine's token

    def _reserve(self, t: float) -> None:
        """Reserve decode blocks for prefilled requests, in order, and start their transfers.

        Round-robin: each request waits for its own decode engine, behind the requests
        before it for that engine; least-loaded: the first request that no engine has
        room for holds back the rest."""
        blocked: set[int] = set()  # round-robin: decode engines out of room in this pass
        for rid in list(self._to_reserve):
            record = self._pending[rid]
            req = record.request
            at = max(t, record.prefill_done_s)
            if record.target >= 0:
                order = [] if record.target in blocked else [record.target]
            else:
                order = sorted(range(len(self.decodes)), key=lambda d: self._load(d))
            local: int | None = None
            for d in order:
                local = self.decodes[d].reserve(req, at=at, num_external_tokens=len(req.prompt_token_ids))
                if local is not None:
                    break
            if local is None:
                if record.target < 0:
                    return  # no decode engine has room: wait for one to free blocks (FIFO)
                blocked.add(record.target)
                continue
            self._to_reserve.remove(rid)
            record.decode = d
            record.reserved_s = at
            record.transfer_tokens = len(req.prompt_token_ids) - local
            p = record.prefill
            work = self.kv_transfer_s(record.transfer_tokens, p, d) * self.time_scale
            self._links[p].start(rid, work, at)

    def _load(self, d: int) -> int:
        sched = self.decodes[d].scheduler
        return len(sched.running) + len(sched.waiting) + sched.num_receiving

    def _prefill_load(self, p: int) -> int:
        return sum(1 for r in self._pending.values() if r.prefill == p and r.decode < 0)

    def _finish_transfers(self, p: int, done: float) -> None:
        for rid in self._links[p].pop_done(done):
            record = self._pending.get(rid)
            if record is None:
                continue  # aborted in flight
            self.num_transfers += 1
            self.transferred_tokens += record.transfer_tokens
            record.kv_arrived_s = done
            self.transfer_seconds += done - record.prefill_done_s
            self.prefills[record.prefill].release(rid, at=done)  # the KV was read: free it
            self.decodes[record.decode].kv_received(rid, at=done)

    def _from_decode(self, outs: list[TokenOutput], t: float) -> list[TokenOutput]:
        for out in outs:
            if out.finish_reason is not None:
                record = self._pending.pop(out.request_id, None)
                if record is not None:
                    out.timings = self._merge(record, out.timings, t)
        self._reserve(t)  # the decode side may have freed blocks
        return outs

    @staticmethod
    def _merge(record: _Pending, dec: dict[str, float] | None, finish_s: float) -> dict[str, float]:
        pre = record.prefill_timings or {}
        dec = dec or {}
        merged = {k: v for k, v in pre.items() if k in ("queue_s", "prefill_s")}
        first = record.reserved_s + dec.get("ttft_s", math.nan)  # the decode side's first token
        merged["kv_transfer_s"] = record.kv_arrived_s - record.prefill_done_s
        merged["ttft_s"] = first - record.arrival_s
        merged["decode_s"] = finish_s - first
        merged["e2e_s"] = finish_s - record.arrival_s
        merged["decode_steps"] = dec.get("decode_steps", 0.0)
        merged["preemptions"] = pre.get("preemptions", 0.0) + dec.get("preemptions", 0.0)
        return merged

    def stats(self) -> EngineStats:
        """All engines together: KV usage over all blocks, prompt and cache counters from
        the prefill side, requests waiting for decode blocks or on a link as waiting."""
        pre = [c.stats() for c in self.prefills]
        dec = [c.stats() for c in self.decodes]
        used = sum(c.scheduler.kv.num_used_blocks for c in self.cores)
        total = sum(c.scheduler.kv.num_blocks for c in self.cores)
        return EngineStats(
            running=sum(s.running for s in pre + dec),
            waiting=sum(s.waiting for s in pre) + sum(s.waiting for s in dec) + len(self._to_reserve),
            kv_usage=used / total,
            prefix_cache_queries=sum(s.prefix_cache_queries for s in pre),
            prefix_cache_hits=sum(s.prefix_cache_hits for s in pre),
            prefix_cache_preempted_queries=sum(s.prefix_cache_preempted_queries for s in pre),
            prefix_cache_preempted_hits=sum(s.prefix_cache_preempted_hits for s in pre),
            preemptions=sum(s.preemptions for s in pre + dec),
            prompt_tokens=sum(s.prompt_tokens for s in pre),
            generation_tokens=sum(s.generation_tokens for s in dec),
            steps=sum(s.steps for s in pre + dec),
            busy_s=sum(s.busy_s for s in pre + dec),
            **_spec_counters(pre + dec),
        )


def _spec_counters(parts: list[EngineStats]) -> dict[str, Any]:
    """The speculative-decoding counters of ``parts`` summed (the decode side verifies)."""
    total = sum_stats(parts)
    names = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens", "spec_accepted_per_position")
    return {name: getattr(total, name) for name in names}
