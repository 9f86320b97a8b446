"""The example pipeline's command line (``python -m spark_io.examples.sensor_totals``): its help says what goes
in and out and how to give Spark settings, and ``--master``/``--conf`` reach the session it runs in.
(The pipeline's exactly-once run across a driver kill is in test_stream_write.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from spark_io import faults
from spark_io.examples import sensor_readings, sensor_totals

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def test_the_help_describes_the_input_the_output_and_the_spark_settings(capsys):
    with pytest.raises(SystemExit) as exit_status:
        sensor_totals.main(["--help"])
    assert exit_status.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse rewraps the option help
    for input_format in ['{"sensor": "s-2", "value": 12.5, "time": 1704067230.0}',
                         "sensor string, value double, time double", "seconds since the epoch",
                         "routing key is not used", "is skipped", "spark_io.examples.sensor_readings"]:
        assert input_format in text, input_format
    for output_format in ['"window_start": "2024-01-01 00:00:00"', '"window_end"', '"readings": 20', '"total": 610.0',
                          "routing key: the sensor", "spark.sql.session.timeZone"]:
        assert output_format in text, output_format
    for setting in ["--master MASTER", "spark://HOST:PORT", "--conf KEY=VALUE", "(repeatable)", "spark-submit",
                    "Running on a Spark cluster"]:
        assert setting in text, setting


@pytest.mark.parametrize("arguments, message", [
    (["--conf", "spark.sql.session.timeZone"], "expected KEY=VALUE"),
    (["--print"], "--print needs --available-now"),
])
def test_bad_settings_are_usage_errors(capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_status:
        sensor_totals.main(["--scope", "s", "--input", "i", "--output", "o", "--checkpoint", "c", *arguments])
    assert exit_status.value.code == 2
    assert message in capsys.readouterr().err


def test_master_and_conf_reach_the_pipelines_session(standalone, scope_name, tmp_path):
    """A run with --master local[1] and --conf (repeated): the session's time zone shows in the totals it prints,
    and Spark's Python workers ran the interpreter of spark.pyspark.python (a wrapper that records each start)."""
    controller = standalone.controller_uri
    asyncio.run(sensor_readings.write(controller, scope_name, "readings", range(150)))  # 00:00:00 to 00:02:29 UTC
    starts = tmp_path / "worker-starts"
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\necho started >> {starts}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    arguments = ["--controller", controller, "--scope", scope_name, "--input", "readings", "--output", "totals",
                 "--checkpoint", str(tmp_path / "checkpoint"), "--available-now", "--print", "--master", "local[1]",
                 "--conf", "spark.sql.session.timeZone=Asia/Kolkata", "--conf", f"spark.pyspark.python={wrapper}",
                 "--conf", "spark.sql.shuffle.partitions=3"]
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYSPARK_")}
    process = subprocess.Popen([sys.executable, "-m", "spark_io.examples.sensor_totals", *arguments], cwd=ROOT,
                               env={**environment, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        output, errors = process.communicate(timeout=240)
    finally:
        faults.kill_session(process.pid)  # the driver, its JVM and Spark's Python workers
        process.wait()
    assert process.returncode == 0, errors[-3000:]
    totals = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    # the watermark (00:02:29 less 10 s) closed [00:00, 00:01) and [00:01, 00:02), in Kolkata's time (UTC+05:30)
    assert [(total["window_start"], total["sensor"]) for total in totals] == [
        (f"2024-01-01 05:3{minute}:00", f"s-{sensor}") for minute in (0, 1) for sensor in range(3)]
    assert [(total["readings"], total["total"]) for total in totals[:3]] == [(20, 570.0), (20, 590.0), (20, 610.0)]
    assert starts.exists() and starts.read_text().count("started") >= 1
