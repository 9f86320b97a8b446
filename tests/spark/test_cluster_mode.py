"""Format ``tributary`` on a Spark standalone cluster: a master and a worker (tests/support/spark_cluster.py),
the driver in a process of its own (tests/spark/cluster_driver.py), so the data source's tasks run in the
worker's executor JVM and its Python workers, apart from the driver. Each test checks exactly once with the
SDK: a batch write and read; a streaming copy run twice from its checkpoint; a streaming copy whose executor
is SIGKILLed while a micro-batch's tasks run (Spark launches another executor and retries them)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_io import faults
from tests.spark.support import create_stream, number_of, open_transactions, read_events, write_events
from tests.support.spark_cluster import Executor, SparkCluster, alive, serve

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    yield from serve(tmp_path_factory, "spark-cluster", cores=2, memory="2g")


class Driver:
    """``python -m tests.spark.cluster_driver COMMAND RESULT MASTER ...`` in a session of its own, its log in
    a file."""

    def __init__(self, tmp_path: Path, cluster: SparkCluster, command: str, *arguments: str, run: int = 0):
        self.cluster = cluster
        self.result = tmp_path / f"{command}-{run}.json"
        self.log_path = tmp_path / f"{command}-{run}.log"
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
        environment.pop(faults.VARIABLE, None)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.spark.cluster_driver", command, str(self.result), cluster.url,
                 *arguments], cwd=ROOT, env=environment, start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILLs every process of the driver's session (its JVM, the driver-side Python workers)."""
        faults.kill_session(self.process.pid)
        self.process.wait(10)

    def finish(self, timeout: float = 150) -> dict:
        """Waits for the driver and returns its result; fails with its log's and the cluster's tails. Every
        process of the driver's session is gone afterwards."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            self.kill()
        if self.process.returncode != 0 or not self.result.exists():
            raise AssertionError(f"driver failed ({self.process.returncode}):\n{self.log()[-4000:]}\n"
                                 f"{self.cluster.logs(20)}")
        return json.loads(self.result.read_text())


def numbers(controller: str, scope: str, stream: str) -> list[int]:
    return sorted(number_of(payload) for _, _, payload in read_events(controller, scope, stream))


def batches(checkpoint: Path, folder: str) -> list[int]:
    """The micro-batches Spark recorded in a checkpoint's ``offsets`` (planned) or ``commits`` (done)."""
    path = checkpoint / folder
    return sorted(int(entry.name) for entry in path.glob("[0-9]*")) if path.exists() else []


def no_open_transactions(store_port: int, scope: str, stream: str, timeout: float = 60) -> list:
    """The stream's OPEN transactions, once there are none or ``timeout`` passed (a task killed before it
    released its transaction leaves it open until its lease lapses)."""
    deadline = time.monotonic() + timeout
    while (still := open_transactions(store_port, scope, stream)) and time.monotonic() < deadline:
        time.sleep(1)
    return still


@pytest.mark.timeout(180)
def test_a_batch_write_and_read_run_on_the_clusters_executor(spark_cluster, standalone, scope_name, tmp_path):
    """Spark makes events 0..5999 on the executor and writes them (exactly once, 3 segments), then reads the
    stream back: Spark's read and the SDK's find each event once."""
    controller = standalone.controller_uri
    result = Driver(tmp_path, spark_cluster, "batch", controller, scope_name, "s", "6000").finish()
    assert result["master"] == spark_cluster.url
    assert result["count"] == 6000
    assert result["events"] == sorted(f"k{n % 16}:{n // 16}" for n in range(6000))
    assert result["segments"] == [0, 1, 2]
    assert numbers(controller, scope_name, "s") == list(range(6000))
    assert open_transactions(standalone.store_port, scope_name, "s") == []
    assert spark_cluster.executor_dirs(result["app_id"]) == ["0"]  # the worker's one executor ran the tasks
    state = spark_cluster.state() or {}
    assert result["app_id"] in {app["id"] for app in state.get("completedapps", [])}, state


@pytest.mark.timeout(240)
def test_a_streaming_copy_restarts_from_its_checkpoint_exactly_once(spark_cluster, standalone, scope_name,
                                                                    tmp_path):
    """Two drivers, one after the other, copy a stream with one checkpoint: the second takes only what was
    written since, in micro-batches of its own, and the output has each input event once."""
    controller = standalone.controller_uri
    checkpoint = tmp_path / "checkpoint"
    create_stream(controller, scope_name, "in", 3)
    write_events(controller, scope_name, "in", range(3000))
    arguments = [controller, scope_name, "in", "out", str(checkpoint), "1000"]
    first = Driver(tmp_path, spark_cluster, "copy", *arguments, run=0).finish()
    assert numbers(controller, scope_name, "out") == list(range(3000))
    done = batches(checkpoint, "commits")
    assert len(done) >= 3  # at most 1,000 events a micro-batch
    write_events(controller, scope_name, "in", range(3000, 5000))
    second = Driver(tmp_path, spark_cluster, "copy", *arguments, run=1).finish()
    assert numbers(controller, scope_name, "out") == list(range(5000))
    assert set(done) < set(batches(checkpoint, "commits"))  # the second run went on from the first's batches
    assert open_transactions(standalone.store_port, scope_name, "out") == []
    assert first["app_id"] != second["app_id"]
    assert [spark_cluster.executor_dirs(result["app_id"]) for result in (first, second)] == [["0"], ["0"]]


def running_python_tasks(executor: Executor, work_dir: Path) -> set[str]:
    """The tasks (TIDs) the executor runs now whose Python part has started, from its log."""
    try:
        log = executor.log(work_dir).read_text(errors="replace")
    except OSError:
        return set()

    def tids(pattern: str) -> set[str]:
        return set(re.findall(pattern + r".*\(TID (\d+)\)", log))

    return (tids(r"Running task") & tids(r"Starting Python task execution")) - tids(r"Finished task")


@pytest.mark.timeout(180)
def test_an_executor_killed_mid_batch_is_replaced_and_the_copy_stays_exactly_once(spark_cluster, standalone,
                                                                                  scope_name, tmp_path):
    """The executor JVM (a child of the worker) is SIGKILLed once a task of a micro-batch after the first runs
    its Python part: its Python workers end, the master launches a new executor, Spark retries the lost tasks,
    and the query finishes with each input event once in the output and no transaction left open."""
    controller = standalone.controller_uri
    checkpoint = tmp_path / "checkpoint"
    create_stream(controller, scope_name, "in", 2)
    write_events(controller, scope_name, "in", range(12_000))
    driver = Driver(tmp_path, spark_cluster, "copy", controller, scope_name, "in", "out", str(checkpoint), "1000")
    killed, deadline = None, time.monotonic() + 120
    try:
        while killed is None and driver.process.poll() is None and time.monotonic() < deadline:
            executors = spark_cluster.executors()
            if batches(checkpoint, "commits") and executors:  # batch 0 is done: the copy is under way
                (executor,) = executors
                if running_python_tasks(executor, spark_cluster.work_dir):
                    os.kill(executor.pid, signal.SIGKILL)
                    killed, committed = executor, batches(checkpoint, "commits")
                    continue
            time.sleep(0.02)
        assert killed is not None, f"no task of a later micro-batch was seen running:\n{driver.log()[-3000:]}"
        gone = time.monotonic() + 30  # the executor's Python workers end with it (their JVM's pipe closes)
        while any(alive(pid) for pid in killed.python) and time.monotonic() < gone:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in killed.python), "a killed executor's Python worker lives on"
    except BaseException:
        driver.kill()
        raise
    result = driver.finish()
    assert result["app_id"] == killed.app_id
    assert spark_cluster.executor_dirs(killed.app_id) == ["0", "1"]  # the master launched a second executor
    log = driver.log()
    assert f"Lost executor {killed.executor_id}" in log and "ExecutorLostFailure" in log, log[-3000:]
    assert batches(checkpoint, "commits")[-1] > committed[-1]  # it went on after the kill
    assert numbers(controller, scope_name, "out") == list(range(12_000))  # no loss, no duplicates
    assert no_open_transactions(standalone.store_port, scope_name, "out") == []
