"""Durability through the real pravega client: events written and flushed to `tributary
standalone` survive a SIGKILL of the whole process (segment store and controller). After a
restart on the same data dir the scopes, streams and segments are all there, a new reader group
reads every event exactly once in per-key order, and writing goes on where it stopped."""

from __future__ import annotations

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.pravega_driver import check_each_once_in_key_order, run_scenario
from tests.support.standalone import StandaloneProcess

pytestmark = [pytest.mark.interop, pytest.mark.process]
SCOPE, STREAM = "durable", "events"
COUNT, KEYS = 20_000, 10


@pytest.mark.slow
def test_flushed_events_survive_sigkill_and_restart(tmp_path):
    standalone = StandaloneProcess(tmp_path / "data", log_path=tmp_path / "standalone.log").start()
    try:
        run_scenario("write", standalone.controller_uri, {"scope": SCOPE, "stream": STREAM, "create": True,
                                                          "segments": 3, "count": COUNT, "keys": KEYS},
                     tmp_path / "write.out")
        standalone.kill()  # SIGKILL right after the flush was acknowledged
        standalone.start()
        with grpc.insecure_channel(f"127.0.0.1:{standalone.controller_port}") as channel:
            stub = pb_grpc.ControllerServiceStub(channel)
            assert stub.checkStreamExists(pb.StreamInfo(scope=SCOPE, stream=STREAM), timeout=10).exists
            assert len(stub.getCurrentSegments(pb.StreamInfo(scope=SCOPE, stream=STREAM),
                                               timeout=10).segmentRanges) == 3
        first = run_scenario("read", standalone.controller_uri, {"scope": SCOPE, "stream": STREAM,
                                                                 "group": "after-kill", "expected": COUNT},
                             tmp_path / "read.out")
        check_each_once_in_key_order(first["received"][0], COUNT, KEYS)
        run_scenario("write", standalone.controller_uri, {"scope": SCOPE, "stream": STREAM, "count": 1000,
                                                          "keys": KEYS, "start": COUNT}, tmp_path / "more.out")
        second = run_scenario("read", standalone.controller_uri, {"scope": SCOPE, "stream": STREAM,
                                                                  "group": "all", "expected": COUNT + 1000},
                              tmp_path / "read-all.out")
        check_each_once_in_key_order(second["received"][0], COUNT + 1000, KEYS)
        assert standalone.terminate() == 0  # SIGTERM: a clean stop
    finally:
        standalone.remove_data()
