"""A Spark Connect client driver (tests/spark/test_connect.py): its session is ``SparkSession.builder.remote(URL)``,
so every query runs in the Connect server's Spark (tests/support/spark_connect.py) and its Python workers. It runs
in a process of its own: a Connect session switches PySpark in its process to Connect mode
(``SPARK_CONNECT_MODE_ENABLED``), which the pytest worker's shared local session must not see.

    python -m tests.spark.connect_driver read RESULT URL CONTROLLER SCOPE STREAM
    python -m tests.spark.connect_driver write RESULT URL CONTROLLER SCOPE STREAM COUNT
    python -m tests.spark.connect_driver copy RESULT URL CONTROLLER SCOPE INPUT OUTPUT CHECKPOINT MAX_EVENTS

``read`` reads STREAM in batch; ``write`` writes events 0..COUNT-1 (as tests.spark.support.write_events numbers
them, made by Spark SQL expressions on the server) to STREAM, exactly once; ``copy`` copies INPUT into OUTPUT
with a streaming query (availableNow, MAX_EVENTS per micro-batch, from CHECKPOINT). Each writes a JSON RESULT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = 16


def session(url: str):
    from pyspark.sql import SparkSession

    import spark_io

    spark = SparkSession.builder.remote(url).getOrCreate()
    spark_io.register(spark)
    return spark


def read(spark, controller: str, scope: str, stream: str) -> dict:
    frame = (spark.read.format("tributary").option("controller", controller)
             .option("scope", scope).option("stream", stream).load())
    rows = frame.collect()
    return {"count": frame.count(), "columns": frame.columns,
            "events": [bytes(row.event).decode() for row in rows],
            "places": sorted({(row.scope, row.stream) for row in rows}),
            "segments": sorted({row.segment_id for row in rows}),
            "positions": len({(row.segment_id, row.offset) for row in rows})}


def write(spark, controller: str, scope: str, stream: str, count: int) -> dict:
    events = spark.range(0, count, numPartitions=4).selectExpr(
        f"concat('k', cast(id % {KEYS} as string), ':', cast(id div {KEYS} as string)) as event",
        f"concat('key-', cast(id % {KEYS} as string)) as routing_key")
    (events.write.format("tributary").mode("append").option("controller", controller).option("scope", scope)
     .option("stream", stream).option("default_num_segments", "3").save())
    return {}


def copy(spark, controller: str, scope: str, source: str, sink: str, checkpoint: str, max_events: str) -> dict:
    query = (spark.readStream.format("tributary").option("controller", controller).option("scope", scope)
             .option("stream", source).option("start_stream_cut", "earliest")
             .option("max_events_per_trigger", max_events).load()
             .selectExpr("event", "cast(segment_id as string) as routing_key")
             .writeStream.format("tributary").option("controller", controller).option("scope", scope)
             .option("stream", sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return {"query_id": query.id, "exception": str(query.exception()) if query.exception() else None,
            "input_rows": [sum(source.numInputRows for source in progress.sources)
                           for progress in query.recentProgress]}  # per micro-batch


def main() -> None:
    command, output, url, controller, scope, *rest = sys.argv[1:]
    spark = session(url)
    result: dict = {"session": f"{type(spark).__module__}.{type(spark).__name__}"}
    if command == "read":
        (stream,) = rest
        result.update(read(spark, controller, scope, stream))
    elif command == "write":
        stream, count = rest
        result.update(write(spark, controller, scope, stream, int(count)))
    elif command == "copy":
        source, sink, checkpoint, max_events = rest
        result.update(copy(spark, controller, scope, source, sink, checkpoint, max_events))
    else:
        raise SystemExit(f"unknown command {command}")
    Path(output).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
