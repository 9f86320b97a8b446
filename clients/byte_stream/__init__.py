"""Byte streams: a stream with exactly one segment holding raw bytes (no event envelopes).

Theory of operation (client reference §5, protocol reference §6.6, §3.4, §3.5).

Both ends first find the stream's one segment: the controller's current
segments (more than one is InvalidArgument), or, for a sealed stream (no current
segment), its head cut. Each writer and reader owns its own connection cache, so
a connection dropped under one never disturbs another, and each is a *flow* of
its connection: one request id carries everything it sends and routes every
reply back to it.

:class:`ByteStreamWriter` (Rust's conditional semantics, Java's pipelining).
The writer's ``offset`` starts at the segment's tail (Rust's ``seek_to_tail``).
Written bytes gather into pieces (at most 8 MiB each; small writes made in one
event-loop turn are coalesced up to ``block_size_bytes``); each piece gets the
next event number (1, 2, 3, ...) and is sent as ``ConditionalBlockEnd`` with
``expected_offset`` = the offset of its first byte. Several pieces are in flight
at once, in order; ``write`` waits only while the in-flight window is full.
``DataAppended(n)`` acknowledges every piece numbered <= n. Because every append
is conditional on the segment's length, a writer that finds someone else's
bytes at its offset gets ``ConditionalCheckFailed``: that piece, every later one
and every later call fail with OffsetConflict until ``reset()`` re-reads the
tail; two writers therefore fence each other. After a lost connection (or
WrongHost, or no acknowledgement for ``ack_timeout_seconds``) the writer
connects again and sends SetupAppend with the same writer id; ``AppendSetup``
names the last event number the segment stored for it, so those pieces are
acknowledged and the rest are re-sent in order with their original event
numbers and expected offsets: the server's per-writer attribute and the offset
condition both refuse a second copy, so no byte is lost or written twice. (One
caveat of the protocol is explained in :mod:`clients.byte_stream.pipeline`.)

:class:`ByteStreamReader` (Java's starting point, Rust's prefetching). The
reader starts at the segment's head (start offset). One ReadSegment is kept
outstanding ahead of the application while fewer than ``buffer_size`` bytes are
buffered. A read at the tail is held by the server until data arrives (the
long-poll); if the server gives up and closes the connection (after 60 s), or
the connection is lost, the reader reconnects and re-issues the read at the same
offset. Replies are matched to the outstanding read by offset, so answers to
reads abandoned by ``seek`` are ignored. ``SegmentIsTruncated`` surfaces once as
TruncatedData, after which the position is the new head; the end of a sealed
segment reads as ``b""``. ``seek`` is a coroutine: it checks the target against
the segment's head and tail (both allowed; outside is InvalidArgument), where Java
checks nothing and reports a bad offset only on the next read.
"""

from .reader import ByteStreamReader
from .writer import ByteStreamWriter

__all__ = ["ByteStreamReader", "ByteStreamWriter"]
