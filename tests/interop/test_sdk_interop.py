"""Tributary's SDK and the real `pravega` client on one stream, both ways: events and transactions
written by one are read by the other byte for byte, each once and in key order, and a routing
key lands in the same segment whichever client wrote it."""

from __future__ import annotations

import asyncio
import collections

import pytest

from clients.model import ScalingPolicy, StreamConfiguration, TransactionState
from tests.support.pravega_driver import check_each_once_in_key_order, run_scenario
from tests.support.sdk import event_of, parse_event, sdk, write_keyed
from tests.support.standalone import INTEROP_TARGETS, interop_server

pytestmark = [pytest.mark.interop, pytest.mark.process]


@pytest.fixture(scope="module", params=INTEROP_TARGETS)
def standalone(request, tmp_path_factory):
    yield from interop_server(request, tmp_path_factory.mktemp("sdk-interop"))


async def _read_everything(uri: str, scope: str, stream: str, group: str) -> list:
    async with sdk.connect(uri) as client:
        end = await client.tail_cut(scope, stream)
        reader_group = await client.create_reader_group(scope, group, [stream], end_cuts=[end])
        async with reader_group.create_reader("r") as reader:
            return [event async for event in reader]


def test_pravega_events_are_read_by_the_sdk_and_keys_share_segments(standalone, tmp_path):
    """Events the pravega client writes (13 keys, 4 segments) are read by the SDK each once in key
    order; the SDK then writes the same keys, and every key's events from both clients sit in one
    segment."""
    uri, count, keys = standalone.controller_uri, 5_000, 13
    run_scenario("write", uri, {"scope": "p2s", "stream": "s", "create": True, "segments": 4, "count": count,
                                "keys": keys}, tmp_path / "write.out")
    events = asyncio.run(_read_everything(uri, "p2s", "s", "g1"))
    check_each_once_in_key_order([event.data.decode() for event in events], count, keys)

    async def write_same_keys() -> None:
        async with sdk.connect(uri) as client, client.create_writer("p2s", "s") as writer:
            for key in range(keys):
                await writer.write(b"sdk:%d" % key, f"key-{key}")

    asyncio.run(write_same_keys())
    segments_of_key = collections.defaultdict(set)
    for event in asyncio.run(_read_everything(uri, "p2s", "s", "g2")):
        text = event.data.decode()
        key = f"k{text[4:]}" if text.startswith("sdk:") else text.partition(":")[0]
        segments_of_key[key].add(event.segment)
    assert len(segments_of_key) == keys
    assert all(len(segments) == 1 for segments in segments_of_key.values()), segments_of_key
    assert len(set().union(*segments_of_key.values())) > 1


def test_sdk_events_are_read_by_pravega(standalone, tmp_path):
    """Events the SDK writes (11 keys, 3 segments, one of 100 KiB per key too) are read by the pravega
    client byte for byte, each once, in key order."""
    uri, count, keys = standalone.controller_uri, 5_000, 11

    async def write() -> None:
        async with sdk.connect(uri) as client:
            await client.create_scope("s2p")
            await client.create_stream("s2p", "s", StreamConfiguration(ScalingPolicy.fixed(3)))
            async with client.create_writer("s2p", "s") as writer:
                await write_keyed(writer, count, keys)

    asyncio.run(write())
    result = run_scenario("read", uri, {"scope": "s2p", "stream": "s", "expected": count, "timeout": 60},
                          tmp_path / "read.out", timeout=120)
    received = [text for reader in result["received"] for text in reader]
    check_each_once_in_key_order(received, count, keys)
    assert all(text.encode() == event_of(*_key_and_sequence(text)) for text in received)


def _key_and_sequence(text: str) -> tuple[int, int]:
    key, sequence = parse_event(text.encode())
    return int(key[1:]), sequence


def test_transactions_cross_both_ways(standalone, tmp_path):
    """A transaction committed by the pravega client is read by the SDK (its aborted one is not), and
    one committed by the SDK is read by the pravega client (the SDK's aborted one is not)."""
    uri = standalone.controller_uri

    async def create_and_commit() -> None:
        async with sdk.connect(uri) as client:
            await client.create_scope("txn")
            for stream in ("from-pravega", "from-sdk"):
                await client.create_stream("txn", stream, StreamConfiguration(ScalingPolicy.fixed(2)))
            writer = client.create_transactional_writer("txn", "from-sdk")
            aborted = await writer.begin()
            await aborted.write(b"aborted:0", "key-0")
            transaction = await writer.begin()
            for number in range(120):
                await transaction.write(event_of(number % 4, number // 4), f"key-{number % 4}")
            await aborted.abort()
            await transaction.commit(wait=True)
            assert await transaction.status() is TransactionState.COMMITTED

    asyncio.run(create_and_commit())
    run_scenario("write_transaction", uri, {"scope": "txn", "stream": "from-pravega", "count": 90, "keys": 3},
                 tmp_path / "txn.out")

    async def committed_by_pravega() -> list[str]:
        async with sdk.connect(uri) as client:
            async with asyncio.timeout(30):
                while True:  # the commit is accepted before the controller finished merging
                    tail = await client.tail_cut("txn", "from-pravega")
                    if sum(tail.positions.values()) > 0:
                        break
                    await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        return [event.data.decode() for event in await _read_everything(uri, "txn", "from-pravega", "g")]

    check_each_once_in_key_order(asyncio.run(committed_by_pravega()), 90, 3)
    result = run_scenario("read", uri, {"scope": "txn", "stream": "from-sdk", "expected": 120, "timeout": 30},
                          tmp_path / "read.out", timeout=90)
    check_each_once_in_key_order([text for reader in result["received"] for text in reader], 120, 4)
