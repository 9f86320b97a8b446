"""Cold chunk lookups by offset in SLTS (issue 25): the first read of a segment with many chunks after a restart.

A segment of ``--chunks`` chunks (default 100,000, as storage without appends makes one per flush) is written
through ``ChunkedSegmentStorage`` on in-memory chunk and metadata stores, then a fresh instance (an empty
in-memory read index, as after a restart) reads 100 bytes at each of a few offsets. Two modes, in the same run:

* ``hints``: the persisted chunk index hints (``server/tier2/chunk_index.py``);
* ``walk``: the baseline, hints switched off (``chunk_index.chunks_linked``/``nearest`` patched out): every
  cold read walks the chunk list from its first chunk, one metadata lookup per chunk.

Reported as min/median/max over ``--runs``: the cold read latency (each offset on a fresh instance) and the
metadata lookups it took, and the time to write the segment (what the hints cost the writes). The metadata
store is a dict here: through the container's metadata table each lookup costs more, so the walk's figure is
a lower bound.

Bars: with hints the slowest cold read <= 20 ms and its lookups <= 25 whatever the chunk count; the walk
slower by >= 20x at 100,000 chunks; writing with hints <= 1.15x the time without. Exit 1 when one misses.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from server.tier2 import chunk_index  # noqa: E402
from server.tier2.chunked_storage import ChunkedSegmentStorage  # noqa: E402
from server.tier2.config import StorageConfig  # noqa: E402
from tests.support.doubles.chunk_storage import InMemoryChunkStorage  # noqa: E402
from tests.support.doubles.slts_metadata import InMemoryMetadataStore  # noqa: E402

CHUNK = 64
NAME = "scope/stream/0.#epoch.0"
FRACTIONS = (0.1, 0.5, 0.9, 0.99)


async def started(chunks, metadata, epoch: int, config: StorageConfig) -> ChunkedSegmentStorage:
    storage = ChunkedSegmentStorage(0, chunks, metadata, config=config)
    await storage.bootstrap(epoch)
    await storage.finish_bootstrap()
    return storage


async def one_run(chunk_count: int) -> dict[str, float]:
    config = StorageConfig(max_chunk_size=CHUNK, defrag_min_chunk_size=0)
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    storage = await started(chunks, metadata, 1, config)
    await storage.create(NAME)
    piece = b"x" * (CHUNK * 64)
    started_at = time.perf_counter()
    for offset in range(0, chunk_count * CHUNK, len(piece)):
        await storage.write(NAME, offset, piece)
    found = {"write s": time.perf_counter() - started_at}
    await storage.close()
    length = chunk_count // 64 * 64 * CHUNK
    latencies, lookups = [], []
    for epoch, fraction in enumerate(FRACTIONS, start=2):
        reader = await started(chunks, metadata, epoch, config)
        offset = int(fraction * length) // CHUNK * CHUNK + 7
        before = metadata.gets
        started_at = time.perf_counter()
        data = await reader.read(NAME, offset, 100)
        latencies.append(time.perf_counter() - started_at)
        lookups.append(metadata.gets - before)
        assert len(data) == 100
        await reader.close()
    found["slowest cold read ms"] = max(latencies) * 1000
    found["median cold read ms"] = statistics.median(latencies) * 1000
    found["most lookups"] = max(lookups)
    return found


def without_hints():
    """Patches the hints out (the baseline); returns the undo."""
    linked, nearest = chunk_index.chunks_linked, chunk_index.nearest

    async def no_link(*_args, **_kwargs) -> None:
        return None

    async def no_hint(*_args, **_kwargs) -> None:
        return None

    chunk_index.chunks_linked, chunk_index.nearest = no_link, no_hint

    def undo() -> None:
        chunk_index.chunks_linked, chunk_index.nearest = linked, nearest
    return undo


def spread(values: list[float]) -> str:
    return f"{min(values):,.2f} / {statistics.median(values):,.2f} / {max(values):,.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"hints": [], "walk": []}
    for run in range(args.runs):
        for mode in ("hints", "walk"):  # interleaved: both modes see the same machine state
            undo = without_hints() if mode == "walk" else (lambda: None)
            try:
                results[mode].append(asyncio.run(one_run(args.chunks)))
            finally:
                undo()
            print(f"run {run + 1}/{args.runs} {mode}: {results[mode][-1]}", flush=True)
    print(f"\nbench_chunk_lookup: {args.chunks:,} chunks of {CHUNK} bytes, {args.runs} runs (min / median / max)")
    for key in ("slowest cold read ms", "median cold read ms", "most lookups", "write s"):
        for mode in ("hints", "walk"):
            print(f"  {key:<22} {mode:<6} {spread([found[key] for found in results[mode]])}")
    hints, walk = results["hints"], results["walk"]
    slowest = max(found["slowest cold read ms"] for found in hints)
    most = max(found["most lookups"] for found in hints)
    speedup = statistics.median(found["median cold read ms"] for found in walk) / \
        statistics.median(found["median cold read ms"] for found in hints)
    write_ratio = statistics.median(found["write s"] for found in hints) / \
        statistics.median(found["write s"] for found in walk)
    bars = [(f"slowest cold read with hints <= 20 ms (measured {slowest:.2f})", slowest <= 20),
            (f"metadata lookups of a cold read with hints <= 25 (measured {most:.0f})", most <= 25),
            (f"walk / hints cold read median >= 20x at 100,000 chunks (measured {speedup:,.0f}x)",
             speedup >= 20 or args.chunks < 100_000),
            (f"write time with hints / without <= 1.15 (measured {write_ratio:.3f})", write_ratio <= 1.15)]
    for text, passed in bars:
        print(f"bar: {text}: {'PASS' if passed else 'FAIL'}")
    return 0 if all(passed for _, passed in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
