"""The paged KV block manager: allocation, reference counts, prefix cache, LRU eviction."""

from __future__ import annotations

from loadgen.server.engine.interface import SamplingParams
from loadgen.server.engine.kv_cache import ROOT_HASH, KVCacheManager, chain_hash
from loadgen.server.engine.sequence import Sequence


def hashes_of(tokens: list[int], block_size: int = 4) -> list[int]:
    seq = Sequence(0, "r", SamplingParams(), list(tokens), len(tokens), 0.0)
    return seq.update_block_hashes(block_size)


def test_allocate_grows_table_and_free_returns_every_block() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    assert kv.blocks_for(0) == 0 and kv.blocks_for(1) == 1 and kv.blocks_for(4) == 1
    assert kv.blocks_for(5) == 2
    assert kv.allocate(1, 5)
    assert len(kv.block_table(1)) == 2 and kv.num_free_blocks == 6
    assert kv.allocate(1, 8)  # still two blocks
    assert len(kv.block_table(1)) == 2
    assert kv.allocate(1, 9)
    assert len(kv.block_table(1)) == 3
    assert kv.usage == 3 / 8
    kv.check_consistency()
    kv.free(1)
    assert kv.num_free_blocks == 8 and kv.usage == 0.0 and not kv.has_seq(1)
    kv.check_consistency()


def test_failed_allocation_changes_nothing() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=4)
    assert kv.allocate(1, 12)
    assert not kv.can_allocate(2, 8)
    assert not kv.allocate(2, 8)
    assert not kv.has_seq(2) and kv.num_free_blocks == 1
    assert not kv.allocate(1, 20)  # needs two more blocks, one is free
    assert len(kv.block_table(1)) == 3
    kv.check_consistency()


def test_chained_hash_depends_on_the_whole_prefix() -> None:
    a = hashes_of([1, 2, 3, 4, 5, 6, 7, 8, 9])
    b = hashes_of([0, 2, 3, 4, 5, 6, 7, 8])
    assert len(a) == 2  # only full blocks are hashed
    assert a[0] == chain_hash(ROOT_HASH, [1, 2, 3, 4])
    assert a[1] == chain_hash(a[0], [5, 6, 7, 8])
    assert a[1] != b[1]  # same second block, different first block


def test_prefix_hit_shares_blocks_and_counts_references() -> None:
    kv = KVCacheManager(num_blocks=16, block_size=4, enable_prefix_caching=True)
    prompt = list(range(10))  # two full blocks and a partial one
    hashes = hashes_of(prompt)
    assert kv.allocate(1, 10)
    kv.cache_full_blocks(1, hashes, num_computed_tokens=10)
    assert kv.num_cached_blocks == 2  # the partial block is never cached
    hit = kv.find_cached_prefix(hashes)
    assert hit.block_ids == kv.block_table(1)[:2] and hit.num_tokens == 8
    assert kv.allocate(2, 10, hit)
    assert kv.block_table(2)[:2] == kv.block_table(1)[:2]
    assert kv.block_table(2)[2] != kv.block_table(1)[2]
    assert kv.num_used_blocks == 4  # 3 + 1 new
    kv.check_consistency()
    kv.free(1)
    assert kv.num_used_blocks == 3  # shared blocks still held by sequence 2
    kv.free(2)
    assert kv.num_used_blocks == 0 and kv.num_cached_blocks == 2
    kv.check_consistency()


def test_only_computed_blocks_are_cached() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    hashes = hashes_of(list(range(12)))
    kv.allocate(1, 12)
    kv.cache_full_blocks(1, hashes, num_computed_tokens=7)  # one full block computed
    assert kv.num_cached_blocks == 1
    kv.cache_full_blocks(1, hashes, num_computed_tokens=12)
    assert kv.num_cached_blocks == 3


def test_a_freed_unhashed_block_goes_to_the_head_and_is_reused_before_cached_ones() -> None:
    # Worked by hand (current vLLM's BlockPool.free_blocks: a finished sequence's blocks
    # in reverse order, those never hashed prepended at the head, hashed ones appended):
    #   start                       queue [0 1 2 3 4 5]
    #   seq 1: 12 tokens -> 0 1 2, all three full and cached (a0 a1 a2)
    #   seq 2:  6 tokens -> 3 4; block 3 full and cached (b0), block 4 partial, never hashed
    #                               queue [5]
    #   free seq 1 (2, 1, 0)        queue [5 2 1 0]
    #   free seq 2 (4 -> head, 3)   queue [4 5 2 1 0 3]
    # vLLM <= 0.27 appended block 4 at the tail too ([5 2 1 0 4 3]), so the next two
    # blocks were 5 and 2 and a2 was evicted; now 4 and 5 come first and every cached
    # block survives.
    kv = KVCacheManager(num_blocks=6, block_size=4, enable_prefix_caching=True)
    a, b = hashes_of(list(range(12))), hashes_of(list(range(100, 106)))
    assert kv.allocate(1, 12) and kv.allocate(2, 6)
    kv.cache_full_blocks(1, a, 12)
    kv.cache_full_blocks(2, b, 6)
    assert kv.block_table(1) == [0, 1, 2] and kv.block_table(2) == [3, 4]
    kv.free(1)
    kv.free(2)
    assert kv.free_queue() == [4, 5, 2, 1, 0, 3]
    assert kv.num_free_blocks == 6 and kv.num_cached_blocks == 4
    # seq 3, two new blocks: the unhashed 4, then 5 (never used); no cached block evicted
    assert kv.allocate(3, 8) and kv.block_table(3) == [4, 5]
    assert kv.find_cached_prefix(a).block_ids == [0, 1, 2] and kv.num_cached_blocks == 4
    assert kv.free_queue() == [2, 1, 0, 3]
    # seq 4 hits a0 a1: they leave the queue; its third block is the head, 2 (evicts a2)
    hit = kv.find_cached_prefix(a[:2])
    assert kv.allocate(4, 12, hit) and kv.block_table(4) == [0, 1, 2]
    assert kv.free_queue() == [3] and kv.find_cached_prefix(a).block_ids == [0, 1]
    # the last free block is b0's: taking it evicts b0
    assert kv.allocate(5, 4) and kv.block_table(5) == [3]
    assert kv.find_cached_prefix(b).num_tokens == 0 and kv.num_free_blocks == 0
    kv.check_consistency()


def test_several_unhashed_blocks_keep_their_reverse_order_at_the_head() -> None:
    # seq 1 holds 3 blocks, none hashed (caching on, nothing registered): freed in reverse
    # order, all at the head, ahead of the never-used blocks 3 and 4
    kv = KVCacheManager(num_blocks=5, block_size=4, enable_prefix_caching=True)
    assert kv.allocate(1, 12) and kv.block_table(1) == [0, 1, 2]
    kv.free(1)
    assert kv.free_queue() == [2, 1, 0, 3, 4]
    assert kv.allocate(2, 4) and kv.block_table(2) == [2]
    kv.check_consistency()


def test_without_prefix_caching_freed_blocks_are_appended_in_reverse_order() -> None:
    kv = KVCacheManager(num_blocks=5, block_size=4, enable_prefix_caching=False)
    assert kv.allocate(1, 12) and kv.block_table(1) == [0, 1, 2]
    kv.free(1)
    assert kv.free_queue() == [3, 4, 2, 1, 0]
    assert kv.allocate(2, 8) and kv.block_table(2) == [3, 4]
    kv.check_consistency()


def test_a_hit_on_cached_free_blocks_needs_them_in_the_pool() -> None:
    kv = KVCacheManager(num_blocks=3, block_size=4, enable_prefix_caching=True)
    hashes = hashes_of(list(range(8)))
    kv.allocate(1, 8)
    kv.cache_full_blocks(1, hashes, 8)
    kv.free(1)
    kv.allocate(2, 4)  # the free block
    hit = kv.find_cached_prefix(hashes)
    assert hit.num_tokens == 8
    # two cached-free blocks reused + one new block: only two blocks are allocatable
    assert not kv.can_allocate(3, 12, hit)
    assert kv.allocate(3, 8, hit)
    assert kv.num_free_blocks == 0
    kv.check_consistency()


def test_identical_blocks_computed_twice_keep_one_cache_entry() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    hashes = hashes_of(list(range(8)))
    kv.allocate(1, 8)
    kv.allocate(2, 8)
    kv.cache_full_blocks(1, hashes, 8)
    kv.cache_full_blocks(2, hashes, 8)
    assert kv.num_cached_blocks == 2
    assert kv.find_cached_prefix(hashes).block_ids == kv.block_table(1)
    kv.free(1)
    kv.free(2)
    assert kv.num_free_blocks == 8
    kv.check_consistency()


def test_prefix_caching_off_never_hits() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    hashes = hashes_of(list(range(8)))
    kv.allocate(1, 8)
    kv.cache_full_blocks(1, hashes, 8)
    kv.free(1)
    assert kv.find_cached_prefix(hashes).num_tokens == 0 and kv.num_cached_blocks == 0
    kv.record_lookup(8, 0)
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (8, 0)


def test_lookups_of_preempted_requests_are_counted_apart() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    kv.record_lookup(10, 8)
    kv.record_lookup(12, 12, preempted=True)
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (10, 8)
    assert (kv.prefix_cache_preempted_queries, kv.prefix_cache_preempted_hits) == (12, 12)
