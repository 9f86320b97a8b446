"""Bad use of Tributary's SDK gets a typed error, never a hang: unknown scopes and streams, invalid
names, oversize events, use after close, a transaction used after commit, a controller that is
down, stream management edge cases."""

from __future__ import annotations

import asyncio
import time

import pytest

from clients import errors
from clients.config import ClientConfig
from clients.model import RetentionPolicy, ScalingPolicy, StreamConfiguration
from coordination.retry import Backoff
from clients.stream_cut import StreamCut
from tests.support.processes import free_port
from tests.support.sdk import sdk
from tests.support.standalone import serve

pytestmark = pytest.mark.process

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-bad-use")


@pytest.fixture
async def client(standalone):
    async with sdk.connect(standalone.controller_uri) as client:
        yield client


async def test_unknown_scopes_and_streams_raise_not_found(client):
    """Creating a stream in a missing scope, writing to or reading a missing stream, and asking for
    a missing stream's configuration raise the right NotFound, quickly."""
    started = time.monotonic()
    with pytest.raises(errors.ScopeNotFound):
        await client.create_stream("no-such-scope", "s")
    await client.create_scope("known")
    with pytest.raises(errors.StreamNotFound):
        await client.create_writer("known", "missing").start()
    with pytest.raises(errors.StreamNotFound):
        await client.get_stream_configuration("known", "missing")
    with pytest.raises(errors.StreamNotFound):
        await client.create_reader_group("known", "g", ["missing"])
    with pytest.raises(errors.ScopeNotFound):
        async for _ in client.list_streams("no-such-scope"):
            pass
    with pytest.raises(errors.ReaderGroupNotFound):
        await client.reader_group("known", "nobody").online_readers()
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("call", [
    lambda c: c.create_scope("bad scope"),
    lambda c: c.create_scope(""),
    lambda c: c.create_stream("known", "slash/y"),
    lambda c: c.create_stream("known", "x" * 300),
    lambda c: c.create_reader_group("known", "bad group!", ["s"]),
    lambda c: c.create_stream("known", "s", StreamConfiguration(ScalingPolicy.fixed(0))),
])
async def test_invalid_names_and_options_are_invalid_argument(client, call):
    """Names that break Pravega's rules and impossible configurations raise InvalidArgument."""
    await client.create_scope("known")
    with pytest.raises(errors.InvalidArgument):
        await call(client)


async def test_oversize_events_wrong_types_and_use_after_close(client):
    """An event above 8 MiB through write() is EventTooLarge (write_large takes it); text through
    the bytes serializer and a non-string key are InvalidArgument; writing after close is ClosedError."""
    await client.create_scope("sizes")
    await client.create_stream("sizes", "s")
    writer = client.create_writer("sizes", "s")
    await writer.write(b"x" * (8 * MIB))  # exactly the limit is fine
    with pytest.raises(errors.EventTooLarge):
        await writer.write(b"x" * (8 * MIB + 1))
    with pytest.raises(errors.InvalidArgument):
        await writer.write("text")
    with pytest.raises(errors.InvalidArgument):
        await writer.write(b"x", routing_key=42)
    await writer.write_large_event(b"y" * (8 * MIB + 1))
    await writer.close()
    with pytest.raises(errors.ClosedError):
        await writer.write(b"late")
    with pytest.raises(errors.ClosedError):
        await writer.flush()


async def test_a_transaction_used_after_commit_or_abort_raises_transaction_failed(client):
    """Writes, flushes and a second commit of a committed transaction raise TransactionFailed, as
    does committing an aborted one."""
    await client.create_scope("txn-bad")
    await client.create_stream("txn-bad", "s")
    writer = client.create_transactional_writer("txn-bad", "s")
    transaction = await writer.begin()
    await transaction.write(b"one")
    await transaction.commit()
    for call in (transaction.write(b"two"), transaction.flush(), transaction.commit()):
        with pytest.raises(errors.TransactionFailed):
            await call
    aborted = await writer.begin()
    await aborted.abort()
    with pytest.raises(errors.TransactionFailed):
        await aborted.commit()


async def test_stream_management_edge_cases(client):
    """Deleting an unsealed stream is StreamNotSealed; sealed streams refuse writers and updates;
    creating twice returns False; truncating at the unbounded cut is InvalidArgument; a scope with a
    stream is ScopeNotEmpty; tags and policies round-trip."""
    await client.create_scope("edges")
    config = StreamConfiguration(ScalingPolicy.by_event_rate(100, 2, 2), RetentionPolicy.by_size(MIB),
                                 tags=("a", "b"))
    assert await client.create_stream("edges", "s", config) is True
    assert await client.create_stream("edges", "s", config) is False
    assert await client.get_stream_configuration("edges", "s") == config
    assert [s async for s in client.list_streams("edges", tag="a")] == ["s"]
    with pytest.raises(errors.StreamNotSealed):
        await client.delete_stream("edges", "s")
    with pytest.raises(errors.ScopeNotEmpty):
        await client.delete_scope("edges")
    with pytest.raises(errors.InvalidArgument):
        await client.truncate_stream(StreamCut.UNBOUNDED)
    await client.seal_stream("edges", "s")
    with pytest.raises(errors.StreamSealed):
        await client.create_writer("edges", "s").start()
    with pytest.raises(errors.StreamSealed):
        await client.update_stream("edges", "s", StreamConfiguration())
    assert await client.delete_stream("edges", "s") is True
    assert await client.delete_stream("edges", "s") is False
    assert await client.delete_scope("edges") is True


async def test_a_controller_that_is_down_ends_in_an_error_naming_its_address():
    """With nothing listening, calls retry for the configured budget and then raise
    ControllerUnavailable naming the address (and say it is retriable)."""
    port = free_port()
    config = ClientConfig(controller_retry=Backoff(initial_seconds=0.01, attempts=None, total_seconds=1.0))
    async with sdk.connect(f"tcp://127.0.0.1:{port}", config) as client:
        started = time.monotonic()
        with pytest.raises(errors.ControllerUnavailable, match=f"127.0.0.1:{port}") as raised:
            await client.create_scope("anything")
        assert raised.value.retriable
        assert time.monotonic() - started < 8


async def test_a_closed_client_refuses_new_work(standalone):
    """After the client is closed, making a writer raises ClosedError; closing again is harmless."""
    client = sdk.connect(standalone.controller_uri)
    await client.close()
    await client.close()
    with pytest.raises(errors.ClosedError):
        client.create_writer("s", "s")


async def test_bad_uris_are_invalid_argument():
    """A controller URI that is not tcp://host:port (or tls://host:port) raises InvalidArgument at once, and
    so does a trust file that does not hold certificates."""
    for uri in ("http://h:1", "tcp://h", "tcp://h:99999", "tls://h"):
        with pytest.raises(errors.InvalidArgument):
            sdk.connect(uri)
    with pytest.raises(errors.InvalidArgument):
        sdk.connect("tls://h:9090", ClientConfig(tls_trust="/nonexistent/ca.pem"))
    with pytest.raises(errors.InvalidArgument):
        ClientConfig(credentials=("user:name", "password"))


async def test_reading_a_missing_group_or_checkpoint_is_typed(client):
    """A second reader with an online reader's id is InvalidArgument; a checkpoint nobody can reach
    times out instead of hanging."""
    await client.create_scope("groups")
    await client.create_stream("groups", "s")
    group = await client.create_reader_group("groups", "g", ["s"])
    async with group.create_reader("r1"):
        with pytest.raises(errors.InvalidArgument):
            await group.create_reader("r1").start()
        with pytest.raises(TimeoutError):
            await group.initiate_checkpoint("never", timeout_seconds=0.5)
    await asyncio.sleep(0)


async def test_bad_batches_and_keys_are_refused_without_breaking_the_writer(client):
    """A batch with text in it, an empty batch and an unhashable routing key are InvalidArgument, and
    the writer still flushes and closes (nothing was counted in flight)."""
    await client.create_scope("batches")
    await client.create_stream("batches", "s")
    writer = client.create_writer("batches", "s")
    with pytest.raises(errors.InvalidArgument):
        await writer.write_batch([b"ok", "text"])
    with pytest.raises(errors.InvalidArgument):
        await writer.write_batch([])
    with pytest.raises(errors.InvalidArgument):
        await writer.write(b"x", routing_key=["not", "hashable"])
    await (await writer.write_batch([b"a", b"b"], "k"))
    async with asyncio.timeout(10):
        await writer.flush()
        await writer.close()


async def test_closing_the_client_closes_its_readers(standalone):
    """Client.close() takes the readers it made offline (they do not linger in the group)."""
    async with sdk.connect(standalone.controller_uri) as setup:
        await setup.create_scope("closing")
        await setup.create_stream("closing", "s")
        await setup.create_reader_group("closing", "g", ["s"])
    client = sdk.connect(standalone.controller_uri)
    reader = client.reader_group("closing", "g").create_reader("r")
    await reader.start()
    await client.close()
    async with sdk.connect(standalone.controller_uri) as other:
        assert await other.reader_group("closing", "g").online_readers() == []
