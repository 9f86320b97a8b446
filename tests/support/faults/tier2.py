"""A ChunkStorage wrapper that injects failures, for fault-injection tests of SLTS.

With nothing armed it behaves exactly like the storage it wraps (same ``supports_*`` flags, and
``counters`` *is* the inner storage's). Knobs, checked in this order on every call:

* ``latency_seconds``: every call sleeps this long first (or, if ``latency`` is set, as long as it says: a
  function called once per call, for a latency that varies).
* ``hang_seconds`` (``hang()`` / ``hang(None)``): every call blocks for that long, then raises
  ChunkStorageUnavailable, as a client timeout would; the inner storage is not called.
* ``unavailable`` (``set_unavailable()``): every call raises ChunkStorageUnavailable until cleared.
* ``fail_next(count, operation=None, error=..., after_inner=False)``: the next ``count`` calls of
  ``operation`` (an operation name such as "write"; None: any operation) raise ``error`` (an
  exception, or an exception class made with the chunk name). With ``after_inner`` the call reaches
  the inner storage first and its result is lost (the operation happened, the caller cannot know).
  Several armings queue up; each call consumes from the first arming that matches it.
* ``tear_next_write(prefix_bytes)``: the next ``write`` or ``create_with_content`` passes only the
  first ``prefix_bytes`` of its data to the inner storage, then raises ChunkStorageUnavailable (a
  torn ``create_with_content`` leaves a short chunk, as a store without atomic creation would).

``calls`` counts the calls of each operation, failed ones included. ``close()`` is never faulted.
``open_region`` is a read for every knob (armed as, and counted as, "read").
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Callable, Sequence

from server.buffers import prefix_views
from server.tier2.chunk_storage import (
    ChunkInfo,
    ChunkRegion,
    ChunkStorage,
    ChunkStorageError,
    ChunkStorageUnavailable,
    WriteData,
    as_parts,
)

OPERATIONS = ("exists", "get_info", "create", "create_with_content", "delete", "read", "write", "concat",
              "set_read_only", "list")

ErrorSpec = BaseException | type[BaseException]


@dataclasses.dataclass
class _Arming:
    operation: str | None
    remaining: int
    error: ErrorSpec
    after_inner: bool


class FaultyChunkStorage(ChunkStorage):
    def __init__(self, inner: ChunkStorage):
        super().__init__()
        self.inner = inner
        self.counters = inner.counters
        self.supports_append = inner.supports_append
        self.supports_concat = inner.supports_concat
        self.supports_truncation = inner.supports_truncation
        self.supports_regions = inner.supports_regions
        self.calls: collections.Counter[str] = collections.Counter()
        self.latency_seconds = 0.0
        self.latency: Callable[[], float] | None = None
        self.hang_seconds: float | None = None
        self.unavailable = False
        self._armed: list[_Arming] = []
        self._torn_write_bytes: int | None = None

    def __repr__(self) -> str:
        return f"<FaultyChunkStorage {self.inner!r}>"

    # ------------------------------------------------------------------ arming

    def fail_next(self, count: int = 1, operation: str | None = None, *,
                  error: ErrorSpec = ChunkStorageUnavailable, after_inner: bool = False) -> None:
        if operation is not None and operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}")
        self._armed.append(_Arming(operation, count, error, after_inner))

    def set_unavailable(self, unavailable: bool = True) -> None:
        self.unavailable = unavailable

    def hang(self, seconds: float | None = 30.0) -> None:
        """Every call blocks ``seconds`` then times out; ``hang(None)`` ends it."""
        self.hang_seconds = seconds

    def tear_next_write(self, prefix_bytes: int) -> None:
        self._torn_write_bytes = prefix_bytes

    def clear(self) -> None:
        """Disarms everything (call counts are kept)."""
        self.latency_seconds, self.hang_seconds, self.unavailable = 0.0, None, False
        self._armed.clear()
        self._torn_write_bytes = None

    # ------------------------------------------------------------------ tripping

    async def _call(self, operation: str, chunk: str, *args, inner_operation: str | None = None):
        self.calls[operation] += 1
        delay = self.latency() if self.latency is not None else self.latency_seconds
        if delay:
            await asyncio.sleep(delay)
        if self.hang_seconds is not None:
            await asyncio.sleep(self.hang_seconds)
            raise ChunkStorageUnavailable(chunk, f"injected: {operation} timed out after {self.hang_seconds}s")
        if self.unavailable:
            raise ChunkStorageUnavailable(chunk, f"injected: storage unavailable ({operation})")
        arming = self._take_arming(operation)
        if arming is None or arming.after_inner:
            result = await getattr(self.inner, inner_operation or operation)(chunk, *args)
            if arming is None:
                return result
            if isinstance(result, ChunkRegion):  # lost to the caller: given back here
                result.release()
        raise _make_error(arming.error, chunk, operation)

    def _take_arming(self, operation: str) -> _Arming | None:
        for arming in self._armed:
            if arming.operation in (None, operation):
                arming.remaining -= 1
                if arming.remaining <= 0:
                    self._armed.remove(arming)
                return arming
        return None

    async def _data_call(self, operation: str, chunk: str, *args, data: WriteData):
        if self._torn_write_bytes is None:
            return await self._call(operation, chunk, *args, data)
        prefix, self._torn_write_bytes = self._torn_write_bytes, None
        await self._call(operation, chunk, *args, prefix_views(as_parts(data), prefix))
        raise ChunkStorageUnavailable(chunk, f"injected torn {operation}: only {prefix} bytes written")

    # ------------------------------------------------------------------ ChunkStorage

    async def exists(self, name: str) -> bool:
        return await self._call("exists", name)

    async def get_info(self, name: str) -> ChunkInfo:
        return await self._call("get_info", name)

    async def create(self, name: str) -> None:
        await self._call("create", name)

    async def create_with_content(self, name: str, data: WriteData) -> int:
        return await self._data_call("create_with_content", name, data=data)

    async def delete(self, name: str) -> None:
        await self._call("delete", name)

    async def read(self, name: str, offset: int, length: int) -> bytes:
        return await self._call("read", name, offset, length)

    async def open_region(self, name: str, offset: int, length: int) -> ChunkRegion:
        return await self._call("read", name, offset, length, inner_operation="open_region")

    async def write(self, name: str, offset: int, data: WriteData) -> int:
        return await self._data_call("write", name, offset, data=data)

    async def concat(self, target: str, sources: Sequence[tuple[str, int]]) -> int:
        return await self._call("concat", target, sources)

    async def set_read_only(self, name: str, read_only: bool = True) -> None:
        await self._call("set_read_only", name, read_only)

    async def list(self, prefix: str = "") -> list[str]:
        return await self._call("list", prefix)

    async def close(self) -> None:
        await self.inner.close()


def _make_error(error: ErrorSpec, chunk: str, operation: str) -> BaseException:
    if isinstance(error, BaseException):
        return error
    if issubclass(error, ChunkStorageError):
        return error(chunk, f"injected {operation} failure")
    return error(f"{chunk}: injected {operation} failure")
