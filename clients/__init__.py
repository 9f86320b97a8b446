"""Everything that talks to a Tributary (or Pravega) server from outside: the wire connection layer,
the controller client, and the asyncio SDK (``tributary.connect``), which this package exports.

The SDK in one breath::

    async with tributary.connect("tcp://127.0.0.1:9090") as client:
        await client.create_scope("scope")
        await client.create_stream("scope", "stream", StreamConfiguration(ScalingPolicy.fixed(4)))
        async with client.create_writer("scope", "stream") as writer:
            await writer.write(b"event", routing_key="key")
        group = await client.create_reader_group("scope", "group", ["stream"])
        async with group.create_reader("reader-1") as reader:
            async for event in reader:
                ...

See ``docs/sdk.md`` for the guide.
"""

from coordination.retry import Backoff

from . import errors
from .batch import BatchClient, EventBatch, SegmentSlice
from .byte_stream import ByteStreamReader, ByteStreamWriter
from .client import Client, connect
from .config import ClientConfig, ReaderConfig, WriterConfig
from .errors import *  # noqa: F403 - the error hierarchy is part of the public API
from .kvt import (
                  Insert,
                  KeyValueTable,
                  KeyValueTableConfiguration,
                  KeyValueTableIterator,
                  Put,
                  Remove,
                  TableEntry,
                  TableItems,
                  TableKey,
                  TableModification,
                  Version,
)
from .model import (
                    RetentionPolicy,
                    RetentionType,
                    ScaleType,
                    ScalingPolicy,
                    Segment,
                    SegmentRange,
                    StreamConfiguration,
                    Successors,
                    TransactionState,
)
from .reader.event_reader import EventRead, EventReader, LargeEventRead
from .reader.reader_group import Checkpoint, ReaderGroup, ReaderGroupConfig, StreamDataRetention
from .reader.time_window import TimeWindow
from .serializers import BytesSerializer, JsonSerializer, Serializer, StringSerializer
from .stream_cut import StreamCut
from .writer.acks import WriteAck
from .writer.event_writer import EventWriter
from .writer.large_events import LargeEventWriter
from .writer.transactions import Transaction, TransactionalWriter

__all__ = [
    "Backoff", "BatchClient", "ByteStreamReader", "ByteStreamWriter", "BytesSerializer", "Checkpoint", "Client",
    "ClientConfig", "EventBatch", "EventRead", "EventReader", "EventWriter", "Insert", "JsonSerializer",
    "KeyValueTable", "KeyValueTableConfiguration", "KeyValueTableIterator", "LargeEventRead", "LargeEventWriter", "Put",
    "ReaderConfig", "ReaderGroup", "ReaderGroupConfig", "Remove", "RetentionPolicy", "RetentionType", "ScaleType",
    "ScalingPolicy", "Segment", "SegmentRange", "SegmentSlice", "Serializer", "StreamConfiguration", "StreamCut",
    "StreamDataRetention", "StringSerializer", "Successors", "TableEntry", "TableItems", "TableKey",
    "TableModification", "TimeWindow", "Transaction", "TransactionState", "TransactionalWriter", "Version", "WriteAck",
    "WriterConfig", "connect", "errors",
    *[name for name in dir(errors) if isinstance(getattr(errors, name), type)
      and issubclass(getattr(errors, name), Exception)],
]
