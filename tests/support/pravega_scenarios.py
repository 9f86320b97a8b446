"""Scenarios run with the REAL pravega client (pravega 0.3.8) in a child process, or with Tributary's
drop-in for it (``tributary.compat.pravega_client``) when ``TRIBUTARY_INTEROP_CLIENT=compat``.

The binding blocks on its Tokio runtime (holding the GIL), so interop tests run each scenario in
its own process, with a timeout, and kill it by PID if needed. Usage:

    python pravega_scenarios.py SCENARIO CONTROLLER_URI ARGS_JSON

The last stdout line is ``RESULT <json>``; anything before it is the client's own logging.
Events are text ``<key>:<sequence>`` with per-key sequence numbers, so per-key order can be
checked; large events are deterministic bytes checked by length and SHA-256.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
import traceback

if os.environ.get("TRIBUTARY_INTEROP_CLIENT") == "compat":
    import tributary.compat.pravega_client as pravega_client
else:
    import pravega_client

SLICE_IDLE_SECONDS_MAX = 5.0  # a reader that has seen nothing for this long after its target stops


def manager(uri: str):
    """A stream manager; over TLS for a ``tls://`` URI (the CA from ``pravega_client_tls_cert_path``), with
    credentials when ``pravega_client_auth_method`` is set (the binding reads both from the environment)."""
    return pravega_client.StreamManager(uri, "pravega_client_auth_method" in os.environ, uri.startswith("tls://"))


def outcome(call):
    """The call's result, or ``raised <type>: <message>`` (for expected failures: tests check the message)."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - the scenario reports what happened
        return f"raised {type(error).__name__}: {error}"


def event_text(key: int, sequence: int) -> str:
    return f"k{key}:{sequence}"


def large_payload(size: int) -> bytes:
    block = hashlib.sha256(str(size).encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


# ---------------------------------------------------------------------- writing and reading


def write_events(writer, count: int, keys: int, start: int = 0, pause_every: int = 0,
                 pause_seconds: float = 0.0) -> None:
    """Writes events ``start``..``start+count-1`` round-robin over ``keys`` keys.

    Uses the blocking ``write_event``: the binding's ``write_event_async`` runs each call as its own
    task, so two async writes of one key can reach the writer in either order (seen in 0.3.8). Whether
    ``write_event`` waits for its ack depends on the writer's ``max_inflight_events`` (the scenario's
    ``max_inflight``; 0, the binding's default, waits for each).
    """
    for number in range(start, start + count):
        key = number % keys
        writer.write_event(event_text(key, number // keys), f"key-{key}")
        if pause_every and (number + 1) % pause_every == 0:
            time.sleep(pause_seconds)


async def read_group(group, readers: int, expected: int, timeout: float,
                     slice_pause_seconds: float = 0.0) -> list[list[str]]:
    """Reads with ``readers`` readers of one group until ``expected`` events in total (or timeout).

    ``slice_pause_seconds`` slows each reader down between slices, so that a reader holding more
    than its share of segments has time to release some to the others.
    """
    members = [group.create_reader(f"reader-{index}") for index in range(readers)]
    received: list[list[str]] = [[] for _ in members]
    deadline = time.monotonic() + timeout

    async def run(index: int) -> None:
        reader = members[index]
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            if sum(map(len, received)) >= expected and time.monotonic() - idle_since > 1.0:
                break
            segment_slice = await reader.get_segment_slice_async()
            count = 0
            for event in segment_slice:
                received[index].append(event.data().decode())
                count += 1
            reader.release_segment(segment_slice)
            if slice_pause_seconds:
                await asyncio.sleep(slice_pause_seconds)
            if count:
                idle_since = time.monotonic()
            elif sum(map(len, received)) >= expected:
                break
        reader.reader_offline()

    await asyncio.gather(*(run(index) for index in range(readers)))
    return received


# ---------------------------------------------------------------------- scenarios


def scenario_admin(uri: str, args: dict) -> dict:
    m = manager(uri)
    scope = args["scope"]
    policy, retention = pravega_client.StreamScalingPolicy, pravega_client.StreamRetentionPolicy
    result = {
        "create_scope": [m.create_scope(scope), m.create_scope(scope)],
        "invalid_scope": outcome(lambda: m.create_scope("bad scope!")),
        "fixed1": m.create_stream(scope, "fixed1", 1),
        "fixed4": m.create_stream(scope, "fixed4", 4),
        "fixed4_again": m.create_stream(scope, "fixed4", 4),
        "invalid_stream": outcome(lambda: m.create_stream(scope, "bad/stream", 1)),
        "missing_scope": outcome(lambda: m.create_stream("no-such-scope", "s", 1)),
        "by_data_rate": m.create_stream_with_policy(scope, "by-data-rate",
                                                    policy.auto_scaling_policy_by_data_rate(1024, 2, 3),
                                                    retention.none(), ["rate", "shared"]),
        "by_event_rate": m.create_stream_with_policy(scope, "by-event-rate",
                                                     policy.auto_scaling_policy_by_event_rate(100, 3, 2),
                                                     retention.by_size(1 << 30), ["shared"]),
        "by_time": m.create_stream_with_policy(scope, "by-time", policy.fixed_scaling_policy(2),
                                               retention.by_time(24 * 3600 * 1000), None),
    }
    result["scopes"] = sorted(m.list_scope())
    result["streams"] = sorted(m.list_stream(scope))
    result["tags"] = {name: m.get_stream_tags(scope, name) for name in ["fixed1", "by-data-rate", "by-event-rate"]}
    result["update"] = m.update_stream_with_policy(scope, "fixed4", policy.fixed_scaling_policy(2),
                                                   retention.by_time(60_000), ["updated"])
    result["tags_after_update"] = m.get_stream_tags(scope, "fixed4")
    result["update_missing"] = outcome(lambda: m.update_stream_with_policy(
        scope, "missing", policy.fixed_scaling_policy(1), retention.none(), None))
    result["delete_unsealed"] = outcome(lambda: m.delete_stream(scope, "fixed1"))
    result["delete_nonempty_scope"] = outcome(lambda: m.delete_scope(scope))
    return result


def scenario_cleanup(uri: str, args: dict) -> dict:
    m = manager(uri)
    scope = args["scope"]
    result = {"seal": {}, "delete": {}}
    for name in sorted(m.list_stream(scope)):
        result["seal"][name] = m.seal_stream(scope, name)
        result["delete"][name] = m.delete_stream(scope, name)
    result["delete_again"] = m.delete_stream(scope, args.get("deleted_name", "fixed1"))
    result["streams_left"] = m.list_stream(scope)
    result["delete_scope"] = [m.delete_scope(scope), m.delete_scope(scope)]
    result["scopes"] = sorted(m.list_scope())
    return result


def scenario_write(uri: str, args: dict) -> dict:
    m = manager(uri)
    if args.get("create"):
        m.create_scope(args["scope"])
        m.create_stream(args["scope"], args["stream"], args.get("segments", 1))
    writer = m.create_writer(args["scope"], args["stream"], args.get("max_inflight", 0))
    started = time.monotonic()
    write_events(writer, args["count"], args["keys"], args.get("start", 0), args.get("pause_every", 0),
                 args.get("pause_seconds", 0.0))
    writer.flush()
    return {"written": args["count"], "seconds": time.monotonic() - started}


def scenario_read(uri: str, args: dict) -> dict:
    m = manager(uri)
    group = m.create_reader_group(args.get("group", "group"), args["scope"], args["stream"])
    if args.get("ready_file"):
        open(args["ready_file"], "w").close()
    received = asyncio.run(read_group(group, args.get("readers", 1), args["expected"], args.get("timeout", 60),
                                      args.get("slice_pause_seconds", 0.0)))
    return {"received": received}


def scenario_group_config(uri: str, args: dict) -> dict:
    """A reader group over two streams made from a StreamReaderGroupConfig, read to the end, then deleted
    (and made again under the same name, which reads everything anew)."""
    m = manager(uri)
    scope, count = args["scope"], args["count"]
    m.create_scope(scope)
    for stream, start in (("first", 0), ("second", count)):
        m.create_stream(scope, stream, 2)
        writer = m.create_writer(scope, stream)
        write_events(writer, count, 4, start)
        writer.flush()
    config = pravega_client.StreamReaderGroupConfig(False, scope, "first", "second")
    group = m.create_reader_group_with_config("both", scope, config)
    result = {"received": asyncio.run(read_group(group, 2, 2 * count, 60))}
    result["delete"] = outcome(lambda: m.delete_reader_group("both", scope) or "deleted")
    again = m.create_reader_group_with_config("both", scope, config)
    result["received_again"] = asyncio.run(read_group(again, 1, 2 * count, 60))
    return result


def scenario_write_and_read(uri: str, args: dict) -> dict:
    result = scenario_write(uri, args)
    result.update(scenario_read(uri, {**args, "expected": args["count"]}))
    return result


def scenario_large(uri: str, args: dict) -> dict:
    m = manager(uri)
    m.create_scope(args["scope"])
    m.create_stream(args["scope"], args["stream"], 1)
    writer = m.create_writer(args["scope"], args["stream"])
    for size in args["sizes"]:
        writer.write_event_bytes(large_payload(size), "big")
    writer.flush()
    group = m.create_reader_group("large", args["scope"], args["stream"])
    reader = group.create_reader("reader")

    async def read() -> list[list]:
        found, deadline = [], time.monotonic() + 60
        while len(found) < len(args["sizes"]) and time.monotonic() < deadline:
            segment_slice = await reader.get_segment_slice_async()
            for event in segment_slice:
                data = event.data()
                found.append([len(data), hashlib.sha256(data).hexdigest()])
            reader.release_segment(segment_slice)
        return found

    return {"read": asyncio.run(read()),
            "expected": [[size, hashlib.sha256(large_payload(size)).hexdigest()] for size in args["sizes"]]}


def scenario_byte_stream(uri: str, args: dict) -> dict:
    m = manager(uri)
    scope, stream = args["scope"], args["stream"]
    m.create_scope(scope)
    m.create_stream(scope, stream, 1)
    data = bytes(range(256)) * 16  # 4 KiB
    stream_io = m.create_byte_stream(scope, stream)
    result = {"empty_offsets": [stream_io.current_head_offset(), stream_io.current_tail_offset()]}
    stream_io.write(data)
    stream_io.flush()
    result["offsets_after_write"] = [stream_io.current_head_offset(), stream_io.current_tail_offset()]
    buffer = bytearray(len(data))
    stream_io.seek(0, 0)
    result["read_all"] = _read_fully(stream_io, buffer) == data
    stream_io.seek(1000, 0)
    result["tell_after_seek"] = stream_io.tell()
    part = bytearray(100)
    result["read_at_1000"] = _read_fully(stream_io, part) == data[1000:1100]
    result["seek_from_end"] = stream_io.seek(-96, 2)
    tail_part = bytearray(96)
    result["read_tail"] = _read_fully(stream_io, tail_part) == data[-96:]
    stream_io.truncate(2048)
    result["offsets_after_truncate"] = [stream_io.current_head_offset(), stream_io.current_tail_offset()]
    stream_io.seek(2048, 0)
    after = bytearray(len(data) - 2048)
    result["read_after_truncate"] = _read_fully(stream_io, after) == data[2048:]
    stream_io.write(b"more")
    stream_io.flush()
    result["tail_after_append"] = stream_io.current_tail_offset()
    reopened = m.create_byte_stream(scope, stream)
    reopened.seek(len(data), 0)
    result["reopened_read"] = _read_fully(reopened, bytearray(4)).decode()
    return result


def _read_fully(stream_io, buffer: bytearray) -> bytes:
    """Reads until ``buffer`` is full (the binding needs a bytearray; it may return fewer bytes)."""
    filled, deadline = 0, time.monotonic() + 20
    while filled < len(buffer) and time.monotonic() < deadline:
        chunk = bytearray(len(buffer) - filled)
        count = stream_io.readinto(chunk) or 0
        buffer[filled:filled + count] = chunk[:count]
        filled += count
    return bytes(buffer[:filled])


def scenario_seal(uri: str, args: dict) -> dict:
    m = manager(uri)
    scope, stream, count = args["scope"], args["stream"], args["count"]
    m.create_scope(scope)
    m.create_stream(scope, stream, 2)
    writer = m.create_writer(scope, stream)
    write_events(writer, count, 4)
    writer.flush()
    result = {"seal": [m.seal_stream(scope, stream), m.seal_stream(scope, stream)]}
    result["write_after_seal"] = outcome(lambda: (writer.write_event("late", "key-0"), writer.flush()) and "accepted")
    group = m.create_reader_group("after-seal", scope, stream)
    reader = group.create_reader("reader")

    async def read_to_the_end() -> tuple[list[str], int]:
        received, empty_slices, deadline = [], 0, time.monotonic() + 30
        while empty_slices < 3 and time.monotonic() < deadline:  # past the end: slices just stay empty
            segment_slice = await reader.get_segment_slice_async()
            events = [event.data().decode() for event in segment_slice]
            reader.release_segment(segment_slice)
            received += events
            empty_slices = empty_slices + 1 if not events and len(received) >= count else 0
        return received, empty_slices

    result["received"], result["empty_slices_at_end"] = asyncio.run(read_to_the_end())
    result["update_sealed"] = outcome(lambda: m.update_stream_with_policy(
        scope, stream, pravega_client.StreamScalingPolicy.fixed_scaling_policy(1),
        pravega_client.StreamRetentionPolicy.none(), None))
    result["delete"] = m.delete_stream(scope, stream)
    result["delete_scope"] = m.delete_scope(scope)
    return result


def scenario_transactions(uri: str, args: dict) -> dict:
    m = manager(uri)
    scope, stream = args["scope"], args["stream"]
    m.create_scope(scope)
    m.create_stream(scope, stream, 2)
    transactional = m.create_transaction_writer(scope, stream, 7)
    committed = transactional.begin_txn()
    for number in range(50):
        committed.write_event(event_text(number % 3, number), f"key-{number % 3}")
    result = {"open_before_commit": committed.is_open()}
    committed.commit()
    aborted = transactional.begin_txn()
    aborted.write_event("aborted:0", "key-0")
    aborted.abort()
    result["open_after_abort"] = aborted.is_open()
    group = m.create_reader_group("txn-readers", scope, stream)
    result["received"] = asyncio.run(read_group(group, 1, 50, 60))[0]
    return result


def scenario_write_transaction(uri: str, args: dict) -> dict:
    """Commits one transaction of ``count`` events over ``keys`` keys (and aborts another)."""
    m = manager(uri)
    transactional = m.create_transaction_writer(args["scope"], args["stream"], 11)
    committed = transactional.begin_txn()
    for number in range(args["count"]):
        key = number % args["keys"]
        committed.write_event(event_text(key, number // args["keys"]), f"key-{key}")
    committed.commit()
    aborted = transactional.begin_txn()
    aborted.write_event("aborted:0", "key-0")
    aborted.abort()
    return {"committed": args["count"]}


def scenario_write_timed(uri: str, args: dict) -> dict:
    """Writes keyed events (``write_event`` waiting for each ack) until ``seconds`` have passed or the file
    ``stop_file`` exists, at most ``rate`` a second; returns how many and the gaps between acks of at least
    ``gap`` seconds as [start, length] on the host's monotonic clock (the same clock as the test's)."""
    m = manager(uri)
    if args.get("create"):
        m.create_scope(args["scope"])
        m.create_stream(args["scope"], args["stream"], args.get("segments", 1))
    writer = m.create_writer(args["scope"], args["stream"], 0)
    keys, interval, gap = args.get("keys", 4), 1.0 / args.get("rate", 200), args.get("gap", 0.2)
    deadline = time.monotonic() + args["seconds"]
    stop_file = args.get("stop_file")
    number, last, gaps = 0, time.monotonic(), []
    while time.monotonic() < deadline and not (stop_file and os.path.exists(stop_file)):
        key = number % keys
        writer.write_event(event_text(key, number // keys), f"key-{key}")
        number += 1
        now = time.monotonic()
        if now - last >= gap:
            gaps.append([last, now - last])
        last = now
        time.sleep(max(0.0, interval - (time.monotonic() - now)))
    writer.flush()
    return {"written": number, "keys": keys, "gaps": gaps}


SCENARIOS = {name[len("scenario_"):]: function for name, function in globals().items()
             if name.startswith("scenario_")}


def main() -> None:
    name, uri, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    try:
        result = SCENARIOS[name](uri, args)
    except Exception:  # noqa: BLE001 - reported to the test, which fails with it
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(3)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip the binding's runtime teardown, which can hang on open connections


if __name__ == "__main__":
    main()
