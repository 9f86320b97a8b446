"""How stream workflows meet transactions (spec §6.4 step 2, §6.5, §6.7), through our controller
and the transaction service: sealing aborts open transactions first; a scale submitted before a
rolling-transaction commit moved the epoch is re-based onto the duplicate epoch and completes."""

from __future__ import annotations

import asyncio

import pytest

from controller_api import controller_pb2 as pb
from controller.store import scale as store_scale
from tests.support.controller_harness import info, make_stream, running_cluster, scale_and_wait
from tests.support.waiting import eventually
from wire import naming

SCOPE, STREAM = "txn-workflows", "s"
LEASE_MS = 60_000


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path / "data") as running:
        await make_stream(running.stub, SCOPE, STREAM, 2)
        yield running


async def transaction_state(stub, txn_id) -> int:
    return (await stub.checkTransactionState(pb.TxnRequest(streamInfo=info(SCOPE, STREAM), txnId=txn_id))).state


async def wait_for_state(stub, txn_id, state: int) -> None:
    async def reached() -> bool:
        return await transaction_state(stub, txn_id) == state

    await eventually(reached, f"the transaction to reach state {state}", timeout=10, interval=0.02)


async def test_concurrent_creations_on_one_stream_all_succeed(cluster):
    """Transactions begun at once on one stream (as the tasks of a Spark write do) are all created: no
    INTERNAL error from the transaction index's conditional updates racing (each raced update waits
    for the other to be durable instead of spinning through its attempts), hence no client retry
    leaving a transaction behind."""
    stub = cluster.stub
    for round_number in range(10):
        created = await asyncio.gather(*(stub.createTransaction(pb.CreateTxnRequest(
            streamInfo=info(SCOPE, STREAM), lease=LEASE_MS)) for _ in range(4)))
        ids = {(reply.txnId.highBits, reply.txnId.lowBits) for reply in created}
        assert len(ids) == 4, round_number
        for reply in created:
            assert await transaction_state(stub, reply.txnId) == pb.TxnState.OPEN


async def test_seal_aborts_open_transactions_first(cluster):
    """An open transaction does not keep a stream from sealing: it is aborted, then the stream seals."""
    stub = cluster.stub
    created = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info(SCOPE, STREAM), lease=LEASE_MS))
    assert await transaction_state(stub, created.txnId) == pb.TxnState.OPEN
    assert (await stub.sealStream(info(SCOPE, STREAM))).status == pb.UpdateStreamStatus.SUCCESS
    await wait_for_state(stub, created.txnId, pb.TxnState.ABORTED)
    assert list((await stub.getCurrentSegments(info(SCOPE, STREAM))).segmentRanges) == []


async def test_scale_pending_across_a_rolling_commit_is_rebased(cluster):
    """A txn of epoch 0; a split takes the stream to epoch 1; another scale of segment 1 is submitted;
    the txn's commit then rolls (epochs 2 and 3). Running the pending scale re-bases it on epoch 3:
    it seals segment 1's duplicate and the stream ends in epoch 4 with consistent successors."""
    stub = cluster.stub
    services = cluster.app.services
    created = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info(SCOPE, STREAM), lease=LEASE_MS))
    await scale_and_wait(stub, SCOPE, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)])
    handle = cluster.app.context.store.stream(SCOPE, STREAM)
    pending = await store_scale.submit_scale(handle, [1], [(0.5, 0.75), (0.75, 1.0)], 0)
    assert pending.active_epoch == 1

    commit = await stub.commitTransaction(pb.TxnRequest(streamInfo=info(SCOPE, STREAM), txnId=created.txnId,
                                                        writerId="", timestamp=0))
    assert commit.status == pb.TxnStatus.SUCCESS
    await wait_for_state(stub, created.txnId, pb.TxnState.COMMITTED)
    current, _ = await handle.get_current_epoch()
    assert current.epoch == 3 and current.reference_epoch == 1  # the rolled duplicate of epoch 1

    await services.scaling.execute(handle, pending)
    final, _ = await handle.get_current_epoch()
    assert final.epoch == 4
    keys = [(segment.key_start, segment.key_end) for segment in final.segments]
    assert keys == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    duplicate_of_one = naming.segment_id(1, 3)
    successors = await stub.getSegmentsImmediatelyFollowing(pb.SegmentId(streamInfo=info(SCOPE, STREAM),
                                                                         segmentId=duplicate_of_one))
    assert [(e.segment.minKey, list(e.value)) for e in successors.segments] == [
        (0.5, [duplicate_of_one]), (0.75, [duplicate_of_one])]
    status = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info(SCOPE, STREAM), epoch=3))
    assert status.status == pb.ScaleStatusResponse.SUCCESS
