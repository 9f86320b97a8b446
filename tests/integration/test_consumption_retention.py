"""Consumption-based retention (PDP-19 as Pravega 0.9+ does it) through our SDK and controller.

Reader groups that subscribe report how far they have read; the retention round truncates at the
slowest subscriber, never keeping less than the policy's minimum, never more than its maximum, and a
deleted group stops holding data back. The controller and segment store run in this process; time
is passed to ``Retention.run_once(now)``, so no test sleeps. One segment per stream, so cuts are
``{0: offset}`` and every event is 108 bytes (100 of payload, 8 of envelope).
"""

from __future__ import annotations

import asyncio

import pytest

import clients.client as sdk
from clients import (
    ReaderGroupConfig,
    RetentionPolicy,
    StreamConfiguration,
    StreamCut,
    StreamDataRetention,
)
from clients.errors import InvalidArgument
from controller.service.context import ServiceSettings
from tests.support.controller_harness import running_cluster

SCOPE = "consumed"
EVENT = 108
MANUAL = ReaderGroupConfig(retention=StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT)
AUTOMATIC = ReaderGroupConfig(retention=StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT)


@pytest.fixture
async def setup(tmp_path):
    settings = ServiceSettings(retention_period_seconds=1.0, retention_interval_seconds=3600,
                               redrive_interval_seconds=3600)  # rounds only when the test runs one
    async with (running_cluster(tmp_path / "data", settings) as cluster,
                sdk.connect(f"tcp://127.0.0.1:{cluster.app.port}") as client):
        await client.create_scope(SCOPE)
        yield cluster, client


async def make(client, stream: str, policy: RetentionPolicy) -> None:
    await client.create_stream(SCOPE, stream, StreamConfiguration(retention=policy))


async def write(client, stream: str, count: int) -> None:
    async with client.create_writer(SCOPE, stream) as writer:
        for _ in range(count):
            await writer.write(b"x" * (EVENT - 8))
        await writer.flush()


def at(stream: str, offset: int) -> StreamCut:
    return StreamCut(SCOPE, stream, {0: offset})


async def head(client, stream: str) -> int:
    return (await client.head_cut(SCOPE, stream)).positions[0]


async def test_truncates_only_to_the_slower_group_and_never_past_the_minimum(setup):
    """Min 1,000 bytes, no practical maximum: the head follows the slower of two groups, and stops
    1,000+ bytes short of the tail once both have read everything."""
    cluster, client = setup
    retention = cluster.app.services.retention
    await make(client, "s", RetentionPolicy.by_size(1_000, 10**9))
    fast = await client.create_reader_group(SCOPE, "fast", ["s"], config=MANUAL)
    slow = await client.create_reader_group(SCOPE, "slow", ["s"], config=MANUAL)
    assert sorted(await client._controller.list_subscribers(SCOPE, "s")) == [f"{SCOPE}/fast", f"{SCOPE}/slow"]
    await write(client, "s", 50)  # 5,400 bytes
    assert await retention.run_once(1_000) == 0  # both groups still at 0
    await fast.release_at([at("s", 40 * EVENT)])
    await slow.release_at([at("s", 20 * EVENT)])
    assert await retention.run_once(1_100) == 1
    assert await head(client, "s") == 20 * EVENT  # the slower group's position
    await slow.release_at([at("s", 48 * EVENT)])
    assert await retention.run_once(1_200) == 1
    assert await head(client, "s") == 40 * EVENT  # now "fast" is the slower one
    await fast.release_at([at("s", 50 * EVENT)])
    await slow.release_at([at("s", 50 * EVENT)])
    assert await retention.run_once(1_300) == 0  # both read all: truncating there would keep < 1,000 bytes
    await write(client, "s", 20)  # 7,560 bytes; the cut recorded at 1,000 ms (5,400) keeps 2,160
    assert await retention.run_once(2_000) == 1
    assert await head(client, "s") == 50 * EVENT
    with pytest.raises(InvalidArgument):
        await slow.release_at([at("s", 10 * EVENT)])  # behind its previous release


async def test_the_maximum_cuts_off_a_group_that_stops_reading(setup):
    """Min 500, max 2,000 bytes: a group stuck at the start holds data back only up to the maximum."""
    cluster, client = setup
    retention = cluster.app.services.retention
    await make(client, "m", RetentionPolicy.by_size(500, 2_000))
    await client.create_reader_group(SCOPE, "stuck", ["m"], config=MANUAL)
    await write(client, "m", 50)
    assert await retention.run_once(1_000) == 0  # one cut recorded (5,400): it keeps nothing
    await write(client, "m", 30)
    assert await retention.run_once(2_000) == 1  # cut 1 keeps 3,240 >= max: truncate there anyway
    assert await head(client, "m") == 50 * EVENT
    await write(client, "m", 10)
    assert await retention.run_once(3_000) == 1  # cut 2 keeps 1,080, within [500, 2,000]
    assert await head(client, "m") == 80 * EVENT


async def test_a_deleted_group_stops_holding_data_back(setup):
    cluster, client = setup
    retention = cluster.app.services.retention
    await make(client, "d", RetentionPolicy.by_size(100, 10**9))
    ahead = await client.create_reader_group(SCOPE, "ahead", ["d"], config=MANUAL)
    await client.create_reader_group(SCOPE, "behind", ["d"], config=MANUAL)
    await write(client, "d", 30)
    await ahead.release_at([at("d", 25 * EVENT)])
    assert await retention.run_once(1_000) == 0  # "behind" is still at 0
    assert await client.delete_reader_group(SCOPE, "behind")
    assert await client._controller.list_subscribers(SCOPE, "d") == [f"{SCOPE}/ahead"]
    assert await retention.run_once(1_100) == 1
    assert await head(client, "d") == 25 * EVENT


async def test_automatic_groups_release_at_each_checkpoint(setup):
    """A group reading with checkpoints: retention follows its last checkpoint; a group that does not
    subscribe holds nothing back; a manual-release call on an automatic group is refused."""
    cluster, client = setup
    retention = cluster.app.services.retention
    await make(client, "a", RetentionPolicy.by_size(100, 10**9))
    group = await client.create_reader_group(SCOPE, "auto", ["a"], config=AUTOMATIC)
    await client.create_reader_group(SCOPE, "bystander", ["a"])  # NONE: not a subscriber
    assert await client._controller.list_subscribers(SCOPE, "a") == [f"{SCOPE}/auto"]
    await write(client, "a", 40)
    async with group.create_reader("r1") as reader:
        for _ in range(30):
            event = await reader.read_next(timeout_seconds=10)
            assert event is not None and not event.is_checkpoint
        pending = asyncio.ensure_future(group.initiate_checkpoint("cp1", timeout_seconds=20))
        while not pending.done():  # a reader answers a checkpoint when the application asks for events
            await reader.read_next(timeout_seconds=0.1)
        checkpoint = await pending
    position = checkpoint.cut(SCOPE, "a").positions[0]
    assert 30 * EVENT <= position <= 40 * EVENT
    await write(client, "a", 20)
    assert await retention.run_once(1_000) == 1
    assert await head(client, "a") == position  # the checkpoint, not the tail: "bystander" is ignored
    with pytest.raises(InvalidArgument):
        await group.release_at([at("a", 40 * EVENT)])
