"""What the controller's services ask of the cluster: which streams' periodic work is theirs, and
exclusive leases on pieces of work. ``Coordination`` is the single-controller answer (everything is
ours, every lease is free); ``controller.cluster.zk.ControllerCluster`` answers through ZooKeeper.

Leases. A workflow on a stream, or the commits of a stream's transactions, run under a lease named
for the stream. Within one controller the services' own locks already keep such work to one task;
the lease keeps it to one controller: ``lease`` raises ``LeaseBusy`` while another live controller
holds it. A controller that dies loses its leases with its ZooKeeper session, and the owner of the
stream's bucket then takes the work over (``on_controllers_lost``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

WORKFLOW = "workflow"  # a stream's create/update/scale/truncate/seal/delete workflow
COMMITS = "commits"  # a stream's transaction commit worker


class LeaseBusy(Exception):
    """Another live controller holds the lease."""


class Coordination:
    """One controller alone: it owns every stream and every lease."""

    def __init__(self, controller_id: str | None = None):
        self.controller_id = controller_id or uuid.uuid4().hex

    def owns(self, scope: str, stream: str) -> bool:
        """Whether this controller runs the stream's periodic work (and takes over its orphaned work)."""
        return True

    @contextlib.asynccontextmanager
    async def lease(self, kind: str, name: str) -> AsyncIterator[None]:
        """Holds the lease on ``kind:name`` for the block. Raises LeaseBusy if another controller holds it."""
        yield

    def on_controllers_lost(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs when a controller leaves the cluster (its unfinished work is orphaned)."""

    def bucket_mapping(self) -> dict[str, list[int]]:
        """controller id -> the buckets it owns (getControllerToBucketMapping); empty when unclustered."""
        return {}

    def cut_off(self) -> str | None:
        """Why this controller must not answer clients now (None: it may): in a cluster, a controller cut off
        from ZooKeeper for longer than its session knows nothing current, and its clients are better served by
        another controller."""
        return None


def stream_lease_name(scope: str, stream: str) -> str:
    return f"{scope}/{stream}"
