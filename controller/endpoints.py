"""Where segments live: segment -> container -> segment store endpoint (controller reference §5.8).

The controller answers getURI with the host owning the segment's container, using the same
hash as the segment stores (``wire.naming.container_of``), so clients never meet WrongHost in a
stable cluster. Any segment name is answered, including those the controller never created
(the Rust client keeps reader-group state in ``<scope>/<group>_kvtable/0.#epoch.0``).
"""

from __future__ import annotations

from collections.abc import Callable

from wire import naming

Endpoint = tuple[str, int]


class SegmentLocator:
    def __init__(self, container_count: int, host_of_container: Callable[[int], Endpoint]):
        if container_count <= 0:
            raise ValueError("container_count must be positive")
        self.container_count = container_count
        self._host_of_container = host_of_container

    @classmethod
    def single_host(cls, container_count: int, endpoint: Endpoint) -> SegmentLocator:
        """Every container on one segment store (standalone)."""
        return cls(container_count, lambda _container: endpoint)

    def endpoint_for_container(self, container: int) -> Endpoint:
        return self._host_of_container(container)

    def endpoint_for(self, segment_name: str) -> Endpoint:
        return self._host_of_container(naming.container_of(segment_name, self.container_count))

    def endpoint_for_id(self, scope: str, stream: str, segment_id: int) -> Endpoint:
        return self.endpoint_for(naming.stream_segment_name(scope, stream, segment_id))
