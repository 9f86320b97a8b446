"""Batch reads with format ``tributary``: partitions per segment slice, exact offsets, cuts, scaling."""

from __future__ import annotations

import pytest

from tests.spark.support import create_stream, number_of, read_events, tail_cut, write_events

pytestmark = pytest.mark.spark


def load(spark, standalone, scope, stream="s", **options):
    reader = (spark.read.format("tributary").option("controller", standalone.controller_uri)
              .option("scope", scope).option("stream", stream))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_a_four_segment_stream_of_100000_events_is_read_once_with_exact_offsets(spark, standalone, scope_name):
    create_stream(standalone.controller_uri, scope_name, "s", 4)
    write_events(standalone.controller_uri, scope_name, "s", range(100_000), size=100)
    frame = load(spark, standalone, scope_name)
    assert frame.schema.simpleString() == ("struct<event:binary,scope:string,stream:string,segment_id:bigint,"
                                           "offset:bigint>")
    assert frame.rdd.getNumPartitions() == 4
    rows = frame.collect()
    assert len(rows) == 100_000
    assert sorted(number_of(row.event) for row in rows) == list(range(100_000))
    assert {(row.scope, row.stream) for row in rows} == {(scope_name, "s")}
    expected = {(segment_id, offset, payload) for segment_id, offset, payload in
                read_events(standalone.controller_uri, scope_name, "s")}
    assert {(row.segment_id, row.offset, bytes(row.event)) for row in rows} == expected
