"""Names of the chunks SLTS creates (design §5.3, §5.9).

* Segment data: ``<segment>.E-<epoch>-O-<offset>.<uuid hex>``: the owner epoch that created
  (and is the only one ever to write) the chunk, and the segment offset of its first byte. The
  random suffix keeps names unique even when one epoch starts two chunks at the same offset (a
  retried write, a re-created segment).
* System journal of container ``<id>``: ``_system/containers/<id>/journal.E-<epoch>.F-<n>`` and
  its snapshots ``_system/containers/<id>/snapshot.E-<epoch>.S-<n>``. Every epoch writes only
  its own files, so an old owner cannot touch the new owner's journal.

The parsers are strict: a name matches at most one of the patterns.
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

_SEGMENT_CHUNK = re.compile(r"^(?P<segment>.+)\.E-(?P<epoch>\d+)-O-(?P<offset>\d+)\.[0-9a-f]{32}$")
_JOURNAL_FILE = re.compile(r"^_system/containers/(?P<container>\d+)/(?P<kind>journal|snapshot)"
                           r"\.E-(?P<epoch>\d+)\.[FS]-(?P<index>\d+)$")


class SegmentChunkName(NamedTuple):
    segment: str
    epoch: int
    offset: int


class JournalFileName(NamedTuple):
    kind: str  # "journal" or "snapshot"
    epoch: int
    # Shadows tuple.index on purpose (callers read ``.index``; nothing calls the tuple method on these).
    index: int  # type: ignore[assignment]


def new_segment_chunk(segment: str, epoch: int, offset: int) -> str:
    """A fresh, unique name for a chunk of ``segment`` starting at ``offset``, written by ``epoch``."""
    return f"{segment}.E-{epoch}-O-{offset}.{uuid.uuid4().hex}"


def parse_segment_chunk(name: str) -> SegmentChunkName | None:
    """The parts of a segment data chunk's name, or None if ``name`` is no such name."""
    match = _SEGMENT_CHUNK.match(name)
    if match is None:
        return None
    return SegmentChunkName(match["segment"], int(match["epoch"]), int(match["offset"]))


def journal_prefix(container_id: int) -> str:
    """The prefix of every journal and snapshot file of one container."""
    return f"_system/containers/{container_id}/"


def journal_file(container_id: int, epoch: int, index: int) -> str:
    return f"{journal_prefix(container_id)}journal.E-{epoch}.F-{index}"


def snapshot_file(container_id: int, epoch: int, index: int) -> str:
    return f"{journal_prefix(container_id)}snapshot.E-{epoch}.S-{index}"


def parse_journal_file(container_id: int, name: str) -> JournalFileName | None:
    """The parts of one of ``container_id``'s journal or snapshot file names, or None."""
    match = _JOURNAL_FILE.match(name)
    if match is None or int(match["container"]) != container_id:
        return None
    return JournalFileName(match["kind"], int(match["epoch"]), int(match["index"]))
