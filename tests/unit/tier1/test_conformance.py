"""Runs the DurableDataLog conformance suite against every implementation we have.

To add an implementation (the replicated log, later), add a factory to LOG_FACTORIES: it gets a
per-test directory and returns a new, unopened instance on the one log that directory stands for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from server.tier1 import DurableDataLog, FaultyDurableDataLog

from .conformance import DurableDataLogConformance
from .helpers import small_local_log


def local_log(home: Path) -> DurableDataLog:
    return small_local_log(home / "log")


def faulty_local_log(home: Path) -> DurableDataLog:
    """The fault-injecting wrapper with nothing armed must be indistinguishable from what it wraps."""
    return FaultyDurableDataLog(small_local_log(home / "log"))


LOG_FACTORIES: dict[str, Callable[[Path], DurableDataLog]] = {
    "local": local_log,
    "faulty(local)": faulty_local_log,
}


@pytest.fixture(params=sorted(LOG_FACTORIES))
async def make_log(request, tmp_path):
    factory = LOG_FACTORIES[request.param]
    created: list[DurableDataLog] = []

    def make() -> DurableDataLog:
        log = factory(tmp_path)
        created.append(log)
        return log

    yield make
    for log in created:  # a failing test must not leave a writer thread or a lock behind
        await log.close()


class TestDurableDataLogConformance(DurableDataLogConformance):
    pass
