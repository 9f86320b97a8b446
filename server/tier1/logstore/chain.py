"""A replicated log's metadata: its epoch, truncation point and chain of ledgers (the ``logs/<id>`` znode).

Pure data with a JSON form; ``docs/replicated-log.md`` explains the fields. Entry n of a ledger is
the log record with sequence ``first_sequence + n``; each ledger starts right after the last record
of the one before it, so sequences run 1, 2, 3, ... across the whole chain.
"""

from __future__ import annotations

import dataclasses
import json

FORMAT_VERSION = 1
OPEN, CLOSED = "open", "closed"


@dataclasses.dataclass(frozen=True)
class LedgerRecord:
    id: int
    first_sequence: int
    ensemble: tuple[str, ...]  # replica ids
    write_quorum: int
    ack_quorum: int
    state: str = OPEN
    last_entry: int = -1  # meaningful once closed; -1: no entries

    @property
    def last_sequence(self) -> int:
        """The sequence of its last record once closed (``first_sequence - 1`` when empty)."""
        return self.first_sequence + self.last_entry

    def closed_at(self, last_entry: int) -> LedgerRecord:
        return dataclasses.replace(self, state=CLOSED, last_entry=last_entry)


@dataclasses.dataclass(frozen=True)
class LogChain:
    epoch: int = 0
    truncation: int = 0  # every sequence up to and including this one is truncated (0: none)
    ledgers: tuple[LedgerRecord, ...] = ()
    enabled: bool = True

    @property
    def next_sequence(self) -> int:
        """Where a ledger added after the last (closed) one starts."""
        if not self.ledgers:
            return self.truncation + 1
        last = self.ledgers[-1]
        if last.state != CLOSED:
            raise ValueError(f"ledger {last.id} is still open")
        return last.last_sequence + 1

    def with_ledger(self, ledger: LedgerRecord) -> LogChain:
        return dataclasses.replace(self, ledgers=self.ledgers + (ledger,))

    def with_last_closed(self, last_entry: int) -> LogChain:
        return dataclasses.replace(self, ledgers=self.ledgers[:-1] + (self.ledgers[-1].closed_at(last_entry),))

    def truncated(self, upto: int) -> tuple[LogChain, list[LedgerRecord]]:
        """The chain truncated up to sequence ``upto`` and the closed ledgers that drops entirely."""
        dropped = [ledger for ledger in self.ledgers if ledger.state == CLOSED and ledger.last_sequence <= upto]
        kept = tuple(ledger for ledger in self.ledgers if ledger not in dropped)
        return dataclasses.replace(self, truncation=max(self.truncation, upto), ledgers=kept), dropped

    def to_json(self) -> bytes:
        return json.dumps({
            "version": FORMAT_VERSION, "epoch": self.epoch, "truncation": self.truncation, "enabled": self.enabled,
            "ledgers": [{"id": ledger.id, "first_sequence": ledger.first_sequence, "ensemble": list(ledger.ensemble),
                         "write_quorum": ledger.write_quorum, "ack_quorum": ledger.ack_quorum,
                         "state": ledger.state, "last_entry": ledger.last_entry} for ledger in self.ledgers],
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LogChain:
        document = json.loads(data)
        if document.get("version") != FORMAT_VERSION:
            raise ValueError(f"log metadata format {document.get('version')!r} is not {FORMAT_VERSION}")
        return cls(epoch=document["epoch"], truncation=document["truncation"], enabled=document["enabled"],
                   ledgers=tuple(LedgerRecord(id=item["id"], first_sequence=item["first_sequence"],
                                              ensemble=tuple(item["ensemble"]), write_quorum=item["write_quorum"],
                                              ack_quorum=item["ack_quorum"], state=item["state"],
                                              last_entry=item["last_entry"]) for item in document["ledgers"]))
