"""Runs the DurableDataLog conformance suite against every implementation we have.

Each entry of LOG_FACTORIES is an async context manager: given a per-test directory (and, for the
replicated log, a ZooKeeper connect string), it yields a callable returning a new, unopened instance
on the one log that directory stands for; a second call is "another process opening the same log".
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from server.tier1 import DurableDataLog, MemoryLogs
from tests.support.faults.tier1 import FaultyDurableDataLog
from tests.support.replicated import replicated_tier1

from .conformance import DurableDataLogConformance
from .helpers import small_local_log

Factory = Callable[[], DurableDataLog]


@contextlib.asynccontextmanager
async def local_log(home: Path, request) -> AsyncIterator[Factory]:
    yield lambda: small_local_log(home / "log")


@contextlib.asynccontextmanager
async def faulty_local_log(home: Path, request) -> AsyncIterator[Factory]:
    """The fault-injecting wrapper with nothing armed must be indistinguishable from what it wraps."""
    yield lambda: FaultyDurableDataLog(small_local_log(home / "log"))


@contextlib.asynccontextmanager
async def memory_log(home: Path, request) -> AsyncIterator[Factory]:
    """The in-memory log the fast tests' segment stores use: a registry of its own per test."""
    logs = MemoryLogs()
    yield lambda: logs.log(str(home / "log"))


@contextlib.asynccontextmanager
async def replicated_log(home: Path, request) -> AsyncIterator[Factory]:
    """Three in-process log stores (3/3/2), 64 KiB ledgers so that the log rolls often, a real ZooKeeper."""
    async with replicated_tier1(home, request.getfixturevalue("zk_hosts")) as cluster:
        assert cluster.tier1 is not None
        tier1 = cluster.tier1
        yield lambda: tier1.log("container-0")


LOG_FACTORIES = {
    "local": local_log,
    "faulty(local)": faulty_local_log,
    "memory": memory_log,
    "replicated": replicated_log,
}


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.zk) if name == "replicated" else name
                        for name in sorted(LOG_FACTORIES)])
async def make_log(request, tmp_path):
    created: list[DurableDataLog] = []
    async with LOG_FACTORIES[request.param](tmp_path, request) as factory:
        def make() -> DurableDataLog:
            log = factory()
            created.append(log)
            return log

        yield make
        for log in created:  # a failing test must not leave a writer thread or a lock behind
            await log.close()


class TestDurableDataLogConformance(DurableDataLogConformance):
    pass
