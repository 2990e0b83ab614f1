"""Several engine replicas behind one API, and the routers that choose between them.

``loadgen serve --replicas N --router POLICY`` runs N independent engines (each with its
own scheduler, KV cache and simulated GPUs) behind one OpenAI-compatible API, as a
data-parallel deployment or a router in front of N ``vllm serve`` processes does, so that
deployments of equal GPU count can be compared. Routers (:data:`ROUTERS`): ``round-robin``,
``least-loaded`` and ``prefix-aware`` (longest cached prefix, unless fewer than
:data:`MATCH_THRESHOLD` of the blocks match or the loads differ by more than
:data:`BALANCE_ABS` and :data:`BALANCE_REL`). :class:`ReplicatedEngine` implements
:class:`~loadgen.server.engine.interface.AsyncEngine`; ``replica_stats()`` feeds
``/metrics``' ``engine="i"`` labels.

Docs: docs/server.md, "Disaggregation, replicas and routing".
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any

from loadgen.errors import ConfigError
from loadgen.server.engine.interface import AsyncEngine, EngineRequest, EngineStats, TokenOutput, sum_stats

__all__ = ["BALANCE_ABS", "BALANCE_REL", "MATCH_THRESHOLD", "ROUTERS", "ReplicatedEngine", "Router", "block_hashes"]

ROUTERS = ("round-robin", "least-loaded", "prefix-aware")
MATCH_THRESHOLD = 0.5  # prefix-aware: least share of the prompt's blocks that must match
BALANCE_ABS = 32  # prefix-aware: loads further apart than this (and BALANCE_REL) ...
BALANCE_REL = 1.5  # ... make it route to the least-loaded replica instead


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[bytes]:
    """Chained hashes of the prompt's full blocks: block ``i``'s hash covers blocks
    ``0..i``, so equal hashes mean equal prefixes (as in vLLM's prefix cache)."""
    out: list[bytes] = []
    parent = b""
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        h = hashlib.blake2b(parent, digest_size=16)
        h.update(b",".join(str(t).encode() for t in token_ids[start : start + block_size]))
        parent = h.digest()
        out.append(parent)
    return out


class Router:
    """Chooses a replica for each request; counts what each replica has outstanding."""

    def __init__(self, policy: str, replicas: int, *, block_size: int = 16, cache_blocks: int = 1 << 20) -> None:
        if policy not in ROUTERS:
            raise ConfigError(f"unknown router {policy!r}; valid: {', '.join(ROUTERS)}", key="--router")
        self.policy = policy
        self.n = replicas
        self.block_size = block_size
        self.cache_blocks = cache_blocks
        self.outstanding = [0] * replicas
        self.routed = [0] * replicas
        self._next = 0
        self._trees: list[OrderedDict[bytes, None]] = [OrderedDict() for _ in range(replicas)]

    def choose(self, token_ids: Sequence[int]) -> int:
        """The replica for a prompt (and remember the choice)."""
        if self.policy == "round-robin":
            index = self._next
        elif self.policy == "least-loaded":
            index = self._least_loaded()
        else:
            index = self._prefix_aware(token_ids)
        self._next = (index + 1) % self.n
        self.routed[index] += 1
        return index

    def _least_loaded(self) -> int:
        order = [(self._next + k) % self.n for k in range(self.n)]
        return min(order, key=lambda i: self.outstanding[i])

    def _prefix_aware(self, token_ids: Sequence[int]) -> int:
        hashes = block_hashes(token_ids, self.block_size)
        low, high = min(self.outstanding), max(self.outstanding)
        balanced = not (high - low > BALANCE_ABS and high > BALANCE_REL * low)
        index = self._least_loaded()
        if hashes and balanced:
            matches = [self._matched(tree, hashes) for tree in self._trees]
            best = max(matches)
            if best >= MATCH_THRESHOLD * len(hashes):
                candidates = [i for i in range(self.n) if matches[i] == best]
                index = min(candidates, key=lambda i: (self.outstanding[i], (i - self._next) % self.n))
        tree = self._trees[index]
        for h in hashes:
            tree[h] = None
            tree.move_to_end(h)
        while len(tree) > self.cache_blocks:
            tree.popitem(last=False)
        return index

    @staticmethod
    def _matched(tree: OrderedDict[bytes, None], hashes: list[bytes]) -> int:
        n = 0
        for h in hashes:
            if h not in tree:
                break
            n += 1
        return n


class ReplicatedEngine:
    """N engines behind one :class:`AsyncEngine` interface, one :class:`Router` choosing."""

    def __init__(self, engines: Sequence[AsyncEngine], router: Router) -> None:
        if not engines:
            raise ConfigError("needs at least one replica", key="--replicas")
        self.engines = list(engines)
        self.router = router
        self.max_model_len = min(e.max_model_len for e in self.engines)
        self.vocab_size = self.engines[0].vocab_size
        self.model_name = self.engines[0].model_name
        self.supports_pooling = all(getattr(e, "supports_pooling", False) for e in self.engines)

    async def start(self) -> None:
        for engine in self.engines:
            await engine.start()

    async def stop(self) -> None:
        for engine in self.engines:
            await engine.stop()

    async def generate(self, request: EngineRequest) -> AsyncIterator[TokenOutput]:
        index = self.router.choose(request.prompt_token_ids)
        outputs = self.engines[index].generate(request)
        self.router.outstanding[index] += 1
        try:
            async for out in outputs:
                if out.finish_reason is not None and out.timings is not None:
                    out.timings["engine"] = float(index)  # /metrics labels its histograms engine="i"
                yield out
        finally:
            self.router.outstanding[index] -= 1
            aclose = getattr(outputs, "aclose", None)
            if aclose is not None:  # closing ours early (a disconnect) aborts theirs
                await aclose()

    def gpu_telemetry(self) -> list[Any]:
        """Every replica's GPU samples, replica after replica (see the sim's telemetry)."""
        out: list[Any] = []
        for engine in self.engines:
            sample = getattr(engine, "gpu_telemetry", None)
            if sample is not None:
                out.extend(sample())
        return out

    def replica_stats(self) -> list[EngineStats]:
        """Each replica's own gauges and counters, in replica order."""
        return [e.stats() for e in self.engines]

    def stats(self) -> EngineStats:
        """The replicas' counters and gauges summed, every field (KV usage: their mean)."""
        parts = self.replica_stats()
        return sum_stats(parts)
