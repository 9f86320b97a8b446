"""FileOperations.write_durably: one pwritev2(RWF_DSYNC) where it can, the two seam steps where a subclass
(the fault-injecting seam) or the kernel needs them, and the same bytes on the disk either way."""

from __future__ import annotations

import errno
import os

import pytest

from server.tier1 import file_operations as module
from server.tier1.file_operations import FileOperations


class Steps(FileOperations):
    """Records the seam's steps."""

    def __init__(self):
        self.steps: list[str] = []

    def write(self, fd, buffers, offset):
        self.steps.append("write")
        super().write(fd, buffers, offset)

    def sync(self, fd):
        self.steps.append("sync")
        super().sync(fd)


@pytest.fixture
def fd(tmp_path):
    descriptor = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(descriptor, bytes(64), 0)
    yield descriptor
    os.close(descriptor)


def test_the_plain_seam_fuses_write_and_sync(fd, monkeypatch):
    if not module._RWF_DSYNC:
        pytest.skip("this Python has no RWF_DSYNC")
    calls = []
    real = os.pwritev
    monkeypatch.setattr(os, "pwritev", lambda *arguments: calls.append(arguments[3:]) or real(*arguments))
    monkeypatch.setattr(os, "fdatasync", lambda _: calls.append("fdatasync"))
    FileOperations().write_durably(fd, [b"abc", memoryview(b"def")], 5, 6)
    assert calls == [(module._RWF_DSYNC,)]
    assert os.pread(fd, 8, 4) == b"\0abcdef\0"


def test_a_seam_that_changes_a_step_sees_both_steps(fd):
    steps = Steps()
    steps.write_durably(fd, [b"xyz"], 0, 3)
    assert steps.steps == ["write", "sync"]
    assert os.pread(fd, 3, 0) == b"xyz"


def test_a_short_fused_write_is_finished_and_synced(fd, monkeypatch):
    if not module._RWF_DSYNC:
        pytest.skip("this Python has no RWF_DSYNC")
    real = os.pwritev
    syncs = []
    monkeypatch.setattr(os, "pwritev", lambda fd, buffers, offset, *flags: real(fd, [bytes(buffers[0])[:2]], offset,
                                                                                 *flags) if flags else
                        real(fd, buffers, offset))
    monkeypatch.setattr(os, "fdatasync", syncs.append)
    FileOperations().write_durably(fd, [b"12345", b"678"], 10, 8)
    assert os.pread(fd, 8, 10) == b"12345678"
    assert syncs == [fd]


def test_a_kernel_that_refuses_the_flag_gets_write_then_sync(fd, monkeypatch):
    if not module._RWF_DSYNC:
        pytest.skip("this Python has no RWF_DSYNC")
    real = os.pwritev
    syncs = []

    def refuse_flags(fd, buffers, offset, *flags):
        if flags:
            raise OSError(errno.EOPNOTSUPP, "not supported")
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", refuse_flags)
    monkeypatch.setattr(os, "fdatasync", syncs.append)
    monkeypatch.setattr(FileOperations, "_fuse_write_and_sync", True)
    operations = FileOperations()
    operations.write_durably(fd, [b"abc"], 0, 3)
    operations.write_durably(fd, [b"def"], 3, 3)
    assert os.pread(fd, 6, 0) == b"abcdef"
    assert syncs == [fd, fd]
    assert FileOperations._fuse_write_and_sync is False  # not tried again


def test_other_errors_of_the_fused_write_fail_it(fd, monkeypatch):
    if not module._RWF_DSYNC:
        pytest.skip("this Python has no RWF_DSYNC")

    def broken(*_):
        raise OSError(errno.EIO, "disk gone")

    monkeypatch.setattr(os, "pwritev", broken)
    with pytest.raises(OSError) as failure:
        FileOperations().write_durably(fd, [b"abc"], 0, 3)
    assert failure.value.errno == errno.EIO
