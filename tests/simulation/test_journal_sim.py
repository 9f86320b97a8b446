"""Log stores in the world on the simulated journal (tests/simulation/journal_sim.py): the store-level tests
of the real journal, run again in a world; kill -9 and restarts; a full disk, a lost disk, a torn tail and
damage; collection; faithfulness to the real journal's bytes; determinism.

Everything runs in this process on a world's virtual loop: each test takes milliseconds of wall time.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from server.tier1.logstore import protocol as p
from server.tier1.logstore.journal import Journal, NewRecord
from server.tier1.logstore.journal_format import NO_ENTRY, JournalCorrupted, Kind
from server.tier1.logstore.ledgers import LedgerWriter, StoreClient, recover
from server.tier1.logstore.service import LogStoreService
from server.tier1.logstore.store import LogStore
from tests.simulation import World
from tests.simulation.journal_sim import JournalDisk, SimJournal, SimLogStoreHost
from tests.simulation.network import OUTSIDE_HOST
from tests.unit.tier1 import test_logstore_ledgers as ledger_cases
from tests.unit.tier1 import test_logstore_store as store_cases

HOST = "10.0.2.1"
UNTIL = 3600.0  # virtual seconds: far more than any test here needs; a hang fails fast as SimulationTimeout
DATA_DIR = pathlib.PurePosixPath("/simulated/data")  # a name only: the stores here touch no file
_ids = itertools.count(1)


def sim_log_store(world: World) -> Callable[..., LogStore]:
    """``LogStore(data_dir, host, port)`` on a ``SimJournal``: one ``JournalDisk`` per data dir, kept across
    restarts (the store runs in the world's own context, on ``OUTSIDE_HOST``, as the test driving it)."""
    disks: dict[str, JournalDisk] = {}

    def make(data_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0) -> LogStore:
        disk = disks.get(os.fspath(data_dir))
        if disk is None:
            disk = disks[os.fspath(data_dir)] = JournalDisk(world, OUTSIDE_HOST)
        return LogStore(data_dir, host, port, journal=disk.journal(), replica_id=disk.replica_id())

    return make


# -- the store-level tests of the real journal, each in a world ------------------------------------------
#
# tests/unit/tier1/test_logstore_store.py and test_logstore_ledgers.py, unchanged: their coroutines run as a
# world's main coroutine, with the module's ``LogStore`` replaced by one on a SimJournal (the store tests
# build theirs through it), or given three such stores (the ledger tests take them as the ``stores`` fixture).

STORE_CASES = ["test_adds_are_acknowledged_in_groups_and_read_back_after_a_restart",
               "test_a_fence_refuses_the_old_writer_but_not_recovery_and_survives_a_restart",
               "test_a_deleted_ledger_is_gone_and_takes_no_adds",
               "test_an_add_behind_a_delete_in_the_same_group_is_refused_not_acknowledged_and_lost",
               "test_a_malformed_frame_closes_only_its_connection"]
STORE_CASES_NOT_REUSED = {  # and why
    "test_a_failing_disk_stops_acknowledgements": "replaces the real journal's fdatasync (test_a_full_disk_... here)",
}
LEDGER_CASES = ["test_entries_are_acknowledged_in_order_on_a_quorum",
                "test_a_lost_replica_degrades_the_writer_and_two_lost_break_it",
                "test_recovery_keeps_every_acknowledged_entry_and_fences_the_old_writer",
                "test_recovery_needs_enough_replicas_to_decide"]
LEDGER_CASES_NOT_REUSED = {  # and why
    "test_a_stall_of_the_writer_s_own_loop_times_no_replica_out": "stalls a real loop with time.sleep (no stores)",
    "test_replicas_silent_for_the_add_timeout_of_running_time_after_a_stall_are_dropped":
        "stalls a real loop with time.sleep (no stores)",
}


def test_every_store_level_case_is_reused_or_excused() -> None:
    store = {name for name in dir(store_cases) if name.startswith("test_")}
    ledgers = {name for name in dir(ledger_cases) if name.startswith("test_")}
    assert store == set(STORE_CASES) | set(STORE_CASES_NOT_REUSED)
    assert ledgers == set(LEDGER_CASES) | set(LEDGER_CASES_NOT_REUSED)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", STORE_CASES)
def test_store_case_in_world(case: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    with World(seed) as world:
        monkeypatch.setattr(store_cases, "LogStore", sim_log_store(world))
        world.run(getattr(store_cases, case)(DATA_DIR), until=UNTIL)
        assert not world.unhandled


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", LEDGER_CASES)
def test_ledger_case_in_world(case: str, seed: int) -> None:
    with World(seed) as world:
        make = sim_log_store(world)

        async def main() -> None:
            stores = [make(DATA_DIR / f"store-{index}") for index in range(3)]
            for store in stores:
                await store.start()
            try:
                await getattr(ledger_cases, case)(stores)
            finally:
                for store in stores:  # those the case stopped itself it removed from the list
                    await store.stop()

        world.run(main(), until=UNTIL)
        assert not world.unhandled


# -- helpers for stores in processes ---------------------------------------------------------------------


def add(ledger: int, entry: int, payload: bytes, flags: int = 0) -> p.Add:
    return p.Add(next(_ids), ledger, entry, entry - 1, flags, payload)


async def connect(store: SimLogStoreHost) -> StoreClient:
    await store.serving()
    return await StoreClient.connect(store.host, store.port)


async def entries(client: StoreClient, ledger: int, first: int = 0, last: int = 10_000) -> dict[int, bytes]:
    reply = await client.call(p.Read(next(_ids), ledger, first, last))
    assert isinstance(reply, p.Entries)
    return {entry: bytes(data) for entry, data in reply.entries}


async def status_of(client: StoreClient, message: p.Message) -> p.Status:
    reply = await client.call(message)
    return p.Status(reply.status)  # type: ignore[attr-defined]


def payload(index: int, size: int) -> bytes:
    return (f"entry {index} ".encode() * (size // 8 + 1))[:max(size, 1)]


# -- kill -9 and restart ---------------------------------------------------------------------------------


@dataclass
class KillRun:
    appended: list[bytes] = field(default_factory=list)
    acknowledged: list[int] = field(default_factory=list)
    unacknowledged_at_crash: int = 0
    recovered: dict[int, bytes] = field(default_factory=dict)
    trace_hash: str = ""


def kill_run(seed: int) -> KillRun:
    """A writer appends to ledger 2 on one store (ack quorum 1); ledger 1 is fenced; at a random moment the
    store is killed (kill -9) and started again on the same disk; what it holds is read back."""
    run = KillRun()
    with World(seed) as world:
        store = SimLogStoreHost(world, HOST, file_size_max=16 * 1024)
        store.start()

        def acknowledged(index: int, future: asyncio.Future[int]) -> None:
            if future.exception() is None:
                assert future.result() == index
                run.acknowledged.append(index)

        async def write(writer: LedgerWriter) -> None:
            while True:
                for _ in range(world.random.randint(1, 5)):
                    run.appended.append(payload(len(run.appended), world.random.randint(0, 600)))
                    writer.append(run.appended[-1]).add_done_callback(
                        functools.partial(acknowledged, len(run.appended) - 1))
                await asyncio.sleep(world.random.uniform(0.0, 0.004))

        async def main() -> None:
            client = await connect(store)
            assert await status_of(client, add(1, 0, b"before the fence")) == p.Status.OK
            assert await status_of(client, p.Fence(next(_ids), 1)) == p.Status.OK
            writer = LedgerWriter(2, [client], ack_quorum=1, add_timeout=60.0)
            writing = asyncio.get_running_loop().create_task(write(writer))
            await asyncio.sleep(world.random.uniform(0.01, 0.4))
            run.unacknowledged_at_crash = len(run.appended) - len(run.acknowledged)
            store.crash()
            writing.cancel()
            await asyncio.sleep(world.random.uniform(0.0, 0.05))
            assert client.closed
            store.start()
            again = await connect(store)
            run.recovered = await entries(again, 2)
            assert await status_of(again, add(1, 1, b"zombie")) == p.Status.FENCED  # the fence survived
            assert await entries(again, 1) == {0: b"before the fence"}
            again.close()

        world.run(main(), until=UNTIL)
        assert not world.unhandled
        run.trace_hash = world.trace_hash()
    return run


def test_kill_9_keeps_every_acknowledged_entry_and_the_fences() -> None:
    runs = [kill_run(seed) for seed in range(20)]
    for run in runs:
        assert run.acknowledged == list(range(len(run.acknowledged))), "acknowledged out of order"
        assert sorted(run.recovered) == list(range(len(run.recovered))), "a gap in what the store kept"
        assert list(run.recovered.values()) == run.appended[:len(run.recovered)]
        assert len(run.recovered) >= len(run.acknowledged), "an acknowledged entry was lost"
    # The scenario exercises what it claims: entries in flight at the crash, some made durable without
    # their acknowledgement reaching the writer, and journals rolled over to a new file.
    assert sum(run.unacknowledged_at_crash > 0 for run in runs) >= 10
    assert any(len(run.recovered) > len(run.acknowledged) for run in runs)
    assert any(len(run.appended) > 100 for run in runs)


def test_same_seed_same_trace_and_another_seed_another() -> None:
    first, again, other = kill_run(7), kill_run(7), kill_run(8)
    assert first.trace_hash == again.trace_hash and first.recovered == again.recovered
    assert other.trace_hash != first.trace_hash


def test_a_client_reconnects_after_a_restart_to_the_same_replica() -> None:
    with World(3) as world:
        store = SimLogStoreHost(world, HOST)
        store.start()

        async def main() -> None:
            await store.serving()
            client, replica = await StoreClient.handshake(HOST, store.port, timeout=5.0)
            assert replica == store.replica_id
            assert await status_of(client, add(4, 0, b"kept")) == p.Status.OK
            store.crash()
            with pytest.raises(ConnectionError):
                await client.call(p.Read(next(_ids), 4, 0, 0))
            with pytest.raises(ConnectionRefusedError):  # nobody listens while it is down
                await StoreClient.connect(HOST, store.port)
            store.start()
            await store.serving()
            again, same = await StoreClient.handshake(HOST, store.port, timeout=5.0)
            assert same == replica
            assert await entries(again, 4) == {0: b"kept"}
            assert await status_of(again, add(4, 1, b"after")) == p.Status.OK
            again.close()

        world.run(main(), until=UNTIL)
        assert not world.unhandled


def test_a_graceful_stop_closes_connections_and_ends_the_process() -> None:
    with World(13) as world:
        store = SimLogStoreHost(world, HOST)
        store.start()

        async def main() -> None:
            client = await connect(store)
            assert await status_of(client, add(6, 0, b"kept")) == p.Status.OK
            await store.stop()
            assert store.process.task is not None and store.process.task.done()
            await asyncio.sleep(0.1)
            assert client.closed
            store.start()
            again = await connect(store)
            assert await entries(again, 6) == {0: b"kept"}
            again.close()

        world.run(main(), until=UNTIL)
        assert "exit 'logstore-10.0.2.1#1' 'returned'" in " ".join(world.trace_tail())


def test_recovery_after_a_replica_and_the_writer_die_keeps_every_acknowledged_entry() -> None:
    for seed in range(8):
        with World(seed) as world:
            stores = [SimLogStoreHost(world, f"10.0.2.{index + 1}") for index in range(3)]
            for store in stores:
                store.start()
            acknowledged: list[int] = []

            def done(future: asyncio.Future[int]) -> None:
                if future.exception() is None:
                    acknowledged.append(future.result())

            async def main() -> None:
                writer = LedgerWriter(5, [await connect(store) for store in stores], ack_quorum=2, add_timeout=60.0)
                for index in range(world.random.randint(20, 200)):
                    writer.append(payload(index, world.random.randint(1, 300))).add_done_callback(done)
                    if world.random.random() < 0.3:
                        await asyncio.sleep(world.random.uniform(0.0, 0.003))
                victim = world.random.choice(stores)
                victim.crash()  # and the writer is abandoned: it never appends again
                writer.abandon()
                await asyncio.sleep(0.1)
                victim.start()
                last = await recover(5, [await connect(store) for store in stores], ack_quorum=2)
                assert last >= max(acknowledged, default=-1)
                for store in stores:
                    client = await connect(store)
                    assert sorted(await entries(client, 5)) == list(range(last + 1))
                    client.close()

            world.run(main(), until=UNTIL)
            assert not world.unhandled


# -- faults ----------------------------------------------------------------------------------------------


def test_a_full_disk_answers_unavailable_until_the_store_restarts() -> None:
    with World(4) as world:
        store = SimLogStoreHost(world, HOST)
        store.start()

        async def main() -> None:
            client = await connect(store)
            assert await status_of(client, add(1, 0, b"ok")) == p.Status.OK
            store.disk.fill()
            assert await status_of(client, add(1, 1, b"no room")) == p.Status.UNAVAILABLE
            store.disk.free()
            assert await status_of(client, add(1, 2, b"later")) == p.Status.UNAVAILABLE  # it stays failed
            assert await status_of(client, p.Fence(next(_ids), 1)) == p.Status.UNAVAILABLE
            assert await entries(client, 1) == {0: b"ok"}  # reads go on
            store.restart()
            again = await connect(store)
            assert await status_of(again, add(1, 1, b"room again")) == p.Status.OK
            assert await entries(again, 1) == {0: b"ok", 1: b"room again"}
            again.close()

        world.run(main(), until=UNTIL)
        assert any(" journal_enospc " in f" {line} " for line in world.trace_tail())


def test_a_slow_fsync_holds_the_group_s_replies_and_the_whole_store_until_it_completes() -> None:
    """During a slow spell (fsyncs of 1 to 2 s), an ADD is answered only once its fsync is over, and a READ sent
    meanwhile waits behind it, as on the real store's blocked loop; the entry is durable (it survives a kill -9
    during the next slow fsync, whose own ADD is never answered). After the spell, writes take no time again."""
    with World(7) as world:
        store = SimLogStoreHost(world, HOST)
        store.start()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            client = await connect(store)
            reader = await connect(store)
            began = loop.time()
            assert await status_of(client, add(1, 0, b"fast")) == p.Status.OK
            fast = loop.time() - began
            store.disk.slow(10.0, 2.0)
            began = loop.time()
            slow_add = asyncio.ensure_future(status_of(client, add(1, 1, b"slow")))
            await asyncio.sleep(0.01)  # the group is in its fsync now
            read = await entries(reader, 1)
            read_waited = loop.time() - began
            assert await slow_add == p.Status.OK
            added = loop.time() - began
            assert fast < 0.05 and 1.0 <= added <= 2.1 and read_waited >= 1.0, (fast, added, read_waited)
            assert read == {0: b"fast"} or read == {0: b"fast", 1: b"slow"}
            unanswered = asyncio.ensure_future(status_of(client, add(1, 2, b"killed in its fsync")))
            await asyncio.sleep(0.5)
            assert not unanswered.done()
            store.restart()
            (lost,) = await asyncio.gather(unanswered, return_exceptions=True)
            assert isinstance(lost, Exception), lost  # the connection reset: never answered
            again = await connect(store)
            recovered = await entries(again, 1)
            assert recovered[0] == b"fast" and recovered[1] == b"slow"
            await asyncio.sleep(10.0)  # the spell is over
            began = loop.time()
            assert await status_of(again, add(2, 0, b"fast again")) == p.Status.OK
            assert loop.time() - began < 0.05

        world.run(main(), until=UNTIL)
        assert any(" journal_fsync_wait " in f" {line} " for line in world.trace_tail())


def test_a_full_disk_by_capacity_fails_the_group_that_does_not_fit() -> None:
    with World(5) as world:
        store = SimLogStoreHost(world, HOST, capacity_bytes=1000)
        store.start()

        async def main() -> None:
            client = await connect(store)
            assert await status_of(client, add(1, 0, bytes(500))) == p.Status.OK
            assert await status_of(client, add(1, 1, bytes(500))) == p.Status.UNAVAILABLE
            assert store.disk.used_bytes == 548

        world.run(main(), until=UNTIL)


def test_a_lost_disk_makes_a_new_empty_replica() -> None:
    with World(6) as world:
        store = SimLogStoreHost(world, HOST)
        store.start()

        async def main() -> None:
            client = await connect(store)
            before = store.replica_id
            assert await status_of(client, add(1, 0, b"gone with the disk")) == p.Status.OK
            store.lose_disk()
            store.start()
            _, after = await StoreClient.handshake(HOST, store.port, timeout=5.0)
            assert after != before and after == store.replica_id
            again = await connect(store)
            assert await status_of(again, p.Read(next(_ids), 1, 0, 0)) == p.Status.NO_SUCH_LEDGER
            again.close()

        world.run(main(), until=UNTIL)


def test_a_torn_tail_is_cut_and_damage_in_an_older_file_stops_the_store() -> None:
    with World(7) as world:
        store = SimLogStoreHost(world, HOST, file_size_max=2048)
        store.start()

        async def main() -> None:
            client = await connect(store)
            for entry in range(40):
                assert await status_of(client, add(3, entry, payload(entry, 100))) == p.Status.OK
            assert len(store.disk.files) > 1
            store.crash()
            used = store.disk.used_bytes
            assert store.disk.tear() > 0
            store.start()
            again = await connect(store)
            assert store.disk.used_bytes == used  # the torn tail was cut
            assert await entries(again, 3) == {entry: payload(entry, 100) for entry in range(40)}
            assert await status_of(again, add(3, 40, b"after the tear")) == p.Status.OK
            store.crash()
            store.disk.corrupt(min(store.disk.files), offset=60)  # inside the first record's payload
            store.start()
            with pytest.raises(JournalCorrupted):
                await store.serving()
            await asyncio.sleep(0.1)
            assert store.process.task is not None and store.process.task.done()  # the process exited

        world.run(main(), until=UNTIL)
        assert any("exit 'logstore-10.0.2.1#3' 'raised JournalCorrupted'" in line for line in world.trace_tail())


def test_files_of_deleted_ledgers_are_collected_and_stay_deleted_after_a_restart() -> None:
    with World(8) as world:
        store = SimLogStoreHost(world, HOST, file_size_max=1024)
        store.start()

        async def main() -> None:
            client = await connect(store)
            for entry in range(30):
                for ledger in (1, 2) if entry < 20 else (3,):
                    assert await status_of(client, add(ledger, entry, payload(entry, 80))) == p.Status.OK
            files = len(store.disk.files)
            assert files > 3
            for ledger in (1, 2):
                assert await status_of(client, p.Delete(next(_ids), ledger)) == p.Status.OK
            assert len(store.disk.files) < files
            store.restart()
            again = await connect(store)
            for ledger in (1, 2):
                assert await status_of(again, p.Read(next(_ids), ledger, 0, 0)) == p.Status.NO_SUCH_LEDGER
            assert await entries(again, 3, first=20) == {entry: payload(entry, 80) for entry in range(20, 30)}
            again.close()

        world.run(main(), until=UNTIL)


# -- faithfulness and the seams --------------------------------------------------------------------------


def test_the_real_journal_writes_the_same_bytes_and_index(tmp_path: pathlib.Path) -> None:
    """The same groups through ``Journal`` and ``SimJournal``: the same record bytes in the same files, the same
    index, the same files collected, and each reads the other's files back to the same index."""
    size = 4096
    groups: list[list[NewRecord]] = []
    for group in range(30):  # ledger 1 alone in the first files, 2 and 3 in the later ones
        ledgers = (1,) if group < 10 else (2, 3)
        groups.append([(Kind.ADD, ledgers[n % len(ledgers)], group * 4 + n, group * 4 + n - 1,
                        payload(group, 40 + n * 30)) for n in range(4)])
        if group == 12:
            groups.append([(Kind.FENCE, 2, NO_ENTRY, NO_ENTRY, b"")])
        if group == 20:
            groups.append([(Kind.DELETE, 1, NO_ENTRY, NO_ENTRY, b"")])
    with World(9) as world:
        disk = JournalDisk(world, HOST)
        sim = SimJournal(disk, size)
        real = Journal(tmp_path / "real", size)
        sim.open()
        real.open()
        try:
            for records in [*groups, [(Kind.ADD, 3, 999, 0, b"tail")]]:
                placed = sim.write(records)
                assert placed == real.write(records)
                sim.index(placed)
                real.index(placed)
            assert sim.ledgers == real.ledgers and sim.deleted == real.deleted
        finally:
            real.close()
        # Index what was written: reopen both from their files.
        sim, real = SimJournal(disk, size), Journal(tmp_path / "real", size)
        sim.open()
        real.open()
        try:
            assert sim.ledgers == real.ledgers and sim.deleted == real.deleted
            assert sim.ledgers[2].fenced and 1 not in sim.ledgers
            for number, data in disk.files.items():
                on_file = (tmp_path / "real" / f"journal-{number:012d}.tj").read_bytes()
                assert on_file[:len(data)] == bytes(data) and not on_file[len(data):].rstrip(b"\0")
            assert sim.read(3, 999) == real.read(3, 999) == b"tail"
            assert sim.collect() == real.collect() != []
        finally:
            real.close()
        # The real journal reads the simulated one's files.
        copy = tmp_path / "copy"
        copy.mkdir()
        for number, data in disk.files.items():
            (copy / f"journal-{number:012d}.tj").write_bytes(bytes(data))
        reread, sim = Journal(copy, size), SimJournal(disk, size)
        reread.open()
        sim.open()
        try:
            assert reread.ledgers == sim.ledgers and reread.deleted == sim.deleted
        finally:
            reread.close()


def test_the_service_hands_journal_and_replica_id_to_its_store(tmp_path: pathlib.Path) -> None:
    with World(10) as world:
        journal = JournalDisk(world, HOST).journal()
        service = LogStoreService(tmp_path / "never", "127.0.0.1:2181", journal=journal, replica_id=b"r" * 16)
        assert service.store._journal is journal and service.replica_id == (b"r" * 16).hex()


def test_a_store_given_journal_and_replica_id_touches_no_file(tmp_path: pathlib.Path) -> None:
    data_dir = tmp_path / "never"
    with World(11) as world:
        disk = JournalDisk(world, HOST)

        async def main() -> None:
            store = LogStore(data_dir, journal=disk.journal(), replica_id=b"x" * 16)
            await store.start()
            client, replica = await StoreClient.handshake("127.0.0.1", store.port, timeout=5.0)
            assert replica == (b"x" * 16).hex()
            assert await status_of(client, add(1, 0, b"in memory")) == p.Status.OK
            client.close()
            await store.stop()

        world.run(main(), until=UNTIL)
    assert not data_dir.exists() and disk.groups == 1


def test_a_write_on_a_lost_disk_fails_with_eio() -> None:
    with World(12) as world:
        disk = JournalDisk(world, HOST)
        journal = disk.journal()
        journal.open()
        disk.lose()
        with pytest.raises(OSError, match="gone"):
            journal.write([(Kind.ADD, 1, 0, -1, b"x")])
