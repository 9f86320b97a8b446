"""Capture test: the real pravega client (pip package pravega 0.3.8, Rust core) talks to a plain
TCP listener; our decoder must read its bytes as the commands the protocol reference says it
sends, and the client must accept the replies our encoder writes."""

from __future__ import annotations

import asyncio
import pathlib
import sys

import pytest

import wire
from tests.support.minimal_controller import start_minimal_controller
from tests.support.recording_segment_store import RecordingSegmentStore
from wire import commands as c
from wire.envelope import envelope_all

pytestmark = [pytest.mark.interop, pytest.mark.process]
DRIVER = pathlib.Path(__file__).parents[1] / "support" / "pravega_writer_driver.py"
EVENTS = [b"hello", b"\x00\x01\xfe\xff binary", b"x" * 100_000]


async def _run_driver(controller_port: int, output: pathlib.Path) -> int:
    with output.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(DRIVER), str(controller_port), "capscope", "capstream",
            stdout=sink, stderr=asyncio.subprocess.STDOUT)
        try:
            return await asyncio.wait_for(process.wait(), timeout=60)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
            return -9


async def test_real_client_writer_traffic_decodes_as_expected(tmp_path):
    """Hello(15, 5) comes first; then SetupAppend for segment 0; then AppendBlockEnds carrying
    the enveloped events with event numbers 1..3; our AppendSetup/DataAppended replies let the
    client's flush() complete."""
    store = RecordingSegmentStore()
    store_port = await store.start()
    controller, controller_port = await start_minimal_controller("127.0.0.1", store_port)
    try:
        exit_code = await _run_driver(controller_port, tmp_path / "driver.out")
    finally:
        await controller.stop(None)
        await store.stop()
    output = (tmp_path / "driver.out").read_text(errors="replace")
    assert exit_code == 0, output
    assert "flushed" in output
    assert store.errors == []

    (raw,) = [data for data in store.received if data]
    assert raw[:16] == bytes.fromhex("ffffff81 00000008 0000000f 00000005")
    (commands,) = [commands for commands in store.commands if commands]
    assert commands[0] == c.Hello(15, 5)
    setup = commands[1]
    assert isinstance(setup, c.SetupAppend)
    assert setup.segment == "capscope/capstream/0.#epoch.0" and setup.delegation_token == ""

    appends = commands[2:]
    assert appends and all(isinstance(append, c.AppendBlockEnd) for append in appends)
    assert all(append.writer_id == setup.writer_id for append in appends)
    assert all(append.size_of_whole_events == len(append.data) for append in appends)
    assert b"".join(bytes(append.data) for append in appends) == envelope_all(EVENTS)
    assert sum(append.num_events for append in appends) == len(EVENTS)
    numbers = [append.last_event_number for append in appends]
    assert numbers == sorted(numbers) and numbers[-1] == len(EVENTS)
    # The client re-encodes to exactly what it sent: our codec is byte-exact on its frames.
    assert b"".join(wire.encode(command) for command in commands) == raw
