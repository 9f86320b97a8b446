"""Test costs: every test is marked by what it needs beyond this process, and the mark is checked.

The cost markers (pyproject.toml lists them) say what a test starts or waits for:

    zk        a real ZooKeeper (a JVM), through the ``zookeeper`` fixture
    s3        moto's S3 server (a child process), through the ``moto_s3`` fixture
    spark     PySpark (a JVM), everything under tests/spark
    process   any other child process: a standalone, a log store, the real ``pravega`` client's server, a CLI
    static    ruff and mypy over the tree
    slow      more than a few seconds of its own, whatever it needs

``fast`` is the default: a test with none of the above is marked ``fast`` when collected, and
``./dev.sh test fast`` runs exactly those (``pytest -m fast``). A fast test runs in this process only, so
the marks are not left to memory: ``zk``, ``s3`` and ``spark`` follow from the fixtures a test uses, and a
test that starts a child process without a cost marker that allows one fails with a message naming the
marker (``ProcessGuard``), whichever helper started it.

The suite runs in parallel (pytest-xdist: ``./dev.sh test``); every test takes free ports and its own
temporary directory. The Spark tests are spread over the workers like any other (each worker that gets one
starts its own Spark session, one at a time: tests/spark/conftest.py): in one group they would be a
critical path of about 11 minutes. (``xdist_group`` marks would not hold them together anyway: pytest 9.2
no longer lets pytest-xdist 3.8 add the group to a test's node id.)
"""

from __future__ import annotations

import multiprocessing.process
import subprocess
from collections.abc import Iterable

import pytest

COSTS = ("zk", "s3", "spark", "process", "static", "slow")
PROCESS_COSTS = frozenset({"zk", "s3", "spark", "process", "static"})  # the costs that start child processes
FIXTURE_COSTS = {"zookeeper": "zk", "moto_s3": "s3", "spark": "spark"}


def costs_of(item: pytest.Item) -> set[str]:
    return {name for name in COSTS if item.get_closest_marker(name) is not None}


def mark_costs(items: Iterable[pytest.Item]) -> None:
    """Adds the markers that follow from fixtures and directories, then ``fast`` where no cost is marked."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        for fixture, cost in FIXTURE_COSTS.items():
            if fixture in fixtures:
                item.add_marker(cost)
        if "tests/spark/" in item.nodeid:
            item.add_marker("spark")
        if not costs_of(item):
            item.add_marker("fast")


class ProcessGuard:
    """Fails a test that starts a child process without a marker saying it may (see the module docstring).

    It wraps ``subprocess.Popen``'s one spawning method (which asyncio's subprocesses use too) and
    ``multiprocessing``'s ``Process.start``; the test currently running is the one blamed, including for
    what its fixtures start."""

    def __init__(self) -> None:
        self.allowed = True  # outside a test (collection, session teardown) anything may start
        self.current = ""
        self._popen_execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]
        self._process_start = multiprocessing.process.BaseProcess.start

    def install(self) -> None:
        guard = self

        def execute_child(popen, args, *rest, **kwargs):
            guard.check(args)
            return guard._popen_execute(popen, args, *rest, **kwargs)

        def start(process):
            guard.check(f"multiprocessing {process.name}")
            return guard._process_start(process)

        subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]
        multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]

    def uninstall(self) -> None:
        subprocess.Popen._execute_child = self._popen_execute  # type: ignore[attr-defined]
        multiprocessing.process.BaseProcess.start = self._process_start  # type: ignore[method-assign]

    def enter(self, item: pytest.Item) -> None:
        self.current = item.nodeid
        self.allowed = bool(costs_of(item) & PROCESS_COSTS)

    def leave(self) -> None:
        self.current, self.allowed = "", True

    def check(self, what) -> None:
        if not self.allowed:
            command = what if isinstance(what, str) else " ".join(map(str, what))[:120]
            raise AssertionError(f"{self.current} started a child process ({command}) but is not marked for it: "
                                 f"mark it @pytest.mark.process (or zk, s3, spark, static); a fast test stays "
                                 f"in its own process")
