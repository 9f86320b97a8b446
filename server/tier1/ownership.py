"""Exclusive ownership of a local log directory.

Why a lock plus an epoch suffices locally. ``open()`` takes an exclusive, non-blocking
``flock`` on ``LOCK`` in the log directory and keeps it until ``close()`` or until the process
dies, when the kernel drops it. So a second owner can only get in once the first one can no
longer write at all: there is no window in which an old owner could still append after the new
one recovered the tail. The epoch bump persisted by every ``open()`` then orders the owners
(Tier-2 fencing and chunk names use it), and each record carries its writer's epoch, which lets
the reader reject an earlier owner's stale bytes after a torn tail.

As defence in depth the writer also checks, before every batch, that the metadata file is still
the one it wrote last (same inode), and re-reads the epoch before a rollover or truncation; if
anything else replaced it, the log fails with ``LogFenced`` (design §7.1).

What the replicated form will do instead. A lock cannot span machines, and a paused (not dead)
owner keeps writing to its replicas. The replicated log fences in the storage itself (§2.10):
the new owner opens the newest ledgers *with recovery*, which seals them on a quorum of bookies
so that an old writer's next add fails, then compare-and-sets the metadata (epoch + 1, a new
ledger) in ZooKeeper; a failed CAS means another owner won and is reported as ``LogFenced``.

``flock`` locks belong to an open file description, so two ``DirectoryLock``s in one process
conflict just like two processes do, which lets tests play a second owner.
"""

from __future__ import annotations

import errno
import fcntl
import os

from .errors import LogBusy

LOCK_FILE_NAME = "LOCK"


class DirectoryLock:
    """An exclusive flock on ``<directory>/LOCK``; the file is never deleted."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, LOCK_FILE_NAME)
        self._fd: int | None = None

    def __repr__(self) -> str:
        return f"<DirectoryLock {self.path} {'held' if self._fd is not None else 'free'}>"

    def acquire(self) -> None:
        """Takes the lock without waiting.

        Raises:
            LogBusy: another open file description (this process or another one) holds it.
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_holder(fd)
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LogBusy(f"log {os.path.dirname(self.path)} is owned by another instance"
                              f" (pid {holder or 'unknown'})") from error
            raise
        # Whoever unlinked and recreated LOCK would lock a different inode: refuse that state.
        if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
            os.close(fd)
            raise LogBusy(f"lock file {self.path} was replaced while locking it")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drops the lock (closing the descriptor releases the flock)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
