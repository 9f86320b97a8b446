"""Codec throughput, each figure next to a baseline measured in the same run.

Baseline: copying the same bytes once with ``bytes()`` (what any codec must at least do if it
copies). Bars (issue #2): 1 MiB SegmentRead decode within 2x of the one-copy baseline, and at
least 150,000 small control commands/s decoded on one core.

Usage: python tests/perf/bench_codec.py [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import wire  # noqa: E402
from tests.perf.bars import Bars  # noqa: E402
from wire import commands as c  # noqa: E402
from wire.envelope import envelope_all  # noqa: E402

WRITER = uuid.uuid4()
SEGMENT = "benchscope/benchstream/0.#epoch.0"


def rate(function, seconds: float) -> float:
    """Calls ``function`` repeatedly for about ``seconds``; returns calls per second (best of 3 rounds)."""
    best = 0.0
    for _ in range(3):
        calls, start = 0, time.perf_counter()
        deadline = start + seconds / 3
        while (now := time.perf_counter()) < deadline:
            function()
            calls += 1
        best = max(best, calls / (now - start))
    return best


def decode_whole(frame: bytes):
    decoder = wire.Decoder()
    decoder.feed(frame)
    return decoder.next_command()


def decode_chunked(frame: bytes, chunk: int):
    """Feeds the frame as a socket would deliver it, ``chunk`` bytes at a time."""
    decoder = wire.Decoder()
    view = memoryview(frame)
    for start in range(0, len(frame), chunk):
        decoder.feed(view[start:start + chunk])
    return decoder.next_command()


def bench_payload(name: str, command, seconds: float) -> list[tuple]:
    frame = wire.encode(command)
    size = len(frame)
    copy_rate = rate(lambda: bytes(memoryview(frame)), seconds)
    rows = [(name, "baseline bytes() copy", copy_rate, size, 1.0)]
    for label, function in [
        ("decode, whole frame (zero copy)", lambda: decode_whole(frame)),
        ("decode, fed in 64 KiB reads (one copy)", lambda: decode_chunked(frame, 65536)),
        ("encode to one bytes (one copy)", lambda: wire.encode(command)),
        ("encode_parts for writelines (no copy)", lambda: wire.encode_parts(command)),
    ]:
        value = rate(function, seconds)
        rows.append((name, label, value, size, value / copy_rate))
    return rows


SMALL_COMMANDS = [
    c.ReadSegment(SEGMENT, 123_456, 8 << 20, "", 77),
    c.GetStreamSegmentInfo(78, SEGMENT, ""),
    c.DataAppended(WRITER, 1000, 999, 79, 1 << 30),
    c.SegmentCreated(80, SEGMENT),
    c.KeepAlive(),
    c.SetupAppend(81, WRITER, SEGMENT, ""),
    c.SegmentAttributeUpdated(82, True),
    c.SealSegment(83, SEGMENT, ""),
]


def bench_small(seconds: float) -> list[tuple]:
    batch = SMALL_COMMANDS * 125  # 1,000 commands per call
    stream = b"".join(wire.encode(command) for command in batch)
    count = len(batch)

    def decode_batch():
        decoder = wire.Decoder()
        decoder.feed(stream)
        for _ in decoder.commands():
            pass

    def encode_batch():
        for command in batch:
            wire.encode(command)

    copy_rate = rate(lambda: bytes(memoryview(stream)), seconds) * count
    decode_rate = rate(decode_batch, seconds) * count
    encode_rate = rate(encode_batch, seconds) * count
    name = f"small control commands ({len(stream) // count} B avg)"
    return [(name, "baseline bytes() copy of the same bytes", copy_rate, len(stream) // count, 1.0),
            (name, "decode (commands/s)", decode_rate, len(stream) // count, decode_rate / copy_rate),
            (name, "encode (commands/s)", encode_rate, len(stream) // count, encode_rate / copy_rate)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    events = envelope_all([b"e" * 100] * (65536 // 108))
    rows = bench_payload(f"AppendBlockEnd, {len(events) // 108} x 100 B events (64 KiB)",
                         c.AppendBlockEnd(WRITER, len(events), events, len(events) // 108, 5000, 9), args.seconds)
    rows += bench_payload("SegmentRead, 1 MiB",
                          c.SegmentRead(SEGMENT, 0, True, False, os.urandom(1 << 20), 10), args.seconds)
    rows += bench_small(args.seconds)
    print(f"{'workload':<46} {'measure':<42} {'per second':>14} {'MB/s':>9} {'vs copy':>8}")
    for name, label, value, size, ratio in rows:
        print(f"{name:<46} {label:<42} {value:>14,.0f} {value * size / 1e6:>9,.0f} {ratio:>7.2f}x")
    small_decode = next(row for row in rows if row[1].startswith("decode (commands"))[2]
    read_chunked = next(row for row in rows if row[0].startswith("SegmentRead") and "64 KiB" in row[1])
    print()
    bars = Bars()
    bars.check("1 MiB SegmentRead decode (64 KiB reads) >= 0.50x of the one-copy rate", read_chunked[4] >= 0.5,
               f"{read_chunked[4]:.2f}x")
    bars.check("small commands decoded >= 150,000/s on one core", small_decode >= 150_000, f"{small_decode:,.0f}/s")
    sys.exit(bars.exit_code())


if __name__ == "__main__":
    main()
