"""The controller's metadata store: scopes, streams and the operations that span both.

Everything the controller knows lives in the versioned key-value store it is given (table
segments in production, memory in unit tests), so any controller process can pick up any
stream. ``MetadataStore`` holds no state of its own beyond that store and the chunk sizes.
"""

from __future__ import annotations

from controller_api.model import StreamConfiguration

from . import layout
from .errors import NotFound
from .key_value import VersionedKeyValueStore
from .scopes import ScopeStore
from .stream_store import StreamStore


class MetadataStore:
    def __init__(self, kv: VersionedKeyValueStore, sizes: layout.ChunkSizes = layout.DEFAULT_CHUNK_SIZES):
        self.kv = kv
        self.sizes = sizes
        self.scopes = ScopeStore(kv)

    async def initialize(self) -> None:
        """Creates the global tables (idempotent; run at controller start)."""
        for table in layout.GLOBAL_TABLES:
            await self.kv.create_table(table)

    def stream(self, scope: str, stream: str) -> StreamStore:
        """A handle on a stream's records (whether or not the stream exists)."""
        return StreamStore(self.kv, scope, stream, self.sizes)

    async def create_stream(self, scope: str, stream: str, configuration: StreamConfiguration,
                            creation_time: int) -> tuple[StreamStore, bool]:
        """Creates the stream's records (state CREATING) and lists it in its scope.

        Returns the handle and whether the records are this creation's (False: a stream created at
        another time exists; the caller checks its state, see spec §4.2). Segment numbers start
        above those of any deleted stream of the same name.

        Raises:
            NotFound: the scope does not exist or is being deleted.
        """
        scope_record, _ = await self.scopes.get_scope(scope)
        if scope_record.sealed:
            raise NotFound(f"scope {scope!r} is being deleted", layout.SCOPES_TABLE, scope)
        starting_number = await self.scopes.starting_segment_number(scope, stream)
        handle = self.stream(scope, stream)
        created = await handle.create(configuration, creation_time, starting_number)
        if created:
            await self.scopes.add_stream(scope, stream, creation_time)
        return handle, created

    async def delete_stream(self, scope: str, stream: str) -> bool:
        """Deletes a SEALED (or stuck CREATING) stream's records. Returns False if it was already gone.

        The last segment number is kept so a re-created stream numbers above it; the scope's
        listing entry goes last, so an interrupted delete is still listed and can be re-driven.

        Raises:
            IllegalStateTransition: the stream is not sealed.
        """
        handle = self.stream(scope, stream)
        current = await handle.check_deletable()
        if current is not None:
            await self.scopes.record_deleted_stream(scope, stream, current.highest_segment_number)
            await handle.delete_tables()
        await self.scopes.remove_stream(scope, stream)
        return current is not None
