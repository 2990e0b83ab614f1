"""Paged KV-cache block manager with prefix caching (in the style of vLLM v1).

The KV cache is a pool of ``num_blocks`` blocks of ``block_size`` token slots; each sequence
owns a *block table* (token ``i`` in block ``table[i // block_size]``). Full blocks are
registered under their chained hash (:func:`chain_hash`: equal hashes mean equal whole
prefixes) as soon as they are allocated, and reused by later sequences (reference counts).
Every free block, cached or not, sits in one LRU queue; a finished sequence's blocks are
freed last first, unhashed ones to the queue's head, hashed ones to its tail, as current
vLLM's ``BlockPool.free_blocks`` does. Only full blocks are ever cached.

Docs: docs/server.md, "The KV cache and prefix caching".
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["ROOT_HASH", "CachedPrefix", "KVCacheManager", "chain_hash"]

ROOT_HASH = 0x5EED_CAFE  # parent hash of a sequence's first block


def chain_hash(parent: int, token_ids: Sequence[int]) -> int:
    """Hash of one full block given its parent's hash (``ROOT_HASH`` for the first)."""
    return hash((parent, tuple(token_ids)))


@dataclass(slots=True)
class CachedPrefix:
    """Result of a prefix lookup: cached blocks covering the first ``num_tokens`` tokens."""

    block_ids: list[int] = field(default_factory=list)
    block_size: int = 16

    @property
    def num_tokens(self) -> int:
        return len(self.block_ids) * self.block_size


class KVCacheManager:
    """Allocates KV blocks to sequences; optionally caches full blocks by prefix hash.

    Counters ``prefix_cache_queries`` / ``prefix_cache_hits`` are in tokens and are
    updated by :meth:`record_lookup` (the scheduler calls it once per admission); the
    lookups of requests that were preempted before are counted apart, in
    ``prefix_cache_preempted_queries`` / ``prefix_cache_preempted_hits`` (as vLLM does, so
    that a victim finding its own blocks again does not raise the hit rate).
    """

    def __init__(self, num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = False) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        # every block with ref 0, cached or not, in eviction order (head first)
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._by_hash: dict[int, int] = {}
        self._tables: dict[int, list[int]] = {}
        self._num_hashed: dict[int, int] = {}  # seq -> leading blocks already registered
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.prefix_cache_preempted_queries = 0
        self.prefix_cache_preempted_hits = 0

    # ------------------------------------------------------------------ queries
    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be allocated now (never cached or cached but unused)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks currently registered in the prefix cache (in use or cached-free)."""
        return len(self._by_hash)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by at least one sequence, 0..1."""
        return self.num_used_blocks / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def block_table(self, seq_id: int) -> list[int]:
        """The sequence's block table (the live list: do not modify)."""
        return self._tables.get(seq_id, [])

    def has_seq(self, seq_id: int) -> bool:
        """Whether the sequence holds a block table."""
        return seq_id in self._tables

    # ------------------------------------------------------------------ prefix cache
    def find_cached_prefix(self, block_hashes: Sequence[int]) -> CachedPrefix:
        """The longest run of leading blocks found in the cache (no counters touched)."""
        found = CachedPrefix(block_size=self.block_size)
        if not self.enable_prefix_caching:
            return found
        for h in block_hashes:
            block = self._by_hash.get(h)
            if block is None:
                break
            found.block_ids.append(block)
        return found

    def record_lookup(self, queried_tokens: int, hit_tokens: int, *, preempted: bool = False) -> None:
        """Count one prefix lookup: tokens looked up and tokens found cached; a request
        preempted before is counted apart."""
        if preempted:
            self.prefix_cache_preempted_queries += queried_tokens
            self.prefix_cache_preempted_hits += hit_tokens
        else:
            self.prefix_cache_queries += queried_tokens
            self.prefix_cache_hits += hit_tokens

    def free_queue(self) -> list[int]:
        """The free blocks in eviction order, next evicted first (for tests)."""
        return list(self._free)

    def cache_full_blocks(self, seq_id: int, block_hashes: Sequence[int], num_computed_tokens: int) -> None:
        """Register under their hashes the sequence's full blocks among its first
        ``num_computed_tokens`` tokens: computed, or being computed by the step just
        scheduled (vLLM caches blocks when it allocates them for a step).

        ``block_hashes[i]`` is the chained hash of the sequence's block ``i``; it must
        cover at least ``num_computed_tokens // block_size`` blocks.
        """
        if not self.enable_prefix_caching:
            return
        table = self._tables[seq_id]
        done = self._num_hashed.get(seq_id, 0)
        full = min(num_computed_tokens // self.block_size, len(table))
        for i in range(done, full):
            block, h = table[i], block_hashes[i]
            if self._hash[block] is None and h not in self._by_hash:
                self._hash[block] = h
                self._by_hash[h] = block
            # else: an identical block was computed concurrently; keep this one private
        if full > done:
            self._num_hashed[seq_id] = full

    # ------------------------------------------------------------------ allocation
    def can_allocate(self, seq_id: int, num_tokens: int, prefix: CachedPrefix | None = None) -> bool:
        """Whether :meth:`allocate` with the same arguments would succeed."""
        return self._shortfall(seq_id, num_tokens, prefix) <= 0

    def _shortfall(self, seq_id: int, num_tokens: int, prefix: CachedPrefix | None) -> int:
        table = self._tables.get(seq_id)
        have = len(table) if table is not None else 0
        reused = prefix.block_ids if (prefix is not None and table is None) else []
        new = self.blocks_for(num_tokens) - have - len(reused)
        # reusing a cached-free block takes it out of the allocatable pool too
        taken = sum(1 for b in reused if self._ref[b] == 0)
        return max(new, 0) + taken - self.num_free_blocks

    def allocate(self, seq_id: int, num_tokens: int, prefix: CachedPrefix | None = None) -> bool:
        """Grow the sequence's table to hold ``num_tokens`` tokens; False if blocks run out.

        On a sequence's first allocation, ``prefix`` (from :meth:`find_cached_prefix`)
        becomes the start of its table. Nothing changes when False is returned.
        """
        table = self._tables.get(seq_id)
        if table is not None and len(table) * self.block_size >= num_tokens:
            return True  # the common decode step: the last block still has room
        if self._shortfall(seq_id, num_tokens, prefix) > 0:
            return False
        if table is None:
            table = self._tables[seq_id] = []
            if prefix is not None and prefix.block_ids:
                for block in prefix.block_ids:
                    if self._ref[block] == 0:
                        del self._free[block]
                    self._ref[block] += 1
                    table.append(block)
                self._num_hashed[seq_id] = len(prefix.block_ids)
        for _ in range(self.blocks_for(num_tokens) - len(table)):
            table.append(self._take_block())
        return True

    def _take_block(self) -> int:
        block, _ = self._free.popitem(last=False)
        h = self._hash[block]
        if h is not None:  # evict it from the prefix cache
            del self._by_hash[h]
            self._hash[block] = None
        self._ref[block] = 1
        return block

    def free(self, seq_id: int) -> None:
        """Release the sequence's blocks; cached ones stay reusable until evicted."""
        table = self._tables.pop(seq_id, None)
        self._num_hashed.pop(seq_id, None)
        if table is None:
            return
        # tail first (the end of a sequence is the least likely to be shared); with prefix
        # caching on, blocks that were never hashed go to the head of the queue, in that
        # order, and hashed ones to the tail (vLLM's BlockPool.free_blocks)
        unhashed: list[int] = []
        for block in reversed(table):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                if self.enable_prefix_caching and self._hash[block] is None:
                    unhashed.append(block)
                else:
                    self._free[block] = None
        for block in reversed(unhashed):
            self._free[block] = None
            self._free.move_to_end(block, last=False)

    # ------------------------------------------------------------------ checks
    def check_consistency(self) -> None:
        """Raise ``RuntimeError`` if reference counts and pools disagree (for tests)."""
        refs = [0] * self.num_blocks
        for table in self._tables.values():
            for block in table:
                refs[block] += 1
        if refs != self._ref:
            raise RuntimeError("reference counts do not match the block tables")
        for block in range(self.num_blocks):
            if (refs[block] == 0) != (block in self._free):
                raise RuntimeError(f"block {block}: free-queue membership disagrees with ref count")
        for h, block in self._by_hash.items():
            if self._hash[block] != h:
                raise RuntimeError(f"block {block}: hash map out of sync")
