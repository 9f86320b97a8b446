"""The persisted workflow intent: what a controller was doing to a stream when it stopped.

Formats (after the format-version byte)::

    WorkflowIntentRecord   kind:u8 started_time:i64 request_id:i64 payload:blob
    PendingWorkflowRecord  kind:u8 started_time:i64

The intent sits in the stream's metadata table, so it is written with the same optimistic
concurrency as the records it guards. The payload is the workflow's own input (a scale's new
ranges, an update's configuration, a truncation's cut), encoded by the workflow. A global
index of streams with a pending intent lets a restarted controller find them without scanning
every scope.
"""

from __future__ import annotations

import dataclasses
import enum

from ..codec import Decoder, Encoder

FORMAT_VERSION = 1


class WorkflowKind(enum.IntEnum):
    CREATE = 1
    UPDATE = 2
    SCALE = 3
    COMMIT_TRANSACTIONS = 4
    TRUNCATE = 5
    SEAL = 6
    DELETE = 7


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowIntentRecord:
    kind: WorkflowKind
    started_time: int
    request_id: int = 0
    payload: bytes = b""

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).u8(self.kind).i64(self.started_time).i64(self.request_id)
                .blob(self.payload).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> WorkflowIntentRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.enum(WorkflowKind, decoder.u8()), decoder.i64(), decoder.i64(), decoder.blob())


@dataclasses.dataclass(frozen=True, slots=True)
class PendingWorkflowRecord:
    """An entry of the global index of streams with a workflow intent."""

    kind: WorkflowKind
    started_time: int

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).u8(self.kind).i64(self.started_time).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> PendingWorkflowRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.enum(WorkflowKind, decoder.u8()), decoder.i64())
