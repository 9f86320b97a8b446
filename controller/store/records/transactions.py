"""Transaction records and the committing-transactions record (spec §6.5).

Formats (after the format-version byte)::

    TransactionRecord            id:uuid(16) epoch:i32 status:u8 creation_time:i64
                                 lease_expiry_time:i64 max_execution_expiry_time:i64 writer_id:str
                                 commit_time:i64 commit_order:i64 completion_time:i64
                                 commit_offsets:[segment_id:i64 offset:i64]
    CommittingTransactionsRecord epoch:i32 (-1: none) active_epoch:i32 (-1: not rolling) ids:[uuid(16)]

A transaction keeps one record for its whole life; COMMITTED/ABORTED records stay (with their
completion time) until a purge removes them, so checkTransactionState still answers afterwards.
``writer_id`` and ``commit_time`` feed writer marks (watermarks) when the commit completes.
"""

from __future__ import annotations

import dataclasses
import uuid

from ..codec import Decoder, Encoder
from ..states import TransactionStatus

FORMAT_VERSION = 1
NO_TIME = -1


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionRecord:
    transaction_id: uuid.UUID
    epoch: int  # the reference epoch it was created in (the id's top 32 bits)
    status: TransactionStatus
    creation_time: int
    lease_expiry_time: int  # abort when a ping has not extended the lease past this
    max_execution_expiry_time: int  # abort at this time whatever the pings say
    writer_id: str = ""
    commit_time: int = NO_TIME  # the writer's event time for watermarks (NO_TIME: no mark)
    commit_order: int = -1  # position in the stream's commit order once COMMITTING
    completion_time: int = NO_TIME  # when it became COMMITTED or ABORTED
    commit_offsets: dict[int, int] = dataclasses.field(default_factory=dict)  # segment -> offset after merge

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).uuid(self.transaction_id).i32(self.epoch).u8(self.status)
                .i64(self.creation_time).i64(self.lease_expiry_time).i64(self.max_execution_expiry_time)
                .text(self.writer_id).i64(self.commit_time).i64(self.commit_order).i64(self.completion_time)
                .pairs(self.commit_offsets).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> TransactionRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.uuid(), decoder.i32(), decoder.enum(TransactionStatus, decoder.u8()), decoder.i64(),
                       decoder.i64(), decoder.i64(), decoder.text(), decoder.i64(), decoder.i64(), decoder.i64(),
                       decoder.pairs())


@dataclasses.dataclass(frozen=True, slots=True)
class CommittingTransactionsRecord:
    """The batch the commit job is working on: one txn epoch, ids in commit order."""

    epoch: int
    transaction_ids: tuple[uuid.UUID, ...]
    active_epoch: int = -1  # set while the batch is rolled into duplicate epochs

    @property
    def is_empty(self) -> bool:
        return self.epoch < 0

    @property
    def is_rolling(self) -> bool:
        return self.active_epoch >= 0

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).i32(self.epoch).i32(self.active_epoch)
                .sequence(self.transaction_ids, Encoder.uuid).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> CommittingTransactionsRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            epoch, active_epoch = decoder.i32(), decoder.i32()
            return cls(epoch, decoder.sequence(Decoder.uuid), active_epoch)


EMPTY_COMMITTING_TRANSACTIONS = CommittingTransactionsRecord(-1, ())
