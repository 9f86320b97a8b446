"""Where every record lives: table names and keys (see LAYOUT.md for the full picture).

Global tables::

    _system/_tables/scopes                      <scope>            -> ScopeRecord
    _system/_tables/deletedStreams              <scope>/<stream>   -> DeletedStreamRecord
    _system/_tables/workflows                   <scope>/<stream>   -> PendingWorkflowRecord

Per scope::

    _system/_tables/<scope>/streams             <stream>           -> CreationRecord
    _system/_tables/<scope>/readerGroups        <group>            -> ReaderGroupConfigRecord

Per stream (``StreamTables``)::

    _system/_tables/<scope>/<stream>/metadata       fixed keys below, plus numbered records
    _system/_tables/<scope>/<stream>/transactions   <32 hex digits of the txn id> -> TransactionRecord
    _system/_tables/<scope>/<stream>/writers        <writer id>        -> WriterMarkRecord

Everything a scale commits lives in the one ``metadata`` table, so it can be written in one
atomic batch. Transactions and writer marks get their own tables because they are listed, and a
listing of ``metadata`` would wade through every epoch record. Table names are a pure function of
scope and stream names: a deleted stream's tables are deleted, and a re-created stream starts
with fresh ones (its segment numbers continue above the old ones through ``deletedStreams``).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable

from wire.naming import epoch_of, uuid_hex

TABLE_PREFIX = "_system/_tables"
SCOPES_TABLE = f"{TABLE_PREFIX}/scopes"
DELETED_STREAMS_TABLE = f"{TABLE_PREFIX}/deletedStreams"
PENDING_WORKFLOWS_TABLE = f"{TABLE_PREFIX}/workflows"
GLOBAL_TABLES = (SCOPES_TABLE, DELETED_STREAMS_TABLE, PENDING_WORKFLOWS_TABLE)

# Fixed keys of a stream's metadata table.
CONFIGURATION = "configuration"
STATE = "state"
CREATION = "creationTime"
CURRENT_EPOCH = "currentEpoch"
TRUNCATION = "truncation"
EPOCH_TRANSITION = "epochTransition"
COMMITTING_TRANSACTIONS = "committingTransactions"
RETENTION_SET = "retentionSet"
HISTORY_INDEX_ROOT = "historyIndexRoot"
SUBSCRIBERS = "subscribers"
WORKFLOW = "workflow"
COLD_SEGMENTS = "coldSegments"


def streams_table(scope: str) -> str:
    return f"{TABLE_PREFIX}/{scope}/streams"


def reader_groups_table(scope: str) -> str:
    return f"{TABLE_PREFIX}/{scope}/readerGroups"


def scoped_name(scope: str, name: str) -> str:
    return f"{scope}/{name}"


@dataclasses.dataclass(frozen=True, slots=True)
class StreamTables:
    """The three tables of one stream."""

    scope: str
    stream: str

    @property
    def metadata(self) -> str:
        return f"{TABLE_PREFIX}/{self.scope}/{self.stream}/metadata"

    @property
    def transactions(self) -> str:
        return f"{TABLE_PREFIX}/{self.scope}/{self.stream}/transactions"

    @property
    def writers(self) -> str:
        return f"{TABLE_PREFIX}/{self.scope}/{self.stream}/writers"

    @property
    def all(self) -> tuple[str, str, str]:
        return (self.metadata, self.transactions, self.writers)


# Numbered keys of a stream's metadata table (decimal, so they stay short and readable in dumps).

def epoch_key(epoch: int) -> str:
    return f"epoch/{epoch}"


HISTORY_CHUNK_PREFIX = "historyChunk/"
HISTORY_LEAF_PREFIX = "historyLeaf/"


def history_chunk_key(chunk: int) -> str:
    return f"{HISTORY_CHUNK_PREFIX}{chunk}"


def history_leaf_key(leaf: int) -> str:
    return f"{HISTORY_LEAF_PREFIX}{leaf}"


def sealed_epoch_key(segment_id: int) -> str:
    return f"sealedEpoch/{segment_id}"


def sealed_sizes_key(shard: int) -> str:
    return f"sealedSizes/{shard}"


def stream_cut_key(recording_time: int) -> str:
    return f"streamCut/{recording_time}"


def subscriber_key(name: str) -> str:
    return f"subscriber/{name}"


def transaction_key(transaction_id: uuid.UUID) -> str:
    return uuid_hex(transaction_id)


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkSizes:
    """How many epochs share one history chunk / one index leaf / one sealed-sizes shard.

    PDP-32 picks 1000 for each: a chunk of 1000 small deltas and a leaf of 1000 times (8 KB) stay
    far below the 1 MiB table-value limit, and the index root grows by only 8 bytes per 1000 epochs.
    Tests shrink them to cross boundaries with few epochs. Changing them for an existing store
    would misplace records, so they are fixed per deployment.
    """

    history_chunk_epochs: int = 1000
    index_leaf_epochs: int = 1000
    sealed_sizes_shard_epochs: int = 1000

    def __post_init__(self):
        if min(self.history_chunk_epochs, self.index_leaf_epochs, self.sealed_sizes_shard_epochs) < 1:
            raise ValueError("chunk sizes must be positive")

    def chunk_of(self, epoch: int) -> int:
        return epoch // self.history_chunk_epochs

    def leaf_of(self, epoch: int) -> int:
        return epoch // self.index_leaf_epochs

    def shard_of(self, segment_id: int) -> int:
        """Shards group segments by creation epoch, as Java does (spec §6.1)."""
        return epoch_of(segment_id) // self.sealed_sizes_shard_epochs

    def sealed_sizes_keys(self, segment_ids: Iterable[int]) -> list[str]:
        """The keys of the shards holding the sizes of ``segment_ids``, each once, in order."""
        return [sealed_sizes_key(shard) for shard in sorted({self.shard_of(segment_id) for segment_id in segment_ids})]


DEFAULT_CHUNK_SIZES = ChunkSizes()  # PDP-32's sizes (frozen: one instance serves every store)
