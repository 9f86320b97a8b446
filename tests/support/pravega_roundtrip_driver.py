"""Writes events with the real pravega client, then reads them back through a reader group.

Run as a subprocess by interop tests (the binding blocks while waiting on servers). Events are
``key-<k>:<n>`` for n in 0..COUNT-1 routed by key ``key-<k>``, then one event of LARGE bytes
(``big:`` + filler; more than 8 MiB makes the client use a transient segment). Prints one JSON
line: {"read": [...]} where each small event is its text and the large one ``big:<length>:<ok>``.
Usage: python pravega_roundtrip_driver.py CONTROLLER_PORT SCOPE STREAM COUNT LARGE
"""

import asyncio
import json
import sys
import time

import pravega_client

KEYS = 7


def large_event(size: int) -> bytes:
    return b"big:" + bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)


async def read_all(manager, scope: str, stream: str, expected: int, large: int, timeout: float) -> list[str]:
    group = manager.create_reader_group("rg1", scope, stream)
    reader = group.create_reader("reader1")
    received: list[str] = []
    deadline = time.monotonic() + timeout
    while len(received) < expected and time.monotonic() < deadline:
        segment_slice = await reader.get_segment_slice_async()
        for event in segment_slice:
            data = event.data()
            if data.startswith(b"big:"):
                received.append(f"big:{len(data)}:{data == large_event(large)}")
            else:
                received.append(data.decode())
        reader.release_segment(segment_slice)
    reader.reader_offline()
    return received


def main() -> None:
    controller_port, scope, stream = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    count, large = int(sys.argv[4]), int(sys.argv[5])
    manager = pravega_client.StreamManager(f"tcp://127.0.0.1:{controller_port}", False, False)
    writer = manager.create_writer(scope, stream)
    for number in range(count):
        key = f"key-{number % KEYS}"
        writer.write_event(f"{key}:{number}", key)
    if large:
        writer.write_event_bytes(large_event(large), "big")
    writer.flush()
    received = asyncio.run(read_all(manager, scope, stream, count + (1 if large else 0), large, 90))
    print(json.dumps({"read": received}), flush=True)


if __name__ == "__main__":
    main()
