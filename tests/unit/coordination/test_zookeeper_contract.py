"""The ZooKeeper contract (tests/support/zookeeper_contract.py) against a real ZooKeeper: the same cases run
against the simulated one in tests/simulation/test_zookeeper_sim.py, so the model answers as the real thing."""

from __future__ import annotations

import pytest

from coordination.zookeeper import ZooKeeper
from tests.support.zookeeper_contract import CASES, Case

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
async def test_the_real_zookeeper_keeps_the_contract(case: Case, zk_hosts: str) -> None:
    clients: list[ZooKeeper] = []

    async def connect() -> ZooKeeper:
        zk = ZooKeeper(zk_hosts, session_timeout=4.0, operation_timeout=10.0)
        await zk.start()
        clients.append(zk)
        return zk

    try:
        await case(connect)
    finally:
        for zk in clients:
            await zk.stop()
