"""Byte-buffer helpers shared by the segment store's layers."""

from __future__ import annotations


def prefix_views(buffers, byte_count: int) -> list[memoryview]:
    """The first ``byte_count`` bytes of ``buffers`` (back to back) as a list of byte views (torn writes)."""
    result = []
    for buffer in buffers:
        if byte_count <= 0:
            break
        view = memoryview(buffer).cast("B")
        result.append(view[:byte_count])
        byte_count -= view.nbytes
    return result
