"""Streaming writes with format ``tributary``: exactly once per micro-batch, across replays and a
driver killed between our commit and Spark's record of the batch; the example pipeline."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spark_io import faults
from tests.spark.support import (create_stream, number_of, open_transactions, read_events, sink_records,
                                 write_events)

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def copy_query(spark, standalone, scope, checkpoint, **options):
    reader = (spark.readStream.format("tributary").option("controller", standalone.controller_uri)
              .option("scope", scope).option("stream", "in").option("start_stream_cut", "earliest"))
    writer = (reader.load().select("event").writeStream.format("tributary")
              .option("controller", standalone.controller_uri).option("scope", scope).option("stream", "out")
              .option("checkpointLocation", str(checkpoint)))
    for name, value in options.items():
        writer = writer.option(name, str(value))
    return writer.trigger(availableNow=True).start()


def output_numbers(standalone, scope, stream="out") -> list[int]:
    return sorted(number_of(payload) for _, _, payload in read_events(standalone.controller_uri, scope, stream))


def last_batch(checkpoint: Path, folder: str) -> int | None:
    numbers = [int(path.name) for path in (checkpoint / folder).glob("[0-9]*")] if (checkpoint / folder).exists() \
        else []
    return max(numbers, default=None)


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_stream_copied_twice_through_a_checkpoint(spark, standalone, scope_name, tmp_path, exactly_once):
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "in", 3)
    write_events(controller, scope_name, "in", range(0, 3000))
    copy_query(spark, standalone, scope_name, tmp_path, exactly_once=exactly_once).awaitTermination(120)
    assert output_numbers(standalone, scope_name) == list(range(3000))
    write_events(controller, scope_name, "in", range(3000, 4000))
    copy_query(spark, standalone, scope_name, tmp_path, exactly_once=exactly_once).awaitTermination(120)
    assert output_numbers(standalone, scope_name) == list(range(4000))
    assert open_transactions(standalone.store_port, scope_name, "out") == []


def test_a_replayed_batch_is_not_written_twice(spark, standalone, scope_name, tmp_path):
    """Spark replays a batch whose commit it did not record (commits/N removed, as after a crash right
    after our commit): the fence drops the replay, and the new transactions are aborted."""
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "in", 2)
    write_events(controller, scope_name, "in", range(0, 2000))
    copy_query(spark, standalone, scope_name, tmp_path).awaitTermination(120)
    batch = last_batch(tmp_path, "commits")
    (tmp_path / "commits" / str(batch)).unlink()
    (tmp_path / "commits" / f".{batch}.crc").unlink(missing_ok=True)
    copy_query(spark, standalone, scope_name, tmp_path).awaitTermination(120)
    assert last_batch(tmp_path, "commits") == batch  # Spark ran the batch again and recorded it this time
    assert output_numbers(standalone, scope_name) == list(range(2000))
    assert open_transactions(standalone.store_port, scope_name, "out") == []
    records = sink_records(standalone.store_port, scope_name, "out")
    jobs = [record for key, record in records.items() if key.startswith("job/")]
    assert len(jobs) == 2 and all(job["state"] == "closed" and len(job["transactions"]) == 2 for job in jobs)
    (query,) = [record for key, record in records.items() if key.startswith("query/")]
    assert query["batch"] == batch and query["state"] == "committed"


def run_driver(arguments: list[str], fault: str | None = None, timeout: float = 240) -> int:
    """Runs a Spark driver in a session of its own; returns its exit status. Whatever the outcome, every
    process of the session is gone afterwards."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("TRIBUTARY_SPARK_FAULT", None)
    if fault is not None:
        environment["TRIBUTARY_SPARK_FAULT"] = fault
    process = subprocess.Popen([sys.executable, "-m", *arguments], cwd=ROOT, env=environment,
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, errors = process.communicate(timeout=timeout)
    finally:
        faults.kill_session(process.pid)  # the driver, its JVM and Spark's Python workers
        process.wait()
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"driver failed ({process.returncode}): {errors.decode()[-3000:]}")
    return process.returncode


def test_a_driver_killed_between_our_commit_and_sparks_record_is_restarted_exactly_once(
        standalone, scope_name, tmp_path):
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "in", 2)
    write_events(controller, scope_name, "in", range(0, 3000))
    arguments = ["tests.spark.copy_driver", controller, scope_name, "in", "out", str(tmp_path), "1000"]
    assert run_driver(arguments, fault="sink-committed:1") == -signal.SIGKILL
    assert last_batch(tmp_path, "offsets") == 1 and last_batch(tmp_path, "commits") == 0
    written = output_numbers(standalone, scope_name)
    assert len(written) == len(set(written)) and len(written) > 1000  # batch 1 is in the output already
    assert run_driver(arguments) == 0
    assert output_numbers(standalone, scope_name) == list(range(3000))
    assert open_transactions(standalone.store_port, scope_name, "out") == []


def test_the_sensor_totals_pipeline_is_exactly_once_across_a_driver_kill(standalone, scope_name, tmp_path):
    """Readings -> totals per sensor and minute (a windowed aggregation: Spark state) -> a stream. The
    driver is killed right after committing the batch that emitted the first windows, then restarted
    and fed more readings: every (sensor, window) total appears exactly once, and each is right."""
    import asyncio

    import clients.client as sdk

    controller = standalone.controller_uri
    create_stream(controller, scope_name, "readings", 2)
    sensors = [f"s-{n}" for n in range(5)]

    async def write(numbers):
        async with sdk.connect(controller) as client, client.create_writer(scope_name, "readings") as writer:
            for number in numbers:  # reading n: sensor n % 5, value n, at second n
                sensor = sensors[number % len(sensors)]
                await writer.write(json.dumps({"sensor": sensor, "value": number, "time": number}).encode(), sensor)

    asyncio.run(write(range(0, 500)))
    arguments = ["spark_io.examples.sensor_totals", "--controller", controller, "--scope", scope_name,
                 "--input", "readings", "--output", "totals", "--checkpoint", str(tmp_path), "--available-now",
                 "--window", "60 seconds", "--lateness", "0 seconds"]
    # batch 0 takes readings 0..499; batch 1 (no new data) emits the windows the watermark (499 s) closed
    assert run_driver(arguments, fault="sink-committed:1") == -signal.SIGKILL
    assert last_batch(tmp_path, "commits") == 0
    assert len(read_events(controller, scope_name, "totals")) == 8 * 5  # [0, 60) .. [420, 480) were committed
    asyncio.run(write(range(500, 1000)))
    assert run_driver(arguments) == 0
    totals = [json.loads(payload) for _, _, payload in read_events(controller, scope_name, "totals")]
    keys = [(total["sensor"], total["window_start"]) for total in totals]
    assert len(keys) == len(set(keys)), "a window's total was written twice"
    assert len(keys) == 16 * 5  # windows [0, 60) .. [900, 960): closed by the watermark at 999 s
    def seconds(text: str) -> float:  # window times are in the session's time zone: compare them to the first
        return datetime.datetime.fromisoformat(text).timestamp()

    first = min(seconds(total["window_start"]) for total in totals)
    for total in totals:
        start = int(seconds(total["window_start"]) - first)
        index = sensors.index(total["sensor"])
        values = [n for n in range(start, start + 60) if n % len(sensors) == index]
        assert (total["readings"], total["total"]) == (len(values), sum(values)), total


def test_a_failing_task_of_a_micro_batch_leaves_no_open_transaction(spark, standalone, scope_name, tmp_path):
    """A row that fails in one task fails the query; the other tasks' transactions are aborted by the
    driver (or by themselves, when they finish after the abort), so none stays open and nothing is visible."""
    from pyspark.sql import functions as F

    controller = standalone.controller_uri
    create_stream(controller, scope_name, "in", 2)
    write_events(controller, scope_name, "in", range(0, 2000))
    source = (spark.readStream.format("tributary").option("controller", controller).option("scope", scope_name)
              .option("stream", "in").option("start_stream_cut", "earliest").load())
    bad = F.col("event").cast("string").startswith("k3:100")  # one event of the 2,000
    failing = source.select(F.when(bad, F.raise_error(F.lit("bad reading"))).otherwise(F.col("event")).alias("event"))
    query = (failing.writeStream.format("tributary").option("controller", controller).option("scope", scope_name)
             .option("stream", "out").option("checkpointLocation", str(tmp_path)).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="bad reading"):
        query.awaitTermination(120)
    assert read_events(controller, scope_name, "out") == []
    assert open_transactions(standalone.store_port, scope_name, "out") == []
    jobs = {key: record for key, record in sink_records(standalone.store_port, scope_name, "out").items()
            if key.startswith("job/")}
    assert all(record["state"] == "closed" for record in jobs.values()), jobs
