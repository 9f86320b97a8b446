"""The real pravega client (0.3.8, Rust core) against our segment store: a writer spread over 4
segments and a reader group whose state lives in our table segments. The controller side is the
minimal test controller (the real one is issue #4); the test creates the stream's segments on the
store itself, over the wire, as a controller would."""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys

import grpc
import pytest

from clients.connection import WireConnection, next_request_id
from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.minimal_controller import start_minimal_controller
from wire import commands as c
from tests.support.segment_store import segment_store

pytestmark = [pytest.mark.interop, pytest.mark.process]
DRIVER = pathlib.Path(__file__).parents[1] / "support" / "pravega_roundtrip_driver.py"
SEGMENTS = 4
EVENTS = 3000
LARGE = 10 * 1024 * 1024 + 123


async def make_stream(controller_port: int, store_port: int, scope: str, stream: str) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{controller_port}") as channel:
        stub = pb_grpc.ControllerServiceStub(channel)
        await stub.createScope(pb.ScopeInfo(scope=scope))
        await stub.createStream(pb.StreamConfig(streamInfo=pb.StreamInfo(scope=scope, stream=stream),
                                                scalingPolicy=pb.ScalingPolicy(scaleType=0,
                                                                               minNumSegments=SEGMENTS)))
    connection = await WireConnection.connect("127.0.0.1", store_port)
    for number in range(SEGMENTS):
        reply = await connection.request(c.CreateSegment(next_request_id(), f"{scope}/{stream}/{number}.#epoch.0",
                                                         0, 0, ""))
        assert isinstance(reply, c.SegmentCreated), reply
    await connection.close()


async def test_real_client_writes_and_reads_through_a_reader_group(tmp_path):
    """3,000 events over 7 routing keys and one 10 MiB event: the reader group reads each exactly
    once, per-key order is kept, and the large event comes back byte for byte."""
    store = segment_store(tmp_path / "data", container_count=4)
    await store.start()
    controller, controller_port = await start_minimal_controller("127.0.0.1", store.port)
    output = tmp_path / "driver.out"
    try:
        await make_stream(controller_port, store.port, "interop", "events")
        with output.open("wb") as sink:
            process = await asyncio.create_subprocess_exec(
                sys.executable, str(DRIVER), str(controller_port), "interop", "events", str(EVENTS), str(LARGE),
                stdout=sink, stderr=asyncio.subprocess.STDOUT)
            try:
                exit_code = await asyncio.wait_for(process.wait(), 180)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
                exit_code = "timeout"
    finally:
        await controller.stop(None)
        await store.stop()
    text = output.read_text(errors="replace")
    assert exit_code == 0, text[-3000:]
    received = json.loads(text.strip().splitlines()[-1])["read"]
    small = [event for event in received if not event.startswith("big:")]
    assert sorted(small, key=lambda e: int(e.split(":")[1])) == [f"key-{n % 7}:{n}" for n in range(EVENTS)]
    for key in range(7):
        numbers = [int(e.split(":")[1]) for e in small if e.startswith(f"key-{key}:")]
        assert numbers == sorted(numbers), f"per-key order broken for key-{key}"
    assert [event for event in received if event.startswith("big:")] == [f"big:{LARGE + 4}:True"]  # the payload is "big:" + LARGE bytes
