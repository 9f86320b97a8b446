"""``tributary.compat.pravega_client`` beyond the binding's own tests: the same public surface as the
binding, blocking calls that let other threads run, ``*_async`` calls that never block the caller's
loop, and the reader's slices (several readers, dropped slices, offline readers, sealed streams), byte
stream seeks beyond the tail and transactions resumed by id. Against a standalone on free ports."""

from __future__ import annotations

import asyncio
import gc
import inspect
import pathlib
import statistics
import threading
import time

import pytest

import tributary.compat.pravega_client as compat
from tests.support.doc_blocks import fenced_blocks
from tests.support.secured import start_secured_standalone
from tests.support.standalone import serve

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "pravega-compat")


@pytest.fixture(scope="module")
def manager(server):
    return compat.StreamManager(server.controller_uri)


def fresh_stream(manager, name: str, segments: int = 1) -> tuple[str, str]:
    scope = f"compat-{name}"
    assert manager.create_scope(scope)
    assert manager.create_stream(scope, "s", segments)
    return scope, "s"


async def read_events(reader, count: int, timeout: float = 30.0) -> list[bytes]:
    events: list[bytes] = []
    async with asyncio.timeout(timeout):
        while len(events) < count:
            piece = await reader.get_segment_slice_async()
            events += [event.data() for event in piece]
            reader.release_segment(piece)
    return events


# ---------------------------------------------------------------------- the surface


def test_the_public_names_and_methods_are_the_binding_s():
    import pravega_client as binding

    classes = sorted(name for name in dir(binding) if isinstance(getattr(binding, name), type))
    assert sorted(compat.__all__) == classes
    for name in classes:
        theirs = {attribute for attribute in dir(getattr(binding, name)) if not attribute.startswith("_")}
        ours = {attribute for attribute in dir(getattr(compat, name)) if not attribute.startswith("_")}
        assert ours == theirs, name


@pytest.mark.parametrize(("method", "parameters"), [
    (compat.StreamManager.__init__, "controller_uri auth_enabled=False tls_enabled=False "
                                    "disable_cert_verification=False"),
    (compat.StreamManager.create_writer, "scope_name stream_name max_inflight_events=0"),
    (compat.StreamManager.create_stream_with_policy,
     "scope_name stream_name scaling_policy=None retention_policy=None tags=None"),
    (compat.StreamManager.create_reader_group,
     "reader_group_name scope_name stream_name read_from_tail=False stream_cut=None"),
    (compat.StreamManager.create_reader_group_with_config, "reader_group_name scope_name rg_config"),
    (compat.StreamManager.create_transaction_writer, "scope_name stream_name writer_id"),
    (compat.StreamWriter.write_event, "event routing_key=None"),
    (compat.StreamWriter.write_event_bytes, "event routing_key=None"),
    (compat.StreamWriter.write_event_async, "event routing_key=None"),
    (compat.StreamTransaction.commit_timestamp, "timestamp"),
    (compat.StreamReader.release_segment, "slice"),
    (compat.ByteStream.seek, "position whence=None"),
    (compat.ByteStream.readinto, "buf"),
])
def test_argument_names_and_defaults_are_the_binding_s(method, parameters):
    signature = inspect.signature(method)
    described = [name if parameter.default is inspect.Parameter.empty else f"{name}={parameter.default!r}"
                 for name, parameter in signature.parameters.items() if name != "self"]
    assert " ".join(described) == parameters


def test_objects_only_the_api_makes_have_no_constructor():
    for cls in (compat.StreamWriter, compat.StreamReader, compat.ByteStream, compat.StreamScalingPolicy,
                compat.StreamCuts, compat.StreamTransaction):
        with pytest.raises(TypeError, match="No constructor defined"):
            cls()
    with pytest.raises(ValueError, match="No Pravega Streams"):
        compat.StreamReaderGroupConfig(False, "scope")


# ---------------------------------------------------------------------- threads and event loops


def _count(stop: threading.Event, stamps: list[float]) -> int:
    """Counts until ``stop``; notes the time every 10,000 counts (to find the longest stall)."""
    count = 0
    while not stop.is_set():
        count += 1
        if count % 10_000 == 0:
            stamps.append(time.perf_counter())
    return count


def test_a_blocking_write_lets_other_threads_run(manager):
    """While ``write_event`` waits for its acknowledgement (the binding's default: each write waits), a
    counting thread keeps counting: the wait does not hold the GIL (the binding's does)."""
    scope, stream = fresh_stream(manager, "threads")
    writer = manager.create_writer(scope, stream)
    writer.write_event("warm-up", "key")

    def counting(body) -> tuple[float, float, float]:
        """(counts per second, seconds, longest stall in seconds) of a counting thread while ``body`` runs."""
        stop, stamps, result = threading.Event(), [], []
        thread = threading.Thread(target=lambda: result.append(_count(stop, stamps)))
        started = time.perf_counter()
        thread.start()
        body()
        elapsed = time.perf_counter() - started
        stop.set()
        thread.join()
        gaps = [later - earlier for earlier, later in zip([started, *stamps], [*stamps, time.perf_counter()])]
        return result[0] / elapsed, elapsed, max(gaps)

    alone, _, _ = counting(lambda: time.sleep(0.5))
    writes = 100
    during, seconds, stall = counting(lambda: [writer.write_event(f"event {n}", "key") for n in range(writes)])
    print(f"counting thread: {alone:,.0f}/s alone, {during:,.0f}/s ({during / alone:.0%}) during {writes} blocking "
          f"writes ({seconds / writes * 1000:.1f} ms each); longest stall {stall * 1000:.1f} ms")
    assert during > 0.2 * alone
    assert stall < 2.0


def test_async_calls_never_block_the_caller_s_loop(manager):
    """A loop writing with ``write_event_async`` and reading with ``get_segment_slice_async`` keeps ticking.

    A 1 ms ticker measures the loop's lag. Each call returns at once (its own time is measured), and while
    a slice request waits half a second for data that another thread writes, the ticker goes on ticking
    (a blocking call would stop it). The lag left is the GIL's switch interval (the runtime thread works
    meanwhile) and the machine's scheduling: on a loaded machine a few ticks come late whatever the loop
    does, so lags above 10 ms are only required to be rare, and the figures are printed."""
    scope, stream = fresh_stream(manager, "loop-lag", segments=2)
    writer = manager.create_writer(scope, stream)
    group = manager.create_reader_group("lag", scope, stream)
    reader = group.create_reader("reader")
    count = 600

    async def run() -> tuple[list[float], list[float], int, int]:
        lags: list[float] = []
        calls: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            loop = asyncio.get_running_loop()
            while not done.is_set():
                before = loop.time()
                await asyncio.sleep(0.001)
                lags.append(loop.time() - before - 0.001)

        def timed(call):
            started = time.perf_counter()
            result = call()
            calls.append(time.perf_counter() - started)
            return result

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        pending = []
        for number in range(count):
            pending.append(timed(lambda: writer.write_event_async(f"event {number}", f"key-{number % 7}")))
            if len(pending) == 50:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
        received = 0
        while received < count:
            piece = await timed(reader.get_segment_slice_async)
            received += sum(1 for _ in piece)
            timed(lambda: reader.release_segment(piece))
        # Nothing more to read: the next request waits until a thread writes, half a second from now.
        late = threading.Timer(0.5, lambda: manager.create_writer(scope, stream).write_event("late"))
        late.start()
        ticks_before = len(lags)
        piece = await timed(reader.get_segment_slice_async)
        ticks_while_waiting = len(lags) - ticks_before
        received += sum(1 for _ in piece)
        late.join()
        done.set()
        await ticking
        return lags, calls, received, ticks_while_waiting

    lags, calls, received, ticks_while_waiting = asyncio.run(run())
    reader.reader_offline()
    lags.sort()
    calls.sort()
    over = sum(lag > 0.010 for lag in lags)
    print(f"{len(lags)} ticks: lag median {statistics.median(lags) * 1000:.2f} ms, "
          f"p99 {lags[int(len(lags) * 0.99)] * 1000:.2f} ms, max {lags[-1] * 1000:.2f} ms, {over} over 10 ms; "
          f"{len(calls)} calls: median {statistics.median(calls) * 1000:.3f} ms, max {calls[-1] * 1000:.2f} ms; "
          f"{ticks_while_waiting} ticks during a 0.5 s wait for a slice")
    assert received == count + 1
    assert statistics.median(calls) < 0.002 and calls[-1] < 0.1
    assert ticks_while_waiting >= 100
    assert statistics.median(lags) < 0.002 and over <= len(lags) // 10


def test_async_writes_keep_the_order_of_the_calls(manager):
    scope, stream = fresh_stream(manager, "order")
    writer = manager.create_writer(scope, stream)
    reader = manager.create_reader_group("order", scope, stream).create_reader("reader")

    async def run() -> list[bytes]:
        await asyncio.gather(*[writer.write_event_async(f"{number}", "one key") for number in range(300)])
        return await read_events(reader, 300)

    assert asyncio.run(run()) == [f"{number}".encode() for number in range(300)]


def test_async_writes_of_a_loop_gone_before_they_were_sent_are_written_by_flush_and_later_writes(manager):
    """An async write wakes the client's loop only when the caller's loop takes its next step; a loop closed
    before that step (writes never awaited) loses nothing: ``flush`` writes them, and so does the next
    write of another loop or a blocking one, in the order of the calls."""
    scope, stream = fresh_stream(manager, "orphans")
    writer = manager.create_writer(scope, stream)
    reader = manager.create_reader_group("orphans", scope, stream).create_reader("reader")

    def orphan(numbers: range) -> None:
        """Writes from a callback of a loop that stops in the same step and closes: never awaited, and the
        wake-up it scheduled for its next step is dropped."""
        loop = asyncio.new_event_loop()

        def write() -> None:
            for number in numbers:
                writer.write_event_async(f"{number}", "one key")

        loop.call_soon(write)
        loop.call_soon(loop.stop)
        loop.run_forever()
        loop.close()
        assert len(writer._writer._queue) == len(numbers)  # so nothing woke the client's loop

    orphan(range(0, 100))
    writer.flush()
    orphan(range(100, 200))
    writer.write_event("200", "one key")  # a blocking write takes the orphans along, before itself
    orphan(range(201, 300))

    async def write_and_read() -> list[bytes]:
        await writer.write_event_async("300", "one key")
        return await read_events(reader, 301)

    assert asyncio.run(write_and_read()) == [f"{number}".encode() for number in range(301)]


# ---------------------------------------------------------------------- slices


@pytest.mark.slow
def test_two_readers_that_release_part_of_their_slices_read_each_event_once(manager):
    """Two readers of one group in one loop, each consuming only part of every slice before releasing it:
    segments move between them (rebalancing) while slices are out, and every event is read exactly once,
    each key's in order."""
    scope, stream = fresh_stream(manager, "two-readers", segments=4)
    writer = manager.create_writer(scope, stream, 100)
    count, keys = 2000, 13
    for number in range(count):
        writer.write_event(f"{number % keys}:{number // keys}", f"key-{number % keys}")
    writer.flush()
    group = manager.create_reader_group("pair", scope, stream)
    readers = [group.create_reader("first")]
    received: list[list[str]] = [[], []]

    async def run(index: int) -> None:
        if index == 1:
            await asyncio.sleep(0.3)  # joins while the first one owns every segment
            readers.append(group.create_reader("second"))
        reader = readers[index]
        async with asyncio.timeout(60):
            while sum(map(len, received)) < count:
                try:
                    piece = await asyncio.wait_for(reader.get_segment_slice_async(), 1.0)
                except TimeoutError:
                    continue
                for taken, event in enumerate(piece):
                    received[index].append(event.data().decode())
                    if taken == 4:
                        break
                reader.release_segment(piece)
                await asyncio.sleep(0.01)

    async def both() -> None:
        await asyncio.gather(run(0), run(1))

    asyncio.run(both())
    for reader in readers:
        reader.reader_offline()
    everything = received[0] + received[1]
    assert len(everything) == count == len(set(everything))
    assert received[0] and received[1]
    for part in received:
        for key in range(keys):
            sequence = [int(item.split(":")[1]) for item in part if item.startswith(f"{key}:")]
            assert sequence == sorted(sequence)


def test_a_dropped_slice_gives_back_what_it_did_not_hand_out(manager):
    scope, stream = fresh_stream(manager, "dropped")
    writer = manager.create_writer(scope, stream)
    for number in range(10):
        writer.write_event(f"{number}", "key")
    reader = manager.create_reader_group("dropped", scope, stream).create_reader("reader")

    async def run() -> list[bytes]:
        piece = await reader.get_segment_slice_async()
        first = next(piece).data()
        del piece
        gc.collect()
        return [first, *await read_events(reader, 9)]

    assert asyncio.run(run()) == [f"{number}".encode() for number in range(10)]


def test_a_reader_taken_offline_fails_its_pending_slice_request(manager):
    scope, stream = fresh_stream(manager, "offline")
    group = manager.create_reader_group("offline", scope, stream)
    reader = group.create_reader("reader")

    async def run() -> None:
        waiting = reader.get_segment_slice_async()  # nothing to read: it waits
        await asyncio.sleep(0.2)
        await asyncio.get_running_loop().run_in_executor(None, group.reader_offline, "reader")
        with pytest.raises(OSError, match="offline"):
            await waiting
        with pytest.raises(OSError):
            await reader.get_segment_slice_async()

    asyncio.run(run())
    reader.reader_offline()  # again: no error


def test_a_sealed_stream_read_to_its_end_gives_empty_slices(manager):
    scope, stream = fresh_stream(manager, "sealed", segments=2)
    writer = manager.create_writer(scope, stream)
    for number in range(20):
        writer.write_event(f"{number}", f"key-{number % 3}")
    assert manager.seal_stream(scope, stream)
    with pytest.raises(ValueError, match="Error observed while writing an event"):
        writer.write_event("late")
    reader = manager.create_reader_group("sealed", scope, stream).create_reader("reader")

    async def run() -> tuple[list[bytes], list[list[bytes]]]:
        events = await read_events(reader, 20)
        after = [[event.data() for event in await reader.get_segment_slice_async()] for _ in range(3)]
        return events, after

    events, after = asyncio.run(run())
    assert sorted(events) == sorted(f"{number}".encode() for number in range(20))
    assert after == [[], [], []]


def test_stream_cuts_start_a_group_where_another_is(manager):
    scope, stream = fresh_stream(manager, "cuts")
    writer = manager.create_writer(scope, stream)
    writer.write_event("before")
    cut = manager.create_reader_group("at-tail", scope, stream, True).get_streamcut()
    assert repr(cut).startswith('StreamCuts("StreamCuts: StreamCut { scoped_stream: ScopedStream')
    writer.write_event("after")
    reader = manager.create_reader_group("from-cut", scope, stream, False, cut).create_reader("reader")
    assert asyncio.run(read_events(reader, 1)) == [b"after"]
    assert list(cut.get_segment_offset_map().values()) == [8 + len("before")]


# ---------------------------------------------------------------------- byte streams, transactions


def test_a_byte_stream_read_beyond_the_tail_waits_for_the_bytes(manager):
    scope, stream = fresh_stream(manager, "bytes")
    reading, writing = manager.create_byte_stream(scope, stream), manager.create_byte_stream(scope, stream)
    assert reading.seek(5) == 5 and reading.tell() == 5  # beyond the tail (0), as the binding allows
    buffer = bytearray(3)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(reading.readinto(buffer)))
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive()  # waiting for the stream to grow
    assert writing.write(b"0123456789") == 10
    writing.flush()
    thread.join(10)
    assert result == [3] and bytes(buffer) == b"567" and reading.tell() == 8
    with pytest.raises(ValueError, match="whence"):
        reading.seek(0, 3)
    with pytest.raises(ValueError, match="negative"):
        reading.seek(-11, 2)
    with pytest.raises(TypeError):
        reading.write(bytearray(b"x"))


def test_a_transaction_is_resumed_by_id_by_another_writer(manager):
    scope, stream = fresh_stream(manager, "transactions")
    transaction = manager.create_transaction_writer(scope, stream, 1).begin_txn()
    transaction.write_event("from the first writer", "key")
    other = manager.create_transaction_writer(scope, stream, 2)
    resumed = other.get_txn(transaction.get_txn_id())
    assert resumed.is_open()
    resumed.write_event_bytes(b"from the second writer", "key")
    resumed.commit()
    assert not transaction.is_open()
    with pytest.raises(compat.TxnFailedException) as failure:
        resumed.abort()
    assert failure.value.args == (transaction.get_txn_id(),)
    with pytest.raises(ValueError):
        other.get_txn(transaction.get_txn_id() + 12345)
    reader = manager.create_reader_group("transactions", scope, stream).create_reader("reader")
    assert asyncio.run(read_events(reader, 2)) == [b"from the first writer", b"from the second writer"]


# ---------------------------------------------------------------------- behaviours of the binding kept


def test_with_nothing_to_read_a_slice_comes_empty_after_a_second(manager):
    """As the binding's: no event for about a second gives an empty slice (readers loop on slices)."""
    scope, stream = fresh_stream(manager, "idle")
    reader = manager.create_reader_group("idle", scope, stream).create_reader("reader")

    async def run() -> tuple[list[bytes], float]:
        started = time.monotonic()
        piece = await reader.get_segment_slice_async()
        return [event.data() for event in piece], time.monotonic() - started

    events, seconds = asyncio.run(run())
    assert events == [] and 0.9 < seconds < 5


def test_events_of_every_size_up_to_beyond_eight_mebibytes(manager):
    """Sizes around the SDK's block sizes (an event filling a block exactly) and above 8 MiB (written as a
    large event, as the Rust client does), each write waiting for its event, then read back whole."""
    scope, stream = fresh_stream(manager, "sizes")
    writer = manager.create_writer(scope, stream)
    sizes = [1, 1024 * 1024 - 8, 1024 * 1024, 8_388_585, 8 * 1024 * 1024, 8 * 1024 * 1024 + 1, 9_000_000]
    for size in sizes:
        writer.write_event_bytes(bytes([size % 251]) * size, "key")
    reader = manager.create_reader_group("sizes", scope, stream).create_reader("reader")
    events = asyncio.run(read_events(reader, len(sizes), timeout=120))
    assert [len(event) for event in events] == sizes
    assert all(event == bytes([size % 251]) * size for event, size in zip(events, sizes, strict=True))


def test_reader_groups_do_not_keep_a_scope_from_being_deleted(manager):
    """The binding's groups are not streams of their scope: list_stream does not show them, and a scope
    whose streams are deleted can be deleted although groups remain."""
    scope, stream = fresh_stream(manager, "groups-left")
    manager.create_reader_group("left-over", scope, stream)
    assert sorted(manager.list_stream(scope)) == ["_MARKs", "s"]
    assert manager.seal_stream(scope, stream) and manager.delete_stream(scope, stream)
    assert manager.delete_scope(scope)
    assert scope not in manager.list_scope()


def test_tls_and_credentials_from_the_binding_s_environment_variables(tmp_path, monkeypatch):
    """``StreamManager("tls://...", True, True)`` with the binding's variables: the CA file and Basic
    credentials (user and password, or a token); wrong credentials fail the first call."""
    standalone, certificates, _ = start_secured_standalone(tmp_path, {"admin": ("secret", "prn::*,READ_UPDATE")})
    try:
        uri = f"tls://localhost:{standalone.controller_port}"
        monkeypatch.setenv("pravega_client_tls_cert_path", str(certificates.ca))
        monkeypatch.setenv("pravega_client_auth_method", "Basic")
        monkeypatch.setenv("pravega_client_auth_username", "admin")
        monkeypatch.setenv("pravega_client_auth_password", "secret")
        secured = compat.StreamManager(uri, True, True)
        assert secured.create_scope("tls") and secured.create_stream("tls", "s", 1)
        secured.create_writer("tls", "s").write_event("over TLS", "key")
        reader = secured.create_reader_group("tls", "tls", "s").create_reader("reader")
        assert asyncio.run(read_events(reader, 1)) == [b"over TLS"]
        monkeypatch.delenv("pravega_client_auth_username")
        monkeypatch.delenv("pravega_client_auth_password")
        monkeypatch.setenv("pravega_client_auth_token", "YWRtaW46c2VjcmV0")  # admin:secret
        assert sorted(compat.StreamManager(uri.replace("tls://", "tcp://"), True, True).list_stream("tls")) == [
            "_MARKs", "s"]
        monkeypatch.setenv("pravega_client_auth_token", "YWRtaW46d3Jvbmc=")  # admin:wrong
        with pytest.raises(ValueError, match="AuthenticationFailed"):
            compat.StreamManager(uri, True, True).list_scope()
    finally:
        standalone.remove_data()


# ---------------------------------------------------------------------- the document


DOCUMENT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "pravega_client.md"


@pytest.mark.parametrize("block", [block for block in fenced_blocks(DOCUMENT) if block.language == "python"],
                         ids=lambda block: block.title)
def test_the_examples_of_the_document_run(block, server):
    namespace: dict = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    namespace["main"](server.controller_uri)


def test_the_fragments_of_the_document_parse():
    blocks = fenced_blocks(DOCUMENT)
    assert any(block.language == "python" for block in blocks)
    for block in blocks:
        assert block.language in ("python", "python-fragment"), block.where
        compile(block.code, block.where, "exec")
