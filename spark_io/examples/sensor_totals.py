"""A streaming pipeline: sensor readings in, per-sensor totals per time window out, exactly once end to end.

Input: a stream of JSON readings, ``{"sensor": "s-3", "value": 12.5, "time": 1700000000.0}``
(``time`` in seconds since the epoch; routing key: the sensor). Output: one JSON event per sensor
and window once the window is complete, ``{"sensor": "s-3", "window_start": "...",
"window_end": "...", "readings": 41, "total": 512.5}`` (routing key: the sensor).

The open windows are Spark state (a windowed streaming aggregation with a watermark, kept in the
checkpoint; a window is emitted once the watermark -- the latest reading time seen, less
``--lateness`` -- passes its end); the input position is Spark's offset log (stream cuts); the
output is written through transactions committed with each batch's fence record. Killed at any
moment and restarted with the same checkpoint, the pipeline neither loses nor repeats a reading
or an output event.

    python -m spark_io.examples.sensor_totals --controller tcp://127.0.0.1:9090 \\
        --scope demo --input readings --output totals --checkpoint /tmp/totals-checkpoint

(``--available-now`` processes what is there and stops; without it, a batch every second.)
"""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F


def start(spark, controller: str, scope: str, source: str, sink: str, checkpoint: str, *,
          window: str = "1 minute", lateness: str = "10 seconds", available_now: bool = False,
          interval: str = "1 second"):
    """Starts the pipeline; returns the StreamingQuery."""
    readings = (spark.readStream.format("tributary").option("controller", controller)
                .option("scope", scope).option("stream", source).option("start_stream_cut", "earliest").load())
    parsed = (readings.select(F.from_json(F.col("event").cast("string"), "sensor string, value double, time double")
                              .alias("reading"))
              .select("reading.*").where(F.col("sensor").isNotNull() & F.col("time").isNotNull())
              .withColumn("at", F.col("time").cast("timestamp")))
    totals = (parsed.withWatermark("at", lateness).groupBy("sensor", F.window("at", window))
              .agg(F.count(F.lit(1)).alias("readings"), F.sum("value").alias("total")))
    events = totals.select(
        F.to_json(F.struct("sensor", F.col("window.start").cast("string").alias("window_start"),
                           F.col("window.end").cast("string").alias("window_end"), "readings", "total")).alias("event"),
        F.col("sensor").alias("routing_key"))
    writer = (events.writeStream.format("tributary").outputMode("append")
              .option("controller", controller).option("scope", scope).option("stream", sink)
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=interval)
    return writer.start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--controller", default="tcp://127.0.0.1:9090")
    parser.add_argument("--scope", required=True)
    parser.add_argument("--input", required=True, help="the stream of readings")
    parser.add_argument("--output", required=True, help="the stream of totals")
    parser.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory for this pipeline")
    parser.add_argument("--window", default="1 minute", help="the length of a window (a Spark interval)")
    parser.add_argument("--lateness", default="10 seconds", help="how late a reading may come (the watermark delay)")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    from spark_io.session import local_session

    spark = local_session(args.master, app="sensor-totals")
    query = start(spark, args.controller, args.scope, args.input, args.output, args.checkpoint,
                  window=args.window, lateness=args.lateness, available_now=args.available_now)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
