"""tributary.native_log: native stderr lines (absl's format, as gRPC's core writes them) become structured
records, at most one per kind per period with a count of the ones held back; and in a real process, fd 2
carries them through the logger while a Python crash's traceback still reaches the real stderr."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest

from tributary.native_log import NativeLine, RateLimiter, parse

HANDSHAKE = ("I1128 00:20:47.595140   14219 ssl_transport_security.cc:2563] Handshake failed with error "
             "SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER")


def test_absl_lines_are_parsed_and_others_kept_whole():
    line = parse(HANDSHAKE)
    assert line == NativeLine(logging.INFO, "ssl_transport_security.cc:2563", line.message,
                              "ssl_transport_security.cc:2563", 14219)
    assert line.message.startswith("Handshake failed with error SSL_ERROR_SSL")
    assert parse("E0000 00:00:1712345678.123456    7 chttp2_server.cc:100] bad").level == logging.ERROR
    assert parse("W1128 00:26:01.349047   21577 log.cc:102] Log level INFO").level == logging.WARNING
    other = parse("something else entirely")
    assert (other.level, other.kind, other.source) == (logging.WARNING, "something else entirely", None)


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_record_per_kind_per_period_with_the_count_held_back():
    clock, emitted = FakeClock(), []
    limiter = RateLimiter(lambda line, held: emitted.append((line.message, held)), period=10.0, clock=clock)
    for n in range(5):
        limiter.offer(NativeLine(logging.INFO, "a.cc:1", f"a{n}"))
        clock.now += 1
    limiter.offer(NativeLine(logging.INFO, "b.cc:2", "b0"))  # another kind is not held back by a's period
    limiter.tick()
    assert emitted == [("a0", 0), ("b0", 0)]
    clock.now = 1010.0
    limiter.tick()  # a's period is over: the last held-back line, with how many others were held back
    assert emitted[2:] == [("a4", 3)]
    limiter.offer(NativeLine(logging.INFO, "a.cc:1", "a5"))  # within the new period (it started at the tick)
    clock.now = 1025.0
    limiter.offer(NativeLine(logging.INFO, "a.cc:1", "a6"))  # period over, nothing flushed by a tick: count kept
    assert emitted[3:] == [("a6", 1)]


def test_at_the_end_every_held_back_line_is_flushed():
    clock, emitted = FakeClock(), []
    limiter = RateLimiter(lambda line, held: emitted.append((line.message, held)), period=10.0, clock=clock)
    for n in range(3):
        limiter.offer(NativeLine(logging.ERROR, "a.cc:1", f"a{n}"))
    limiter.tick(final=True)
    assert emitted == [("a0", 0), ("a2", 1)]


@pytest.mark.process
def test_a_process_logs_native_lines_as_json_and_still_shows_its_traceback():
    """What C code writes to fd 2 comes out as JSON records (rate-limited); a Python exception's traceback and
    the command's own messages (sys.stderr) come out as they are."""
    program = textwrap.dedent(f"""
        import os, sys
        from tributary import logs
        logs.configure("info")
        for _ in range(4):
            os.write(2, {(HANDSHAKE + chr(10)).encode()!r})
        print("a message of the command's own", file=sys.stderr)
        raise RuntimeError("boom")
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert "a message of the command's own" in lines
    assert "RuntimeError: boom" in lines and "Traceback (most recent call last):" in lines
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert [(record["logger"], record["level"], record["source"], record.get("suppressed")) for record in records] \
        == [("tributary.native", "info", "ssl_transport_security.cc:2563", None),
            ("tributary.native", "info", "ssl_transport_security.cc:2563", 2)]
    assert not any(line.startswith("I1128") for line in lines)
