"""Per-stream reader-side records: subscribers (consumption-based retention) and writer marks.

Subscribers are few per stream, so they sit in the metadata table: a set record naming them and
one record per subscriber, added in one atomic batch. Writer marks can be many and are listed by
the watermarking job, so they have their own table keyed by writer id.
"""

from __future__ import annotations

from collections.abc import Callable

from . import layout
from .errors import AlreadyExists, WriteConflict
from .key_value import ABSENT, PAGE_ENTRIES_DEFAULT, Write
from .records import SubscriberRecord, SubscriberSet, WriterMarkRecord
from .stream_store import StreamStore


async def add_subscriber(stream: StreamStore, name: str, generation: int, time: int) -> None:
    """Subscribes reader group ``name`` with an empty cut.

    Raises:
        AlreadyExists: it is already subscribed.
        WriteConflict: the subscriber set changed concurrently.
    """
    subscribers, version = await stream.read(layout.SUBSCRIBERS, SubscriberSet)
    if name in subscribers.names:
        raise AlreadyExists(f"{stream}: {name!r} is already a subscriber", stream.tables.metadata,
                            layout.subscriber_key(name))
    await stream.write([
        Write(layout.SUBSCRIBERS, SubscriberSet(subscribers.names + (name,)).encode(), version),
        Write(layout.subscriber_key(name), SubscriberRecord(generation, time, {}).encode(), ABSENT)])


async def list_subscribers(stream: StreamStore) -> tuple[str, ...]:
    subscribers, _ = await stream.read(layout.SUBSCRIBERS, SubscriberSet)
    return subscribers.names


async def get_subscriber(stream: StreamStore, name: str) -> tuple[SubscriberRecord, int]:
    """Raises NotFound if ``name`` is not subscribed."""
    return await stream.read(layout.subscriber_key(name), SubscriberRecord)


async def update_subscriber_cut(stream: StreamStore, name: str, generation: int, stream_cut: dict[int, int],
                                time: int) -> int:
    """Replaces a subscriber's truncation cut. Returns the new version.

    Raises:
        NotFound: ``name`` is not subscribed.
        WriteConflict: ``generation`` is older than the stored one, or a concurrent update won.
    """
    record, version = await get_subscriber(stream, name)
    if generation < record.generation:
        raise WriteConflict(f"{stream}: subscriber {name!r} is at generation {record.generation}, not {generation}",
                            stream.tables.metadata, layout.subscriber_key(name))
    return await stream.kv.replace(stream.tables.metadata, layout.subscriber_key(name),
                                   SubscriberRecord(generation, time, dict(stream_cut)).encode(), version)


async def remove_subscriber(stream: StreamStore, name: str) -> None:
    """Unsubscribes ``name`` (absent is fine): the set first, so it never names a missing record."""
    subscribers, version = await stream.read(layout.SUBSCRIBERS, SubscriberSet)
    if name in subscribers.names:
        remaining = SubscriberSet(tuple(other for other in subscribers.names if other != name))
        await stream.kv.replace(stream.tables.metadata, layout.SUBSCRIBERS, remaining.encode(), version)
    await stream.kv.remove(stream.tables.metadata, layout.subscriber_key(name))


async def note_writer_mark(stream: StreamStore, writer_id: str, mark: WriterMarkRecord,
                           check: Callable[[WriterMarkRecord], None] | None = None) -> bool:
    """Records a writer's time and position. Returns False (writing nothing) if the writer already
    reported a later time: marks never go back (the reply is INVALID_TIME). ``check(stored)``, if
    given, sees the stored mark (when there is one, after the time check) and may raise to refuse.

    Raises:
        WriteConflict: a concurrent report from the same writer won; the caller re-reads and retries.
    """
    (found,) = await stream.kv.get_many(stream.tables.writers, [writer_id])
    if found is not None:
        stored = WriterMarkRecord.decode(found.value)
        if stored.timestamp > mark.timestamp:
            return False
        if check is not None:
            check(stored)
    await stream.kv.write_batch(stream.tables.writers,
                                [Write(writer_id, mark.encode(), ABSENT if found is None else found.version)])
    return True


async def get_writer_mark(stream: StreamStore, writer_id: str) -> tuple[WriterMarkRecord, int]:
    """Raises NotFound for an unknown writer."""
    return await stream.read(writer_id, WriterMarkRecord, stream.tables.writers)


async def shut_down_writer(stream: StreamStore, writer_id: str) -> None:
    """Marks a writer not alive, so the watermarking job may drop it. Raises NotFound."""
    mark, version = await get_writer_mark(stream, writer_id)
    if mark.is_alive:
        stopped = WriterMarkRecord(mark.timestamp, mark.position, is_alive=False)
        await stream.kv.replace(stream.tables.writers, writer_id, stopped.encode(), version)


async def remove_writer_mark(stream: StreamStore, writer_id: str, expected_version: int | None = None) -> None:
    """Drops a writer's mark, optionally only if unchanged since ``expected_version``.

    Raises:
        NotFound: ``expected_version`` is given and the writer is unknown.
        WriteConflict: the mark changed since ``expected_version``.
    """
    await stream.kv.remove(stream.tables.writers, writer_id, expected_version)


async def list_writer_marks(stream: StreamStore, token: bytes = b"",
                            limit: int = PAGE_ENTRIES_DEFAULT) -> tuple[dict[str, WriterMarkRecord], bytes]:
    """One page of writer marks and the token for the next (empty: done)."""
    page = await stream.kv.list_entries(stream.tables.writers, token, limit)
    return {writer: WriterMarkRecord.decode(value.value) for writer, value in page.entries}, page.token



async def list_writer_marks_versioned(stream: StreamStore, token: bytes = b"", limit: int = PAGE_ENTRIES_DEFAULT
                                      ) -> tuple[dict[str, tuple[WriterMarkRecord, int]], bytes]:
    """One page of writer marks with their versions (for removals conditional on an unchanged mark)
    and the token for the next (empty: done)."""
    page = await stream.kv.list_entries(stream.tables.writers, token, limit)
    return {writer: (WriterMarkRecord.decode(value.value), value.version) for writer, value in page.entries}, page.token
