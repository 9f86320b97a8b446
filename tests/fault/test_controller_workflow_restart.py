"""A controller that "crashes" in the middle of a workflow (a fault point raises between two
steps, its intent stays in the metadata store) is replaced by a new controller over the same
segment store; the new one re-drives the intent at start and the stream ends up consistent:
the workflow's full effect on the metadata and on the segment store, state ACTIVE (or SEALED),
nothing left pending, and the stream usable for the next operation."""

from __future__ import annotations

import asyncio

import pytest

from clients.errors import NoSuchSegment
from controller_api import controller_pb2 as pb
from controller.service.context import ServiceSettings
from controller.service.fault_points import FaultPoints
from controller.store import layout
from controller.store import scale as store_scale
from controller.store.records import EpochTransitionRecord
from controller.store.workflows import list_pending_workflows
from tests.support.controller_harness import info, key_ranges, make_stream, running_cluster, scale_and_wait
from wire import naming

SCOPE, STREAM = "restart", "s"
NO_PERIODIC_REDRIVE = ServiceSettings(redrive_interval_seconds=3600)


async def assert_nothing_pending(cluster) -> None:
    entries, _ = await list_pending_workflows(cluster.app.context.store.kv)
    assert entries == [], entries


async def segment_info(cluster, segment_id: int):
    return await cluster.segment_info(SCOPE, STREAM, segment_id)


@pytest.mark.parametrize("point", ["scale.segments_created", "scale.epoch_written", "scale.segments_sealed",
                                   "scale.epoch_moved"])
async def test_scale_interrupted_at_each_step_is_completed_by_the_next_controller(tmp_path, point):
    """Split segment 0 of a 2-segment stream; the first controller dies after ``point``."""
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", NO_PERIODIC_REDRIVE, faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        faults.arm(point)
        reply = await cluster.stub.scale(pb.ScaleRequest(streamInfo=info(SCOPE, STREAM), sealedSegments=[0],
                                                         newKeyRanges=key_ranges((0.0, 0.25), (0.25, 0.5))))
        assert reply.status == pb.ScaleResponse.STARTED
        await asyncio.wait_for(faults.crashed.wait(), 30)  # STARTED comes before the steps: wait for the crash
        status = await cluster.stub.checkScale(pb.ScaleStatusRequest(streamInfo=info(SCOPE, STREAM), epoch=0))
        assert status.status == pb.ScaleStatusResponse.IN_PROGRESS  # stuck half way

        await cluster.restart_controller(settings=NO_PERIODIC_REDRIVE)
        assert cluster.app.pending_workflows_at_start == 1
        status = await cluster.stub.checkScale(pb.ScaleStatusRequest(streamInfo=info(SCOPE, STREAM), epoch=0))
        assert status.status == pb.ScaleStatusResponse.SUCCESS
        current = await cluster.stub.getCurrentSegments(info(SCOPE, STREAM))
        assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in current.segmentRanges] == [
            (naming.segment_id(2, 1), 0.0, 0.25), (naming.segment_id(3, 1), 0.25, 0.5), (1, 0.5, 1.0)]
        successors = await cluster.stub.getSegmentsImmediatelyFollowing(pb.SegmentId(streamInfo=info(SCOPE, STREAM),
                                                                                      segmentId=0))
        assert sorted(entry.segment.segmentId.segmentId for entry in successors.segments) == [
            naming.segment_id(2, 1), naming.segment_id(3, 1)]
        assert (await segment_info(cluster, 0)).is_sealed
        assert not (await segment_info(cluster, naming.segment_id(2, 1))).is_sealed
        await assert_nothing_pending(cluster)
        # The stream is ACTIVE again: the next scale goes through.
        await scale_and_wait(cluster.stub, SCOPE, STREAM, [1], [(0.5, 0.75), (0.75, 1.0)])


async def test_a_redrive_that_loses_a_race_to_a_late_write_tries_again(tmp_path):
    """A controller that dies leaves its last write in flight; it can land after the next controller read the
    records, so the re-drive's conditional write loses the race. The re-drive reads again and goes on (it
    used to log "re-drive failed" and leave the scale IN_PROGRESS until the next periodic round)."""
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", NO_PERIODIC_REDRIVE, faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        faults.arm("scale.segments_created")  # the crash comes just before the new epoch is written
        reply = await cluster.stub.scale(pb.ScaleRequest(streamInfo=info(SCOPE, STREAM), sealedSegments=[0],
                                                         newKeyRanges=key_ranges((0.0, 0.25), (0.25, 0.5))))
        assert reply.status == pb.ScaleResponse.STARTED
        await asyncio.wait_for(faults.crashed.wait(), 30)
        kv, handle = cluster.app.context.store.kv, cluster.app.context.store.stream(SCOPE, STREAM)
        transition, _ = await handle.read(layout.EPOCH_TRANSITION, EpochTransitionRecord)
        write_batch, late = kv.write_batch, []

        async def epoch_write_lands_first(table, writes):
            if not late and any(write.key == layout.epoch_key(1) for write in writes):
                late.append(table)  # the dead controller's epoch write, which our re-drive's read did not see
                await store_scale.create_new_epoch(handle, transition)
            return await write_batch(table, writes)

        kv.write_batch = epoch_write_lands_first
        await cluster.app.services.runner.redrive_all()
        assert late, "the re-drive never wrote the new epoch"
        status = await cluster.stub.checkScale(pb.ScaleStatusRequest(streamInfo=info(SCOPE, STREAM), epoch=0))
        assert status.status == pb.ScaleStatusResponse.SUCCESS
        await assert_nothing_pending(cluster)


async def test_create_interrupted_is_finished_by_the_next_controller(tmp_path):
    """The first controller dies after writing the records, before creating any segment."""
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", NO_PERIODIC_REDRIVE, faults) as cluster:
        await cluster.stub.createScope(pb.ScopeInfo(scope=SCOPE))
        faults.arm("create.records_written")
        reply = await cluster.stub.createStream(pb.StreamConfig(streamInfo=info(SCOPE, STREAM),
                                                                scalingPolicy=pb.ScalingPolicy(minNumSegments=3)))
        assert reply.status == pb.CreateStreamStatus.FAILURE  # the client would retry
        await cluster.restart_controller(settings=NO_PERIODIC_REDRIVE)
        current = await cluster.stub.getCurrentSegments(info(SCOPE, STREAM))
        assert len(current.segmentRanges) == 3
        for segment in current.segmentRanges:
            assert not (await segment_info(cluster, segment.segmentId.segmentId)).is_sealed
        again = await cluster.stub.createStream(pb.StreamConfig(streamInfo=info(SCOPE, STREAM),
                                                                scalingPolicy=pb.ScalingPolicy(minNumSegments=3)))
        assert again.status == pb.CreateStreamStatus.STREAM_EXISTS
        await assert_nothing_pending(cluster)


@pytest.mark.parametrize("point", ["seal.state_sealing", "seal.segments_sealed"])
async def test_seal_interrupted_is_finished_by_the_next_controller(tmp_path, point):
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", NO_PERIODIC_REDRIVE, faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        faults.arm(point)
        reply = await cluster.stub.sealStream(info(SCOPE, STREAM))
        assert reply.status == pb.UpdateStreamStatus.FAILURE
        await cluster.restart_controller(settings=NO_PERIODIC_REDRIVE)
        assert (await cluster.stub.getCurrentSegments(info(SCOPE, STREAM))).segmentRanges == []
        assert (await segment_info(cluster, 0)).is_sealed and (await segment_info(cluster, 1)).is_sealed
        deleted = await cluster.stub.deleteStream(info(SCOPE, STREAM))
        assert deleted.status == pb.DeleteStreamStatus.SUCCESS
        await assert_nothing_pending(cluster)


async def test_truncate_interrupted_is_finished_by_the_next_controller(tmp_path):
    """Truncation past a scale: the sealed predecessor must end up deleted, the cut's segments truncated."""
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", NO_PERIODIC_REDRIVE, faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        await scale_and_wait(cluster.stub, SCOPE, STREAM, [0], [(0.0, 0.5)])
        cut = {naming.segment_id(2, 1): 0, 1: 0}
        faults.arm("truncate.record_written")
        reply = await cluster.stub.truncateStream(pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut=cut))
        assert reply.status == pb.UpdateStreamStatus.FAILURE
        await cluster.restart_controller(settings=NO_PERIODIC_REDRIVE)
        head = await cluster.stub.getSegments(pb.GetSegmentsRequest(streamInfo=info(SCOPE, STREAM)))
        assert {location.segmentId.segmentId: location.offset for location in head.segments} == cut
        with pytest.raises(NoSuchSegment):
            await segment_info(cluster, 0)  # wholly before the cut: deleted
        await assert_nothing_pending(cluster)


async def test_delete_interrupted_is_finished_by_the_next_controller(tmp_path):
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", NO_PERIODIC_REDRIVE, faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        await cluster.stub.sealStream(info(SCOPE, STREAM))
        faults.arm("delete.segments_deleted")
        reply = await cluster.stub.deleteStream(info(SCOPE, STREAM))
        assert reply.status == pb.DeleteStreamStatus.FAILURE
        await cluster.restart_controller(settings=NO_PERIODIC_REDRIVE)
        exists = await cluster.stub.checkStreamExists(info(SCOPE, STREAM))
        assert exists.exists is False
        listed = await cluster.stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope=SCOPE)))
        assert list(listed.streams) == []
        # Re-created under the same name, the stream numbers its segments above the deleted ones.
        await make_stream(cluster.stub, SCOPE, STREAM, 1)
        current = await cluster.stub.getCurrentSegments(info(SCOPE, STREAM))
        assert [r.segmentId.segmentId for r in current.segmentRanges] == [2]
        await assert_nothing_pending(cluster)


async def test_update_interrupted_is_finished_by_the_next_controller(tmp_path):
    """An update to 3 fixed segments dies after storing the configuration; the rescale still happens."""
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", NO_PERIODIC_REDRIVE, faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        faults.arm("update.configuration_written")
        update = pb.StreamConfig(streamInfo=info(SCOPE, STREAM), scalingPolicy=pb.ScalingPolicy(minNumSegments=3),
                                 tags=pb.Tags(tag=["after"]))
        reply = await cluster.stub.updateStream(update)
        assert reply.status == pb.UpdateStreamStatus.FAILURE
        await cluster.restart_controller(settings=NO_PERIODIC_REDRIVE)
        current = await cluster.stub.getCurrentSegments(info(SCOPE, STREAM))
        assert [(r.minKey, r.maxKey) for r in current.segmentRanges][-1][1] == 1.0
        assert len(current.segmentRanges) == 3
        configuration = await cluster.stub.getStreamConfiguration(info(SCOPE, STREAM))
        assert list(configuration.tags.tag) == ["after"] and configuration.scalingPolicy.minNumSegments == 3
        await assert_nothing_pending(cluster)


async def test_periodic_redrive_finishes_a_failed_workflow_without_a_restart(tmp_path):
    """A workflow that failed in a running controller is finished by its periodic re-drive."""
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", ServiceSettings(redrive_interval_seconds=0.2), faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        faults.arm("seal.segments_sealed")
        reply = await cluster.stub.sealStream(info(SCOPE, STREAM))
        assert reply.status == pb.UpdateStreamStatus.FAILURE
        for _ in range(100):
            if not (await cluster.stub.getCurrentSegments(info(SCOPE, STREAM))).segmentRanges:
                break
            await asyncio.sleep(0.05)
        assert (await cluster.stub.getCurrentSegments(info(SCOPE, STREAM))).segmentRanges == []
        await assert_nothing_pending(cluster)
