"""Runs the real pravega client's event writer; executed as a subprocess by the capture test.

The binding blocks (holding the GIL) until the segment store answers, so it runs in its own
process that the test can kill. Usage: python pravega_writer_driver.py CONTROLLER_PORT SCOPE STREAM
"""

import sys

import pravega_client


def main() -> None:
    controller_port, scope, stream = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    manager = pravega_client.StreamManager(f"tcp://127.0.0.1:{controller_port}", False, False)
    manager.create_scope(scope)
    manager.create_stream(scope, stream, 1)
    writer = manager.create_writer(scope, stream)
    writer.write_event("hello")
    writer.write_event_bytes(b"\x00\x01\xfe\xff binary", "key-1")
    writer.write_event("x" * 100_000, "key-2")
    writer.flush()
    print("flushed", flush=True)


if __name__ == "__main__":
    main()
