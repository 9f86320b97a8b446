"""Metadata tables, as the Pravega connector offers them: ``option("metadata", "StreamInfo")`` gives
one row with the stream's head and tail cuts (text form), ``option("metadata", "Streams")`` one row
per stream of the scope. The rows are gathered when the query is planned and travel with its
single partition."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .access import ServerAccess
from .bridge import Bridge
from .options import StreamOptions

STREAM_INFO_SCHEMA = "head_stream_cut string, tail_stream_cut string"
STREAMS_SCHEMA = "scope_name string, stream_name string"


@dataclasses.dataclass
class RowsPartition(InputPartition):
    rows: list


class MetadataReader(DataSourceReader):
    """Reads ``streaminfo`` or ``streams`` metadata of the target."""

    def __init__(self, kind: str, access: ServerAccess, scope: str, stream: str | None):
        self.kind, self.access, self.scope, self.stream = kind, access, scope, stream

    def partitions(self) -> list[RowsPartition]:
        bridge = Bridge.get()
        client = bridge.client(self.access)

        async def rows():
            if self.kind == "streams":
                return [(self.scope, stream) async for stream in client.list_streams(self.scope)]
            assert self.stream is not None, "the cuts of a scope's stream"
            head = await client.head_cut(self.scope, self.stream)

            tail = await client.tail_cut(self.scope, self.stream)
            return [(head.as_text(), tail.as_text())]

        return [RowsPartition(bridge.run(rows()))]

    def read(self, partition: RowsPartition) -> Iterator[tuple]:  # type: ignore[override]  # gets our partitions
        yield from partition.rows


def metadata_reader(kind: str, target: StreamOptions) -> MetadataReader:
    return MetadataReader(kind, target.access, target.scope, target.stream)


__all__ = ["STREAMS_SCHEMA", "STREAM_INFO_SCHEMA", "MetadataReader", "metadata_reader"]
