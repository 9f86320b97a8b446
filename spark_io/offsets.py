"""Micro-batch offsets: stream cuts as canonical JSON objects.

Spark keeps each source's offset as the JSON text of the dict the source returns, and decides
whether there is new data by comparing those texts, so one cut must always give one text: keys
in sorted order, segment ids as decimal strings (JSON object keys are strings), offsets as
integers. The form is readable in ``<checkpoint>/offsets/<batch>``::

    {"cut": {"0": 4096, "4294967298": 0}, "scope": "sensors", "stream": "readings", "v": 1}
"""

from __future__ import annotations

from collections.abc import Mapping

from clients.stream_cut import StreamCut

VERSION = 1


def offset_of(cut: StreamCut) -> dict:
    """The canonical offset of ``cut``."""
    positions = {str(segment): int(offset) for segment, offset in cut.positions.items()}
    return {"cut": dict(sorted(positions.items())), "scope": cut.scope, "stream": cut.stream, "v": VERSION}


def cut_of(offset: Mapping) -> StreamCut:
    """The stream cut of an offset written by :func:`offset_of`.

    Raises:
        ValueError: not such an offset (or one of a newer version).
    """
    if not isinstance(offset, Mapping) or offset.get("v") != VERSION:
        raise ValueError(f"not a tributary offset (version {VERSION}): {offset!r}")
    try:
        return StreamCut(offset["scope"], offset["stream"],
                         {int(segment): int(position) for segment, position in offset["cut"].items()})
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"not a tributary offset: {offset!r} ({error})") from None


__all__ = ["cut_of", "offset_of"]
