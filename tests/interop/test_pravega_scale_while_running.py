"""Scaling through our controller's gRPC API while the real pravega client writes and reads:
a writer keeps writing over 16 routing keys while segments are split and merged three times; a
reader group reading from the head meanwhile gets every event exactly once, per key in order,
across predecessors and successors."""

from __future__ import annotations

import time

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.pravega_driver import Scenario, check_each_once_in_key_order, run_scenario
from tests.support.standalone import BINDING_TARGETS, interop_server
from wire import naming

pytestmark = [pytest.mark.interop, pytest.mark.process]
SCOPE, STREAM = "scaling", "live"
COUNT, KEYS = 8_000, 16  # the binding waits for each ack: ~10 s here, several times that on a loaded CI machine


@pytest.fixture(params=BINDING_TARGETS)
def standalone(request, tmp_path):
    yield from interop_server(request, tmp_path)


def scale(stub, sealed: list[int], ranges: list[tuple[float, float]]) -> None:
    """Scales and polls checkScale until SUCCESS."""
    info = pb.StreamInfo(scope=SCOPE, stream=STREAM)
    reply = stub.scale(pb.ScaleRequest(streamInfo=info, sealedSegments=sealed, newKeyRanges=[
        pb.ScaleRequest.KeyRangeEntry(start=start, end=end) for start, end in ranges]), timeout=30)
    assert reply.status == pb.ScaleResponse.STARTED, reply
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = stub.checkScale(pb.ScaleStatusRequest(streamInfo=info, epoch=reply.epoch), timeout=10).status
        if status == pb.ScaleStatusResponse.SUCCESS:
            return
        assert status == pb.ScaleStatusResponse.IN_PROGRESS
        time.sleep(0.02)
    raise AssertionError("scale did not finish")


def wait_for(path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_no_event_lost_or_duplicated_while_scaling(standalone, tmp_path):
    uri = standalone.controller_uri
    run_scenario("write", uri, {"scope": SCOPE, "stream": STREAM, "create": True, "segments": 2, "count": 0,
                                "keys": KEYS}, tmp_path / "create.out")
    ready = tmp_path / "reader.ready"
    reader = Scenario("read", uri, {"scope": SCOPE, "stream": STREAM, "expected": COUNT, "timeout": 280,
                                    "ready_file": str(ready)}, tmp_path / "read.out")
    writer = None
    try:
        wait_for(ready)
        writer = Scenario("write", uri, {"scope": SCOPE, "stream": STREAM, "count": COUNT, "keys": KEYS,
                                         "pause_every": 200, "pause_seconds": 0.05}, tmp_path / "write.out")
        with grpc.insecure_channel(f"127.0.0.1:{standalone.controller_port}") as channel:
            stub = pb_grpc.ControllerServiceStub(channel)
            time.sleep(1.0)
            scale(stub, [0], [(0.0, 0.25), (0.25, 0.5)])  # epoch 1: segments 2, 3 replace 0
            time.sleep(0.7)
            scale(stub, [1], [(0.5, 0.7), (0.7, 0.85), (0.85, 1.0)])  # epoch 2: 4, 5, 6 replace 1
            time.sleep(0.7)
            scale(stub, [naming.segment_id(2, 1), naming.segment_id(3, 1)], [(0.0, 0.5)])  # epoch 3: 7 merges 2, 3
            writing_after_scales = writer.process.poll() is None
            current = stub.getCurrentSegments(pb.StreamInfo(scope=SCOPE, stream=STREAM), timeout=10)
        assert [r.segmentId.segmentId for r in current.segmentRanges] == [
            naming.segment_id(7, 3), naming.segment_id(4, 2), naming.segment_id(5, 2), naming.segment_id(6, 2)]
        written = writer.result(timeout=300)
        assert written["written"] == COUNT
        received = reader.result(timeout=300)["received"][0]
    finally:
        reader.kill()
        if writer is not None:
            writer.kill()
    assert writing_after_scales, f"the writer finished ({written['seconds']:.1f} s) before the scales: proves nothing"
    check_each_once_in_key_order(received, COUNT, KEYS)
