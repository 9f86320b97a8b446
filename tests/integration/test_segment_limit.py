"""The per-container segment limit (issue 25): every segment's metadata stays in memory, so a container refuses
segments past --max-segments-per-container with a clear error (never a crash or a hang), counts the refusals,
and takes new ones again once segments are deleted. Its own and the controller's _system segments are not
counted, so the control plane keeps working at the limit."""

from __future__ import annotations

import pytest

from clients import errors
from clients.segment_store_client import SegmentStoreClient
from server import metrics
from tests.support.segment_store import running_segment_store

LIMIT = 20


@pytest.fixture
async def store(tmp_path):
    async with running_segment_store(tmp_path, container_count=1, max_segments_per_container=LIMIT) as service:
        client = SegmentStoreClient(("127.0.0.1", service.port))
        yield service, client
        await client.close()


async def test_creations_past_the_limit_are_refused_clearly_until_segments_go(store):
    service, client = store
    container = service.containers[0]
    assert container.segment_count() == 0  # the container's own segments (storage metadata) are not counted
    rejected = metrics.SEGMENT_LIMIT_REJECTIONS.value
    for number in range(LIMIT):
        assert await client.create_segment(f"scope/s{number}/0.#epoch.0")
    await client.create_table("_system/_tables/scope/s/metadata")  # the controller's records: not refused
    for create in (lambda: client.create_segment("scope/over/0.#epoch.0"), lambda: client.create_table("scope/t")):
        with pytest.raises(errors.IllegalArgument) as refused:
            await create()
        assert f"holds its limit of {LIMIT} segments" in refused.value.reply.message
    assert metrics.SEGMENT_LIMIT_REJECTIONS.value == rejected + 2
    assert container.segment_count() == LIMIT
    # The store is otherwise undisturbed, and a deletion makes room.
    assert (await client.segment_info("scope/s0/0.#epoch.0")).write_offset == 0
    assert await client.delete_segment("scope/s0/0.#epoch.0")
    assert await client.create_segment("scope/over/0.#epoch.0")
    with pytest.raises(errors.IllegalArgument):
        await client.create_segment("scope/again/0.#epoch.0")


async def test_a_restarted_store_counts_its_segments_again(tmp_path):
    async with running_segment_store(tmp_path, container_count=1, max_segments_per_container=3) as service:
        client = SegmentStoreClient(("127.0.0.1", service.port))
        for number in range(3):
            await client.create_segment(f"scope/s{number}/0.#epoch.0")
        await client.close()
    async with running_segment_store(tmp_path, container_count=1, max_segments_per_container=3) as service:
        client = SegmentStoreClient(("127.0.0.1", service.port))
        assert service.containers[0].segment_count() == 3
        with pytest.raises(errors.IllegalArgument):
            await client.create_segment("scope/over/0.#epoch.0")
        await client.close()

