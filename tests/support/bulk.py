"""Bulk segment bytes over the wire for Tier-2 tests: pipelined appends of a checkable pattern, and reads
that verify every byte.

Block ``k`` of a pattern (``block_size`` bytes) repeats the 8-byte big-endian ``k`` xor ``seed``, so any
byte's expected value follows from its offset, and a misplaced, lost or duplicated block is caught.
"""

from __future__ import annotations

import asyncio
import struct
import uuid

from clients.connection import WireConnection, next_request_id
from wire import commands as c

MiB = 1024 * 1024


def pattern_block(index: int, block_size: int = MiB, seed: int = 0) -> bytes:
    return struct.pack(">Q", index ^ seed) * (block_size // 8)


async def append_pattern(port: int, segment: str, total: int, *, block_size: int = MiB, seed: int = 0,
                         in_flight: int = 16, first_block: int = 0, progress=None) -> int:
    """Appends ``total`` bytes (whole blocks) of the pattern to ``segment``; returns the length acknowledged."""
    connection = await WireConnection.connect("127.0.0.1", port)
    try:
        writer = uuid.uuid4()
        setup = await connection.request(c.SetupAppend(next_request_id(), writer, segment, ""))
        assert isinstance(setup, c.AppendSetup), setup
        window = asyncio.Semaphore(in_flight)
        acknowledged = 0
        pending = set()

        async def one(future):
            nonlocal acknowledged
            try:
                reply = await asyncio.wait_for(future, 120)
                assert isinstance(reply, c.DataAppended), reply
                acknowledged = max(acknowledged, reply.current_segment_write_offset)
            finally:
                window.release()

        for number in range(total // block_size):
            await window.acquire()
            data = pattern_block(first_block + number, block_size, seed)
            request_id = next_request_id()
            future = connection.expect(request_id)
            connection.send(c.AppendBlockEnd(writer, len(data), data, 1, number + 1, request_id))
            task = asyncio.create_task(one(future))
            pending.add(task)
            task.add_done_callback(pending.discard)
            if progress is not None and number % 256 == 0:
                progress(number * block_size)
        await asyncio.gather(*pending)
        return acknowledged
    finally:
        await connection.close()


async def verify_pattern(port: int, segment: str, length: int, *, block_size: int = MiB, seed: int = 0,
                         read_size: int = 8 * MiB, start: int = 0) -> int:
    """Reads ``[start, length)`` of ``segment`` and checks every byte against the pattern; returns bytes read."""
    connection = await WireConnection.connect("127.0.0.1", port)
    try:
        offset, pending = start, bytearray()
        block = start // block_size
        skip = start - block * block_size
        while offset < length:
            reply = await connection.request(c.ReadSegment(segment, offset, min(read_size, length - offset), "",
                                                           next_request_id()), timeout=60)
            assert isinstance(reply, c.SegmentRead), reply
            assert len(reply.data) > 0, f"empty read at {offset}"
            pending += reply.data
            offset += len(reply.data)
            while len(pending) + skip >= block_size:
                expected = pattern_block(block, block_size, seed)[skip:]
                if bytes(pending[:len(expected)]) != expected:
                    raise AssertionError(f"block {block} of {segment} differs (offsets "
                                         f"{block * block_size}..{(block + 1) * block_size})")
                del pending[:len(expected)]
                block, skip = block + 1, 0
        assert not pending or bytes(pending) == pattern_block(block, block_size, seed)[skip:skip + len(pending)]
        return offset - start
    finally:
        await connection.close()
