"""SparkSessions set up for format ``tributary`` (tests, examples, notebooks, drivers).

:func:`local_session` is a session on this machine: Spark's Python workers run ``PYSPARK_PYTHON``,
set to this interpreter, whose environment has spark_io, the SDK and pyarrow (the default
``python3`` on ``PATH`` may have none of them); Spark stays on loopback (``SPARK_LOCAL_IP``, the
driver's address), with its web UI off.

:func:`spark_session` is what a driver that may run on a cluster uses (``spark_io.examples``): a
local master gets :func:`local_session`, any other master Spark's own defaults (executors must
reach the driver, so nothing is pinned to loopback). See "Running on a Spark cluster" in
docs/spark.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping


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


def spark_session(master: str | None = None, app: str = "tributary", conf: Mapping[str, str] | None = None):
    """A SparkSession with format ``tributary`` registered, on this machine or on a cluster.

    ``master``: a Spark master URL. None: the one spark-submit was given, when spark-submit started
    this process (it then hands over ``PYSPARK_GATEWAY_PORT``), else ``local[2]``. A ``local`` master
    gets :func:`local_session`; any other, Spark's defaults and log level WARN. ``conf``: Spark
    settings, given to the session builder after this module's defaults. ``spark.pyspark.python``
    (the interpreter of Spark's Python workers) is also exported as ``PYSPARK_PYTHON`` first, as
    spark-submit does: PySpark reads the workers' interpreter from that variable, not from the
    settings.
    """
    conf = dict(conf or {})
    if "spark.pyspark.python" in conf:
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not submitted:
        master = "local[2]"
    if master is not None and master.startswith("local"):
        return local_session(master, app, **conf)
    from pyspark.sql import SparkSession

    from . import register

    builder = SparkSession.builder if submitted else SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    for name, value in conf.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")  # spark-submit's default, INFO, buries the application's output
    register(session)
    return session


__all__ = ["local_session", "spark_session"]
