"""A TCP listener standing in for a segment store in codec capture tests.

It records every byte a client sends, decodes the stream with ``wire.Decoder`` and answers the
append path just enough for a writer to complete (Hello, AppendSetup, DataAppended), using our
encoder. It keeps no data: it is a probe of the wire format, not a server.
"""

from __future__ import annotations

import asyncio

import wire
from wire import commands as c


class RecordingSegmentStore:
    def __init__(self):
        self.received: list[bytes] = []  # raw bytes per connection, in arrival order
        self.commands: list[list] = []  # decoded commands per connection
        self.errors: list[str] = []
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(self.received)
        self.received.append(b"")
        self.commands.append([])
        decoder = wire.Decoder()
        try:
            while data := await reader.read(65536):
                self.received[index] += data
                decoder.feed(data)
                for command in decoder.commands():
                    self.commands[index].append(command)
                    reply = _reply_to(command)
                    if reply is not None:
                        writer.write(wire.encode(reply))
                await writer.drain()
        except wire.ProtocolError as error:
            self.errors.append(str(error))
        finally:
            writer.close()


def _reply_to(command):
    if isinstance(command, c.Hello):
        return c.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION)
    if isinstance(command, c.SetupAppend):
        return c.AppendSetup(command.request_id, command.segment, command.writer_id, wire.NULL_ATTRIBUTE_VALUE)
    if isinstance(command, c.AppendBlockEnd):
        return c.DataAppended(command.writer_id, command.last_event_number, -1, command.request_id, 0)
    return None
