"""Transactions over real sockets: the controller's gRPC servicer in front of TransactionService
(over the in-memory metadata store), a real segment store behind it, and (when installed) the
real pravega Python client (0.3.8, Rust core) as the writer."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import textwrap
import uuid

import grpc
import pytest

from clients.segment_store_client import SegmentStoreClient
from controller.endpoints import SegmentLocator
from controller.grpc_server import start_grpc_server
from controller.grpc_service import ControllerServicer
from controller.service.context import ControllerContext
from controller.service.services import ControllerServices
from controller.service.transactions import TransactionService, TransactionSettings
from controller.store import MetadataStore, queries
from controller.store import transactions as stored
from controller.store.states import TransactionStatus
from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from controller_api.protobuf import transaction_id_from
from tests.support.controller_harness import append_to_segment
from tests.support.doubles.key_value_store import InMemoryKeyValueStore
from tests.support.segment_store import running_segment_store
from tests.support.waiting import eventually
from tests.unit.test_transaction_service import (
    FAST_RETRIES,
    SCOPE,
    client_segment_name,
    create_stream,
    read_events,
    scale_stream,
    segment_exists,
)
from wire.naming import stream_segment_name

SETTINGS = TransactionSettings(timer_interval_ms=20, job_backoff=FAST_RETRIES)
WAIT_SECONDS = 20


@pytest.fixture
async def cluster(tmp_path):
    """A segment store, a TransactionService over it and the controller's gRPC servicer for both;
    yields (context, service, segment store, gRPC port)."""
    async with running_segment_store(tmp_path) as store:
        endpoint = ("127.0.0.1", store.port)
        metadata = MetadataStore(InMemoryKeyValueStore())
        await metadata.initialize()
        client = SegmentStoreClient(endpoint)
        context = ControllerContext(metadata, client, SegmentLocator.single_host(2, endpoint))
        service = TransactionService(context, settings=SETTINGS)
        await service.start()
        services = ControllerServices(context, service.abort_open_transaction)
        server, port = await start_grpc_server(ControllerServicer(services, service), "127.0.0.1", 0)
        try:
            yield context, service, store, port
        finally:
            await server.stop(None)
            await services.stop()
            await service.stop()
            await client.close()


async def wait_for_status(context: ControllerContext, stream: str, transaction_id, expected: TransactionStatus):
    async def reached() -> bool:
        return (await stored.get_transaction(context.store.stream(SCOPE, stream), transaction_id))[0].status == expected

    await eventually(reached, f"the transaction to be {expected.name}", timeout=WAIT_SECONDS, interval=0.02)


async def test_transaction_rpcs_over_grpc(cluster):
    """Over gRPC: create returns a non-negative lowBits and generalised ranges; data appended to
    the txn segments is in the parents after commit; abort deletes; errors become gRPC codes."""
    context, _, store, port = cluster
    stream = await create_stream(context, "grpc", segments=2)
    info = pb.StreamInfo(scope=SCOPE, stream="grpc")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ControllerServiceStub(channel)
        committed = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=90_000))
        aborted = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=90_000))
        assert committed.txnId.lowBits >= 0 and committed.txnId.highBits >> 32 == 0
        assert committed.activeSegments[-1].maxKey == 1.0
        for index in range(2):
            await append_to_segment(store.port, client_segment_name(committed, index), [b"yes-%d" % index])
            await append_to_segment(store.port, client_segment_name(aborted, index), [b"no-%d" % index])
        reply = await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=committed.txnId, writerId="123",
                                                           timestamp=-(2**63)))
        assert reply.status == pb.TxnStatus.SUCCESS
        assert (await stub.abortTransaction(pb.TxnRequest(streamInfo=info, txnId=aborted.txnId))).status == (
            pb.TxnStatus.SUCCESS)
        await wait_for_status(context, "grpc", transaction_id_from(committed.txnId), TransactionStatus.COMMITTED)
        await wait_for_status(context, "grpc", transaction_id_from(aborted.txnId), TransactionStatus.ABORTED)
        state = await stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=committed.txnId))
        assert state.state == pb.TxnState.COMMITTED
        for index, segment in enumerate((await queries.current_segments(stream)).segments):
            name = stream_segment_name(SCOPE, "grpc", segment.segment_id)
            assert await read_events(context.segments, store.port, name) == [b"yes-%d" % index]
            assert not await segment_exists(context.segments, client_segment_name(aborted, index))
        listing = await stub.listCompletedTransactions(pb.ListCompletedTxnRequest(streamInfo=info))
        assert {(entry.txnId.lowBits, entry.status) for entry in listing.response} == {
            (committed.txnId.lowBits, pb.TxnResponse.COMMITTED), (aborted.txnId.lowBits, pb.TxnResponse.ABORTED)}
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.createTransaction(pb.CreateTxnRequest(streamInfo=pb.StreamInfo(scope=SCOPE, stream="nope"),
                                                             lease=90_000))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as bad_lease:
            await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=1))
        assert bad_lease.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        unknown = pb.TxnId(highBits=0, lowBits=987_654_321)
        assert (await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=unknown))).status == (
            pb.TxnStatus.TRANSACTION_NOT_FOUND)


DRIVER = textwrap.dedent("""
    import json, sys
    import pravega_client
    port, scope, stream, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    manager = pravega_client.StreamManager(f"tcp://127.0.0.1:{port}", False, False)
    writer = manager.create_transaction_writer(scope, stream, 123)
    committed = writer.begin_txn()
    for number in range(count):
        committed.write_event(f"committed-{number}", f"key-{number % 5}")
    was_open = committed.is_open()
    committed.commit()
    aborted = writer.begin_txn()
    aborted.write_event("aborted", "key-0")
    aborted.abort()
    print(json.dumps({"committed": committed.get_txn_id(), "aborted": aborted.get_txn_id(), "was_open": was_open}))
""")


@pytest.mark.interop
@pytest.mark.skipif(importlib.util.find_spec("pravega_client") is None, reason="the pravega client is not installed")
@pytest.mark.process
async def test_real_client_commits_and_aborts_transactions(cluster):
    """The real client on a stream scaled to epoch 1: its txn ids carry epoch 1, its writes reach
    the txn segments we created (our names equal its names), the committed events land in the
    parents exactly once and the aborted one never does."""
    context, _, store, port = cluster
    stream = await create_stream(context, "real", segments=2)
    first = (await queries.current_segments(stream)).segments[0]
    await scale_stream(context, stream, [first.segment_id], [(0.0, 0.2), (0.2, first.key_end)])
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", DRIVER, str(port), SCOPE, "real", "40",
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        output, errors = await asyncio.wait_for(process.communicate(), 120)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, errors.decode(errors="replace")[-3000:]
    result = json.loads(output.decode().strip().splitlines()[-1])
    assert result["was_open"] is True
    committed_id, aborted_id = (uuid.UUID(int=result[key]) for key in ("committed", "aborted"))
    assert committed_id.int >> 96 == 1 == aborted_id.int >> 96
    await wait_for_status(context, "real", committed_id, TransactionStatus.COMMITTED)
    await wait_for_status(context, "real", aborted_id, TransactionStatus.ABORTED)
    events = []
    for segment in (await queries.current_segments(stream)).segments:
        name = stream_segment_name(SCOPE, "real", segment.segment_id)
        events += await read_events(context.segments, store.port, name)
    assert sorted(events) == sorted(f"committed-{number}".encode() for number in range(40))
