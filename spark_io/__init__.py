"""spark_io: PySpark's reader and writer of Tributary (and Pravega) streams, format ``tributary``.

A Python data source (``pyspark.sql.datasource``, PySpark 4.2 or newer, with pyarrow): no JVM
connector jar; Spark's Python workers speak the wire protocol through the SDK. Options, columns
and guarantees follow the Pravega Spark connector's (see ``docs/spark.md``)::

    import spark_io
    spark_io.register(spark)
    df = (spark.read.format("tributary").option("controller", "tcp://127.0.0.1:9090")
          .option("scope", "examples").option("stream", "events").load())
"""

from __future__ import annotations


def register(spark) -> None:
    """Registers format ``tributary`` with ``spark``, a SparkSession, classic or Spark Connect (both have
    ``spark.dataSource.register``; a Connect session sends the class to its server, where Spark's Python workers
    import ``spark_io``); call once per session."""
    from .source import TributaryDataSource

    spark.dataSource.register(TributaryDataSource)


__all__ = ["register"]
