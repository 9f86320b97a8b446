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


def test_a_large_segment_is_read_by_several_partitions_each_event_once(spark, standalone, scope_name):
    """max_partition_bytes cuts one segment's slice at event boundaries (LocateOffset): a one-segment stream
    is read by several tasks, and the rows are exactly the stream's, offsets included."""
    create_stream(standalone.controller_uri, scope_name, "s", 1)
    write_events(standalone.controller_uri, scope_name, "s", range(20_000), size=100)  # ~2.3 MB
    frame = load(spark, standalone, scope_name, max_partition_bytes=256 * 1024)
    assert frame.rdd.getNumPartitions() == 9
    rows = frame.collect()
    assert len(rows) == 20_000
    expected = {(segment_id, offset, payload) for segment_id, offset, payload in
                read_events(standalone.controller_uri, scope_name, "s")}
    assert {(row.segment_id, row.offset, bytes(row.event)) for row in rows} == expected
    assert load(spark, standalone, scope_name).rdd.getNumPartitions() == 1  # the default: 128 MiB


def test_a_read_between_two_stream_cuts(spark, standalone, scope_name):
    """start_stream_cut and end_stream_cut in their text form bound the read exactly."""
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 3)
    write_events(controller, scope_name, "s", range(0, 3000))
    start = tail_cut(controller, scope_name, "s")
    write_events(controller, scope_name, "s", range(3000, 5000))
    end = tail_cut(controller, scope_name, "s")
    write_events(controller, scope_name, "s", range(5000, 6000))
    rows = load(spark, standalone, scope_name, start_stream_cut=start.as_text(), end_stream_cut=end.as_text()).collect()
    assert sorted(number_of(row.event) for row in rows) == list(range(3000, 5000))
    assert all(start.positions[row.segment_id] <= row.offset < end.positions[row.segment_id] for row in rows)
    later = load(spark, standalone, scope_name, start_stream_cut=end.as_text()).collect()
    assert sorted(number_of(row.event) for row in later) == list(range(5000, 6000))


def test_a_scaled_stream_is_read_completely(spark, standalone, scope_name):
    """Events written before and after a scale (2 -> 3 segments) are all read; predecessors and successors
    are partitions of their own, and each key's events keep their order within each segment."""
    import asyncio

    import clients.client as sdk

    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 2)
    write_events(controller, scope_name, "s", range(0, 4000), keys=32)

    async def scale():
        async with sdk.connect(controller) as client:
            segments = await client.get_segments(scope_name, "s")
            await client.scale_stream(scope_name, "s", [segments[1].segment], [(0.5, 0.75), (0.75, 1.0)])
    asyncio.run(scale())
    write_events(controller, scope_name, "s", range(4000, 8000), keys=32)
    frame = load(spark, standalone, scope_name)
    assert frame.rdd.getNumPartitions() == 4
    rows = frame.collect()
    assert sorted(number_of(row.event, keys=32) for row in rows) == list(range(8000))
    assert len({row.segment_id for row in rows}) == 4


def test_metadata_tables(spark, standalone, scope_name):
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 2)
    create_stream(controller, scope_name, "t", 1)
    write_events(controller, scope_name, "s", range(100))
    info = load(spark, standalone, scope_name, metadata="StreamInfo").collect()
    assert len(info) == 1 and info[0].tail_stream_cut == tail_cut(controller, scope_name, "s").as_text()
    head = info[0].head_stream_cut
    assert sorted(number_of(row.event) for row in load(spark, standalone, scope_name, start_stream_cut=head,
                                                          end_stream_cut=info[0].tail_stream_cut).collect()) \
        == list(range(100))
    streams = (spark.read.format("tributary").option("controller", controller).option("scope", scope_name)
               .option("metadata", "streams").load().collect())
    assert sorted((row.scope_name, row.stream_name) for row in streams) == [(scope_name, "s"), (scope_name, "t")]


@pytest.mark.parametrize("options, message", [
    ({"start_stream_cut": "yesterday"}, "start_stream_cut"),
    ({"end_stream_cut": "earliest"}, "end_stream_cut"),
    ({"approx_bytes_per_trigger": "0"}, "approx_bytes_per_trigger"),
    ({"approx_bytes_per_trigger": "10", "max_events_per_trigger": "10"}, "conflict"),
    ({"default_num_segments": "many"}, "default_num_segments"),
    ({"max_partition_bytes": "0"}, "max_partition_bytes"),
    ({"default_retention_size_bytes": "10", "default_retention_duration_milliseconds": "10"}, "conflict"),
    ({"allow_create_scope": "perhaps"}, "allow_create_scope"),
    ({"metadata": "Everything"}, "metadata"),
    ({"controller": "http://x"}, "controller"),
])
def test_bad_options_fail_at_planning_naming_the_option(spark, standalone, scope_name, options, message):
    with pytest.raises(Exception, match=message):
        load(spark, standalone, scope_name, **options).collect()


def test_a_missing_scope_or_stream_option_is_named(spark, standalone):
    with pytest.raises(Exception, match="option scope is required"):
        spark.read.format("tributary").option("controller", standalone.controller_uri).option("stream", "s").load()
    with pytest.raises(Exception, match="option stream is required"):
        spark.read.format("tributary").option("controller", standalone.controller_uri).option("scope", "x").load()


def test_a_cut_of_another_stream_is_refused(spark, standalone, scope_name):
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 1)
    create_stream(controller, scope_name, "t", 1)
    with pytest.raises(Exception, match="not .*/s"):
        load(spark, standalone, scope_name, start_stream_cut=tail_cut(controller, scope_name, "t").as_text()).collect()
