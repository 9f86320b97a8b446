"""Native libraries' stderr lines (gRPC's C core above all) as structured, rate-limited log records.

gRPC's core writes its own log lines straight to file descriptor 2, in absl's format
(``I1128 00:20:47.595140   14219 ssl_transport_security.cc:2563] Handshake failed ...``), one per failed
TLS handshake: a plaintext client retrying against the TLS port fills the terminal with lines that are
not JSON. :func:`capture` gives Python's own stderr a duplicate of the real one, points fd 2 at a pipe,
and a daemon thread turns each native line into a record of the logger ``tributary.native`` (level
from the line's first letter: E error, W warning, I info, F critical; other lines warning), at most
one per kind (source location, or the whole line when it has none) per ``RATE_LIMIT_SECONDS``, the next
one saying how many were ``suppressed``. The records obey ``--log-level`` like any other, unless
``GRPC_VERBOSITY`` or ``GRPC_TRACE`` is set: then whatever gRPC writes is what the user asked it for,
and every line is logged.

What must still reach the terminal does: Python tracebacks and ``click.echo(err=True)`` go through
``sys.stderr`` (the duplicate); faulthandler, enabled here, writes a fatal crash's traceback there too.
The pipe's write end is non-blocking, so a stalled reader loses native lines instead of stalling the
threads that write them; at exit fd 2 is given back and the pipe drained.
"""

from __future__ import annotations

import atexit
import dataclasses
import faulthandler
import logging
import os
import re
import select
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

RATE_LIMIT_SECONDS = 10.0
_TICK_SECONDS = 1.0  # how often the reader wakes to report the suppressed lines of a quiet kind
_LINE_MAX = 64 * 1024  # a longer line without a newline is cut
# absl / gpr: severity letter, MMDD, time, thread id, file:line] message
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+(\d+) ([^\s:\]]+:\d+)\] ?(.*)$")
_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}

log = logging.getLogger("tributary.native")
_captured: list[TextIO] = []  # the real stderr, once captured (once per process)


@dataclasses.dataclass(frozen=True)
class NativeLine:
    """One line a native library wrote to stderr, parsed."""

    level: int
    kind: str  # what rate limiting counts by: the source location, or the whole line
    message: str
    source: str | None = None
    thread: int | None = None


def parse(line: str) -> NativeLine:
    """absl's (and gRPC's older gpr) format, or any other line (level warning, counted by its text)."""
    match = _ABSL_LINE.match(line)
    if match is None:
        return NativeLine(logging.WARNING, line, line)
    letter, thread, source, message = match.groups()
    return NativeLine(_LEVELS[letter], source, message, source, int(thread))


@dataclasses.dataclass
class _Window:
    logged_at: float
    suppressed: int = 0
    last: NativeLine | None = None


class RateLimiter:
    """At most one record per kind per ``period`` seconds; the ones held back are counted, and the last of
    them is logged (with the count) when the period is over and no newer line of its kind came."""

    def __init__(self, emit: Callable[[NativeLine, int], None], period: float = RATE_LIMIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._emit = emit  # (line, how many of its kind were held back before it)
        self._period = period
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def offer(self, line: NativeLine) -> None:
        now = self._clock()
        window = self._windows.get(line.kind)
        if window is None or now - window.logged_at >= self._period:
            held = window.suppressed if window is not None else 0
            self._windows[line.kind] = _Window(now)
            self._emit(line, held)
        else:
            window.suppressed += 1
            window.last = line

    def tick(self, final: bool = False) -> None:
        """Logs the last held-back line of each kind whose period is over (``final``: of every kind)."""
        now = self._clock()
        for kind, window in list(self._windows.items()):
            if window.last is not None and (final or now - window.logged_at >= self._period):
                self._windows[kind] = _Window(now)
                self._emit(window.last, window.suppressed - 1)
            elif now - window.logged_at >= self._period:
                del self._windows[kind]  # quiet kinds are forgotten


def _log(line: NativeLine, suppressed: int) -> None:
    extra: dict[str, object] = {"source": line.source, "native_thread": line.thread}
    if suppressed:
        extra["suppressed"] = suppressed
    log.log(line.level, line.message, extra={key: value for key, value in extra.items() if value is not None})


def capture() -> TextIO | None:
    """Sends what native code writes to fd 2 through ``tributary.native``; returns the real stderr (also made
    ``sys.stderr``) for the log handler. Once per process; None when ``sys.stderr`` is not fd 2 (a test runner
    holds it) and nothing is done."""
    if _captured:
        return _captured[0]
    try:
        if sys.stderr is None or sys.stderr.fileno() != 2:
            return None
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both OSError and ValueError
        return None
    sys.stderr.flush()
    real = os.fdopen(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                     errors="backslashreplace")
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    os.dup2(write_end, 2)
    os.close(write_end)
    sys.stderr = real
    faulthandler.enable(file=real)
    if os.environ.get("GRPC_VERBOSITY") or os.environ.get("GRPC_TRACE"):
        log.setLevel(logging.DEBUG)  # the user asked gRPC for these lines: show all of them
    limiter = RateLimiter(_log)
    reader = threading.Thread(target=_pump, args=(read_end, limiter), name="native-stderr", daemon=True)
    reader.start()
    atexit.register(_release, real, reader)
    _captured.append(real)
    return real


def _pump(read_end: int, limiter: RateLimiter) -> None:
    """The reader thread: lines from the pipe to records until every write end is closed."""
    pending = b""
    try:
        while True:
            if select.select([read_end], [], [], _TICK_SECONDS)[0]:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > _LINE_MAX:
                    lines, pending = [*lines, pending], b""
                for line in lines:
                    _offer(limiter, line)
            _guarded(limiter.tick)
        if pending:
            _offer(limiter, pending)
        _guarded(lambda: limiter.tick(final=True))
    finally:
        os.close(read_end)


def _offer(limiter: RateLimiter, raw: bytes) -> None:
    text = raw.decode("utf-8", "backslashreplace").rstrip("\r")
    if not text.strip():
        return
    line = parse(text)
    if log.isEnabledFor(line.level):
        _guarded(lambda: limiter.offer(line))


def _guarded(action: Callable[[], None]) -> None:
    """The reader must not die (the writers would lose every later line): a failed record is skipped."""
    try:
        action()
    except Exception:  # noqa: BLE001 - logging itself failed; nothing better to report it to
        pass


def _release(real: TextIO, reader: threading.Thread) -> None:
    """At exit: fd 2 is the real stderr again (closing the pipe's write end), and what is in the pipe is logged."""
    try:
        os.dup2(real.fileno(), 2)
    except OSError:
        return
    reader.join(timeout=2.0)
