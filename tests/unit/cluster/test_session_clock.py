"""When a ZooKeeper session must be presumed expired (coordination.zookeeper.SessionClock): the rule alone, then
the clock of a real session (answers, kazoo's pings, the negotiated timeout) and a session cut off by a
partition (tests/support/tcp_proxy.py's blackhole) whose clock stops while kazoo still hopes."""

from __future__ import annotations

import asyncio
import time

import pytest

from coordination.zookeeper import NoNodeError, SessionClock, ZooKeeper
from tests.support.tcp_proxy import FaultyProxy
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(60)


def test_the_session_lives_until_the_timeout_after_the_latest_answered_send():
    clock = SessionClock(session_timeout=2.0, heard_at=10.0)
    assert clock.presumed_expiry == 12.0
    clock.heard(13.0)
    clock.heard(11.0)  # a slow request sent earlier, answered later, proves nothing newer
    assert clock.heard_at == 13.0 and clock.presumed_expiry == 15.0
    assert not clock.presumed_expired(14.999) and clock.presumed_expired(15.0)
    assert clock.silent_for(14.5) == pytest.approx(1.5) and clock.silent_for(12.0) == 0.0


def test_a_ping_counts_from_when_it_was_sent_and_the_negotiated_timeout_replaces_the_asked_one():
    clock = SessionClock(session_timeout=10.0, heard_at=0.0)
    clock.ping_answered()  # no ping sent: nothing learned
    assert clock.heard_at == 0.0
    clock.ping_sent(5.0)
    clock.ping_answered()
    assert clock.heard_at == 5.0
    clock.negotiated(4.0)  # the ensemble's maxSessionTimeout clamped it
    assert clock.presumed_expiry == 9.0


def split(zk_hosts: str) -> tuple[int, str]:
    address, _, chroot = zk_hosts.partition("/")
    return int(address.rpartition(":")[2]), "/" + chroot


async def test_a_live_session_keeps_its_clock_moving_by_answers_and_pings(zk_hosts):
    zk = ZooKeeper(zk_hosts, session_timeout=10.0)  # the test server allows at most 4 s (20 ticks of 200 ms)
    started = time.monotonic()
    await zk.start()
    try:
        assert zk.session_timeout == 4.0, "the negotiated timeout replaces the asked one"
        assert zk.clock.heard_at >= started
        sent = time.monotonic()
        with pytest.raises(NoNodeError):  # an error the server sent is an answer too
            await zk.get("/nothing-here")
        assert zk.clock.heard_at >= sent
        idle_from = zk.clock.heard_at
        await asyncio.sleep(2.0)  # no calls: only kazoo's pings (every third of the session timeout) are heard
        assert zk.clock.heard_at > idle_from + 0.5
        assert zk.clock.silent_for(time.monotonic()) < 4.0 * 2 / 3
    finally:
        await zk.stop()


async def test_a_partitioned_session_is_presumed_expired_one_timeout_after_it_was_last_heard(zk_hosts):
    port, chroot = split(zk_hosts)
    async with FaultyProxy("127.0.0.1", port) as proxy:
        zk = ZooKeeper(f"127.0.0.1:{proxy.port}{chroot}", session_timeout=2.0)
        await zk.start()
        lost = asyncio.Event()
        zk.on_session_lost(lost.set)
        try:
            await zk.exists("/")
            cut_at = time.monotonic()
            proxy.blackhole()
            await asyncio.sleep(2.5)
            assert zk.clock.heard_at <= cut_at, "nothing crosses a partition"
            assert zk.clock.presumed_expired(time.monotonic())
            assert cut_at - 2.0 / 3 - 0.2 < zk.clock.heard_at, "pings were heard up to the cut"
            assert not lost.is_set(), "kazoo learns of the expiry only from the server"
            proxy.heal()
            await asyncio.wait_for(lost.wait(), 15)  # the server expired it meanwhile
            healed_at = time.monotonic()
            await eventually(lambda: zk.clock.heard_at >= healed_at, "a new session, heard", timeout=15)
            assert not zk.clock.presumed_expired(time.monotonic())
        finally:
            await zk.stop()
