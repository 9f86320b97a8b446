"""Persisted workflow intents: a controller that crashes mid-workflow lets another one re-drive it.

Theory of operation. Before a workflow (create, update, scale, commit, truncate, seal, delete)
touches a stream, it records its intent in the stream's metadata table; when it has finished,
it removes it. The intent is created only if absent, so it is also the per-stream mutual
exclusion between controllers. Every workflow step is idempotent (each checks what is already
done), so re-driving means running the workflow again from the top with the stored payload.

A restarted controller finds the streams to re-drive in the global ``workflows`` index. The
index entry is written *before* the intent and removed *after* it, so every intent is indexed;
an index entry whose stream has no intent is left over from a crash and is simply dropped. The
stream's intent record is authoritative; the index entry's kind is only a hint.
"""

from __future__ import annotations

from . import layout
from .errors import AlreadyExists
from .key_value import PAGE_ENTRIES_DEFAULT, VersionedKeyValueStore
from .records import PendingWorkflowRecord, WorkflowIntentRecord
from .stream_store import StreamStore


async def begin_workflow(stream: StreamStore, intent: WorkflowIntentRecord) -> int:
    """Records ``intent`` for the stream. Returns its version (also when the same intent is re-begun).

    Raises:
        AlreadyExists: a different workflow is pending on the stream.
    """
    index_key = layout.scoped_name(stream.scope, stream.name)
    await stream.kv.put(layout.PENDING_WORKFLOWS_TABLE, index_key,
                        PendingWorkflowRecord(intent.kind, intent.started_time).encode())
    try:
        return await stream.kv.create(stream.tables.metadata, layout.WORKFLOW, intent.encode())
    except AlreadyExists:
        pending, version = await stream.read(layout.WORKFLOW, WorkflowIntentRecord)
        if pending == intent:
            return version
        raise AlreadyExists(f"{stream}: a {pending.kind.name} workflow is pending", stream.tables.metadata,
                            layout.WORKFLOW) from None


async def get_workflow(stream: StreamStore) -> tuple[WorkflowIntentRecord, int] | None:
    """The pending intent and its version, or None if no workflow is pending."""
    (found,) = await stream.read_many([(layout.WORKFLOW, WorkflowIntentRecord)])
    return found


async def end_workflow(stream: StreamStore, expected_version: int | None = None) -> None:
    """Removes the intent (only the one read at ``expected_version``, if given), then its index entry.

    Raises:
        WriteConflict: the intent was replaced since ``expected_version`` (another workflow owns it).
    """
    await stream.kv.remove(stream.tables.metadata, layout.WORKFLOW, expected_version)
    await stream.kv.remove(layout.PENDING_WORKFLOWS_TABLE, layout.scoped_name(stream.scope, stream.name))


async def forget_index_entry(kv: VersionedKeyValueStore, scope: str, stream: str) -> None:
    """Drops an index entry whose stream has no intent (left by a crash, or the stream is gone)."""
    await kv.remove(layout.PENDING_WORKFLOWS_TABLE, layout.scoped_name(scope, stream))


async def list_pending_workflows(kv: VersionedKeyValueStore, token: bytes = b"", limit: int = PAGE_ENTRIES_DEFAULT
                                 ) -> tuple[list[tuple[str, str, PendingWorkflowRecord]], bytes]:
    """One page of (scope, stream, hint) for streams that may have a pending workflow."""
    page = await kv.list_entries(layout.PENDING_WORKFLOWS_TABLE, token, limit)
    entries = []
    for key, value in page.entries:
        scope, _, stream = key.partition("/")
        entries.append((scope, stream, PendingWorkflowRecord.decode(value.value)))
    return entries, page.token
