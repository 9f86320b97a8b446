"""Child-process roles for SDK fault tests: each runs one SDK user in its own process, so a test can
SIGKILL it or measure its memory alone.

    python -m tests.support.sdk_roles ROLE CONTROLLER_URI ARGS_JSON

The role writes progress to ``args["out"]`` (one JSON line per record, flushed) and its result as
the last line ``{"result": ...}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys

import psutil

import clients.client as sdk
from clients.config import ReaderConfig, WriterConfig

MIB = 1024 * 1024


class Output:
    def __init__(self, path: str):
        self._file = open(path, "a", buffering=1)

    def record(self, **fields) -> None:
        self._file.write(json.dumps(fields) + "\n")
        self._file.flush()


def pattern_chunk(index: int, size: int) -> bytes:
    """Deterministic, non-repeating-looking bytes for chunk ``index`` of a large event."""
    seed = hashlib.sha256(index.to_bytes(8, "big")).digest()
    return (seed * (size // len(seed) + 1))[:size]


def rss() -> int:
    return psutil.Process().memory_info().rss


async def role_write_large(uri: str, args: dict, out: Output) -> dict:
    """Writes one large event of ``size`` bytes in 1 MiB pieces; records peak RSS growth and the hash."""
    size, piece = args["size"], MIB
    config = WriterConfig(large_event_buffer_bytes=args.get("buffer", 16 * MIB))
    async with sdk.connect(uri) as client:
        async with client.create_writer(args["scope"], args["stream"], config) as writer:
            await writer.write(b"before", "key")
            baseline, peak = rss(), 0
            digest = hashlib.sha256()
            async with writer.write_large("key") as event:
                out.record(transient=event.transient_segment)
                written, index = 0, 0
                while written < size:
                    chunk = pattern_chunk(index, min(piece, size - written))
                    digest.update(chunk)
                    await event.write(chunk)
                    written += len(chunk)
                    index += 1
                    peak = max(peak, rss() - baseline)
                    if args.get("stall_after") and written >= args["stall_after"]:
                        out.record(ready=written)
                        await asyncio.sleep(3600)  # the test kills us here
            await writer.write(b"after", "key")
    return {"sha256": digest.hexdigest(), "rss_growth": peak}


async def role_read_large(uri: str, args: dict, out: Output) -> dict:
    """Reads the stream to its tail; hashes large events chunk by chunk; records peak RSS growth."""
    async with sdk.connect(uri) as client:
        end = await client.tail_cut(args["scope"], args["stream"])
        group = await client.create_reader_group(args["scope"], args["group"], [args["stream"]], end_cuts=[end])
        baseline, peak = rss(), 0
        events = []
        async with group.create_reader("reader", ReaderConfig()) as reader:
            async for event in reader:
                if event.data is not None:
                    events.append(event.data.decode())
                    continue
                digest = hashlib.sha256()
                async for chunk in event.chunks():
                    digest.update(chunk)
                    peak = max(peak, rss() - baseline)
                events.append({"size": event.payload_size, "sha256": digest.hexdigest()})
    return {"events": events, "rss_growth": peak}


async def role_group_reader(uri: str, args: dict, out: Output) -> dict:
    """A reader of an existing group that records every event it reads (until killed or ``expected``)."""
    async with sdk.connect(uri) as client:
        group = client.reader_group(args["scope"], args["group"])
        async with group.create_reader(args["reader"]) as reader:
            out.record(ready=True)
            count = 0
            while True:
                event = await reader.read_next(0.5)
                if event is None:
                    continue
                out.record(event=event.data.decode(), segment=event.segment, offset=event.offset)
                count += 1
                if args.get("pace_seconds"):
                    await asyncio.sleep(args["pace_seconds"])
    return {"read": count}


ROLES = {name[len("role_"):]: function for name, function in globals().items() if name.startswith("role_")}


def main() -> None:
    role, uri, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out = Output(args["out"])
    import uvloop

    result = uvloop.run(ROLES[role](uri, args, out))
    out.record(result=result)


if __name__ == "__main__":
    main()
