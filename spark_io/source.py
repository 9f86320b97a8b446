"""The data source ``tributary``: what Spark asks for, and which part of spark_io answers.

=====================================  ==============================================
``spark.read.format("tributary")``     :class:`~spark_io.reading.BatchReader`
``... .option("metadata", ...)``       :class:`~spark_io.metadata.MetadataReader`
``spark.readStream.format(...)``       :class:`~spark_io.stream_reader.StreamReader`
``df.write.format("tributary")``       :class:`~spark_io.writing.BatchWriter`
``df.writeStream.format(...)``         :class:`~spark_io.writing.StreamWriter`
=====================================  ==============================================

Options are parsed and checked here, on the driver, before anything is planned
(:mod:`spark_io.options`), so a bad one fails the query with its name in the message.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .metadata import STREAM_INFO_SCHEMA, STREAMS_SCHEMA, metadata_reader
from .options import metadata_kind, read_options, stream_options, write_options
from .reading import READ_SCHEMA, BatchReader


class TributaryDataSource(DataSource):
    """Pravega streams on Tributary, read and written by Spark (format ``tributary``)."""

    @classmethod
    def name(cls) -> str:
        return "tributary"

    def schema(self) -> str:
        kind = metadata_kind(self.options)
        stream_options(self.options, require_stream=kind != "streams")  # fails early on a missing name
        if kind == "streaminfo":
            return STREAM_INFO_SCHEMA
        if kind == "streams":
            return STREAMS_SCHEMA
        return READ_SCHEMA

    def reader(self, schema: StructType):
        kind = metadata_kind(self.options)
        if kind is not None:
            return metadata_reader(kind, stream_options(self.options, require_stream=kind == "streaminfo"))
        return BatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType):
        from .stream_reader import StreamReader

        if metadata_kind(self.options) is not None:
            raise ValueError("option metadata: metadata tables are read in batch, not as a stream")
        return StreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from .writing import BatchWriter, check_input_schema

        check_input_schema(schema, overwrite)
        return BatchWriter(write_options(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .writing import StreamWriter, check_input_schema

        check_input_schema(schema, overwrite)
        return StreamWriter(write_options(self.options, streaming=True), schema)


__all__ = ["TributaryDataSource"]
