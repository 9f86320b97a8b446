"""SIGTERM ends every cluster process within a few seconds whatever else is down (issue 24): a cluster
stopped in the wrong order (ZooKeeper first, everything at once, the log store first) while a writer
keeps it busy. State is durable and ephemeral nodes go with the sessions, so a stopping process
waits for nothing it cannot reach (docs/cluster.md, 'Stopping a cluster').

One ZooKeeper of the test's own (it is killed), one log store (quorum 1/1/1), one segment store, one
controller and a `tributary loadgen` writer: real processes, each stopped by its PID."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.support.cluster import Cluster
from tests.support.processes import kill_process

pytestmark = pytest.mark.process

STOP_SECONDS = 5.0  # SIGTERM to exit, for every process
KAZOO_WARNINGS_MAX = 6  # kazoo's reconnection lines in a process's log: rate-limited, not one per attempt


def _exit_within(process: subprocess.Popen, deadline: float) -> tuple[int | str, float]:
    """(exit status, or 'still running', seconds since the deadline's start)."""
    try:
        process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return "still running", STOP_SECONDS
    return process.returncode, round(time.monotonic() - (deadline - STOP_SECONDS), 2)


@pytest.mark.parametrize("order", ["zookeeper killed first", "everything at once", "log store killed first"])
def test_sigterm_ends_each_process_within_seconds_whatever_is_down(tmp_path, order):
    with Cluster(tmp_path, containers=2, segment_stores=1, controllers=1, log_stores=1,
                 log_quorum="1/1/1") as cluster:
        assert cluster.zookeeper is not None and cluster.log_stores is not None
        load = subprocess.Popen(
            [sys.executable, "-m", "tributary", "loadgen", "--controller", cluster.controllers[0].uri,
             "--writers", "2", "--readers", "0", "--segments", "2", "--rate", "2000", "--event-size", "1000",
             "--duration", "60", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)  # writing by now: appends in flight when the stop comes
            assert load.poll() is None, "the writer stopped early"
            zookeeper, log_store = cluster.zookeeper.process, cluster.log_stores.processes[0].process
            assert zookeeper is not None and log_store is not None
            processes = {"controller": cluster.controllers[0].process,
                         "segment store": cluster.segment_stores[0].process, "log store": log_store}
            if order == "zookeeper killed first":
                kill_process(zookeeper)
                time.sleep(1)  # every session is reconnecting by now
            elif order == "log store killed first":
                kill_process(processes.pop("log store"))
                time.sleep(1)  # the segment store's ledger is broken by now, appends waiting on a roll
            else:
                zookeeper.send_signal(signal.SIGTERM)
            started = time.monotonic()
            for process in processes.values():
                assert process is not None
                process.send_signal(signal.SIGTERM)
            ended = {name: _exit_within(process, started + STOP_SECONDS) for name, process in processes.items()}
        finally:
            kill_process(load)
        assert all(status == 0 for status, _ in ended.values()), ended  # {process: (exit status, seconds)}
        for log in tmp_path.glob("*.log"):
            kazoo_warnings = [line for line in log.read_text().splitlines()
                              if '"tributary.zookeeper.kazoo"' in line and '"warning"' in line]
            assert len(kazoo_warnings) <= KAZOO_WARNINGS_MAX, (log.name, kazoo_warnings)
