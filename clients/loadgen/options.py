"""The loadgen's options: one frozen dataclass, checked as a whole when it is made.

Each refusal is an :class:`OptionError` whose message starts with the command-line
name of the option at fault (``--event-size: ...``), so the CLI can print it as it is.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any

from wire.constants import MAX_EVENT_SIZE

from ..controller_client import parse_controller_uri
from ..errors import InvalidArgument
from ..model import check_scope_name, check_stream_name
from .events import HEADER_SIZE

MAX_SEGMENTS = 1000
MAX_STREAMS = 1000
MAX_TASKS = 10_000  # writers, readers: each is an asyncio task with its own connections
MAX_TRANSACTION_SIZE = 1_000_000
MAX_RATE_STEPS = 100
RATE_MESSAGE = "must be a number of events per second >= 0 (0: unlimited), or a comma-separated list of them"


class OptionError(ValueError):
    """An option value that makes no sense; ``option`` is its command-line name (``--rate``)."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """Everything one loadgen run is told (the CLI's options, same names with ``_``).

    * ``streams`` streams named ``stream`` (one) or ``stream-0`` ... (several), each with
      ``segments`` fixed segments when ``create`` makes them;
    * ``writers`` writers and ``readers`` readers spread round-robin over the streams
      (the readers of one stream form one reader group, started at the stream's tail);
    * events of ``event_size`` bytes at ``rate`` events/s in total (0: as fast as possible)
      for ``duration`` seconds, with ``keys`` routing keys round-robin (0: no key), in
      transactions of ``transaction_size`` events (0: no transactions); ``rate`` may be a
      schedule, a tuple of rates (see :func:`parse_rate`): one step of ``duration`` each;
    * readers then read on until they have everything, for at most ``drain_timeout`` s.
    """

    controller: str = "tcp://127.0.0.1:9090"
    scope: str = "loadgen"
    stream: str = "loadgen"
    streams: int = 1
    segments: int = 4
    create: bool = True
    writers: int = 1
    readers: int = 1
    event_size: int = 100
    rate: float | tuple[float, ...] = 1000.0
    duration: float = 10.0
    keys: int = 16
    transaction_size: int = 0
    output: pathlib.Path | None = None
    drain_timeout: float = 30.0
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        try:
            parse_controller_uri(self.controller)
        except InvalidArgument as error:
            raise OptionError("--controller", str(error)) from None
        self._check_names()
        _count("--streams", self.streams, 1, MAX_STREAMS)
        _count("--segments", self.segments, 1, MAX_SEGMENTS)
        _count("--writers", self.writers, 0, MAX_TASKS)
        _count("--readers", self.readers, 0, MAX_TASKS)
        if self.writers == 0 and self.readers == 0:
            raise OptionError("--writers", "with --writers 0 and --readers 0 there is nothing to do")
        if 0 < self.readers < self.streams:
            raise OptionError("--readers", f"{self.readers} reader(s) cannot cover {self.streams} streams: "
                                           f"use 0 or at least --streams")
        _count("--event-size", self.event_size, HEADER_SIZE, MAX_EVENT_SIZE,
               f"must be between {HEADER_SIZE} bytes (the loadgen's event header) and {MAX_EVENT_SIZE} (8 MiB)")
        self._check_rate()
        _number("--duration", self.duration, "must be a number of seconds > 0", minimum=0, strict=True)
        _count("--keys", self.keys, 0, 1_000_000)
        _count("--transaction-size", self.transaction_size, 0, MAX_TRANSACTION_SIZE)
        if self.transaction_size and not self.writers:
            raise OptionError("--transaction-size", "transactions need writers (--writers is 0)")
        _number("--drain-timeout", self.drain_timeout, "must be a number of seconds >= 0", minimum=0)
        _number("--connect-timeout", self.connect_timeout, "must be a number of seconds > 0", minimum=0,
                strict=True)
        if self.output is not None:
            parent = pathlib.Path(self.output).parent
            if pathlib.Path(self.output).is_dir():
                raise OptionError("--output", f"{self.output} is a directory")
            if not parent.is_dir():
                raise OptionError("--output", f"directory {parent} does not exist")

    def _check_rate(self) -> None:
        steps = self.rate_steps
        if not 1 <= len(steps) <= MAX_RATE_STEPS:
            raise OptionError("--rate", f"a schedule has 1 to {MAX_RATE_STEPS} steps (got {len(steps)})")
        for step in steps:
            _number("--rate", step, RATE_MESSAGE, minimum=0)

    def _check_names(self) -> None:
        try:
            check_scope_name(self.scope)
        except InvalidArgument as error:
            raise OptionError("--scope", str(error)) from None
        try:
            for name in self.stream_names:
                check_stream_name(name)
        except (InvalidArgument, TypeError) as error:
            raise OptionError("--stream", str(error)) from None

    @property
    def stream_names(self) -> list[str]:
        """The streams written and read: ``stream`` alone, or ``stream-0`` ... ``stream-(N-1)``."""
        if self.streams == 1:
            return [self.stream]
        return [f"{self.stream}-{index}" for index in range(self.streams)]

    @property
    def rate_steps(self) -> tuple[float, ...]:
        """The total rate of each step of the write phase (one step for a single ``rate``)."""
        return self.rate if isinstance(self.rate, tuple) else (self.rate,)

    def as_dict(self) -> dict[str, Any]:
        """The options as JSON-ready values."""
        values = dataclasses.asdict(self)
        values["output"] = None if self.output is None else str(self.output)
        values["stream_names"] = self.stream_names
        return values


def parse_rate(text: str) -> float | tuple[float, ...]:
    """``--rate`` as given: one rate (``"5000"``) or a schedule of steps (``"1000,10000,50000"``).

    Each element must be a number; whether the numbers make sense is ``LoadOptions``'s check.
    """
    steps = []
    for element in text.split(","):
        try:
            steps.append(float(element))
        except ValueError:
            raise OptionError("--rate", f"{RATE_MESSAGE} ({element.strip()!r} is not a number)") from None
    return steps[0] if len(steps) == 1 else tuple(steps)


def _count(option: str, value: object, lowest: int, highest: int, message: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(option, f"must be a whole number, not {value!r}")
    if not lowest <= value <= highest:
        raise OptionError(option, (message or f"must be between {lowest} and {highest}") + f" (got {value})")


def _number(option: str, value: object, message: str, *, minimum: float, strict: bool = False) -> None:

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < minimum or (strict and value == minimum):
        raise OptionError(option, f"{message} (got {value!r})")


__all__ = ["MAX_RATE_STEPS", "MAX_SEGMENTS", "LoadOptions", "OptionError", "parse_rate"]
