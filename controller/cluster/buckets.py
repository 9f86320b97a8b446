"""Which controller runs the periodic work of which stream (docs/cluster.md).

Streams fall into ``BUCKET_COUNT`` buckets by a stable hash of their scoped name; each bucket
belongs to one live controller, chosen by rendezvous hashing (the controller whose hash with the
bucket is highest). Every controller computes the same owners from the same membership, and when
a controller leaves, only its buckets move (spread over the others); when one joins, it takes
about its share. Ownership decides who runs a stream's retention, auto-scaling, transaction
timeouts and sweeps, and who takes over a dead controller's unfinished work; the work itself is
guarded by leases (``leases``), so two controllers that briefly disagree about membership never
run one piece of work at once.
"""

from __future__ import annotations

from collections.abc import Collection

import xxhash

BUCKET_COUNT = 64


def bucket_of(scope: str, stream: str, bucket_count: int = BUCKET_COUNT) -> int:
    return xxhash.xxh64_intdigest(f"{scope}/{stream}".encode()) % bucket_count


def bucket_owners(controllers: Collection[str], bucket_count: int = BUCKET_COUNT) -> dict[int, str]:
    """bucket -> controller id (empty if no controller is live)."""
    if not controllers:
        return {}
    return {bucket: max(controllers, key=lambda controller: (_weight(controller, bucket), controller))
            for bucket in range(bucket_count)}


def _weight(controller: str, bucket: int) -> int:
    return xxhash.xxh64_intdigest(f"{controller}#{bucket}".encode())
