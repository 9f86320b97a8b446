"""Batch writes with format ``tributary``: transactions per task, routing keys, failures, refusals."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from tests.spark.support import number_of, open_transactions, read_events
from tests.support.sdk import event_of, parse_event

pytestmark = pytest.mark.spark


def writer(frame, standalone, scope, stream="s", **options):
    write = (frame.write.format("tributary").mode("append").option("controller", standalone.controller_uri)
             .option("scope", scope).option("stream", stream))
    for name, value in options.items():
        write = write.option(name, str(value))
    return write


def keyed_rows(spark, count: int, keys: int = 16, partitions: int = 4):
    """Rows (event, routing_key) for numbers 0..count-1, as tests.spark.support.write_events makes them,
    each key's rows in one partition in number order (a shuffle does not keep the order by itself)."""
    rows = [(n, event_of(n % keys, n // keys), f"key-{n % keys}") for n in range(count)]
    frame = spark.createDataFrame(rows, "n long, event binary, routing_key string")
    return frame.repartition(partitions, "routing_key").sortWithinPartitions("n").select("event", "routing_key")


@pytest.mark.parametrize("exactly_once", [True, False])
def test_written_rows_are_read_back_once_with_per_key_order(spark, standalone, scope_name, exactly_once):
    """Every row becomes one event; rows of one key, written by one task, keep their order in the stream
    (the frame is repartitioned by key, so each key's rows are in one task, in order)."""
    frame = keyed_rows(spark, 20_000)
    writer(frame, standalone, scope_name, default_num_segments=3, exactly_once=exactly_once).save()
    events = read_events(standalone.controller_uri, scope_name, "s")
    assert sorted(number_of(payload) for _, _, payload in events) == list(range(20_000))
    last: dict[str, int] = {}
    for _, _, payload in sorted(events, key=lambda e: (e[0], e[1])):
        key, sequence = parse_event(payload)
        assert sequence > last.get(key, -1), f"{key}: {sequence} after {last[key]}"
        last[key] = sequence
    assert len({segment for segment, _, _ in events}) == 3
    assert open_transactions(standalone.store_port, scope_name, "s") == []


def test_string_events_and_no_routing_key(spark, standalone, scope_name):
    frame = spark.createDataFrame([(f"text-{n}",) for n in range(500)], "event string")
    writer(frame, standalone, scope_name).save()
    events = read_events(standalone.controller_uri, scope_name, "s")
    assert sorted(bytes(payload) for _, _, payload in events) == sorted(f"text-{n}".encode() for n in range(500))


def test_a_failing_task_leaves_nothing_visible_and_no_open_transaction(spark, standalone, scope_name):
    """A task that fails after writing part of its rows aborts its transaction; the job fails; nothing of
    the other tasks' committed-looking work becomes visible either (the driver aborts)."""
    frame = spark.range(0, 4000, numPartitions=4).select(
        F.when(F.col("id") == 3500, F.raise_error(F.lit("boom at row 3500")))
        .otherwise(F.concat(F.lit("row-"), F.col("id").cast("string"))).alias("event"))
    with pytest.raises(Exception, match="boom at row 3500"):
        writer(frame, standalone, scope_name, default_num_segments=2).save()
    assert read_events(standalone.controller_uri, scope_name, "s") == []
    assert open_transactions(standalone.store_port, scope_name, "s") == []


def test_overwrite_and_bad_columns_are_refused_at_planning(spark, standalone, scope_name):
    frame = spark.createDataFrame([(b"x",)], "event binary")
    with pytest.raises(Exception, match="append-only"):
        writer(frame, standalone, scope_name).mode("overwrite").save()
    with pytest.raises(Exception, match="no column 'event'"):
        writer(spark.createDataFrame([(b"x",)], "payload binary"), standalone, scope_name).save()
    with pytest.raises(Exception, match="column 'event' must be binary or string"):
        writer(spark.createDataFrame([(1,)], "event int"), standalone, scope_name).save()
    with pytest.raises(Exception, match="column 'routing_key' must be string"):
        writer(spark.createDataFrame([(b"x", 1)], "event binary, routing_key int"), standalone, scope_name).save()
    with pytest.raises(Exception, match="transaction_timeout_ms"):
        writer(frame, standalone, scope_name, transaction_timeout_ms=5).save()


def test_writing_to_a_missing_stream_without_creation_fails_clearly(spark, standalone, scope_name):
    frame = spark.createDataFrame([(b"x",)], "event binary")
    with pytest.raises(Exception, match="(?i)not.*(found|exist)"):
        writer(frame, standalone, scope_name, allow_create_scope="false", allow_create_stream="false").save()
