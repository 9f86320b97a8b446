"""TransactionService over the in-memory metadata store and a real in-process segment store:
ids, create, commit (in place and rolling), abort, lease timeouts, pings, restarts mid-commit.

The service takes and returns plain values; the tests call it as a client does, through the
controller's gRPC servicer (``TransactionRpcs``, no network), so they check the messages and
statuses a client sees. Streams are set up with the store's own functions and their segments created with the
SegmentStoreClient, as a controller would; transaction data is appended over the wire to the
transaction segments, exactly where a client would write it, and read back from the parents.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

import grpc
import pytest

from clients.connection import WireConnection, next_request_id
from clients.errors import NoSuchSegment
from clients.segment_store_client import SegmentStoreClient
from controller.cluster import COMMITS, Coordination, LeaseBusy
from controller.endpoints import SegmentLocator
from controller.grpc_service import ControllerServicer
from controller.service.context import ControllerContext
from controller.service.errors import LeaseOutOfRange, StreamNotFound, StreamNotWritable
from controller.service.retries import TRANSACTION_JOB
from controller.service.transactions import PingStatus, TransactionService, TransactionSettings, jobs, stream_index
from controller.service.transactions.ids import COUNTER_LOW_MASK, TransactionIdAllocator, compose_transaction_id
from controller.service.transactions.segments import transaction_segment
from controller.store import MetadataStore, State, StreamStore, queries, scale
from controller.store import transactions as stored
from controller.store.readers import get_writer_mark
from controller_api.model import ScalingPolicy, StreamConfiguration
from controller.store.states import TransactionStatus
from controller_api import controller_pb2 as pb
from controller_api.protobuf import transaction_id_from, transaction_id_to
from tests.support.controller_harness import append_to_segment
from tests.support.doubles.key_value_store import InMemoryKeyValueStore
from tests.support.segment_store import running_segment_store
from tests.support.waiting import eventually
from wire import commands as wc
from wire.envelope import split_events
from wire.naming import segment_id, stream_segment_name, transaction_segment_name, uuid_hex

SCOPE = "scope"
LEASE_MS = 30_000
FAST_RETRIES = dataclasses.replace(TRANSACTION_JOB, initial_seconds=0.005, max_delay_seconds=0.05)
SETTINGS = TransactionSettings(lease_grace_ms=0, timer_interval_ms=10, job_backoff=FAST_RETRIES)
WAIT_SECONDS = 10
WORKERS_LOG = "controller.service.transactions.workers"


class FakeClock:
    """The context's now_ms: moves only when a test says so."""

    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


class RpcAborted(Exception):
    """What ``AbortingContext.abort`` raises: the call ended with the gRPC status ``code``."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code


class AbortingContext:
    """The one part of a grpc.aio servicer context that the controller's servicer uses."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise RpcAborted(code, details)


class TransactionRpcs:
    """The transaction RPCs of ``service`` as a client reaches them: through the controller's gRPC
    servicer (message conversion and error mapping), without the network."""

    def __init__(self, service: TransactionService):
        self._servicer = ControllerServicer(None, service)
        self._context = AbortingContext()

    async def create_transaction(self, request: pb.CreateTxnRequest) -> pb.CreateTxnResponse:
        return await self._servicer.createTransaction(request, self._context)

    async def ping_transaction(self, request: pb.PingTxnRequest) -> pb.PingTxnStatus:
        return await self._servicer.pingTransaction(request, self._context)

    async def commit_transaction(self, request: pb.TxnRequest) -> pb.TxnStatus:
        return await self._servicer.commitTransaction(request, self._context)

    async def abort_transaction(self, request: pb.TxnRequest) -> pb.TxnStatus:
        return await self._servicer.abortTransaction(request, self._context)

    async def check_transaction_state(self, request: pb.TxnRequest) -> pb.TxnState:
        return await self._servicer.checkTransactionState(request, self._context)

    async def list_completed_transactions(self, request: pb.ListCompletedTxnRequest) -> pb.ListCompletedTxnResponse:
        return await self._servicer.listCompletedTransactions(request, self._context)


def rpcs(service: TransactionService) -> TransactionRpcs:
    return TransactionRpcs(service)


# ---------------------------------------------------------------------- fixtures and helpers


@pytest.fixture
async def segment_store(tmp_path):
    async with running_segment_store(tmp_path) as service:
        yield service


@pytest.fixture
async def context(segment_store):
    store = MetadataStore(InMemoryKeyValueStore())
    await store.initialize()
    endpoint = ("127.0.0.1", segment_store.port)
    client = SegmentStoreClient(endpoint)
    yield ControllerContext(store, client, SegmentLocator.single_host(2, endpoint), FakeClock())
    await client.close()


@pytest.fixture
async def service(context):
    service = TransactionService(context, settings=SETTINGS)
    await service.start()
    yield service
    await service.stop()


async def create_stream(context: ControllerContext, name: str = "stream", segments: int = 2) -> StreamStore:
    """An ACTIVE stream with its epoch-0 segments created on the segment store."""
    await context.store.scopes.create_scope(SCOPE)
    configuration = StreamConfiguration(ScalingPolicy(min_num_segments=segments))
    stream, _ = await context.store.create_stream(SCOPE, name, configuration, context.now_ms())
    for segment in (await queries.current_segments(stream)).segments:
        await context.segments.create_segment(stream_segment_name(SCOPE, name, segment.segment_id))
    await stream.transition_state(State.ACTIVE)
    return stream


async def scale_stream(context: ControllerContext, stream: StreamStore, seal: list[int],
                       ranges: list[tuple[float, float]]) -> None:
    """A whole scale as a controller runs it: ETR, SCALING, new segments, epoch, seal, ACTIVE."""
    transition = await scale.submit_scale(stream, seal, ranges, context.now_ms())
    await stream.transition_state(State.SCALING, expected=State.ACTIVE)
    for new in transition.new_segments:
        await context.segments.create_segment(stream_segment_name(SCOPE, stream.name, new.segment_id))
    await scale.create_new_epoch(stream, transition)
    sizes = {}
    for sealed in seal:
        name = stream_segment_name(SCOPE, stream.name, sealed)
        await context.segments.seal_segment(name)
        sizes[sealed] = (await context.segments.segment_info(name)).write_offset
    await scale.seal_old_segments(stream, transition, sizes)
    await scale.complete_scale(stream, transition)


async def read_events(client: SegmentStoreClient, port: int, segment: str) -> list[bytes]:
    """Every event in a segment, read up to its current length (never a waiting tail read)."""
    length = (await client.segment_info(segment)).write_offset
    connection = await WireConnection.connect("127.0.0.1", port)
    data = bytearray()
    try:
        while len(data) < length:
            reply = await connection.request(wc.ReadSegment(segment, len(data), length - len(data), "",
                                                            next_request_id()))
            data += reply.data
    finally:
        await connection.close()
    payloads, consumed = split_events(bytes(data))
    assert consumed == len(data)
    return [bytes(payload) for payload in payloads]


async def segment_exists(client: SegmentStoreClient, segment: str) -> bool:
    try:
        await client.segment_info(segment)
        return True
    except NoSuchSegment:
        return False


def request(stream: StreamStore, transaction_id: pb.TxnId, writer: str = "", timestamp: int = 0) -> pb.TxnRequest:
    return pb.TxnRequest(streamInfo=pb.StreamInfo(scope=stream.scope, stream=stream.name), txnId=transaction_id,
                         writerId=writer, timestamp=timestamp)


async def begin(service: TransactionService, stream: StreamStore, lease: int = LEASE_MS) -> pb.CreateTxnResponse:
    return await rpcs(service).create_transaction(pb.CreateTxnRequest(
        streamInfo=pb.StreamInfo(scope=stream.scope, stream=stream.name), lease=lease))


def client_segment_name(response: pb.CreateTxnResponse, index: int) -> str:
    """The transaction segment name as the client derives it from the reply (spec §5.4)."""
    segment = response.activeSegments[index].segmentId
    return transaction_segment_name(stream_segment_name(segment.streamInfo.scope, segment.streamInfo.stream,
                                                        segment.segmentId), transaction_id_from(response.txnId))


async def state_of(service: TransactionService, stream: StreamStore, transaction_id: pb.TxnId) -> int:
    return (await rpcs(service).check_transaction_state(request(stream, transaction_id))).state


async def wait_for_state(service: TransactionService, stream: StreamStore, transaction_id: pb.TxnId,
                         expected: int) -> None:
    async def reached() -> bool:
        return await state_of(service, stream, transaction_id) == expected
    await eventually(reached, f"the transaction to reach state {expected}", timeout=WAIT_SECONDS)


async def commit_turned_away(caplog: pytest.LogCaptureFixture, state: State) -> None:
    """Waits until the stream's commit worker has found the stream held by ``state`` (its retry log line)."""
    def seen() -> bool:
        return any("retry in" in record.getMessage() and f"is {state.name}" in record.getMessage()
                   for record in caplog.records)
    await eventually(seen, f"the commit worker to find the stream {state.name}")


# ---------------------------------------------------------------------- ids


def test_transaction_ids_put_the_epoch_on_top_and_keep_low_bits_non_negative():
    """Ids carry the epoch in msb's top 32 bits; lowBits never goes negative, even when the
    counter passes 2**63, and the wire form round-trips."""
    for epoch, counter in [(0, 1), (7, 12345), (2**31 - 1, 2**63 - 1), (3, 2**63), (5, 2**95 - 1)]:
        transaction_id = compose_transaction_id(epoch, counter)
        wire_id = transaction_id_to(transaction_id)
        assert wire_id.highBits >> 32 == epoch and transaction_id.int >> 96 == epoch
        assert 0 <= wire_id.lowBits == counter & COUNTER_LOW_MASK
        assert transaction_id_from(wire_id) == transaction_id
    assert compose_transaction_id(3, 2**63) != compose_transaction_id(3, 0)


def test_answers_use_the_wire_numbers():
    """PingStatus and TransactionStatus carry the numbers of the wire's enums of the same names
    (the gRPC layer sends ``int(status)``)."""
    for status in PingStatus:
        assert pb.PingTxnStatus.Status.Value(status.name) == status
    for state in TransactionStatus:
        assert pb.TxnState.State.Value(state.name) == state


async def test_the_counter_never_repeats_across_allocators():
    """A second allocator (a restarted controller) reserves a fresh block: no id is handed out twice."""
    kv = InMemoryKeyValueStore()
    first, second = TransactionIdAllocator(kv, block_size=3), TransactionIdAllocator(kv, block_size=3)
    ids = [await first.next_id(0) for _ in range(4)] + [await second.next_id(0) for _ in range(4)]
    ids += [await first.next_id(0) for _ in range(2)]
    counters = [transaction_id.int & ((1 << 96) - 1) for transaction_id in ids]
    assert len(set(counters)) == len(counters) and min(counters) >= 1


# ---------------------------------------------------------------------- create


async def test_create_returns_generalised_segments_and_creates_them(service, context, segment_store):
    """After a scale (epoch 1), a txn gets epoch 1 in its id, one segment per active segment named
    with the generalised id (number, 1), ranges sorted and ending at exactly 1.0, streamInfo set;
    the segments exist on the segment store before the reply."""
    stream = await create_stream(context, segments=3)
    first = (await queries.current_segments(stream)).segments[0]
    await scale_stream(context, stream, [first.segment_id], [(first.key_start, 0.1), (0.1, first.key_end)])
    current = await queries.current_segments(stream)
    response = await begin(service, stream)
    assert response.txnId.highBits >> 32 == 1 and response.txnId.lowBits >= 0
    assert response.delegationToken == ""
    assert [r.segmentId.segmentId for r in response.activeSegments] == [
        segment_id(segment.number, 1) for segment in current.segments]
    assert [(r.minKey, r.maxKey) for r in response.activeSegments] == [
        (segment.key_start, segment.key_end) for segment in current.segments]
    assert response.activeSegments[-1].maxKey == 1.0
    for index, segment_range in enumerate(response.activeSegments):
        assert segment_range.segmentId.streamInfo == pb.StreamInfo(scope=SCOPE, stream="stream")
        assert await segment_exists(context.segments, client_segment_name(response, index))
    name = client_segment_name(response, 0)
    hex_id = uuid_hex(transaction_id_from(response.txnId))
    assert name == f"{SCOPE}/stream/{current.segments[0].number}.#epoch.1#transaction.{hex_id}"
    assert await state_of(service, stream, response.txnId) == pb.TxnState.OPEN


async def test_create_refuses_bad_leases_missing_and_sealed_streams(service, context):
    """A lease outside [10 s, 600 s] is INVALID_ARGUMENT, a missing stream NOT_FOUND, a sealed one
    INTERNAL (the client retries), each a typed error of the service; a txn of a sealed stream
    cannot commit."""
    stream = await create_stream(context)
    left_open = await begin(service, stream)
    for lease in (9_999, 600_001):
        with pytest.raises(LeaseOutOfRange):
            await service.create_transaction(SCOPE, stream.name, lease)
        with pytest.raises(RpcAborted) as refused:
            await begin(service, stream, lease)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(StreamNotFound):
        await service.create_transaction(SCOPE, "missing", LEASE_MS)
    with pytest.raises(RpcAborted) as missing:
        await begin(service, context.store.stream(SCOPE, "missing"))
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    await stream.transition_state(State.SEALED)
    with pytest.raises(StreamNotWritable):
        await service.create_transaction(SCOPE, stream.name, LEASE_MS)
    with pytest.raises(RpcAborted) as sealed:
        await begin(service, stream)
    assert sealed.value.code == grpc.StatusCode.INTERNAL
    assert (await rpcs(service).commit_transaction(request(stream, left_open.txnId))).status == pb.TxnStatus.FAILURE
    assert await state_of(service, stream, left_open.txnId) == pb.TxnState.OPEN


# ---------------------------------------------------------------------- commit and abort


async def test_committed_data_lands_in_the_parents_in_commit_order(service, context, segment_store, caplog):
    """Two txns written over the wire and committed (second first, while an update holds the
    stream, so both go in one batch) land after the data already in each parent, in commit order;
    the txn segments are gone, both are COMMITTED, a repeated commit is SUCCESS, an abort of a
    committed txn FAILURE, and the writer's mark holds the latest commit time."""
    stream = await create_stream(context)
    parents = [stream_segment_name(SCOPE, "stream", segment.segment_id)
               for segment in (await queries.current_segments(stream)).segments]
    await append_to_segment(segment_store.port, parents[0], [b"before"])
    first, second = await begin(service, stream), await begin(service, stream)
    for response, label in ((first, b"first"), (second, b"second")):
        for index in range(2):
            await append_to_segment(segment_store.port, client_segment_name(response, index), [label + b"-%d" % index, label])
    caplog.set_level(logging.INFO, logger=WORKERS_LOG)
    await stream.transition_state(State.UPDATING)
    api = rpcs(service)
    assert (await api.commit_transaction(request(stream, second.txnId, "7", 5000))).status == pb.TxnStatus.SUCCESS
    assert (await api.commit_transaction(request(stream, first.txnId, "7", 4000))).status == pb.TxnStatus.SUCCESS
    await commit_turned_away(caplog, State.UPDATING)
    await stream.transition_state(State.ACTIVE)
    for response in (first, second):
        await wait_for_state(service, stream, response.txnId, pb.TxnState.COMMITTED)
    assert await read_events(context.segments, segment_store.port, parents[0]) == [
        b"before", b"second-0", b"second", b"first-0", b"first"]
    assert await read_events(context.segments, segment_store.port, parents[1]) == [
        b"second-1", b"second", b"first-1", b"first"]
    assert not await segment_exists(context.segments, client_segment_name(first, 0))
    assert (await rpcs(service).commit_transaction(request(stream, first.txnId))).status == pb.TxnStatus.SUCCESS
    assert (await rpcs(service).abort_transaction(request(stream, first.txnId))).status == pb.TxnStatus.FAILURE
    mark, _ = await get_writer_mark(stream, "7")
    assert mark.timestamp == 5000 and set(mark.position) == {segment_id(0, 0), segment_id(1, 0)}
    assert (await stream.get_state())[0] == State.ACTIVE
    assert (await stored.get_committing_transactions(stream))[0].is_empty


async def test_aborted_data_never_appears_and_its_segments_are_deleted(service, context, segment_store):
    """An aborted txn's segments are deleted and its data never reaches the parent; abort is
    idempotent and a later commit is FAILURE; listCompletedTransactions reports it ABORTED."""
    stream = await create_stream(context, segments=1)
    parent = stream_segment_name(SCOPE, "stream", segment_id(0, 0))
    response = await begin(service, stream)
    await append_to_segment(segment_store.port, client_segment_name(response, 0), [b"never"])
    assert (await rpcs(service).abort_transaction(request(stream, response.txnId))).status == pb.TxnStatus.SUCCESS
    await wait_for_state(service, stream, response.txnId, pb.TxnState.ABORTED)
    assert not await segment_exists(context.segments, client_segment_name(response, 0))
    assert await read_events(context.segments, segment_store.port, parent) == []
    assert (await rpcs(service).abort_transaction(request(stream, response.txnId))).status == pb.TxnStatus.SUCCESS
    assert (await rpcs(service).commit_transaction(request(stream, response.txnId))).status == pb.TxnStatus.FAILURE
    listing = await rpcs(service).list_completed_transactions(pb.ListCompletedTxnRequest(streamInfo=request(
        stream, response.txnId).streamInfo))
    assert [(entry.txnId, entry.status) for entry in listing.response] == [(response.txnId, pb.TxnResponse.ABORTED)]


async def test_unknown_transactions_and_streams_get_final_statuses(service, context):
    """Commit/abort of an unknown txn answer TRANSACTION_NOT_FOUND, of an unknown stream
    STREAM_NOT_FOUND; check state and ping answer UNKNOWN."""
    stream = await create_stream(context)
    unknown = transaction_id_to(compose_transaction_id(0, 999_999))
    missing = context.store.stream(SCOPE, "missing")
    api = rpcs(service)
    assert (await api.commit_transaction(request(stream, unknown))).status == pb.TxnStatus.TRANSACTION_NOT_FOUND
    assert (await api.abort_transaction(request(stream, unknown))).status == pb.TxnStatus.TRANSACTION_NOT_FOUND
    assert (await api.commit_transaction(request(missing, unknown))).status == pb.TxnStatus.STREAM_NOT_FOUND
    assert await state_of(service, stream, unknown) == pb.TxnState.UNKNOWN
    assert await state_of(service, missing, unknown) == pb.TxnState.UNKNOWN
    ping = pb.PingTxnRequest(streamInfo=request(stream, unknown).streamInfo, txnId=unknown, lease=LEASE_MS)
    assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.UNKNOWN


# ---------------------------------------------------------------------- pings and timeouts


async def test_ping_statuses(context):
    """DISCONNECTED before start; OK extends the lease; LEASE_TOO_LARGE above 600 s;
    MAX_EXECUTION_TIME_EXCEEDED past the hard bound; COMMITTED and ABORTED once decided."""
    stream = await create_stream(context)
    service = TransactionService(context, settings=dataclasses.replace(SETTINGS, max_execution_ms_max=60_000))
    response = await begin(service, stream, lease=10_000)
    ping = pb.PingTxnRequest(streamInfo=request(stream, response.txnId).streamInfo, txnId=response.txnId,
                             lease=20_000)
    assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.DISCONNECTED
    await service.start()
    try:
        transaction_id = transaction_id_from(response.txnId)
        before, _ = await stored.get_transaction(stream, transaction_id)
        context.now_ms.now += 5_000
        assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.OK
        after, _ = await stored.get_transaction(stream, transaction_id)
        assert after.lease_expiry_time == context.now_ms() + 20_000 > before.lease_expiry_time
        ping.lease = 600_001
        assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.LEASE_TOO_LARGE
        ping.lease = 20_000
        context.now_ms.now += 15_000  # 20 s after creation; the hard bound is creation + 60 s
        assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.OK
        context.now_ms.now += 15_000  # now + lease = creation + 55 s: still within the bound
        assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.OK
        context.now_ms.now += 15_000  # now + lease = creation + 70 s: past it
        assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.MAX_EXECUTION_TIME_EXCEEDED
        assert before.max_execution_expiry_time == before.creation_time + 60_000
        second = await begin(service, stream)
        second_ping = pb.PingTxnRequest(streamInfo=ping.streamInfo, txnId=second.txnId, lease=20_000)
        await rpcs(service).commit_transaction(request(stream, second.txnId))
        assert (await rpcs(service).ping_transaction(second_ping)).status == pb.PingTxnStatus.COMMITTED
        third = await begin(service, stream)
        await rpcs(service).abort_transaction(request(stream, third.txnId))
        third_ping = pb.PingTxnRequest(streamInfo=ping.streamInfo, txnId=third.txnId, lease=20_000)
        assert (await rpcs(service).ping_transaction(third_ping)).status == pb.PingTxnStatus.ABORTED
    finally:
        await service.stop()


async def test_lease_expiry_aborts_unpinged_transactions(service, context, segment_store):
    """With time moved past the lease, the background loop aborts the unpinged txn (segments
    deleted, data never in the parent) while a pinged one stays OPEN."""
    stream = await create_stream(context, segments=1)
    idle, pinged = await begin(service, stream), await begin(service, stream)
    await append_to_segment(segment_store.port, client_segment_name(idle, 0), [b"lost"])
    context.now_ms.now += LEASE_MS - 1_000
    ping = pb.PingTxnRequest(streamInfo=request(stream, pinged.txnId).streamInfo, txnId=pinged.txnId, lease=LEASE_MS)
    assert (await rpcs(service).ping_transaction(ping)).status == pb.PingTxnStatus.OK
    await service.abort_expired_transactions(context.now_ms())  # the timer's tick, now: nothing is due yet
    assert await state_of(service, stream, idle.txnId) == pb.TxnState.OPEN  # not yet expired
    context.now_ms.now += 2_000
    await wait_for_state(service, stream, idle.txnId, pb.TxnState.ABORTED)
    assert await state_of(service, stream, pinged.txnId) == pb.TxnState.OPEN
    assert not await segment_exists(context.segments, client_segment_name(idle, 0))
    assert await read_events(context.segments, segment_store.port,
                             stream_segment_name(SCOPE, "stream", segment_id(0, 0))) == []
    assert (await rpcs(service).commit_transaction(request(stream, idle.txnId))).status == pb.TxnStatus.FAILURE


async def test_lease_grace_delays_the_timeout_abort(context):
    """With a grace period, a txn outlives its lease by the grace (Rust pings late, spec §4.5)."""
    stream = await create_stream(context, segments=1)
    service = TransactionService(context, settings=TransactionSettings(lease_grace_ms=60_000, timer_interval_ms=10))
    await service.start()
    try:
        response = await begin(service, stream)
        context.now_ms.now += LEASE_MS + 59_000
        await service.abort_expired_transactions(context.now_ms())  # the timer's tick, now: within the grace
        assert await state_of(service, stream, response.txnId) == pb.TxnState.OPEN
        context.now_ms.now += 1_000
        await wait_for_state(service, stream, response.txnId, pb.TxnState.ABORTED)
    finally:
        await service.stop()


# ---------------------------------------------------------------------- scale interplay


async def test_rolling_commit_after_a_scale(service, context, segment_store):
    """A txn of epoch 0 committed after a scale to epoch 1 is rolled: its data lands in sealed
    duplicates (epoch 2, reference 0) that succeed the epoch-1 segments, which succeed into the
    new active duplicates (epoch 3, reference 1). Readers following successors see events written
    before the commit, then the txn's, then those written after it."""
    stream = await create_stream(context, segments=2)
    epoch0 = await queries.current_segments(stream)
    response = await begin(service, stream)
    for index in range(2):
        await append_to_segment(segment_store.port, client_segment_name(response, index), [b"txn-%d" % index])
    low = epoch0.segments[0]
    await scale_stream(context, stream, [low.segment_id], [(0.0, 0.25), (0.25, low.key_end)])
    epoch1 = await queries.current_segments(stream)
    for segment in epoch1.segments:
        await append_to_segment(segment_store.port, stream_segment_name(SCOPE, "stream", segment.segment_id), [b"before-commit"])

    # Stop the job right before it seals the epoch-1 segments: their successors are known already
    # (spec §8 item 6: record "sealed in E" first). A second commit request resumes the job.
    context.fault_points.arm(jobs.STEP_ROLLING_SEAL)
    assert (await rpcs(service).commit_transaction(request(stream, response.txnId))).status == pb.TxnStatus.SUCCESS
    await asyncio.wait_for(service.drain(), WAIT_SECONDS)
    for segment in epoch1.segments:
        name = stream_segment_name(SCOPE, "stream", segment.segment_id)
        assert not (await context.segments.segment_info(name)).is_sealed
        assert await queries.successors(stream, segment.segment_id)
    assert (await rpcs(service).commit_transaction(request(stream, response.txnId))).status == pb.TxnStatus.SUCCESS
    await wait_for_state(service, stream, response.txnId, pb.TxnState.COMMITTED)

    duplicate, active = await queries.epoch_segments(stream, 2), await queries.current_segments(stream)
    assert (duplicate.epoch, duplicate.reference_epoch, active.epoch, active.reference_epoch) == (2, 0, 3, 1)
    assert [segment.segment_id for segment in duplicate.segments] == [segment_id(s.number, 2) for s in epoch0.segments]
    assert [segment.segment_id for segment in active.segments] == [segment_id(s.number, 3) for s in epoch1.segments]
    for index, segment in enumerate(duplicate.segments):
        name = stream_segment_name(SCOPE, "stream", segment.segment_id)
        assert await read_events(context.segments, segment_store.port, name) == [b"txn-%d" % index]
        assert (await context.segments.segment_info(name)).is_sealed
    for segment in active.segments:
        await append_to_segment(segment_store.port, stream_segment_name(SCOPE, "stream", segment.segment_id), [b"after-commit"])

    # Follow the successor chain from each epoch-1 segment, reading as a reader would.
    for start in epoch1.segments:
        seen = await read_events(context.segments, segment_store.port,
                                 stream_segment_name(SCOPE, "stream", start.segment_id))
        assert (await context.segments.segment_info(stream_segment_name(SCOPE, "stream", start.segment_id))).is_sealed
        for rolled in await queries.successors(stream, start.segment_id):
            assert rolled in duplicate.segments
            seen += await read_events(context.segments, segment_store.port,
                                      stream_segment_name(SCOPE, "stream", rolled.segment_id))
            for successor in await queries.successors(stream, rolled.segment_id):
                assert successor in active.segments
                seen += await read_events(context.segments, segment_store.port,
                                          stream_segment_name(SCOPE, "stream", successor.segment_id))
        assert seen.index(b"before-commit") < min(seen.index(event) for event in seen if event.startswith(b"txn"))
        assert seen[-1] == b"after-commit"
    assert (await stream.get_state())[0] == State.ACTIVE

    # A txn created now belongs to the duplicate's reference epoch and commits in place.
    later = await begin(service, stream)
    assert later.txnId.highBits >> 32 == 1
    await append_to_segment(segment_store.port, client_segment_name(later, 0), [b"later"])
    await rpcs(service).commit_transaction(request(stream, later.txnId))
    await wait_for_state(service, stream, later.txnId, pb.TxnState.COMMITTED)
    assert (await queries.current_segments(stream)).epoch == 3
    assert (await read_events(context.segments, segment_store.port,
                              stream_segment_name(SCOPE, "stream", active.segments[0].segment_id)))[-1] == b"later"


async def test_commits_wait_while_another_workflow_holds_the_stream(service, context, segment_store, caplog):
    """While the stream is SCALING the commit stays COMMITTING and nothing is merged; once it is
    ACTIVE again the batch commits, holding the stream in COMMITTING_TXN meanwhile."""
    stream = await create_stream(context, segments=1)
    response = await begin(service, stream)
    await append_to_segment(segment_store.port, client_segment_name(response, 0), [b"waits"])
    caplog.set_level(logging.INFO, logger=WORKERS_LOG)
    await stream.transition_state(State.SCALING)
    await rpcs(service).commit_transaction(request(stream, response.txnId))
    await commit_turned_away(caplog, State.SCALING)
    assert await state_of(service, stream, response.txnId) == pb.TxnState.COMMITTING
    assert await segment_exists(context.segments, client_segment_name(response, 0))
    context.fault_points.arm(jobs.STEP_MERGE)  # the job stops right before merging, and is resumed below
    await stream.transition_state(State.ACTIVE)
    await asyncio.wait_for(service.drain(), WAIT_SECONDS)
    assert (await stream.get_state())[0] == State.COMMITTING_TXN
    await rpcs(service).commit_transaction(request(stream, response.txnId))
    await wait_for_state(service, stream, response.txnId, pb.TxnState.COMMITTED)
    await asyncio.wait_for(service.drain(), WAIT_SECONDS)  # the job hands the stream back after the txn's state
    assert (await stream.get_state())[0] == State.ACTIVE
    assert await read_events(context.segments, segment_store.port,
                             stream_segment_name(SCOPE, "stream", segment_id(0, 0))) == [b"waits"]


# ---------------------------------------------------------------------- restarts


class LeaseHeldElsewhere(Coordination):
    """A cluster's coordination in which another controller holds the commits lease for ``busy_takes`` tries
    (its worker ran its last batch before this controller's transaction turned COMMITTING)."""

    def __init__(self, busy_takes: int):
        super().__init__()
        self.busy_takes, self.takes = busy_takes, 0

    @contextlib.asynccontextmanager
    async def lease(self, kind: str, name: str):
        self.takes += kind == COMMITS
        if kind == COMMITS and self.takes <= self.busy_takes:
            raise LeaseBusy(f"{kind}:{name} changed hands; try again")
        yield


async def test_a_commit_waits_for_the_lease_another_controller_holds_instead_of_the_sweep(context, caplog):
    """The commits lease busy at first (another controller's worker, about to exit): the worker waits for it and
    commits, instead of leaving the transaction COMMITTING until the next sweep (a minute)."""
    coordination = LeaseHeldElsewhere(busy_takes=3)
    context = dataclasses.replace(context, coordination=coordination)
    service = TransactionService(context, settings=dataclasses.replace(SETTINGS, sweep_interval_ms=3_600_000))
    await service.start()
    try:
        stream = await create_stream(context)
        txn = await begin(service, stream)
        assert (await rpcs(service).commit_transaction(request(stream, txn.txnId))).status == pb.TxnStatus.SUCCESS
        await wait_for_state(service, stream, txn.txnId, pb.TxnState.COMMITTED)
        assert coordination.takes == 4  # three busy, then taken
    finally:
        await service.stop()


async def _crash_at(context: ControllerContext, step: str) -> TransactionService:
    """A started service whose next job to reach ``step`` stops there, as if the controller died
    (``FaultPoints``: the job raises SimulatedCrash and its worker ends)."""
    context.fault_points.arm(step)
    service = TransactionService(context, settings=SETTINGS)
    await service.start()
    return service


@pytest.mark.parametrize("step", [jobs.STEP_BATCH, jobs.STEP_MERGE,
                                  jobs.STEP_COMPLETE])
async def test_restart_mid_commit_completes_on_start(context, segment_store, step):
    """A controller stopped after COMMITTING is recorded (before, or right after, the merges)
    leaves the txn COMMITTING; a new service's start() finishes it and the data is in the parent."""
    stream = await create_stream(context, segments=2)
    crashed = await _crash_at(context, step)
    response = await begin(crashed, stream)
    for index in range(2):
        await append_to_segment(segment_store.port, client_segment_name(response, index), [b"survives-%d" % index])
    await rpcs(crashed).commit_transaction(request(stream, response.txnId))
    await asyncio.wait_for(crashed.drain(), WAIT_SECONDS)
    await crashed.stop()
    assert await state_of(crashed, stream, response.txnId) == pb.TxnState.COMMITTING
    restarted = TransactionService(context, settings=SETTINGS)
    await restarted.start()
    try:
        await wait_for_state(restarted, stream, response.txnId, pb.TxnState.COMMITTED)
        await restarted.drain()
        for index, segment in enumerate((await queries.current_segments(stream)).segments):
            assert await read_events(context.segments, segment_store.port,
                                     stream_segment_name(SCOPE, "stream", segment.segment_id)) == [
                b"survives-%d" % index]
        assert (await stream.get_state())[0] == State.ACTIVE
    finally:
        await restarted.stop()


@pytest.mark.parametrize("step", [jobs.STEP_ROLLING_EPOCHS, jobs.STEP_ROLLING_SEAL])
async def test_restart_mid_rolling_commit_completes_on_start(context, segment_store, step):
    """A rolling commit cut short after the duplicates are filled (before or after the epoch
    records) is finished by a new service: epochs 2 and 3 once each, data once, stream ACTIVE."""
    stream = await create_stream(context, segments=1)
    crashed = await _crash_at(context, step)
    response = await begin(crashed, stream)
    await append_to_segment(segment_store.port, client_segment_name(response, 0), [b"rolled"])
    await scale_stream(context, stream, [segment_id(0, 0)], [(0.0, 0.5), (0.5, 1.0)])
    await rpcs(crashed).commit_transaction(request(stream, response.txnId))
    await asyncio.wait_for(crashed.drain(), WAIT_SECONDS)
    await crashed.stop()
    assert await state_of(crashed, stream, response.txnId) == pb.TxnState.COMMITTING
    restarted = TransactionService(context, settings=SETTINGS)
    await restarted.start()
    try:
        await wait_for_state(restarted, stream, response.txnId, pb.TxnState.COMMITTED)
        await restarted.drain()
        assert [epoch.epoch for epoch in await queries.fetch_epochs(stream, 0, 3)] == [0, 1, 2, 3]
        assert (await queries.current_segments(stream)).epoch == 3
        assert await read_events(context.segments, segment_store.port,
                                 stream_segment_name(SCOPE, "stream", segment_id(0, 2))) == [b"rolled"]
        assert (await stream.get_state())[0] == State.ACTIVE
    finally:
        await restarted.stop()


async def test_restart_re_arms_lease_timeouts_and_unfinished_aborts(context, segment_store):
    """OPEN txns of a stopped controller still time out under the next one, and an abort cut short
    before deleting the segments is finished by start()."""
    stream = await create_stream(context, segments=1)
    crashed = await _crash_at(context, jobs.STEP_ABORT)
    open_one, aborting = await begin(crashed, stream), await begin(crashed, stream)
    await rpcs(crashed).abort_transaction(request(stream, aborting.txnId))
    await asyncio.wait_for(crashed.drain(), WAIT_SECONDS)
    await crashed.stop()
    assert await segment_exists(context.segments, client_segment_name(aborting, 0))
    restarted = TransactionService(context, settings=SETTINGS)
    await restarted.start()
    try:
        await wait_for_state(restarted, stream, aborting.txnId, pb.TxnState.ABORTED)
        assert not await segment_exists(context.segments, client_segment_name(aborting, 0))
        assert await state_of(restarted, stream, open_one.txnId) == pb.TxnState.OPEN
        context.now_ms.now += LEASE_MS
        await wait_for_state(restarted, stream, open_one.txnId, pb.TxnState.ABORTED)
    finally:
        await restarted.stop()


async def test_sweep_purges_old_completed_records(service, context):
    """Completed records older than the retention are purged (then UNKNOWN), younger ones kept."""
    stream = await create_stream(context, segments=1)
    old, young = await begin(service, stream), await begin(service, stream)
    await rpcs(service).abort_transaction(request(stream, old.txnId))
    await wait_for_state(service, stream, old.txnId, pb.TxnState.ABORTED)
    context.now_ms.now += SETTINGS.completed_retention_ms - 1
    await rpcs(service).abort_transaction(request(stream, young.txnId))
    await wait_for_state(service, stream, young.txnId, pb.TxnState.ABORTED)
    context.now_ms.now += 1
    await service.sweep(context.now_ms())
    assert await state_of(service, stream, old.txnId) == pb.TxnState.UNKNOWN
    assert await state_of(service, stream, young.txnId) == pb.TxnState.ABORTED
    assert (await stream_index.list_streams(context.store.kv))[0] == [(SCOPE, "stream")]
    context.now_ms.now += SETTINGS.completed_retention_ms
    await service.sweep(context.now_ms())
    assert await state_of(service, stream, young.txnId) == pb.TxnState.UNKNOWN
    assert (await stream_index.list_streams(context.store.kv))[0] == []  # nothing left to watch


async def test_seal_workflow_aborts_open_transactions_only(service, context):
    """abort_open_transaction (the seal workflow's hook) aborts an OPEN txn and leaves a
    committing one alone, without raising for either."""
    stream = await create_stream(context, segments=1)
    open_one, committing = await begin(service, stream), await begin(service, stream)
    await rpcs(service).commit_transaction(request(stream, committing.txnId))
    for response in (open_one, committing):
        await service.abort_open_transaction(SCOPE, "stream", transaction_id_from(response.txnId))
    await wait_for_state(service, stream, open_one.txnId, pb.TxnState.ABORTED)
    await wait_for_state(service, stream, committing.txnId, pb.TxnState.COMMITTED)
    await service.abort_open_transaction(SCOPE, "stream", transaction_id_from(open_one.txnId))  # completed: no error


def test_transaction_segment_names_match_the_spec_example():
    """Parent sc/st/0.#epoch.0 with a txn of epoch 1 -> sc/st/0.#epoch.1#transaction.<hex> (spec §5.4)."""
    transaction_id = compose_transaction_id(1, 5)
    assert transaction_segment("sc", "st", segment_id(0, 0), 1, transaction_id) == (
        "sc/st/0.#epoch.1#transaction.00000001000000000000000000000005")
