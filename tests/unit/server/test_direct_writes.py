"""direct_writes: any split of any parts at any offset lands byte for byte as a plain write would,
the page-aligned middle of a large write goes through an O_DIRECT descriptor, and filesystems that
refuse O_DIRECT get plain writes."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server import direct_writes

KiB = 1024


@pytest.fixture
def small_direct(monkeypatch):
    """Direct writes from 8 KiB on, through a 12 KiB staging buffer, so small examples cross every boundary."""
    monkeypatch.setattr(direct_writes, "DIRECT_MIN_BYTES", 8 * KiB)
    monkeypatch.setattr(direct_writes, "STAGING_BYTES", 12 * KiB)
    monkeypatch.setattr(direct_writes._staging, "buffer", None, raising=False)
    yield
    direct_writes._staging.buffer = None


def direct_opens(monkeypatch) -> list[int]:
    """Records the flags of every open of /proc/self/fd (the direct descriptor)."""
    opened = []
    real_open = os.open

    def recording_open(path, flags, *args):
        if str(path).startswith("/proc/self/fd/"):
            opened.append(flags)
        return real_open(path, flags, *args)

    monkeypatch.setattr(direct_writes.os, "open", recording_open)
    return opened


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.integers(0, 9000), sizes=st.lists(st.integers(0, 20 * KiB), min_size=1, max_size=6))
def test_any_split_lands_byte_for_byte(tmp_path_factory, small_direct, prefix, sizes):
    path = tmp_path_factory.mktemp("direct") / "chunk"
    before = os.urandom(prefix)
    parts = [os.urandom(size) for size in sizes]
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, before)
        assert direct_writes.write_parts(fd, parts, prefix) == sum(sizes)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    assert path.read_bytes() == before + b"".join(parts)


def test_the_aligned_middle_of_a_large_write_goes_direct(tmp_path, small_direct, monkeypatch):
    opened = direct_opens(monkeypatch)
    path = tmp_path / "chunk"
    data = os.urandom(100 * KiB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 100)  # an unaligned start: a buffered head first
        direct_writes.write_parts(fd, [data[:333], data[333:]], 100)
        direct_writes.write_parts(fd, [b"small"], 100 + len(data))  # below the minimum: buffered
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * 100 + data + b"small"
    assert len(opened) == 1 and opened[0] & os.O_DIRECT


def test_filesystems_without_o_direct_get_plain_writes(tmp_path, small_direct, monkeypatch):
    real_open = os.open
    refused = []

    def refusing_open(path, flags, *args):
        if flags & os.O_DIRECT:
            refused.append(path)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    path = tmp_path / "chunk"
    data = os.urandom(64 * KiB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    monkeypatch.setattr(direct_writes.os, "open", refusing_open)
    monkeypatch.setattr(direct_writes, "_devices_without_direct", set())
    try:
        direct_writes.write_parts(fd, [data], 0)
        direct_writes.write_parts(fd, [data], len(data))
    finally:
        os.close(fd)
    assert path.read_bytes() == data + data
    assert len(refused) == 1  # the device is remembered: no second attempt


def test_other_open_errors_are_not_taken_for_a_refusal(tmp_path, small_direct, monkeypatch):
    def failing_open(path, flags, *args):
        raise OSError(errno.EMFILE, "Too many open files")

    fd = os.open(tmp_path / "chunk", os.O_RDWR | os.O_CREAT, 0o644)
    monkeypatch.setattr(direct_writes.os, "open", failing_open)
    try:
        with pytest.raises(OSError, match="Too many"):
            direct_writes.write_parts(fd, [os.urandom(64 * KiB)], 0)
    finally:
        os.close(fd)


def test_a_device_refusing_the_alignment_gets_the_whole_write_again_buffered(tmp_path, small_direct, monkeypatch):
    real_pwrite = os.pwrite
    monkeypatch.setattr(direct_writes, "_devices_without_direct", set())
    path = tmp_path / "chunk"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    direct_fds = []

    def refusing_pwrite(descriptor, data, offset):
        if descriptor != fd:  # the O_DIRECT descriptor
            direct_fds.append(descriptor)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(direct_writes.os, "pwrite", refusing_pwrite)
    data = os.urandom(64 * KiB)
    try:
        os.write(fd, b"x" * 10)
        assert direct_writes.write_parts(fd, [data], 10) == len(data)
        assert direct_writes.write_parts(fd, [data], 10 + len(data)) == len(data)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * 10 + data + data
    assert len(direct_fds) == 1  # the device is remembered


def test_a_short_pwritev_is_finished_by_hand(tmp_path, monkeypatch):
    """pwrite_all (the one pwritev loop of the log, the chunks and the journal) completes short writes."""
    real_pwritev = os.pwritev
    calls = []

    def short_pwritev(fd, buffers, offset):
        calls.append(len(buffers))
        first = bytes(buffers[0])[:3]  # only 3 bytes of the first buffer make it
        return real_pwritev(fd, [first], offset)

    monkeypatch.setattr(direct_writes.os, "pwritev", short_pwritev)
    parts = [b"abcdefgh", b"", memoryview(b"ijklmnop")[2:], b"q" * 5000]
    fd = os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert direct_writes.pwrite_all(fd, parts, 7) == 8 + 6 + 5000
    finally:
        os.close(fd)
    assert (tmp_path / "file").read_bytes() == b"\0" * 7 + b"abcdefgh" + b"klmnop" + b"q" * 5000
    assert calls == [4]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pages=st.integers(0, 4), sizes=st.lists(st.integers(0, 30 * KiB), min_size=1, max_size=5))
def test_write_pages_lands_the_data_and_zeros_to_the_page_end(tmp_path_factory, small_direct, pages, sizes):
    """Whole pages only, through O_DIRECT: the data at the aligned offset, zeros after it up to the page end,
    and the bytes before the offset untouched."""
    path = tmp_path_factory.mktemp("pages") / "file"
    path.write_bytes(b"\xee" * (pages * 4 * KiB + 40 * KiB))
    parts = [os.urandom(size) for size in sizes]
    data = b"".join(parts)
    offset = pages * 4 * KiB
    fd = os.open(path, os.O_RDWR)
    try:
        assert direct_writes.write_pages(fd, parts, offset)
    finally:
        os.close(fd)
    content = path.read_bytes()
    end = offset + len(data)
    assert content[:offset] == b"\xee" * offset
    assert content[offset:end] == data
    assert content[end:end + (-end % (4 * KiB))] == bytes(-end % (4 * KiB))
    assert content[end + (-end % (4 * KiB)):] == b"\xee" * (len(content) - end - (-end % (4 * KiB)))


def test_write_pages_refuses_an_unaligned_offset_and_reports_a_filesystem_without_o_direct(tmp_path, monkeypatch):
    fd = os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(ValueError):
            direct_writes.write_pages(fd, [b"x"], 100)
        monkeypatch.setattr(direct_writes, "_open_direct", lambda fd: None)
        assert direct_writes.write_pages(fd, [b"x"], 0) is False
        assert os.fstat(fd).st_size == 0  # nothing written: the caller writes buffered
    finally:
        os.close(fd)
