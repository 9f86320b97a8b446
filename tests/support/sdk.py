"""Helpers for tests of Tributary's own SDK: keyed event payloads and the checks on what was read."""

from __future__ import annotations

import collections

import clients.client as sdk


def event_of(key: int, sequence: int, size: int = 0) -> bytes:
    """``k<key>:<sequence>`` padded with ``.`` to ``size`` bytes."""
    text = f"k{key}:{sequence}".encode()
    return text + b"." * max(0, size - len(text))


def parse_event(data: bytes) -> tuple[str, int]:
    key, _, sequence = bytes(data).rstrip(b".").decode().partition(":")
    return key, int(sequence)


async def write_keyed(writer, count: int, keys: int, start: int = 0, size: int = 0) -> list:
    """Writes events ``start``..``start+count-1`` round-robin over ``keys`` keys (routing key ``key-<k>``),
    event number n being key n % keys, sequence n // keys. Returns the acks."""
    acks = []
    for number in range(start, start + count):
        key = number % keys
        acks.append(await writer.write(event_of(key, number // keys, size), f"key-{key}"))
    return acks


def check_each_once_in_key_order(received: list[bytes], count: int, keys: int) -> None:
    """Every event ``write_keyed`` wrote (``count`` over ``keys`` keys) arrived once, each key's in order."""
    per_key = collections.defaultdict(list)
    for data in received:
        key, sequence = parse_event(data)
        per_key[key].append(sequence)
    assert len(received) == count, f"{len(received)} events read, {len(set(map(bytes, received)))} distinct"
    for key in range(keys):
        expected = list(range(len(range(key, count, keys))))
        assert per_key[f"k{key}"] == expected, f"key k{key}: order broken or events missing/duplicated"


def check_key_order(received: list[bytes]) -> None:
    """Within each key, sequence numbers never go backwards (duplicates of a re-read allowed)."""
    last: dict[str, int] = {}
    for data in received:
        key, sequence = parse_event(data)
        assert sequence >= last.get(key, -1), f"key {key}: {sequence} after {last[key]}"
        last[key] = sequence


async def read_all(client, scope: str, stream: str, group: str, readers: int = 1, end_cut=None) -> list[list]:
    """Reads ``scope/stream`` from the head to ``end_cut`` (the tail now, by default) with ``readers``
    readers of a new group; returns each reader's events (EventRead objects)."""
    import asyncio

    end_cut = end_cut or await client.tail_cut(scope, stream)
    reader_group = await client.create_reader_group(scope, group, [stream], end_cuts=[end_cut])
    results: list[list] = [[] for _ in range(readers)]

    async def run(index: int) -> None:
        async with reader_group.create_reader(f"reader-{index}") as reader:
            async for event in reader:
                results[index].append(event)

    await asyncio.gather(*(run(index) for index in range(readers)))
    return results


__all__ = ["sdk", "event_of", "parse_event", "write_keyed", "check_each_once_in_key_order", "check_key_order",
           "read_all"]
