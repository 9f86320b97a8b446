"""The simulated ZooKeeper (tests/simulation/zookeeper_sim.py): the contract the real one keeps
(tests/support/zookeeper_contract.py), then what only a world can do to it: killed owners, partitions, pauses,
an ensemble down, lost replies, and the same run from the same seed.

Every test runs in this process on the world's loop, in milliseconds of wall time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import controller.cluster.zk
import server.tier1.logstore.service
import server.tier1.replicated
from coordination import zookeeper as zookeeper_module
from coordination.zookeeper import NodeExistsError, ZooKeeper, ZooKeeperUnavailable
from tests.simulation import World
from tests.simulation.zookeeper_sim import JUTE_MAXBUFFER, SimZooKeeper, SimZooKeeperServer
from tests.support.zookeeper_contract import CASES, Case, eventually

ZK = "10.0.9.1"
HOSTS = f"{ZK}:2181"
A = "10.0.0.1"
B = "10.0.0.2"
REAL_ZOOKEEPER = ZooKeeper


def _new(hosts: str = HOSTS, **options: Any) -> ZooKeeper:
    """A ZooKeeper made as production code makes one (the name the world patched)."""
    return zookeeper_module.ZooKeeper(hosts, **options)


async def _client_in(world: World, name: str, host: str, **options: Any) -> ZooKeeper:
    """A started client owned by a new process ``name`` on ``host`` (which then idles): its connection loop,
    pings and callbacks are that process's, and die with it."""
    ready: asyncio.Future[ZooKeeper] = asyncio.get_running_loop().create_future()

    async def main() -> None:
        zk = _new(**options)
        await zk.start()
        ready.set_result(zk)
        await asyncio.get_running_loop().create_future()

    world.process(name, host).start(main)
    return await ready


def _run(world: World, scenario: Callable[[], Awaitable[Any]], until: float = 3600) -> Any:
    return world.run(scenario(), until=until)


def _lines(world: World, kind: str) -> list[str]:
    return [line for line in world.trace_tail() if line.split()[1:2] == [kind]]


# -- the contract ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "latency"), [(1, (0.0005, 0.0025)), (2, (0.0005, 0.0025)), (3, (0.01, 0.05))],
                         ids=["seed1", "seed2", "seed3-slow-links"])
@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_the_model_keeps_the_contract(case: Case, seed: int, latency: tuple[float, float]) -> None:
    with World(seed, latency=latency) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.0)
        zookeeper.ensure_path("/contract")
        clients: list[ZooKeeper] = []

        async def connect() -> ZooKeeper:
            zk = _new(f"{HOSTS}/contract", session_timeout=4.0, operation_timeout=10.0)
            await zk.start()
            clients.append(zk)
            return zk

        async def main() -> None:
            try:
                await case(connect)
            finally:
                for zk in clients:
                    await zk.stop()

        world.run(world.process("client", A).start(main), until=600)
        assert not world.unhandled
        assert not _lines(world, "zk_session_expired")


def test_production_code_makes_the_model_inside_the_world_only() -> None:
    modules = (zookeeper_module, controller.cluster.zk, server.tier1.replicated, server.tier1.logstore.service)
    with World(1) as world:
        world.zookeeper(ZK)

        async def scenario() -> None:
            for module in modules:
                assert issubclass(module.ZooKeeper, SimZooKeeper) and issubclass(module.ZooKeeper, REAL_ZOOKEEPER)
            zk = _new(session_timeout=100.0)  # the ensemble's maxSessionTimeout (20 ticks of 2 s) clamps it
            await zk.start()
            assert zk.connected and zk.session_timeout == 40.0
            short = _new(session_timeout=1.0)  # minSessionTimeout: 2 ticks
            await short.start()
            assert short.session_timeout == 4.0
            await zk.stop()
            await short.stop()
            assert not zk.connected

        _run(world, scenario)
        assert len(_lines(world, "zk_session")) == 2 and len(_lines(world, "zk_session_closed")) == 2
    assert all(module.ZooKeeper is REAL_ZOOKEEPER for module in modules)


def test_start_fails_where_no_zookeeper_answers() -> None:
    with World(1) as world:

        async def scenario() -> float:
            zk = _new("10.0.9.9:2181", session_timeout=4.0)
            started = asyncio.get_running_loop().time()
            with pytest.raises(ZooKeeperUnavailable, match="cannot connect"):
                await zk.start(timeout=3.0)
            return asyncio.get_running_loop().time() - started

        assert _run(world, scenario) == pytest.approx(3.0)


# -- sessions: kill -9, partitions, pauses --------------------------------------------------------------


def test_an_ephemeral_goes_one_session_timeout_after_its_owner_is_killed_not_before() -> None:
    with World(11) as world:
        zookeeper = world.zookeeper(ZK)

        async def scenario() -> None:
            owner = await _client_in(world, "owner", A, session_timeout=6.0)
            await owner.create("/lock", b"owner", ephemeral=True)
            watcher = await _client_in(world, "watcher", B, session_timeout=6.0)
            gone = asyncio.Event()
            assert await watcher.exists("/lock", watch=gone.set)
            await asyncio.sleep(10)  # pings keep the session alive
            assert zookeeper.exists("/lock")
            loop = asyncio.get_running_loop()
            killed_at = loop.time()
            world.processes["owner"].crash()
            while zookeeper.exists("/lock"):
                await asyncio.sleep(0.01)
            after = loop.time() - killed_at
            # heard last at most a third of the timeout before the kill; expired on the tick after the timeout
            assert 6.0 * 2 / 3 - 0.5 < after <= 6.0 + zookeeper.tick + 0.05, after
            await eventually(gone.is_set)

        _run(world, scenario)
        assert len(_lines(world, "zk_session_expired")) == 1


def test_a_partition_longer_than_the_session_timeout_loses_the_session_and_its_ephemerals() -> None:
    with World(12) as world:
        zookeeper = world.zookeeper(ZK)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            zk = await _client_in(world, "member", A, session_timeout=6.0, operation_timeout=5.0)
            lost = asyncio.Event()
            zk.on_session_lost(lost.set)
            await zk.create("/member", b"", ephemeral=True)
            session = zk.session_id
            world.network.partition(A, ZK)
            presumed_at = None
            while session in zookeeper.sessions:
                if presumed_at is None and zk.clock.presumed_expired(loop.time()):
                    presumed_at = loop.time()
                await asyncio.sleep(0.01)
            expired_at = loop.time()
            assert presumed_at is not None and presumed_at < expired_at, \
                "the client presumes its session expired before the server expires it"
            assert not zookeeper.exists("/member"), "the ephemeral goes with the session, on the server"
            await asyncio.sleep(10)
            assert not lost.is_set(), "kazoo learns of the expiry only from the server"
            assert not zk.connected
            with pytest.raises(ZooKeeperUnavailable):
                await zk.exists("/")
            world.network.heal()
            await eventually(lost.is_set)
            await eventually(lambda: zk.connected)  # kazoo goes on with a new session
            assert zk.session_id not in (None, session)
            assert await zk.exists("/") and not await zk.exists("/member")

        _run(world, scenario)


def test_a_partition_shorter_than_the_session_timeout_keeps_the_session() -> None:
    with World(13) as world:
        zookeeper = world.zookeeper(ZK)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            zk = await _client_in(world, "member", A, session_timeout=10.0)
            lost = asyncio.Event()
            zk.on_session_lost(lost.set)
            await zk.create("/member", b"", ephemeral=True)
            session = zk.session_id
            await zk.exists("/")  # heard now: the session lives at least 10 s from here

            world.network.partition(A, ZK)  # a blip: TCP delivers what it held when it heals, no ping is missed
            for _ in range(30):
                await asyncio.sleep(0.1)
                assert zk.connected
            world.network.heal()

            fired = asyncio.Event()
            await zk.get("/member", watch=fired.set)
            await zk.exists("/")
            cut_at = loop.time()
            world.network.partition(A, ZK)  # long enough for kazoo to drop the connection (a ping unanswered)
            await eventually(lambda: not zk.connected)
            assert loop.time() - cut_at < 10.0 * 2 / 3 + 0.1
            assert fired.is_set(), "kazoo 2.11 calls every watch when the connection drops"
            await asyncio.sleep(cut_at + 8.0 - loop.time())
            world.network.heal()
            await eventually(lambda: zk.connected)
            assert loop.time() - cut_at < 10.0, "reconnected within the session timeout"
            assert zk.session_id == session and zookeeper.exists("/member")
            await asyncio.sleep(20)
            assert not lost.is_set() and zookeeper.ephemeral_owner("/member") == session

        _run(world, scenario)
        states = [line.split()[3] for line in _lines(world, "zk_client")]
        assert states[-2:] == ["'SUSPENDED'", "'CONNECTED'"]


def test_calls_across_a_partition_fail_after_the_operation_timeout() -> None:
    with World(14) as world:
        world.zookeeper(ZK)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            zk = await _client_in(world, "client", A, session_timeout=30.0, operation_timeout=5.0)
            await zk.create("/x", b"1")
            world.network.partition(A, ZK)
            for call in (zk.get("/x"), zk.set("/x", b"2"), zk.get_children("/")):
                started = loop.time()
                with pytest.raises(ZooKeeperUnavailable):
                    await call
                assert loop.time() - started == pytest.approx(5.0)
            world.network.heal()
            await eventually(lambda: zk.connected, 30)
            assert (await zk.get("/x"))[0] in (b"1", b"2")  # the set given up on may still have gone through

        _run(world, scenario)


def test_a_client_paused_past_its_session_timeout_finds_it_lost() -> None:
    with World(15) as world:
        zookeeper = world.zookeeper(ZK)
        outcome: dict[str, Any] = {}

        async def main() -> None:
            zk = _new(session_timeout=6.0)
            await zk.start()
            lost = asyncio.Event()
            zk.on_session_lost(lost.set)
            await zk.create("/mine", b"", ephemeral=True)
            creating = asyncio.ensure_future(zk.create("/sent", b""))
            await asyncio.sleep(0.0001)  # the request left (links take 0.5 ms or more); no answer yet
            world.processes["paused"].pause(15)
            outcome["created"] = await creating  # answered before the session expired; held during the pause
            await lost.wait()
            outcome["lost_at"] = asyncio.get_running_loop().time()

        async def scenario() -> None:
            task = world.process("paused", A).start(main)
            await asyncio.sleep(1)
            assert zookeeper.exists("/sent"), "a request sent before the pause is processed"
            await asyncio.sleep(9)
            assert not zookeeper.exists("/mine"), "no pings while paused: the session expired"
            await task

        _run(world, scenario)
        assert outcome["created"] == "/sent" and outcome["lost_at"] > 15


# -- the ensemble: down and up, lost replies, oversized packets ------------------------------------------


def test_sessions_survive_the_ensemble_down_longer_than_their_timeout() -> None:
    with World(16) as world:
        zookeeper = world.zookeeper(ZK)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            zk = await _client_in(world, "member", A, session_timeout=6.0, operation_timeout=3.0)
            lost = asyncio.Event()
            zk.on_session_lost(lost.set)
            await zk.create("/member", b"", ephemeral=True)
            session = zk.session_id
            zookeeper.down(20)
            await eventually(lambda: not zk.connected)
            started = loop.time()
            with pytest.raises(ZooKeeperUnavailable):
                await zk.get("/member")
            assert loop.time() - started == pytest.approx(3.0)
            await asyncio.sleep(20 - 2 - (loop.time() - started))
            zk.operation_timeout = 30.0  # a call waits while the ensemble is down, within its deadline
            patient = asyncio.ensure_future(zk.get("/member"))
            await eventually(lambda: zookeeper.up)
            await eventually(lambda: zk.connected)
            assert zk.session_id == session and zookeeper.exists("/member")
            assert await patient == (b"", 0)
            await asyncio.sleep(20)
            assert not lost.is_set()

        _run(world, scenario)
        assert [line.split()[1] for line in world.trace_tail() if line.split()[1] in ("zk_down", "zk_up")] \
            == ["zk_up", "zk_down", "zk_up"]


def test_a_write_whose_reply_is_lost_is_retried_as_kazoo_would() -> None:
    with World(17) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.0)

        async def scenario() -> None:
            zk = await _client_in(world, "writer", A)
            await zk.create("/v", b"v0")
            zookeeper.reply_loss = 1.0  # every applied write loses its reply (an answer to a retry is not a write)
            assert await zk.set_if("/v", b"v1", 0) == 1, "set_if's retry meets its own write: done"
            with pytest.raises(NodeExistsError):
                await zk.create("/c", b"")  # its retry finds the node the first attempt made
            zookeeper.reply_loss = 0.0
            assert await zk.get("/v") == (b"v1", 1) and zookeeper.exists("/c")

            zookeeper.reply_loss = 1.0
            zookeeper.ensure_path("/seq")
            retried = asyncio.ensure_future(zk.create("/seq/n_", b"", sequence=True))
            await eventually(lambda: len(zookeeper.children("/seq")) == 1)
            zookeeper.reply_loss = 0.0  # the retry makes a second node, and is answered
            assert await retried == "/seq/n_0000000001" and sorted(zookeeper.children("/seq")) == [
                "n_0000000000", "n_0000000001"]

        _run(world, scenario)
        assert len(_lines(world, "zk_reply_lost")) == 3


def test_a_registration_replaces_a_killed_process_s_node_and_knows_its_own_retried_create() -> None:
    """``ZooKeeper.register`` (log stores and segment stores register so): a process restarted before its previous
    session expired replaces the node it left, even when every reply to its writes is lost (its delete and its create
    are applied, then retried: the retried create finds the node and knows it by its data). Found by the simulation
    (cluster seed 56): the log store's registration raised NodeExistsError there and the log store never started."""
    with World(5) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.0)
        zookeeper.ensure_path("/logstores")
        path = "/logstores/replica-1"

        async def scenario() -> None:
            old = await _client_in(world, "old", A, session_timeout=4.0)
            await old.register(path, b"old process")
            world.processes["old"].crash()  # its session, and its node, live on for up to 4 s
            new = await _client_in(world, "new", B, session_timeout=4.0)
            zookeeper.reply_loss = 1.0
            await new.register(path, b"new process")
            zookeeper.reply_loss = 0.0
            assert zookeeper.data(path) == b"new process"
            assert len(_lines(world, "zk_reply_lost")) == 2, "the delete's and the create's replies were lost"
            await asyncio.sleep(10.0)  # the old session expires: the node is the new session's, and stays
            assert _lines(world, "zk_session_expired") and zookeeper.data(path) == b"new process"
            await new.register(path, b"new process")  # again, with the node there: it is ours
            assert zookeeper.data(path) == b"new process"

        _run(world, scenario)


def test_a_packet_over_jute_maxbuffer_drops_the_connection_until_the_call_gives_up() -> None:
    with World(18) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.0)

        async def scenario() -> None:
            zk = await _client_in(world, "writer", A, operation_timeout=2.0)
            await zk.create("/fits", b"x" * (JUTE_MAXBUFFER - 100))
            with pytest.raises(ZooKeeperUnavailable):
                await zk.create("/big", b"x" * JUTE_MAXBUFFER)
            assert not zookeeper.exists("/big") and zookeeper.exists("/fits")
            await eventually(lambda: zk.connected)

        _run(world, scenario)
        assert _lines(world, "zk_too_big")


def test_watches_fire_when_the_connection_drops_and_are_then_forgotten() -> None:
    """kazoo 2.11 (checked against a real server): a lost connection calls every watch once, and none is set again
    on the reconnect, so later changes do not fire it."""
    with World(19) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.0)

        async def scenario() -> None:
            zk = await _client_in(world, "watcher", A)
            await zk.create("/w", b"")
            fired: list[str] = []
            await zk.get("/w", watch=lambda: fired.append("data"))
            await zk.get_children("/w", watch=lambda: fired.append("children"))
            assert not await zk.exists("/later", watch=lambda: fired.append("exists"))
            zookeeper.restart()
            await eventually(lambda: len(fired) == 3)
            await eventually(lambda: zk.connected)
            await zk.set("/w", b"changed")
            await zk.create("/w/kid")
            await zk.create("/later")
            await asyncio.sleep(1)
            assert sorted(fired) == ["children", "data", "exists"]

        _run(world, scenario)


# -- determinism ------------------------------------------------------------------------------------------


def _eventful(seed: int) -> tuple[str, int]:
    with World(seed) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.2)

        async def scenario() -> None:
            members = [await _client_in(world, f"m{i}", f"10.0.1.{i}", session_timeout=4.0, operation_timeout=3.0)
                       for i in range(3)]
            for i, zk in enumerate(members):
                try:
                    await zk.create(f"/m{i}", b"", ephemeral=True)
                except (NodeExistsError, ZooKeeperUnavailable):
                    pass
            counter = members[0]
            await counter.ensure_path("/counter")
            for round_ in range(10):
                zk = members[round_ % 3]
                try:
                    data, version = await zk.get("/counter")
                    await zk.set_if("/counter", str(round_).encode(), version)
                    await zk.create("/seq/n_", b"", sequence=True, makepath=True)
                except Exception as error:  # noqa: BLE001 - a nemesis run: any outcome, as long as it repeats
                    world.record("test_error", type(error).__name__)
                if round_ == 3:
                    world.network.partition("10.0.1.1", ZK)
                if round_ == 6:
                    world.processes["m2"].crash()
                    zookeeper.down(2)
                await asyncio.sleep(1.5)
            world.network.heal()
            await asyncio.sleep(10)

        _run(world, scenario)
        return world.trace_hash(), world.trace.count


def test_the_same_seed_gives_the_same_trace() -> None:
    first, again, other = _eventful(21), _eventful(21), _eventful(22)
    assert first == again
    assert first != other


def test_the_server_is_reachable_from_the_world() -> None:
    with World(1) as world:
        zookeeper = world.zookeeper(ZK)
        assert world.zookeepers == {ZK: zookeeper} and isinstance(zookeeper, SimZooKeeperServer)
        with pytest.raises(ValueError):
            world.zookeeper(ZK)
        assert zookeeper.children("/") == ["zookeeper"] and zookeeper.exists("/zookeeper/quota")


@pytest.mark.parametrize("seed", [9, *range(100, 140)])
def test_the_session_is_presumed_expired_before_the_server_expires_it_even_right_after_connecting(seed) -> None:
    """The server restarts the session's timer when the handshake arrives and expires it on the first tick after
    the timeout. The wrapper's clock once took the CONNECTED state change (when the answer arrived) as heard: with
    20-50 ms links and ZooKeeper's 200 ms test tick, 37 of 200 seeds presumed the expiry after it happened (seed 9
    among them). It now counts from when the connection attempt began."""
    with World(seed, latency=(0.02, 0.05)) as world:
        zookeeper = world.zookeeper(ZK, tick=0.2, min_session_timeout=0.4)
        started: dict[str, ZooKeeper] = {}

        async def main() -> None:
            zk = _new(session_timeout=4.0)
            await asyncio.sleep(world.random.uniform(0, 0.2))
            await zk.start()
            world.network.partition(A, ZK)  # nothing is heard after the handshake
            started["zk"] = zk
            await asyncio.get_running_loop().create_future()

        async def scenario() -> tuple[float, float]:
            world.process("member", A).start(main)
            await eventually(lambda: "zk" in started)
            zk = started["zk"]
            session = zk.session_id
            while session in zookeeper.sessions:
                await asyncio.sleep(0.001)
            return zk.presumed_expiry, asyncio.get_running_loop().time()

        presumed, expired = _run(world, scenario)
        assert presumed <= expired
