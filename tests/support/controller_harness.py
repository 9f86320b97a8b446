"""An in-process segment store + controller for integration tests, and a gRPC stub on it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import uuid

import grpc

from clients.connection import WireConnection, next_request_id
from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from controller.app import ControllerApp
from controller.service.context import ServiceSettings
from controller.service.fault_points import FaultPoints
from server.service import SegmentStoreService
from tests.support.segment_store import segment_store
from wire import commands as c
from wire import naming
from wire.envelope import envelope_all


@dataclasses.dataclass
class Cluster:
    store: SegmentStoreService
    app: ControllerApp
    channel: grpc.aio.Channel
    stub: pb_grpc.ControllerServiceStub

    async def restart_controller(self, **app_options) -> None:
        """Stops this controller (pending intents stay) and starts a fresh one on the same store."""
        await self.channel.close()
        await self.app.stop()
        self.app = ControllerApp(port=0, segment_store=("127.0.0.1", self.store.port), **app_options)
        await self.app.start()
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.app.port}")
        self.stub = pb_grpc.ControllerServiceStub(self.channel)

    async def segment_info(self, scope: str, stream: str, segment_id: int) -> c.StreamSegmentInfo:
        """The stream segment as the segment store reports it. Raises clients.errors.NoSuchSegment."""
        return await self.app.client.segment_info(naming.stream_segment_name(scope, stream, segment_id))

    async def table_info(self, name: str) -> c.TableSegmentInfo:
        """A table segment as the segment store reports it. Raises clients.errors.NoSuchSegment."""
        return await self.app.client.table_info(name)


def start_segment_store(data_dir, container_count: int = 4, **config) -> SegmentStoreService:
    return segment_store(data_dir, container_count=container_count, **config)


@contextlib.asynccontextmanager
async def running_cluster(data_dir, settings: ServiceSettings = ServiceSettings(),
                          fault_points: FaultPoints | None = None, store_config: dict | None = None, **app_options):
    """Yields a Cluster; stops everything afterwards and deletes the data dir (preallocated logs).

    ``store_config`` overrides SegmentStoreConfig fields of the segment store (e.g. its ``load`` metering)."""
    store = start_segment_store(data_dir, **(store_config or {}))
    await store.start()
    app = ControllerApp(port=0, segment_store=("127.0.0.1", store.port), settings=settings,
                        fault_points=fault_points, **app_options)
    try:
        await app.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.port}")
        cluster = Cluster(store, app, channel, pb_grpc.ControllerServiceStub(channel))
        try:
            yield cluster
        finally:
            await cluster.channel.close()
            await cluster.app.stop()
    finally:
        await store.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def info(scope: str, stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream)


def fixed_config(scope: str, stream: str, segments: int, tags=None, **fields) -> pb.StreamConfig:
    config = pb.StreamConfig(streamInfo=info(scope, stream),
                             scalingPolicy=pb.ScalingPolicy(scaleType=0, minNumSegments=segments), **fields)
    if tags is not None:
        config.tags.CopyFrom(pb.Tags(tag=tags))
    return config


def key_ranges(*pairs: tuple[float, float]) -> list:
    return [pb.ScaleRequest.KeyRangeEntry(start=start, end=end) for start, end in pairs]


async def make_stream(stub, scope: str, stream: str, segments: int = 1, **fields) -> None:
    await stub.createScope(pb.ScopeInfo(scope=scope))
    reply = await stub.createStream(fixed_config(scope, stream, segments, **fields))
    assert reply.status == pb.CreateStreamStatus.SUCCESS, reply


async def scale_and_wait(stub, scope: str, stream: str, sealed: list[int], ranges, timeout_polls: int = 500):
    """Scales and polls checkScale until SUCCESS. Returns the ScaleResponse."""
    reply = await stub.scale(pb.ScaleRequest(streamInfo=info(scope, stream), sealedSegments=sealed,
                                             newKeyRanges=key_ranges(*ranges)))
    assert reply.status == pb.ScaleResponse.STARTED, reply
    for _ in range(timeout_polls):
        status = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info(scope, stream), epoch=reply.epoch))
        if status.status == pb.ScaleStatusResponse.SUCCESS:
            return reply
        assert status.status == pb.ScaleStatusResponse.IN_PROGRESS, status
        await asyncio.sleep(0.01)
    raise AssertionError("scale did not finish")


async def append_to_segment(store_port: int, segment: str, events: list[bytes]) -> int:
    """Appends ``events`` (enveloped, as a writer would) to a segment. Returns the segment's new length."""
    connection = await WireConnection.connect("127.0.0.1", store_port)
    try:
        writer = uuid.uuid4()
        setup = await connection.request(c.SetupAppend(next_request_id(), writer, segment, ""))
        assert isinstance(setup, c.AppendSetup), setup
        data = envelope_all(events)
        request_id = next_request_id()
        future = connection.expect(request_id)
        connection.send(c.AppendBlockEnd(writer, len(data), data, len(events), len(events), request_id))
        reply = await asyncio.wait_for(future, 10)
        assert isinstance(reply, c.DataAppended), reply
        return reply.current_segment_write_offset
    finally:
        await connection.close()
