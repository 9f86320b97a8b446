"""The read index (cached blocks with gaps over Tier-2) and the cache budget that evicts from it."""

from hypothesis import given, settings
from hypothesis import strategies as st

from server.containers.cache import CacheManager
from server.containers.read_index import COALESCE_BELOW, SLAB_MAX, ReadIndex


def joined(parts) -> bytes:
    return b"".join(bytes(part) for part in parts)


def test_append_read_across_blocks():
    index = ReadIndex()
    for chunk in (b"abc", b"defg", b"h"):
        index.append(chunk)
    assert index.length == 8
    assert joined(index.read(0, 100)) == b"abcdefgh"
    assert joined(index.read(2, 3)) == b"cde"
    assert joined(index.read(8, 10)) == b""


def test_restored_index_has_no_cached_bytes_but_knows_tier2_holds_them():
    index = ReadIndex(start_offset=10, length=100)
    assert (index.start_offset, index.length, index.storage_length) == (10, 100, 100)
    assert index.read(10, 5) == []  # not cached: the container goes to Tier-2
    index.append(b"tail")
    assert joined(index.read(100, 10)) == b"tail"
    index.insert(50, b"x" * 50)
    assert joined(index.read(90, 20)) == b"x" * 10 + b"tail"


def test_insert_fills_gaps_only():
    index = ReadIndex(length=20)
    index.insert(5, b"B" * 5)
    index.insert(0, b"a" * 20)  # overlaps the cached block: only the gaps are taken
    assert joined(index.read(0, 20)) == b"a" * 5 + b"B" * 5 + b"a" * 10
    assert index.cached_bytes == 20


def test_unflushed_blocks_are_pinned_and_flushed_ones_evictable():
    block = COALESCE_BELOW  # appends this large are blocks of their own (smaller ones share slabs)
    cache = CacheManager(block * 5 // 3)
    index = ReadIndex(cache=cache)
    index.append(b"x" * block)
    index.append(b"y" * block)  # over budget, but nothing is in Tier-2: nothing can go
    assert cache.size == 2 * block and cache.throttled
    index.storage_length = block  # the storage writer flushed the first block
    assert cache.evict() == block
    assert cache.size == block and not cache.throttled
    assert index.read(0, 10) == []
    assert joined(index.read(block, 10)) == b"y" * 10


def test_small_appends_share_slabs_that_double_up_to_their_maximum():
    """2,000 events of 1 KiB (one at a time, as at 1,000 events/s) are a handful of blocks, not 2,000: what
    the storage writer's flush reads and copies. Every byte reads back, and the cache counts each once."""
    cache = CacheManager(1 << 30)
    index = ReadIndex(cache=cache)
    events = [bytes([n % 251]) * 1024 for n in range(2000)]
    for event in events:
        index.append(memoryview(b"frame header" + event + b"trailer")[12:12 + 1024])  # a view, as received
    parts = index.read(0, 1 << 30)
    assert joined(parts) == b"".join(events)
    assert len(parts) <= 2 * 1024 * 2000 // SLAB_MAX + 10, len(parts)
    assert max(len(part) for part in parts) == SLAB_MAX
    assert cache.size == index.cached_bytes == 2000 * 1024


def test_views_handed_out_keep_their_bytes_while_the_slab_fills():
    index = ReadIndex()
    index.append(b"a" * 100)
    index.append(b"b" * 100)
    before = index.read(0, 1000)
    for _ in range(50):
        index.append(b"c" * 100)
    assert joined(before) == b"a" * 100 + b"b" * 100
    assert joined(index.read(0, 10_000)) == b"a" * 100 + b"b" * 100 + b"c" * 5000


def test_a_partly_flushed_slab_is_pinned_and_a_flushed_one_goes_whole():
    cache = CacheManager(100)
    index = ReadIndex(cache=cache)
    for _ in range(4):
        index.append(b"z" * 100)  # one slab of 400 bytes, over budget
    index.storage_length = 300
    assert cache.evict() == 0 and cache.size == 400  # its last 100 bytes exist nowhere else
    index.storage_length = 400
    assert cache.evict() == 400 and cache.size == 0 and index.read(0, 10) == []
    index.append(b"w" * 100)  # a new block after the evicted slab, not bytes written into it
    index.append(b"v" * 100)
    assert joined(index.read(400, 1000)) == b"w" * 100 + b"v" * 100
    assert cache.size == index.cached_bytes == 200


def test_a_merged_sources_blocks_are_never_written_by_the_target():
    source = ReadIndex()
    source.append(b"s" * 100)
    source.append(b"t" * 100)  # a slab with room left
    target = ReadIndex()
    target.append_index(source)
    target.append(b"u" * 100)
    target.append(b"v" * 100)
    assert joined(source.read(0, 1000)) == b"s" * 100 + b"t" * 100
    assert joined(target.read(0, 1000)) == b"s" * 100 + b"t" * 100 + b"u" * 100 + b"v" * 100


def test_truncate_keeps_blocks_tier2_does_not_have_yet():
    block = COALESCE_BELOW  # blocks of their own (small appends share a slab, dropped whole)
    index = ReadIndex()
    index.append(b"a" * block)
    index.append(b"b" * block)
    index.truncate(block + 5)
    assert index.start_offset == block + 5
    assert joined(index.read(0, 2 * block)) == b"a" * block + b"b" * block  # the writer still needs them
    index.storage_length = 2 * block
    index.drop_below(min(index.start_offset, index.storage_length))
    assert index.cached_bytes == block


def test_throttling_ends_with_a_callback_once_eviction_made_room():
    cache = CacheManager(100)
    index = ReadIndex(cache=cache)
    index.append(b"z" * 150)
    relieved = []
    cache.when_relieved(lambda: relieved.append(True))
    assert relieved == []
    index.storage_length = 150
    cache.evict()
    assert relieved == [True]


def test_merged_source_blocks_are_shared_with_gaps_preserved():
    source = ReadIndex(length=10)  # bytes 0..10 in Tier-2 only
    source.append(b"cached")
    target = ReadIndex()
    target.append(b"head")
    target.append_index(source)
    assert target.length == 4 + 16
    assert target.read(4, 5) == []  # a gap: the container reads the source from Tier-2
    assert joined(target.read(14, 10)) == b"cached"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "append", "flush", "evict", "read", "insert", "truncate"]),
                          st.integers(0, 400), st.sampled_from([1, 7, 100, 300, 2000, COALESCE_BELOW])),
                max_size=40))
def test_reads_always_return_the_exact_bytes(steps):
    """Whatever is appended, flushed, evicted, truncated and re-inserted, a read returns a prefix of the true
    bytes, and what an earlier read returned keeps its bytes."""
    cache = CacheManager(5000)
    index = ReadIndex(cache=cache)
    truth = bytearray()
    handed_out = []
    for action, offset, size in steps:
        if action == "append":
            data = bytes((len(truth) + i) % 251 for i in range(size))
            index.append(data)
            truth += data
        elif action == "truncate" and truth:
            index.truncate(min(index.start_offset + offset, len(truth)))
        elif action == "flush":
            index.storage_length = min(len(truth), index.storage_length + size)
        elif action == "evict":
            cache.evict()
        elif action == "insert" and truth:
            start = offset % len(truth)
            end = min(len(truth), index.storage_length, start + size)
            if start < end:
                index.insert(start, bytes(truth[start:end]))
        elif truth:
            start = offset % len(truth)
            if start < index.start_offset:
                continue
            parts = index.read(start, size)
            got = joined(parts)
            assert got == bytes(truth[start:start + len(got)])
            handed_out.append((parts, got))
            if start >= index.storage_length:
                assert len(got) == min(size, len(truth) - start)  # unflushed bytes are always cached
    assert cache.size == index.cached_bytes
    assert all(joined(parts) == got for parts, got in handed_out)
