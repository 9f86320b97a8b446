"""Child process of the Tier-1 SIGKILL test: appends numbered records until it is killed.

Usage: python _log_writer_child.py DIRECTORY FIRST_NUMBER

Four appenders share one counter and each appends the next numbered record (so the log order is
the number order); every acknowledged record is reported on stdout as ``ACK <number> <sequence>``,
one unbuffered write each, only after ``append`` returned. Every 300 acknowledgements it truncates
the log up to the record acknowledged 150 earlier and reports ``TRUNCATED <sequence>``. The log
uses small files so that a few seconds roll over and recycle files many times.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

FILE_SIZE = 256 * 1024
MAX_APPEND_SIZE = 64 * 1024
APPENDERS = 4
TRUNCATE_EVERY = 300
KEEP_BEHIND = 150


def make_payload(number: int) -> bytes:
    """The record for ``number``: self-describing, of varied length (sometimes above the copy threshold)."""
    generator = random.Random(number)
    length = generator.choice((0, 10, 100, 1000, 3000, 20000))
    return struct.pack("<QI", number, length) + generator.randbytes(length)


def number_of(payload: bytes) -> int:
    return struct.unpack_from("<Q", payload)[0]


async def main(directory: str, first_number: int) -> None:
    from server.tier1 import LocalDurableDataLog, LogAddress  # here: the test imports make_payload cheaply

    log = LocalDurableDataLog(directory, file_size=FILE_SIZE, max_append_size=MAX_APPEND_SIZE)
    epoch = await log.open()
    os.write(1, f"OPEN {epoch}\n".encode())
    next_number = first_number
    acknowledged: list[int] = []

    async def appender() -> None:
        nonlocal next_number
        while True:
            number = next_number
            next_number += 1
            address = await log.append(make_payload(number))
            os.write(1, f"ACK {number} {address.sequence}\n".encode())
            acknowledged.append(address.sequence)
            if len(acknowledged) % TRUNCATE_EVERY == 0:
                point = acknowledged[-KEEP_BEHIND]
                await log.truncate(LogAddress(point))
                os.write(1, f"TRUNCATED {point}\n".encode())

    await asyncio.gather(*(appender() for _ in range(APPENDERS)))


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1], int(sys.argv[2])))
