"""Writes sensor readings for spark_io.examples.sensor_totals, with the SDK.

Reading n (n = --first, ..., --first + --count - 1) is the event
  {"sensor": "s-<n mod --sensors>", "value": n, "time": --start + n}
(JSON, UTF-8; time in seconds since the epoch, so one reading a second),
written with the sensor as routing key. The scope and the stream are created
if missing (the stream with --segments fixed segments). Returns once every
reading is durable.

    python -m spark_io.examples.sensor_readings --scope demo --stream readings --count 300
    python -m spark_io.examples.sensor_readings --scope demo --stream readings --count 300 --first 300
"""

from __future__ import annotations

import argparse
import asyncio
import json

START = 1704067200  # 2024-01-01 00:00:00 UTC, on a minute


def reading(number: int, sensors: int, start: float) -> tuple[bytes, str]:
    """Reading ``number``: its event and its routing key."""
    sensor = f"s-{number % sensors}"
    return json.dumps({"sensor": sensor, "value": number, "time": start + number}).encode(), sensor


async def write(controller: str, scope: str, stream: str, numbers: range, *, sensors: int = 3,
                start: float = START, segments: int = 2) -> None:
    from clients.client import connect
    from clients.model import ScalingPolicy, StreamConfiguration

    async with connect(controller) as client:
        await client.create_scope(scope)
        await client.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
        async with client.create_writer(scope, stream) as writer:
            events = [reading(number, sensors, start) for number in numbers]
            await writer.write_many([event for event, _ in events], [key for _, key in events])
            await writer.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spark_io.examples.sensor_readings",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controller", default="tcp://127.0.0.1:9090",
                        help="the controller's URI (default: %(default)s)")
    parser.add_argument("--scope", required=True)
    parser.add_argument("--stream", required=True, help="the stream of readings")
    parser.add_argument("--count", type=int, required=True, help="how many readings to write")
    parser.add_argument("--first", type=int, default=0, help="the number of the first reading (default: %(default)s)")
    parser.add_argument("--sensors", type=int, default=3, help="how many sensors (default: %(default)s)")
    parser.add_argument("--start", type=float, default=START,
                        help="the time of reading 0, seconds since the epoch (default: %(default)s, 2024-01-01 UTC)")
    parser.add_argument("--segments", type=int, default=2,
                        help="segments of the stream, if it is created (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.count < 0 or args.first < 0 or args.sensors < 1 or args.segments < 1:
        parser.error("--count and --first must be 0 or more, --sensors and --segments 1 or more")
    asyncio.run(write(args.controller, args.scope, args.stream, range(args.first, args.first + args.count),
                      sensors=args.sensors, start=args.start, segments=args.segments))
    print(f"wrote {args.count} readings to {args.scope}/{args.stream}")


if __name__ == "__main__":
    main()
