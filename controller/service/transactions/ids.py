"""Transaction ids: the transaction epoch in the top 32 bits, a never-repeating counter below (spec §5.4).

Layout of the 128-bit id (``TxnId{highBits = msb, lowBits = lsb}`` on the wire)::

    msb = epoch << 32 | counter_high      (epoch: i32 >= 0, counter_high: 32 bits)
    lsb = counter_low                     (63 bits: lowBits stays NON-NEGATIVE)

The counter is split as ``counter_high = counter >> 63``, ``counter_low = counter & (2**63 - 1)``,
like Java's Int96 counter, so ``lsb`` never has its sign bit set: the Rust client sign-extends
``lowBits`` into its u128 id, and a negative one would corrupt the id, its epoch and its
segment names. Random version-4 UUIDs would be negative (their variant bits) and are never used.

The counter is cluster wide and durable: a controller reserves a block of values with one
compare-and-swap on ``_system/_tables/transactionCounter`` (key ``counter``) and hands them out
from memory. A restarted controller reserves a fresh block, so values left in an old block are
skipped, never repeated.

Format (after the format-version byte): ``TransactionCounterRecord  high:i64 low:i64`` (the
next unreserved counter value, split as above).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from coordination.retry import retry

from ...store import NotFound, VersionedKeyValueStore
from ...store.codec import Decoder, Encoder
from ..retries import COMPARE_AND_SWAP, is_lost_race

FORMAT_VERSION = 1
COUNTER_TABLE = "_system/_tables/transactionCounter"
COUNTER_KEY = "counter"
COUNTER_FIRST = 1
COUNTER_LOW_BITS = 63
COUNTER_LOW_MASK = (1 << COUNTER_LOW_BITS) - 1
COUNTER_MAX = (1 << (32 + COUNTER_LOW_BITS)) - 1
EPOCH_MAX = 2**31 - 1
RESERVATION_BLOCK_DEFAULT = 1000
_UINT64_MASK = (1 << 64) - 1


class CounterExhausted(Exception):
    """The 95-bit counter ran out (a broken invariant rather than an operating error)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionCounterRecord:
    next_value: int

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).i64(self.next_value >> COUNTER_LOW_BITS)
                .i64(self.next_value & COUNTER_LOW_MASK).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> TransactionCounterRecord:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        high, low = decoder.i64(), decoder.i64()
        decoder.finish()
        return cls((high << COUNTER_LOW_BITS) | low)


def compose_transaction_id(epoch: int, counter: int) -> uuid.UUID:
    """The id of the transaction numbered ``counter``, created in (reference) epoch ``epoch``."""
    if not 0 <= epoch <= EPOCH_MAX:
        raise ValueError(f"epoch {epoch} is not a non-negative int32")
    if not 0 <= counter <= COUNTER_MAX:
        raise CounterExhausted(f"transaction counter {counter} is out of range")
    most_significant = (epoch << 32) | (counter >> COUNTER_LOW_BITS)
    return uuid.UUID(int=(most_significant << 64) | (counter & COUNTER_LOW_MASK))


class TransactionIdAllocator:
    """Hands out counter values from blocks reserved in the store; one per controller process."""

    def __init__(self, kv: VersionedKeyValueStore, block_size: int = RESERVATION_BLOCK_DEFAULT):
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self._kv = kv
        self._block_size = block_size
        self._next = 0
        self._end = 0  # exclusive end of the reserved block
        self._lock = asyncio.Lock()

    async def next_id(self, epoch: int) -> uuid.UUID:
        """A new transaction id in ``epoch``. Raises CounterExhausted (never in practice)."""
        async with self._lock:
            if self._next >= self._end:
                self._next, self._end = await self._reserve_block()
            counter, self._next = self._next, self._next + 1
        return compose_transaction_id(epoch, counter)

    async def _reserve_block(self) -> tuple[int, int]:
        """Moves the stored counter past one block (compare-and-swap). Returns the block [start, end).

        Raises:
            WriteConflict: other controllers kept reserving first (``COMPARE_AND_SWAP`` attempts).
        """
        return await retry(self._try_reserve_block, COMPARE_AND_SWAP, retriable=is_lost_race)

    async def _try_reserve_block(self) -> tuple[int, int]:
        try:
            (found,) = await self._kv.get_many(COUNTER_TABLE, [COUNTER_KEY])
        except NotFound:
            await self._kv.create_table(COUNTER_TABLE)
            found = None
        start = COUNTER_FIRST if found is None else TransactionCounterRecord.decode(found.value).next_value
        end = start + self._block_size
        if end - 1 > COUNTER_MAX:
            raise CounterExhausted("the transaction counter is exhausted")
        value = TransactionCounterRecord(end).encode()
        if found is None:
            await self._kv.create(COUNTER_TABLE, COUNTER_KEY, value)  # AlreadyExists: another controller was first
        else:
            await self._kv.replace(COUNTER_TABLE, COUNTER_KEY, value, found.version)
        return start, end
