"""Format ``tributary`` through Spark Connect: a Connect server started from PySpark's own jars
(tests/support/spark_connect.py) and a client driver, ``SparkSession.builder.remote(...)`` with
``spark_io.register(spark)``, in a process of its own (tests/spark/connect_driver.py: a Connect session switches
PySpark's whole process to Connect mode, so it stays out of the pytest worker and its shared local session).
The server runs the data source in its Python workers; each test checks with the SDK: a batch read, a batch write
exactly once, and a streaming copy (availableNow, several micro-batches) run twice from one checkpoint, exactly
once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.support import create_stream, number_of, open_transactions, read_events, write_events
from tests.support.spark_connect import SparkConnectServer, serve

pytestmark = [pytest.mark.spark, pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
DRIVER_SECONDS = 150


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    yield from serve(tmp_path_factory, "spark-connect")


def drive(tmp_path: Path, server: SparkConnectServer, command: str, *arguments: str, run: int = 0) -> dict:
    """Runs ``python -m tests.spark.connect_driver COMMAND ...`` in a session of its own and returns its result;
    fails with its log's and the server's tails. Every process of the driver's session is gone afterwards."""
    result, log_path = tmp_path / f"{command}-{run}.json", tmp_path / f"{command}-{run}.log"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        environment.pop(name, None)
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "tests.spark.connect_driver", command, str(result),
                                    server.url, *arguments], cwd=ROOT, env=environment, start_new_session=True,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        process.wait(DRIVER_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    finally:
        from spark_io.faults import kill_session

        kill_session(process.pid)
        process.wait(10)
    if process.returncode != 0 or not result.exists():
        raise AssertionError(f"connect driver {command} failed ({process.returncode}):\n"
                             f"{log_path.read_text(errors='replace')[-4000:]}\n{server.logs(30)}")
    outcome = json.loads(result.read_text())
    assert outcome["session"] == "pyspark.sql.connect.session.SparkSession", outcome["session"]
    return outcome


def numbers(controller: str, scope: str, stream: str) -> list[int]:
    return sorted(number_of(payload) for _, _, payload in read_events(controller, scope, stream))


def batches(checkpoint: Path, folder: str) -> list[int]:
    """The micro-batches Spark recorded in a checkpoint's ``offsets`` (planned) or ``commits`` (done)."""
    path = checkpoint / folder
    return sorted(int(entry.name) for entry in path.glob("[0-9]*")) if path.exists() else []


def test_batch_read_through_connect(connect_server, standalone, scope_name, tmp_path):
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "events", 3)
    write_events(controller, scope_name, "events", range(600))

    outcome = drive(tmp_path, connect_server, "read", controller, scope_name, "events")

    assert outcome["count"] == 600
    assert outcome["columns"] == ["event", "scope", "stream", "segment_id", "offset"]
    assert sorted(number_of(event.encode()) for event in outcome["events"]) == list(range(600))
    assert outcome["places"] == [[scope_name, "events"]]
    assert len(outcome["segments"]) == 3
    assert outcome["positions"] == 600  # each event at its own (segment, offset)


def test_batch_write_through_connect_exactly_once(connect_server, standalone, scope_name, tmp_path):
    controller = standalone.controller_uri

    drive(tmp_path, connect_server, "write", controller, scope_name, "written", "1000")

    assert numbers(controller, scope_name, "written") == list(range(1000))
    assert open_transactions(standalone.store_port, scope_name, "written") == []


def test_streaming_copy_through_connect_exactly_once(connect_server, standalone, scope_name, tmp_path):
    controller = standalone.controller_uri
    checkpoint = tmp_path / "checkpoint"
    create_stream(controller, scope_name, "input", 2)
    create_stream(controller, scope_name, "output", 2)
    write_events(controller, scope_name, "input", range(300))

    first = drive(tmp_path, connect_server, "copy", controller, scope_name, "input", "output", str(checkpoint), "100")
    assert first["exception"] is None
    assert sum(first["input_rows"]) == 300 and max(first["input_rows"]) <= 100, first["input_rows"]
    assert numbers(controller, scope_name, "output") == list(range(300))
    done = batches(checkpoint, "commits")
    assert len(done) >= 3 and done == batches(checkpoint, "offsets")  # 100 events a micro-batch, each committed

    write_events(controller, scope_name, "input", range(300, 500))
    second = drive(tmp_path, connect_server, "copy", controller, scope_name, "input", "output", str(checkpoint),
                   "100", run=1)
    assert second["exception"] is None
    assert sum(second["input_rows"]) == 200, second["input_rows"]  # from the checkpoint on: nothing read twice
    assert numbers(controller, scope_name, "output") == list(range(500))
    assert batches(checkpoint, "commits")[-1] > done[-1]
