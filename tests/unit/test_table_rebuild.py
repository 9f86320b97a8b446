"""A table segment's key index rebuilt from Tier-2 at recovery (server/containers/table_maintenance.py)."""

from __future__ import annotations

import pytest

from server.containers.metadata import SegmentMetadata, SegmentType
from server.containers.state import ContainerState, InconsistentState
from server.containers.table_maintenance import rebuild_indexes

TABLE = "_system/_tables/t"


class _TierTwoMissingBytes:
    """A Tier-2 that lost a table's bytes (what a corruption leaves): every read returns nothing."""

    def __init__(self) -> None:
        self.reads = 0

    async def read(self, name: str, offset: int, length: int) -> bytes:
        self.reads += 1
        return b""


@pytest.mark.timeout(10)  # (without the fix it spins)
async def test_a_tier2_read_that_returns_nothing_fails_the_rebuild_instead_of_spinning():
    """Before, the rebuild read again from the same offset for ever, without awaiting anything that takes time:
    the store's start held its loop at 100% CPU (found by the simulation, a planted bug's lost bytes)."""
    state = ContainerState()
    segment = SegmentMetadata(1, TABLE, SegmentType.TABLE, {}, 0, 0, 100)  # restored: 100 bytes, all in Tier-2
    segment.data.storage_length = 100
    segment.table_incomplete = True
    state.by_name[TABLE], state.by_id[1] = segment, segment
    storage = _TierTwoMissingBytes()
    with pytest.raises(InconsistentState, match="bytes at 0 of table"):
        await rebuild_indexes(0, state, storage, TABLE)  # type: ignore[arg-type]
    assert storage.reads == 1
