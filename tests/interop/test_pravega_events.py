"""Events through `tributary standalone` with the real pravega client: 100,000 events over many
routing keys read back through a reader group (exact bytes, each once, per-key order); two
readers of one group splitting the segments; events of 1 MiB, just under and over 8 MiB (the
last through the client's transient-segment path); sealing while a writer holds the stream."""

from __future__ import annotations

import time

import pytest

from tests.support.pravega_driver import Scenario, check_each_once_in_key_order, run_scenario
from tests.support.standalone import BINDING_TARGETS, interop_server

pytestmark = [pytest.mark.interop, pytest.mark.process]
MIB = 1024 * 1024


@pytest.fixture(params=BINDING_TARGETS)
def standalone(request, tmp_path):
    yield from interop_server(request, tmp_path)


def test_hundred_thousand_events_each_once_in_key_order(standalone, tmp_path):
    """100,000 events over 97 routing keys into 4 segments, up to 1,000 in flight (the binding's
    ``max_inflight_events``: appends pipelined as its users write them), come back exactly once, per key
    in order. (With the binding's default of 0 in flight, each write waits for its ack: the other tests.)"""
    count, keys = 100_000, 97
    result = run_scenario("write_and_read", standalone.controller_uri,
                          {"scope": "events", "stream": "many", "create": True, "segments": 4, "count": count,
                           "keys": keys, "max_inflight": 1000, "timeout": 120}, tmp_path / "many.out",
                          timeout=240)
    check_each_once_in_key_order(result["received"][0], count, keys)


@pytest.mark.slow
def test_two_readers_split_the_segments(standalone, tmp_path):
    """Two readers of one group over 4 segments while a writer keeps writing: the first reader takes
    every segment, releases some at the client's 10 s rebalance, the second picks them up; both read,
    no routing key is read by both at once, and together they read each event once in key order."""
    count, keys = 12_000, 13
    uri = standalone.controller_uri
    run_scenario("write", uri, {"scope": "split", "stream": "s", "create": True, "segments": 4, "count": 0,
                                "keys": keys}, tmp_path / "create.out")
    ready = tmp_path / "readers.ready"
    readers = Scenario("read", uri, {"scope": "split", "stream": "s", "readers": 2, "expected": count,
                                     "timeout": 150, "slice_pause_seconds": 0.05, "ready_file": str(ready)},
                       tmp_path / "read.out")
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        run_scenario("write", uri, {"scope": "split", "stream": "s", "count": count, "keys": keys,
                                    "pause_every": 50, "pause_seconds": 0.05}, tmp_path / "write.out")
        first, second = readers.result(timeout=180)["received"]
    finally:
        readers.kill()
    assert first and second, (len(first), len(second))
    check_each_once_in_key_order(first + second, count, keys)


def test_large_events_up_to_and_beyond_eight_mebibytes(standalone, tmp_path):
    """1 MiB, 8 MiB - 8 and 8 MiB events, and 8 MiB + 1 and 10 MiB ones (transient segments), byte for byte."""
    sizes = [MIB, 8 * MIB - 8, 8 * MIB, 8 * MIB + 1, 10 * MIB]
    result = run_scenario("large", standalone.controller_uri, {"scope": "large", "stream": "s", "sizes": sizes},
                          tmp_path / "large.out")
    assert result["read"] == result["expected"]


def test_seal_then_read_to_the_end_and_writes_are_rejected(standalone, tmp_path):
    """A sealed stream: writes fail, a reader reads every event and then just finds nothing more;
    updates are answered (Rust reads STREAM_SEALED as success), and the stream and scope delete."""
    count = 2_000
    result = run_scenario("seal", standalone.controller_uri, {"scope": "sealed", "stream": "s", "count": count},
                          tmp_path / "seal.out")
    assert result["seal"] == [True, True]
    # the Rust writer stops on the seal and reports the closed channel to every later write
    assert result["write_after_seal"].startswith("raised ValueError: Error observed while writing an event")
    check_each_once_in_key_order(result["received"], count, 4)
    assert result["empty_slices_at_end"] == 3
    assert result["update_sealed"] is True  # STREAM_SEALED is unknown to the Rust enum: read as SUCCESS
    assert result["delete"] is True and result["delete_scope"] is True


def test_a_reader_group_from_a_config_over_two_streams_then_deleted(standalone, tmp_path):
    """create_reader_group_with_config over two streams: two readers get every event of both once; after
    delete_reader_group the same name makes a new group, which reads everything again."""
    count = 500
    result = run_scenario("group_config", standalone.controller_uri, {"scope": "group-config", "count": count},
                          tmp_path / "group-config.out")
    received = [event for reader in result["received"] for event in reader]
    assert sorted(received) == sorted(set(received)) and len(received) == 2 * count
    assert result["delete"] == "deleted"
    again = [event for reader in result["received_again"] for event in reader]
    assert sorted(again) == sorted(received)
