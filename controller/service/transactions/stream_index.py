"""The global index of streams that have transactions, and each stream's commit-order counter.

Table ``_system/_tables/transactionStreams``: key ``<scope>/<stream>`` ->
``TransactionStreamRecord  commit_order_next:i64`` (after the format-version byte).

Why. A restarted controller must find every OPEN transaction (to re-arm its lease timer) and
every COMMITTING or ABORTING one (to finish it) without listing every scope and stream. The
index names the streams to look at; the stream's own ``transactions`` table is authoritative.

Ordering rules that keep the index complete:

* ``create`` touches the entry (a conditional rewrite, so its version changes) *before* storing
  a new transaction and again *after*. ``forget_if_idle`` reads the entry's version, checks that
  the stream has no active transaction, and removes the entry only at that version. Whatever
  the interleaving, either the check sees the new transaction, or the touch after it changes
  the version and the removal fails.
* The commit order (spec §6.1 "commit order") is a per-stream counter in the same entry: commit
  requests take increasing positions, and the commit job batches them in that order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from coordination.retry import retry

from ...store import NotFound, Versioned, VersionedKeyValueStore, Write, WriteConflict
from ...store.codec import Decoder, Encoder
from ...store.key_value import ABSENT, PAGE_ENTRIES_DEFAULT
from ..retries import TRANSACTION_INDEX_UPDATE, is_lost_race

FORMAT_VERSION = 1
STREAMS_TABLE = "_system/_tables/transactionStreams"


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionStreamRecord:
    commit_order_next: int = 0

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i64(self.commit_order_next).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> TransactionStreamRecord:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        record = cls(decoder.i64())
        decoder.finish()
        return record


def stream_key(scope: str, stream: str) -> str:
    return f"{scope}/{stream}"


async def _update(kv: VersionedKeyValueStore, scope: str, stream: str,
                  change: Callable[[TransactionStreamRecord], TransactionStreamRecord]) -> TransactionStreamRecord:
    """Read-modify-write of the stream's entry (created if absent). Returns the record it replaced.

    A lost race is retried after a short wait (``TRANSACTION_INDEX_UPDATE``): another update is
    accepted but not yet durable, so reads still show the old version, and re-reading at once
    would spin through every attempt within one log write.

    Raises:
        WriteConflict: the entry kept changing.
    """
    key = stream_key(scope, stream)

    async def update_once() -> TransactionStreamRecord:
        try:
            (found,) = await kv.get_many(STREAMS_TABLE, [key])
        except NotFound:
            await kv.create_table(STREAMS_TABLE)
            found = None
        old = TransactionStreamRecord() if found is None else TransactionStreamRecord.decode(found.value)
        expected = ABSENT if found is None else found.version
        await kv.write_batch(STREAMS_TABLE, [Write(key, change(old).encode(), expected)])
        return old

    return await retry(update_once, TRANSACTION_INDEX_UPDATE, retriable=is_lost_race)


async def touch(kv: VersionedKeyValueStore, scope: str, stream: str) -> None:
    """Lists the stream (or changes its entry's version if listed)."""
    await _update(kv, scope, stream, lambda record: record)


async def next_commit_order(kv: VersionedKeyValueStore, scope: str, stream: str) -> int:
    """The next position in the stream's commit order (increasing, never reused while listed)."""
    old = await _update(kv, scope, stream,
                        lambda record: TransactionStreamRecord(record.commit_order_next + 1))
    return old.commit_order_next


async def read_entry(kv: VersionedKeyValueStore, scope: str, stream: str) -> Versioned | None:
    try:
        (found,) = await kv.get_many(STREAMS_TABLE, [stream_key(scope, stream)])
    except NotFound:
        return None
    return found


async def forget(kv: VersionedKeyValueStore, scope: str, stream: str, expected_version: int) -> bool:
    """Removes the entry if it still has ``expected_version``. Returns False if it changed."""
    try:
        await kv.remove(STREAMS_TABLE, stream_key(scope, stream), expected_version)
        return True
    except (NotFound, WriteConflict):
        return False


async def list_streams(kv: VersionedKeyValueStore, token: bytes = b"",
                       limit: int = PAGE_ENTRIES_DEFAULT) -> tuple[list[tuple[str, str]], bytes]:
    """One page of (scope, stream) and the token for the next (empty list: done)."""
    try:
        page = await kv.list_entries(STREAMS_TABLE, token, limit)
    except NotFound:
        return [], b""
    streams = []
    for key, _ in page.entries:
        scope, _, stream = key.partition("/")
        streams.append((scope, stream))
    return streams, page.token
