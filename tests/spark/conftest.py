"""One SparkSession (``local[2]``) and one standalone Tributary for every Spark test of the run.

Spark's Python workers run ``PYSPARK_PYTHON``: set to this interpreter, whose environment has
spark_io, the SDK and pyarrow installed (the pip default ``python3`` may have none of them).
Spark stays on loopback (``SPARK_LOCAL_IP``, the driver's bind address), its UI off.
"""

from __future__ import annotations

import itertools
import os
import sys

import pytest

from tests.support.standalone import StandaloneProcess

SPARK_ENVIRONMENT = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                     "SPARK_LOCAL_IP": "127.0.0.1"}
_names = itertools.count()


def spark_session(master: str = "local[2]", app: str = "tributary-tests"):
    """A SparkSession as the tests (and the pipeline example) use it, with format ``tributary`` registered."""
    os.environ.update(SPARK_ENVIRONMENT)
    from pyspark.sql import SparkSession

    import spark_io

    session = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    spark_io.register(session)
    return session


@pytest.fixture(scope="session")
def spark():
    session = spark_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    process = StandaloneProcess(tmp_path_factory.mktemp("spark-standalone") / "data").start()
    yield process
    process.remove_data()


@pytest.fixture
def scope_name(request) -> str:
    """A scope of this test's own (letters, digits and dashes)."""
    return f"spark-{next(_names)}-{request.node.name[:30]}".replace("_", "-").replace("[", "-").replace("]", "")
