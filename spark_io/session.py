"""A local SparkSession set up for format ``tributary`` (tests, examples, notebooks).

Spark's Python workers run ``PYSPARK_PYTHON``: set to this interpreter, whose environment has
spark_io, the SDK and pyarrow (the default ``python3`` on ``PATH`` may have none of them).
Spark stays on loopback (``SPARK_LOCAL_IP``, the driver's address), with its web UI off.
"""

from __future__ import annotations

import os
import sys


def local_session(master: str = "local[2]", app: str = "tributary", **config: str):
    """A SparkSession on this machine with format ``tributary`` registered; ``config`` adds Spark settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from . import register

    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    for name, value in config.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


__all__ = ["local_session"]
