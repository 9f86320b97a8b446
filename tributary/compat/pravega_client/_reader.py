"""Reader groups and readers of the binding: ``StreamReaderGroupConfig``, ``StreamReaderGroup``,
``StreamReader`` and ``StreamCuts``, on the SDK's reader groups; the slices a reader hands out are
made in :mod:`._slices` (whose docstring explains how positions follow what the application consumed).
"""

from __future__ import annotations

import asyncio
import weakref

from clients.errors import TributaryError
from clients.reader.reader_group import ReaderGroup
from clients.stream_cut import StreamCut

from ._common import Internal, check_type, debug_string, error_text, scoped_stream_text, stream_cut_text
from ._connection import Connection
from ._runtime import Runtime
from ._slices import Slice, _SliceReader

# ---------------------------------------------------------------------- configuration, cuts


class StreamReaderGroupConfig:
    """The streams of a reader group (all of one scope) and whether to start at their tails.

    ``StreamReaderGroupConfig(False, "scope", "s1", "s2")`` reads s1 and s2 from their heads.
    """

    def __init__(self, read_from_tail: bool, scope_name: str, *stream_names: str):
        check_type(scope_name, str, "scope_name")
        for name in stream_names:
            check_type(name, str, "stream_names")
        if not stream_names:
            raise ValueError("No Pravega Streams present in the ReaderGroupConfiguration")
        self._read_from_tail = bool(read_from_tail)
        self._scope = scope_name
        self._streams = tuple(stream_names)

    def _text(self, refresh_ms: int, start: StreamCut | None = None) -> str:
        if start is not None:
            cut = stream_cut_text(start.scope, start.stream, start.positions)
            starts = f"{scoped_stream_text(start.scope, start.stream)}: V1({cut})"
        else:
            where = "Tail" if self._read_from_tail else "Unbounded"
            starts = ", ".join(f"{scoped_stream_text(self._scope, stream)}: {where}" for stream in self._streams)
        return (f"ReaderGroupConfig {{ config: V1(ReaderGroupConfigV1 {{ group_refresh_time_millis: {refresh_ms}, "
                f"starting_stream_cuts: {{{starts}}}, ending_stream_cuts: {{}} }}) }}")

    def to_str(self) -> str:
        return f"ReaderGroupConfig: {self._text(1000)}"

    def __repr__(self) -> str:
        return f"StreamReaderGroupConfig({debug_string(self.to_str())})"


class StreamCuts(Internal):
    """A position in one stream: an offset per segment (``StreamReaderGroup.get_streamcut``)."""

    _cut: StreamCut

    @classmethod
    def _of(cls, cut: StreamCut) -> StreamCuts:
        cuts = cls._new()
        cuts._cut = cut
        return cuts

    def get_segment_offset_map(self) -> dict[int, int]:
        """``{segment id: offset}``."""
        return self._cut.positions

    def to_str(self) -> str:
        return f"StreamCuts: {stream_cut_text(self._cut.scope, self._cut.stream, self._cut.positions)}"

    def __repr__(self) -> str:
        return f"StreamCuts({debug_string(self.to_str())})"


# ---------------------------------------------------------------------- the application's objects


class StreamReader(Internal):
    """A reader of a reader group (made by ``StreamReaderGroup.create_reader``)."""

    _connection: Connection
    _reader: _SliceReader
    _streams: list[tuple[str, str]]

    @classmethod
    def _make(cls, connection: Connection, reader: _SliceReader, streams: list[tuple[str, str]]) -> StreamReader:
        handle = cls._new()
        handle._connection, handle._reader, handle._streams = connection, reader, streams
        weakref.finalize(handle, _offline_later, connection.runtime, reader)
        return handle

    def get_segment_slice_async(self) -> asyncio.Future[Slice]:
        """A future (of the running loop) of the next segment slice: the events available in one segment.

        Raises (through the future):
            OSError: the reader is offline, or reading failed.
        """
        return self._connection.runtime.for_caller(self._acquire())

    async def _acquire(self) -> Slice:
        try:
            state = await self._reader.take_slice()
        except TributaryError as error:
            raise OSError(f"Error while attempting to acquire segment: {error_text(error)}") from error
        return Slice._of(self._reader, state)

    def release_segment(self, slice: Slice) -> None:
        """Gives the slice's segment back (with the events not consumed from it); the slice ends."""
        check_type(slice, Slice, "slice")
        state = slice._state
        if state is not None and slice._reader is self._reader:
            self._reader.release_now(state)  # queues under the reader's lock: no trip to the loop

    def reader_offline(self) -> None:
        """Takes the reader out of its group at the events consumed so far (again: no error)."""
        self._connection.call(_offline(self._reader))

    def to_str(self) -> str:
        return f"Streams: [{', '.join(scoped_stream_text(scope, stream) for scope, stream in self._streams)}] "

    def __repr__(self) -> str:
        return f"StreamReader({self.to_str()})"


async def _offline(reader: _SliceReader) -> None:
    try:
        await reader.go_offline()
    except TributaryError as error:
        raise OSError(f"Error while taking the reader offline: {error_text(error)}") from error


def _offline_later(runtime: Runtime, reader: _SliceReader) -> None:
    runtime.later(reader.go_offline())


class StreamReaderGroup(Internal):
    """A reader group (made by ``StreamManager.create_reader_group`` or ``create_reader_group_with_config``)."""

    _connection: Connection
    _name: str
    _group: ReaderGroup
    _config: StreamReaderGroupConfig
    _start: StreamCut | None

    @classmethod
    def _make(cls, connection: Connection, name: str, scope: str, config: StreamReaderGroupConfig,
              stream_cut: StreamCuts | None) -> StreamReaderGroup:
        check_type(scope, str, "scope_name")
        if stream_cut is not None:
            check_type(stream_cut, StreamCuts, "stream_cut")
        group = cls._new()
        group._connection, group._name, group._config = connection, name, config
        group._start = (StreamCut(config._scope, config._streams[0], stream_cut._cut.positions)
                        if stream_cut is not None else None)
        group._group = connection.call(group._create(scope))
        return group

    async def _create(self, scope: str) -> ReaderGroup:
        config = self._config
        streams: list[str | StreamCut] = ([self._start] if self._start is not None
                                          else [f"{config._scope}/{stream}" for stream in config._streams])
        try:
            return await self._connection.client.create_reader_group(
                scope, self._name, streams, start_at="tail" if config._read_from_tail else "head")
        except TributaryError as error:
            raise ValueError(f"create reader group failed: {error_text(error)}") from error

    def create_reader(self, reader_name: str) -> StreamReader:
        """A reader of this group, online from now on.

        Raises:
            OSError: it cannot join (a reader of that name is online already, or the group is gone).
        """
        check_type(reader_name, str, "reader_name")
        reader = self._connection.call(self._join(reader_name))
        return StreamReader._make(self._connection, reader,
                                  [(self._config._scope, stream) for stream in self._config._streams])

    async def _join(self, reader_name: str) -> _SliceReader:
        reader = _SliceReader(self._group, reader_name, self._connection.runtime)
        try:
            await reader.start()
        except TributaryError as error:
            await reader.close()
            raise OSError(f"Error while creating reader {reader_name!r}: {error_text(error)}") from error
        self._connection.client._adopt(reader)  # closed (offline) with the client
        self._connection.readers[(self._group.scope, self._name, reader_name)] = reader
        return reader

    def reader_offline(self, reader_name: str) -> None:
        """Takes reader ``reader_name`` out of the group (no error if it is not online).

        A reader of this process leaves at the events it consumed; another's segments go back at the
        positions it last reported.
        """
        check_type(reader_name, str, "reader_name")
        self._connection.call(self._offline(reader_name))

    async def _offline(self, reader_name: str) -> None:
        local = self._connection.readers.get((self._group.scope, self._name, reader_name))
        try:
            if local is not None and not local._closed:
                await local.go_offline()
            else:
                await self._group.reader_offline(reader_name)
        except TributaryError as error:
            raise ValueError(f" Failed to mark reader offline: {error_text(error)}") from error

    def get_streamcut(self) -> StreamCuts:
        """Where the group is in its (first) stream: from the positions its readers last reported."""
        return StreamCuts._of(self._connection.call(self._stream_cut()))

    async def _stream_cut(self) -> StreamCut:
        scope, stream = self._config._scope, self._config._streams[0]
        try:
            cuts = await self._group.stream_cuts()
        except TributaryError as error:
            raise ValueError(f"get stream cut failed: {error_text(error)}") from error
        cut = cuts.get(f"{scope}/{stream}")
        return StreamCut(scope, stream, cut.positions if cut is not None else {})

    def to_str(self) -> str:
        return f"ReaderGroup: {debug_string(self._name)}, ReaderGroup config : {self._config._text(1000, self._start)}"

    def __repr__(self) -> str:
        return f"StreamReaderGroup({self.to_str()})"


