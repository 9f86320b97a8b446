"""SLTS's metadata store inside its own container: the storage metadata table segment (design §5.3).

Every SLTS commit becomes one conditional table update of
``_system/containers/storage_metadata_<id>``, logged in Tier-1 like any other:
it is atomic, and a container whose log was fenced by a newer owner cannot
commit, which is how SLTS is fenced (§7.2 item 8). A commit that both updates
and removes keys is one table update batch carrying removal records, so it stays
one atomic operation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from wire.constants import NO_VERSION
from wire.constants import NOT_EXISTS as WIRE_NOT_EXISTS

from .. import errors
from ..tier2.metadata_store import (
    NOT_EXISTS,
    MetadataStore,
    MetadataStoreUnavailable,
    StorageFenced,
    Versioned,
    VersionMismatch,
    Write,
)
from .table import TableIndex, TableUpdate


def storage_metadata_segment(container_id: int) -> str:
    return f"_system/containers/storage_metadata_{container_id}"


class TableMetadataStore(MetadataStore):
    """SLTS's metadata over one table segment of the container: ``index()`` gives its committed key index
    (None before it exists), ``update(entries)`` updates it conditionally, ``fenced()`` says whether
    the container lost its log to a newer owner."""

    def __init__(self, segment_name: str, index: Callable[[], TableIndex | None],
                 update: Callable[[list[TableUpdate]], Awaitable[list[int | None]]], fenced: Callable[[], bool]):
        self.segment_name = segment_name
        self._index = index
        self._update = update
        self._fenced = fenced

    async def get(self, key: str) -> Versioned | None:
        index = self._index()
        found = None if index is None else index.get(key.encode("utf-8", "surrogatepass"))
        if found is None:
            return None
        version, value = found
        return Versioned(value, version)

    async def write(self, writes: Iterable[Write]) -> dict[str, int]:
        writes = list(writes)
        entries: list[TableUpdate] = [(key.encode("utf-8", "surrogatepass"),
                    NO_VERSION if expected is None else WIRE_NOT_EXISTS if expected == NOT_EXISTS else expected,
                    None if value is None else bytes(value))
                   for key, value, expected in writes]
        try:
            versions = await self._update(entries)
        except (errors.TableKeyBadVersion, errors.TableKeyDoesNotExist) as error:
            raise VersionMismatch(str(error)) from error
        except errors.ContainerUnavailable as error:
            if self._fenced():
                raise StorageFenced(str(error)) from error
            raise MetadataStoreUnavailable(str(error)) from error
        except errors.NoSuchSegment as error:
            raise MetadataStoreUnavailable(f"{self.segment_name} does not exist yet") from error
        # A removed key (a write of None) has no version.
        return {write.key: version for write, version in zip(writes, versions, strict=True) if version is not None}

    async def keys(self) -> list[str]:
        index = self._index()
        if index is None:
            return []
        return sorted(key.decode("utf-8", "surrogatepass") for key, _, _ in index.items())

