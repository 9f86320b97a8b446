"""A Spark driver for crash tests: copies one stream into another with a streaming query (availableNow).

    python -m tests.spark.copy_driver CONTROLLER SCOPE INPUT OUTPUT CHECKPOINT [MAX_EVENTS_PER_TRIGGER]
"""

from __future__ import annotations

import sys

from spark_io.session import local_session


def main() -> None:
    controller, scope, source, sink, checkpoint, *limit = sys.argv[1:]
    spark = local_session(app="copy-driver")
    reader = (spark.readStream.format("tributary").option("controller", controller).option("scope", scope)
              .option("stream", source).option("start_stream_cut", "earliest"))
    if limit:
        reader = reader.option("max_events_per_trigger", limit[0])
    query = (reader.load().select("event", "segment_id")
             .selectExpr("event", "cast(segment_id as string) as routing_key")
             .writeStream.format("tributary").option("controller", controller).option("scope", scope)
             .option("stream", sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
