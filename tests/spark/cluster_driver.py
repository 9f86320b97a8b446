"""A Spark driver on a standalone cluster (tests/spark/test_cluster_mode.py): its executors are the
worker's JVMs, apart from this process's.

    python -m tests.spark.cluster_driver batch RESULT MASTER CONTROLLER SCOPE STREAM COUNT
    python -m tests.spark.cluster_driver copy RESULT MASTER CONTROLLER SCOPE INPUT OUTPUT CHECKPOINT [MAX_EVENTS]

``batch`` writes events 0..COUNT-1 (as tests.spark.support.write_events numbers them, made by Spark on
the executors) to STREAM, exactly once, then reads STREAM back with Spark; ``copy`` copies INPUT into
OUTPUT with a streaming query (availableNow, from CHECKPOINT). Each writes a JSON RESULT: the
application's id, and for ``batch`` what the read found. Nothing here is pickled by reference from
``tests`` (the executors cannot import it): the events are made by Spark SQL expressions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spark_io.session import spark_session

KEYS = 16


def session(master: str, app: str):
    return spark_session(master=master, app=app, conf={
        "spark.pyspark.python": sys.executable,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.executor.cores": "2",
        "spark.cores.max": "2",  # one executor of 2 cores on the worker
        "spark.executor.memory": "1g",
        "spark.sql.shuffle.partitions": "2",
    })


def batch(spark, controller: str, scope: str, stream: str, count: int) -> dict:
    options = {"controller": controller, "scope": scope, "stream": stream}
    events = spark.range(0, count, numPartitions=4).selectExpr(
        f"concat('k', cast(id % {KEYS} as string), ':', cast(id div {KEYS} as string)) as event",
        f"concat('key-', cast(id % {KEYS} as string)) as routing_key")
    events.write.format("tributary").mode("append").options(**options).option("default_num_segments", "3").save()
    read = spark.read.format("tributary").options(**options).load()
    rows = read.select("event", "segment_id").collect()
    return {"count": read.count(), "events": sorted(bytes(row.event).decode() for row in rows),
            "segments": sorted({row.segment_id for row in rows})}


def copy(spark, controller: str, scope: str, source: str, sink: str, checkpoint: str, limit: list[str]) -> dict:
    reader = (spark.readStream.format("tributary").option("controller", controller).option("scope", scope)
              .option("stream", source).option("start_stream_cut", "earliest"))
    if limit:
        reader = reader.option("max_events_per_trigger", limit[0])
    query = (reader.load().selectExpr("event", "cast(segment_id as string) as routing_key")
             .writeStream.format("tributary").option("controller", controller).option("scope", scope)
             .option("stream", sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    return {}


def main() -> None:
    command, output, master, controller, scope, *rest = sys.argv[1:]
    spark = session(master, f"cluster-{command}")
    result = {"app_id": spark.sparkContext.applicationId, "master": spark.sparkContext.master}
    if command == "batch":
        stream, count = rest
        result.update(batch(spark, controller, scope, stream, int(count)))
    elif command == "copy":
        source, sink, checkpoint, *limit = rest
        result.update(copy(spark, controller, scope, source, sink, checkpoint, limit))
    else:
        raise SystemExit(f"unknown command {command}")
    Path(output).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
