"""Issue 24: the controller's transaction lease grace (``--transaction-lease-grace``), with real processes.

A transaction whose writer stops pinging is aborted lease + grace after its last ping, plus at most one
round of the controller's lease timer (1 s). The default grace (180 s) is kept for the ``pravega`` (Rust)
client's pinger (controller/service/transactions/rules.py); with a small one a dead writer's transaction
goes within seconds of its lease, not three minutes later. Checked on a `tributary standalone` with a
2 s grace (a transaction pinged once by hand, and one whose SDK process is SIGKILLed while it pings) and on
a `tributary controller` with no grace, in front of a `tributary segmentstore`, at the same time."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

import pytest

import tributary
from clients.controller_client import ControllerClient
from clients.model import ScalingPolicy, StreamConfiguration, TransactionState
from clients.writer.transactions import ping_interval_seconds
from tests.support.processes import ServerProcess, free_port, kill_process, listening, wait_until_ready
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.process

LEASE_MS = 10_000  # the smallest lease the controller allows
LEASE = LEASE_MS / 1000
STANDALONE_GRACE = 2.0
TIMER_ROUND = 1.0  # TransactionSettings.timer_interval_ms: how often the controller looks at lease deadlines
SLACK = 3.0  # scheduling on a busy 2-core machine (polls every 50 ms, RPCs, the abort's first step)
REPOSITORY = pathlib.Path(__file__).resolve().parents[2]

CHILD = """
import asyncio, sys
import tributary
from clients.config import WriterConfig


async def main(uri, scope, stream):
    async with tributary.connect(uri) as client:
        writer = client.create_transactional_writer(scope, stream, WriterConfig(transaction_lease_ms=10_000))
        txn = await writer.begin()
        await txn.write(b"never committed", routing_key="key")
        await txn.flush()
        print(txn.id, flush=True)
        await asyncio.Event().wait()  # the SDK goes on pinging until the process is killed


asyncio.run(main(*sys.argv[1:]))
"""


@pytest.fixture
def standalone(tmp_path):
    process = StandaloneProcess(tmp_path / "standalone", log_path=tmp_path / "standalone.log",
                                extra_args=["--transaction-lease-grace", str(STANDALONE_GRACE)]).start()
    try:
        yield process.controller_uri
    finally:
        process.remove_data()


@pytest.fixture
def controller_without_grace(tmp_path):
    """`tributary controller --transaction-lease-grace 0` in front of a `tributary segmentstore`."""
    store = ServerProcess("segmentstore", tmp_path / "store", extra_args=["--log-file-size", "16"]).start()
    port = free_port()
    with open(tmp_path / "controller.log", "ab") as log:
        controller = subprocess.Popen(
            [sys.executable, "-m", "tributary", "controller", "--port", str(port),
             "--segment-store", f"127.0.0.1:{store.port}", "--containers", "4", "--transaction-lease-grace", "0"],
            stdout=log, stderr=log)
    try:
        wait_until_ready(controller, listening(port), f"controller on port {port}", 30.0)
        yield f"tcp://127.0.0.1:{port}"
    finally:
        kill_process(controller)
        store.kill()
        shutil.rmtree(tmp_path / "store", ignore_errors=True)


async def new_stream(client, scope: str) -> None:
    await client.create_scope(scope)
    await client.create_stream(scope, "s", StreamConfiguration(ScalingPolicy.fixed(1)))


async def left_open_at(controller: ControllerClient, scope: str, transaction_id: uuid.UUID, deadline: float) -> float:
    """Polls the transaction's state; returns when it was first seen no longer OPEN (monotonic clock),
    after waiting for it to be ABORTED."""
    while (state := await controller.transaction_state(scope, "s", transaction_id)) == TransactionState.OPEN:
        assert time.monotonic() < deadline, f"{scope}: transaction {transaction_id} is still open"
        await asyncio.sleep(0.05)
    left = time.monotonic()
    while state != TransactionState.ABORTED:
        assert state == TransactionState.ABORTING and time.monotonic() < deadline + 10, state
        await asyncio.sleep(0.05)
        state = await controller.transaction_state(scope, "s", transaction_id)
    return left


async def pinged_once(uri: str, scope: str, grace: float) -> tuple[float, float, float]:
    """A transaction created and pinged once over the controller API, then never again: returns when
    the ping was sent and answered, and when the transaction was first seen no longer OPEN."""
    async with tributary.connect(uri) as client:
        await new_stream(client, scope)
        controller = client._controller
        transaction_id, _ = await controller.create_transaction(scope, "s", LEASE_MS)
        sent = time.monotonic()
        assert await controller.ping_transaction(scope, "s", transaction_id, LEASE_MS) == TransactionState.OPEN
        answered = time.monotonic()
        left = await left_open_at(controller, scope, transaction_id, answered + LEASE + grace + TIMER_ROUND + 20)
        return sent, answered, left


async def killed_while_pinging(uri: str, scope: str) -> tuple[float, float]:
    """An SDK process begins a transaction (10 s lease), writes to it, pings it for a while and is
    SIGKILLed: returns when it was killed and when the transaction was first seen no longer OPEN."""
    async with tributary.connect(uri) as client:
        await new_stream(client, scope)
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, uri, scope, "s", cwd=REPOSITORY,
                                                     stdout=asyncio.subprocess.PIPE)
        try:
            line = await asyncio.wait_for(child.stdout.readline(), 30)
            transaction_id = uuid.UUID(line.decode().strip())
            await asyncio.sleep(ping_interval_seconds(LEASE_MS) + 1)  # it pings the lease on at least once
            killed = time.monotonic()
            child.kill()  # SIGKILL: no close, no abort, no more pings
        finally:
            if child.returncode is None:
                child.kill()
            await child.wait()
        controller = client._controller
        left = await left_open_at(controller, scope, transaction_id, killed + LEASE + STANDALONE_GRACE + 20)
        return killed, left


async def test_an_unpinged_transaction_is_aborted_lease_plus_grace_after_its_last_ping(standalone,
                                                                                       controller_without_grace):
    (sent, answered, left), (sent_0, answered_0, left_0), (killed, left_killed) = await asyncio.gather(
        pinged_once(standalone, "grace-2", STANDALONE_GRACE),
        pinged_once(controller_without_grace, "grace-0", 0.0),
        killed_while_pinging(standalone, "killed"))
    # Not before lease + grace after the last ping (the controller's deadline counts from when it got it) ...
    assert left - sent >= LEASE + STANDALONE_GRACE - 0.05, left - sent
    assert left_0 - sent_0 >= LEASE - 0.05, left_0 - sent_0
    # ... and within a timer round of it.
    assert left - answered <= LEASE + STANDALONE_GRACE + TIMER_ROUND + SLACK, left - answered
    assert left_0 - answered_0 <= LEASE + TIMER_ROUND + SLACK, left_0 - answered_0
    # The SDK's last ping came at most one ping interval before the kill.
    after_kill = left_killed - killed
    assert after_kill >= LEASE + STANDALONE_GRACE - ping_interval_seconds(LEASE_MS) - 0.05, after_kill
    assert after_kill <= LEASE + STANDALONE_GRACE + TIMER_ROUND + SLACK, after_kill


def test_the_lease_grace_option_is_checked():
    """Both commands take --transaction-lease-grace SECONDS; a negative one is a usage error (status 2)."""
    for command in ("controller", "standalone"):
        help_text = subprocess.run([sys.executable, "-m", "tributary", command, "--help"], capture_output=True,
                                   text=True, timeout=60).stdout
        assert "--transaction-lease-grace SECONDS" in help_text and "180" in help_text
        result = subprocess.run([sys.executable, "-m", "tributary", command, "--transaction-lease-grace", "-1"],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and "--transaction-lease-grace" in result.stderr, result.stderr
