"""The read index (cached blocks with gaps over Tier-2) and the cache budget that evicts from it."""

from hypothesis import given, settings
from hypothesis import strategies as st

from server.containers.cache import CacheManager
from server.containers.read_index import ReadIndex


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
    cache = CacheManager(1000)
    index = ReadIndex(cache=cache)
    index.append(b"x" * 600)
    index.append(b"y" * 600)  # over budget, but nothing is in Tier-2: nothing can go
    assert cache.size == 1200 and cache.throttled
    index.storage_length = 600  # the storage writer flushed the first block
    assert cache.evict() == 600
    assert cache.size == 600 and not cache.throttled
    assert index.read(0, 10) == []
    assert joined(index.read(600, 10)) == b"y" * 10


def test_truncate_keeps_blocks_tier2_does_not_have_yet():
    index = ReadIndex()
    index.append(b"a" * 10)
    index.append(b"b" * 10)
    index.truncate(15)
    assert index.start_offset == 15
    assert joined(index.read(0, 20)) == b"a" * 10 + b"b" * 10  # the writer still needs them
    index.storage_length = 20
    index.drop_below(min(index.start_offset, index.storage_length))
    assert index.cached_bytes == 10


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


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "flush", "evict", "read", "insert"]),
                          st.integers(0, 400), st.integers(1, 300)), max_size=40))
def test_reads_always_return_the_exact_bytes(steps):
    """Whatever is appended, flushed, evicted and re-inserted, a read returns a prefix of the true bytes."""
    cache = CacheManager(500)
    index = ReadIndex(cache=cache)
    truth = bytearray()
    for action, offset, size in steps:
        if action == "append":
            data = bytes((len(truth) + i) % 251 for i in range(size))
            index.append(data)
            truth += data
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
            got = joined(index.read(start, size))
            assert got == bytes(truth[start:start + len(got)])
            if start >= index.storage_length:
                assert len(got) == min(size, len(truth) - start)  # unflushed bytes are always cached
    assert cache.size == index.cached_bytes
