"""A streaming pipeline: sensor readings in, per-sensor totals per time window out, exactly once end to end.

Input (--input): one JSON object per event, UTF-8, for example
  {"sensor": "s-2", "value": 12.5, "time": 1704067230.0}
read with Spark's from_json as "sensor string, value double, time double": time
in seconds since the epoch; other fields are ignored; an event that is not such
an object, or has no sensor or no time, is skipped. The routing key is not used
(python -m spark_io.examples.sensor_readings writes such readings, keyed by
sensor).

Output (--output): one JSON event per sensor and window once the window is
complete, routing key: the sensor; window_start and window_end are in the
session's time zone (spark.sql.session.timeZone):
  {"sensor": "s-2", "window_start": "2024-01-01 00:00:00",
   "window_end": "2024-01-01 00:01:00", "readings": 20, "total": 610.0}

A window is emitted once the watermark -- the latest reading time seen, less
--lateness -- passes its end; readings later than that are dropped. The open
windows are Spark state in the checkpoint; the input position is Spark's offset
log (stream cuts); the output is written through transactions committed with
each batch's fence record. Killed at any moment and restarted with the same
checkpoint, the pipeline neither loses nor repeats a reading or an output event.

    python -m spark_io.examples.sensor_totals --controller tcp://127.0.0.1:9090 \\
        --scope demo --input readings --output totals --checkpoint ./checkpoint

Spark: --master and --conf KEY=VALUE go to the SparkSession builder (a local
master stays on loopback). Started by spark-submit, the pipeline takes
spark-submit's master and settings. On a cluster every executor's Python needs
tributary[spark], and the executors connect to --controller and to the segment
stores themselves: see "Running on a Spark cluster" in docs/spark.md.
"""

from __future__ import annotations

import argparse
import json

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


def settings(pairs: list[str]) -> dict[str, str]:
    """``--conf`` values (KEY=VALUE) as a dict; raises ValueError for one without ``=``."""
    found = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected KEY=VALUE")
        found[key.strip()] = value
    return found


def print_totals(spark, controller: str, scope: str, sink: str) -> None:
    """Prints every total of the output stream, one JSON object a line, by window and sensor."""
    events = (spark.read.format("tributary").option("controller", controller)
              .option("scope", scope).option("stream", sink).load().select(F.col("event").cast("string")))
    totals = [json.loads(row.event) for row in events.collect()]
    for total in sorted(totals, key=lambda total: (total["window_start"], total["sensor"])):
        print(json.dumps(total), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spark_io.examples.sensor_totals",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controller", default="tcp://127.0.0.1:9090",
                        help="the controller's URI; on a cluster, one the executors reach (default: %(default)s)")
    parser.add_argument("--scope", required=True)
    parser.add_argument("--input", required=True, help="the stream of readings (JSON, see above)")
    parser.add_argument("--output", required=True, help="the stream of totals (created if missing)")
    parser.add_argument("--checkpoint", required=True,
                        help="Spark's checkpoint directory for this pipeline (on a cluster: shared storage)")
    parser.add_argument("--window", default="1 minute", help="the length of a window, a Spark interval "
                                                             "(default: %(default)s)")
    parser.add_argument("--lateness", default="10 seconds",
                        help="how late a reading may come, the watermark delay (default: %(default)s)")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is there, then stop (default: a batch every second, until killed)")
    parser.add_argument("--print", action="store_true", dest="print_totals",
                        help="with --available-now: then print every total of --output, one JSON object a line")
    parser.add_argument("--master", default=None,
                        help="Spark's master URL: local[N], spark://HOST:PORT, yarn, k8s://... (default: "
                             "spark-submit's, else local[2])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session, e.g. spark.sql.session.timeZone=UTC (repeatable)")
    args = parser.parse_args(argv)
    if args.print_totals and not args.available_now:
        parser.error("--print needs --available-now (without it the pipeline does not end)")
    try:
        conf = settings(args.conf)
    except ValueError as error:
        parser.error(str(error))

    from spark_io.session import spark_session

    spark = spark_session(args.master, app="sensor-totals", conf=conf)
    query = start(spark, args.controller, args.scope, args.input, args.output, args.checkpoint,
                  window=args.window, lateness=args.lateness, available_now=args.available_now)
    query.awaitTermination()
    if args.print_totals:
        print_totals(spark, args.controller, args.scope, args.output)
    spark.stop()


if __name__ == "__main__":
    main()
