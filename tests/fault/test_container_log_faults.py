"""Fault injection through the Tier-1 log under a container and under the whole server: fsync
failures and torn writes surface as failed (never acknowledged) appends, the container stops, and
recovery on the same log keeps every acknowledged append exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from clients.connection import WireConnection, next_request_id
from clients.errors import ClientError
from server import errors
from server.config import SegmentStoreConfig
from server.containers.container import ContainerStatus, SegmentContainer
from server.service import SegmentStoreService
from server.tier1 import DurableDataLog, LocalDurableDataLog
from tests.support.faults.tier1 import FaultyDurableDataLog, FaultyFileOperations
from tests.support.replicated import replicated_tier1
from tests.support.waiting import eventually
from wire import commands as c
from wire.envelope import envelope, envelope_all, split_events

SEGMENT = "fault/stream/0.#epoch.0"
LOG_OPTIONS = {"file_size": 1 << 20, "max_append_size": 256 << 10}


def faulty_log(directory) -> FaultyDurableDataLog:
    return FaultyDurableDataLog(LocalDurableDataLog(directory, file_operations=FaultyFileOperations(),
                                                    **LOG_OPTIONS))


@contextlib.asynccontextmanager
async def logs_of(kind: str, home, request) -> AsyncIterator[tuple[Callable[[], FaultyDurableDataLog],
                                                                   Callable[[], DurableDataLog]]]:
    """(a fault-injecting log, a plain log on the same records) for each tier-1."""
    if kind == "local":
        yield (lambda: faulty_log(home)), (lambda: LocalDurableDataLog(home, **LOG_OPTIONS))
        return
    async with replicated_tier1(home, request.getfixturevalue("zk_hosts")) as cluster:
        tier1 = cluster.tier1
        assert tier1 is not None
        yield (lambda: FaultyDurableDataLog(tier1.log("container-0"))), (lambda: tier1.log("container-0"))


async def recovered_data(make_log) -> bytes:
    container = SegmentContainer(0, make_log())
    await container.start()
    try:
        info = container.get_info(SEGMENT)
        result = await container.read(SEGMENT, 0, info.length)
        return bytes(result.data())
    finally:
        await container.stop()


INJECTIONS = {
    "fsync failure": lambda log: log.fail_next_sync(),
    "fsync failure losing data": lambda log: log.fail_next_sync(lose_unsynced_data=True),
    "torn write": lambda log: log.tear_next_write(),
    "append failure after the record reached the disk": lambda log: log.fail_next_append(data_reaches_disk=True),
    "append failure before the record reached the disk": lambda log: log.fail_next_append(),
}
CASES = [("local", inject) for inject in INJECTIONS] + [  # the replicated log has no file seam: log-level faults
    pytest.param("replicated", "append failure after the record reached the disk", marks=pytest.mark.zk),
    pytest.param("replicated", "append failure before the record reached the disk", marks=pytest.mark.zk)]


@pytest.mark.parametrize("kind, inject", CASES)
async def test_log_fault_fails_the_append_and_recovery_keeps_acknowledged(tmp_path, request, kind, inject):
    """Acknowledged appends survive; the faulted append and everything after it fail; the container
    reports the failure; a new container on the same log recovers exactly a prefix that includes
    every acknowledged append."""
    async with logs_of(kind, tmp_path, request) as (make_faulty_log, make_log):
        durable_log = make_faulty_log()
        failures = []
        container = SegmentContainer(0, durable_log, on_failure=lambda _, error: failures.append(error))
        await container.start()
        await container.create_segment(SEGMENT)
        acknowledged = [f"event-{n}".encode() for n in range(30)]
        for event in acknowledged:
            await container.append(SEGMENT, envelope(event))
        INJECTIONS[inject](durable_log)
        with pytest.raises(errors.ContainerUnavailable):
            await container.append(SEGMENT, envelope(b"doomed"))
        assert failures and container.status == ContainerStatus.FAILED
        with pytest.raises(errors.ContainerUnavailable):
            await container.append(SEGMENT, envelope(b"after the failure"))
        await container.stop()
        events, consumed = split_events(await recovered_data(make_log))
        recovered = [bytes(event) for event in events]
        assert recovered[:len(acknowledged)] == acknowledged
        assert recovered[len(acknowledged):] in ([], [b"doomed"])


@pytest.mark.parametrize("fault", ["fsync failure", "disk full"])
async def test_a_failing_replica_is_rolled_away_from_and_the_container_goes_on(tmp_path, zk_hosts, fault):
    """Under a container on the replicated log (3/3/2), one log store's journal starts failing: that replica
    answers UNAVAILABLE, the log rolls to a ledger on the other replicas plus a fourth, the container never
    fails, and a new container recovers every acknowledged append."""
    async with replicated_tier1(tmp_path, zk_hosts, stores=4) as cluster:
        tier1 = cluster.tier1
        assert tier1 is not None
        failures = []
        container = SegmentContainer(0, tier1.log("container-0"), on_failure=lambda _, error: failures.append(error))
        await container.start()
        await container.create_segment(SEGMENT)
        first_ensemble = set(container._log._chain.ledgers[-1].ensemble)
        sick = next(store for store in cluster.stores if store.replica_id in first_ensemble)

        def failing(*_):
            raise OSError(errno.EIO if fault == "fsync failure" else errno.ENOSPC, fault)

        acknowledged = [f"event-{n}".encode() for n in range(200)]
        for number, event in enumerate(acknowledged):
            if number == 50:
                setattr(sick.store._journal, "sync" if fault == "fsync failure" else "write_at", failing)
            await container.append(SEGMENT, envelope(event))
        assert not failures and container.status == ContainerStatus.RUNNING
        # with an ack quorum of 2 the appends go on over the healthy replicas; the roll away from the sick one
        # follows its failure, and on a loaded machine may come after the last append is acknowledged
        await eventually(lambda: len(container._log._chain.ledgers) >= 2, "the roll to a new ledger", timeout=30)
        ledgers = container._log._chain.ledgers
        assert sick.replica_id not in ledgers[-1].ensemble
        await container.stop()
        events, _ = split_events(await recovered_data(lambda: tier1.log("container-0")))
        assert [bytes(event) for event in events] == acknowledged


async def test_server_restarts_a_failed_container_and_the_writer_resumes(tmp_path):
    """Through the wire: an fsync failure closes the writer's connection without an ack; the service
    restarts the container from its log; the writer reconnects, SetupAppend reports what is stored,
    and the segment holds every acknowledged event exactly once."""
    logs: dict[int, list] = {}

    def factory(config, container_id):
        log = faulty_log(config.data_dir / "tier1" / f"container-{container_id}")
        logs.setdefault(container_id, []).append(log)
        return log

    service = SegmentStoreService(SegmentStoreConfig(data_dir=tmp_path, port=0, container_count=1), factory)
    await service.start()
    writer = uuid.uuid4()
    try:
        connection = await WireConnection.connect("127.0.0.1", service.port)
        await connection.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, ""))
        await connection.request(c.SetupAppend(next_request_id(), writer, SEGMENT, ""))
        for number in range(1, 11):
            reply = await connection.request(c.AppendBlockEnd(writer, 0, envelope(b"e%d" % number), 1, number,
                                                              next_request_id()))
            assert isinstance(reply, c.DataAppended)
        logs[0][-1].fail_next_sync()
        with pytest.raises(ClientError):
            await connection.request(c.AppendBlockEnd(writer, 0, envelope(b"e11"), 1, 11, next_request_id()),
                                     timeout=10)
        for _ in range(100):
            if len(logs[0]) == 2 and service.containers[0].status == ContainerStatus.RUNNING:
                break
            await asyncio.sleep(0.05)
        assert len(logs[0]) == 2, "the failed container was not replaced"
        connection = await WireConnection.connect("127.0.0.1", service.port)
        setup = await connection.request(c.SetupAppend(next_request_id(), writer, SEGMENT, ""))
        assert setup.last_event_number in (10, 11)
        stored = setup.last_event_number
        for number in range(stored + 1, 13):
            reply = await connection.request(c.AppendBlockEnd(writer, 0, envelope(b"e%d" % number), 1, number,
                                                              next_request_id()))
            assert isinstance(reply, c.DataAppended)
        read = await connection.request(c.ReadSegment(SEGMENT, 0, 1 << 20, "", next_request_id()))
        assert bytes(read.data) == envelope_all([b"e%d" % n for n in range(1, 13)])
        await connection.close()
    finally:
        await service.stop()
