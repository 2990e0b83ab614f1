"""Prefill/decode disaggregation: two engine cores joined by a KV-transfer link.

A request is prefilled in the *prefill pool* (its own GPUs, scheduler and KV cache),
which also samples its first token. Its prompt's KV then crosses the link — modelled as
one link used by one transfer at a time, each taking ``prompt tokens * KV bytes per
token / link bandwidth`` — and the request joins the *decode pool* with that KV in place
(``num_external_tokens``), where it decodes the remaining tokens. A first token that
ends the request (EOS, a stop token, or ``max_tokens == 1``) finishes it in the prefill
pool. A request preempted in the decode pool recomputes its KV there.

Timings merge both pools: ``queue_s``, ``prefill_s`` and ``ttft_s`` come from the
prefill pool, ``kv_transfer_s`` is the wait for the link (queueing included), and
``decode_s`` / ``e2e_s`` end at the decode pool's last token.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, replace
from typing import Callable

from loadgen.errors import PromptTooLong
from loadgen.server.engine.core import Clock, EngineCore, poll_due
from loadgen.server.engine.interface import EngineRequest, EngineStats, TokenOutput

__all__ = ["DisaggCore"]


@dataclass(slots=True)
class _Pending:
    request: EngineRequest
    arrival_s: float
    ticket: int
    first_token_ids: tuple[int, ...] = ()
    transfer_s: float = 0.0
    prefill_timings: dict[str, float] | None = None


class DisaggCore:
    """Implements :class:`~loadgen.server.engine.core.Core` over two :class:`EngineCore`.

    ``kv_transfer_s(num_tokens)`` gives the modelled transfer time of a prompt's KV; it is
    multiplied by ``time_scale`` like step times.
    """

    def __init__(self, prefill: EngineCore, decode: EngineCore,
                 kv_transfer_s: Callable[[int], float], clock: Clock, *,
                 time_scale: float = 1.0, max_events_per_poll: int = 128) -> None:
        self.prefill, self.decode = prefill, decode
        self.kv_transfer_s = kv_transfer_s
        self.clock = clock
        self.time_scale = time_scale
        self.max_events_per_poll = max_events_per_poll
        self._pending: dict[str, _Pending] = {}
        self._transfers: list[tuple[float, int, str]] = []  # (done at, ticket, request id)
        self._tickets = itertools.count()
        self._link_free_at = -math.inf
        self.num_transfers = 0
        self.transfer_seconds = 0.0

    # ------------------------------------------------------------------ inputs
    def add_request(self, request: EngineRequest, *, at: float | None = None) -> None:
        """Queue a request in the prefill pool (checked against the decode pool too)."""
        now = self.clock() if at is None else at
        total = len(request.prompt_token_ids) + request.params.max_tokens
        dec = self.decode.scheduler
        if total > dec.config.max_model_len:
            raise PromptTooLong(
                f"prompt ({len(request.prompt_token_ids)} tokens) + max_tokens "
                f"({request.params.max_tokens}) = {total} exceeds the context length of "
                f"{dec.config.max_model_len} tokens")
        if dec.kv.blocks_for(total) > dec.config.num_gpu_blocks:
            raise PromptTooLong(f"prompt + max_tokens = {total} tokens exceeds the decode "
                                f"pool's KV cache ({dec.config.num_gpu_blocks * dec.config.block_size} tokens)")
        params = replace(request.params, max_tokens=1)
        self.prefill.add_request(EngineRequest(request.request_id, request.prompt_token_ids, params), at=now)
        self._pending[request.request_id] = _Pending(request, now, next(self._tickets))

    def abort(self, request_id: str) -> bool:
        """Drop a request in either pool or on the link; False if unknown."""
        record = self._pending.pop(request_id, None)
        if self.prefill.abort(request_id) or self.decode.abort(request_id):
            return True
        return record is not None  # aborted while its KV was in flight

    def has_unfinished(self) -> bool:
        """Whether any request is in a pool or on the link."""
        return bool(self._pending)

    # ------------------------------------------------------------------ events
    def next_event_time(self) -> float | None:
        """The earliest of both pools' next events and the next transfer's end."""
        times = [t for t in (self.prefill.next_event_time(), self.decode.next_event_time())
                 if t is not None]
        if self._transfers:
            times.append(self._transfers[0][0])
        return min(times) if times else None

    def poll(self, now: float | None = None) -> list[TokenOutput]:
        """Process every event due at ``now`` in time order (bounded); return outputs."""
        return poll_due(self, self.clock() if now is None else now, self.max_events_per_poll)

    def process_event(self) -> list[TokenOutput]:
        """The earliest event: a transfer that ends, else a step of the decode pool, else
        one of the prefill pool."""
        t = self.next_event_time()
        if self._transfers and self._transfers[0][0] == t:
            self._finish_transfer()
            return []
        if self.decode.next_event_time() == t:
            return self._from_decode(self.decode.process_event())
        return self._from_prefill(self.prefill.process_event())

    def _from_prefill(self, outs: list[TokenOutput]) -> list[TokenOutput]:
        t = self.prefill.last_step_end
        result = []
        for out in outs:
            record = self._pending.get(out.request_id)
            if record is None:
                continue
            if out.finish_reason == "stop" or record.request.params.max_tokens <= 1:
                del self._pending[out.request_id]
                out.timings = self._merge(record, out.timings, None, t)
                result.append(out)
                continue
            record.first_token_ids = tuple(out.token_ids)
            record.prefill_timings = out.timings
            start = max(t, self._link_free_at)
            done = start + self.kv_transfer_s(len(record.request.prompt_token_ids)) * self.time_scale
            self._link_free_at = done
            record.transfer_s = done - t
            heapq.heappush(self._transfers, (done, record.ticket, out.request_id))
            result.append(TokenOutput(out.request_id, out.token_ids,
                                      num_cached_tokens=out.num_cached_tokens))
        return result

    def _finish_transfer(self) -> None:
        done, ticket, request_id = heapq.heappop(self._transfers)
        record = self._pending.get(request_id)
        if record is None or record.ticket != ticket:
            return  # aborted in flight
        self.num_transfers += 1
        self.transfer_seconds += record.transfer_s
        req = record.request
        params = replace(req.params, max_tokens=req.params.max_tokens - 1,
                         min_tokens=max(0, req.params.min_tokens - 1))
        decode_req = EngineRequest(req.request_id, [*req.prompt_token_ids, *record.first_token_ids],
                                   params)
        self.decode.add_request(decode_req, at=done, num_external_tokens=len(req.prompt_token_ids))

    def _from_decode(self, outs: list[TokenOutput]) -> list[TokenOutput]:
        t = self.decode.last_step_end
        for out in outs:
            if out.finish_reason is not None:
                record = self._pending.pop(out.request_id, None)
                if record is not None:
                    out.timings = self._merge(record, record.prefill_timings, out.timings, t)
        return outs

    @staticmethod
    def _merge(record: _Pending, pre: dict[str, float] | None, dec: dict[str, float] | None,
               finish_s: float) -> dict[str, float]:
        pre = pre or {}
        merged = dict(pre)
        first = record.arrival_s + pre.get("ttft_s", 0.0)
        merged["kv_transfer_s"] = record.transfer_s if dec is not None else 0.0
        merged["decode_s"] = finish_s - first
        merged["e2e_s"] = finish_s - record.arrival_s
        if dec is not None:
            merged["decode_steps"] = dec["decode_steps"] + 1.0
            merged["preemptions"] = pre.get("preemptions", 0.0) + dec["preemptions"]
        return merged

    def stats(self) -> EngineStats:
        """Both pools together: KV usage over all blocks, prompt and cache counters from
        the prefill pool (the preempted requests' lookups from both: a request preempted
        in the decode pool is prefilled again there), transfers in flight counted as
        waiting."""
        p, d = self.prefill.stats(), self.decode.stats()
        pk, dk = self.prefill.scheduler.kv, self.decode.scheduler.kv
        return EngineStats(
            running=p.running + d.running, waiting=p.waiting + d.waiting + len(self._transfers),
            kv_usage=(pk.num_used_blocks + dk.num_used_blocks) / (pk.num_blocks + dk.num_blocks),
            prefix_cache_queries=p.prefix_cache_queries, prefix_cache_hits=p.prefix_cache_hits,
            prefix_cache_preempted_queries=(p.prefix_cache_preempted_queries
                                            + d.prefix_cache_preempted_queries),
            prefix_cache_preempted_hits=p.prefix_cache_preempted_hits + d.prefix_cache_preempted_hits,
            preemptions=p.preemptions + d.preemptions, prompt_tokens=p.prompt_tokens,
            generation_tokens=p.generation_tokens + d.generation_tokens, steps=p.steps + d.steps)
