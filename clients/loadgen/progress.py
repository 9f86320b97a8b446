"""Showing a run as it goes, and its summary at the end.

Three kinds of progress: a live line redrawn about once a second with ``rich`` (on a
terminal), a plain line every few seconds (``--no-progress``, or stdout is not a
terminal), or nothing (``--quiet``). Rates on the line are over the last interval;
the p99 latencies are of the whole run so far. A run with a rate schedule of several
steps shows the step it is in, and its summary has a table of the steps after the
overall one: the latency against the load, step by step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .stats import MB, PERCENTILES


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Where the run is: its phase, totals so far, latency p99s (ms, None before any) and the step of the schedule
    (from 0, of ``steps``) with its offered rate (0: unlimited)."""

    phase: str
    elapsed: float
    duration: float
    written: int
    written_bytes: int
    read: int
    read_bytes: int
    lag: int
    p99_ack_ms: float | None
    p99_end_to_end_ms: float | None
    errors: int
    step: int
    steps: int
    offered: float


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _offered(events_per_second: float) -> str:
    """An offered rate as shown: ``10,000`` (events/s) or ``unlimited`` (0)."""
    return f"{events_per_second:,.0f}" if events_per_second else "unlimited"


def _step(current: Snapshot) -> str:
    """``step 2/5 10,000 ev/s | `` while a schedule of several steps is written; else nothing."""
    if current.steps < 2 or current.phase != "write":
        return ""
    unit = " ev/s" if current.offered else ""
    return f"step {current.step + 1}/{current.steps} {_offered(current.offered)}{unit} | "


class Progress:
    """Reports snapshots every ``interval`` seconds; the base class reports nothing."""

    interval = 1.0

    def __init__(self, console: Console):
        self.console = console
        self._previous: tuple[float, Snapshot] | None = None

    async def run(self, snapshot: Callable[[], Snapshot]) -> None:
        """Reports until cancelled."""
        self._previous = (time.monotonic(), snapshot())
        self.begin()
        while True:
            await asyncio.sleep(self.interval)
            now, current = time.monotonic(), snapshot()
            then, before = self._previous
            self._previous = (now, current)
            self.show(current, before, max(now - then, 1e-9))

    def begin(self) -> None:
        """Called once when reporting starts."""

    def show(self, current: Snapshot, before: Snapshot, seconds: float) -> None:
        """Called every ``interval`` with this snapshot and the one before."""

    def close(self) -> None:
        """Called once at the end (before the summary)."""

    @staticmethod
    def line(current: Snapshot, before: Snapshot, seconds: float) -> str:
        """The progress line: interval rates, lag, p99s so far, time."""
        write_rate = (current.written - before.written) / seconds
        read_rate = (current.read - before.read) / seconds
        write_mb = (current.written_bytes - before.written_bytes) / seconds / MB
        read_mb = (current.read_bytes - before.read_bytes) / seconds / MB
        remaining = max(0.0, current.duration - current.elapsed) if current.phase == "write" else 0.0
        errors = f" | errors {current.errors}" if current.errors else ""
        return (f"[{current.phase}] {current.elapsed:6.1f}s (remaining {remaining:.0f}s) | {_step(current)}"
                f"write {write_rate:,.0f} ev/s {write_mb:.2f} MB/s | read {read_rate:,.0f} ev/s {read_mb:.2f} MB/s | "
                f"lag {current.lag:,} | p99 ack {_ms(current.p99_ack_ms)} ms e2e {_ms(current.p99_end_to_end_ms)} ms"
                f"{errors}")


class PlainProgress(Progress):
    """One plain line every ``interval`` seconds (logs, pipes, CI)."""

    def __init__(self, console: Console, interval: float = 5.0):
        super().__init__(console)
        self.interval = interval

    def show(self, current: Snapshot, before: Snapshot, seconds: float) -> None:
        self.console.print(self.line(current, before, seconds), markup=False, highlight=False, soft_wrap=True)


class LiveProgress(Progress):
    """A line redrawn in place about once a second (a terminal)."""

    def __init__(self, console: Console):
        super().__init__(console)
        self._live: Live | None = None

    def begin(self) -> None:
        self._live = Live(Text("starting..."), console=self.console, auto_refresh=False, transient=False)
        self._live.start()

    def show(self, current: Snapshot, before: Snapshot, seconds: float) -> None:
        if self._live is not None:
            self._live.update(Text(self.line(current, before, seconds)), refresh=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def make_progress(mode: str, console: Console) -> Progress:
    """``"live"``, ``"plain"`` or ``"none"``."""
    if mode == "live":
        return LiveProgress(console)
    if mode == "plain":
        return PlainProgress(console)
    return Progress(console)


SUMMARY_FIELDS = (*(name for name, _ in PERCENTILES), "max")
"""The latency figures of the overall table (``p50`` ... ``max``, as in the JSON's ``p50_ms`` ...)."""
STEP_FIELDS = ("p50", "p95", "p99", "p99_9", "max")
"""The latency figures of the steps table, for write acks and end to end."""


def _label(field: str) -> str:
    """A latency figure's column name: ``p99_9`` is ``p99.9``."""
    return field.replace("_", ".")


def _latency_cells(summary: dict[str, Any] | None, fields: tuple[str, ...]) -> list[str]:
    """A latency summary's ``fields`` as table cells (all blank without a summary)."""
    return [_ms(summary.get(f"{field}_ms")) if summary else "" for field in fields]


def summary_table(results: dict[str, Any]) -> Table:
    """The final table: throughput and latency percentiles of each measurement."""
    table = Table(title="tributary loadgen", title_justify="left")
    for column in ("", "events", "events/s", "MB/s", *(f"{_label(field)} ms" for field in SUMMARY_FIELDS)):
        table.add_column(column, justify="left" if not column else "right")
    totals, rates, latency = results["totals"], results["rates"], results["latency_ms"]

    def row(name: str, events: int, events_per_second: float | None, mb_per_second: float | None,
            summary: dict[str, Any] | None) -> None:

        cells = _latency_cells(summary, SUMMARY_FIELDS)
        table.add_row(name, f"{events:,}", "" if events_per_second is None else f"{events_per_second:,.0f}",
                      "" if mb_per_second is None else f"{mb_per_second:.2f}", *cells)

    writers, readers = results["options"]["writers"], results["options"]["readers"]
    if writers:
        row("written", totals["events_written"], rates["write_events_per_second"], rates["write_mb_per_second"], None)
    if latency["write_ack"]["count"]:
        row("  write ack (sampled)", latency["write_ack"]["count"], None, None, latency["write_ack"])
    if latency["transaction_commit"]["count"]:
        row("  txn commit", latency["transaction_commit"]["count"], None, None, latency["transaction_commit"])
    if readers:
        row("read", totals["events_read"], rates["read_events_per_second"], rates["read_mb_per_second"], None)
    if latency["end_to_end"]["count"]:
        row("  end-to-end", latency["end_to_end"]["count"], None, None, latency["end_to_end"])
    return table


def steps_table(results: dict[str, Any]) -> Table:
    """One row per step of the schedule: offered and achieved events/s, write-ack and end-to-end latency (ms)."""
    table = Table(title="steps (ms; write ack sampled; end-to-end of the events sent in the step)",
                  title_justify="left")
    latencies = (f"{kind}\n{_label(field)}" for kind in ("ack", "e2e") for field in STEP_FIELDS)
    for column in ("\nstep", "offered\nev/s", "achieved\nev/s", *latencies):
        table.add_column(column, justify="right", overflow="fold")  # squeezed: wrap a number, never cut it
    for number, step in enumerate(results["steps"], 1):
        latency = step["latency_ms"]
        table.add_row(str(number), _offered(step["offered_events_per_second"]),
                      f"{step['write_events_per_second']:,.0f}", *_latency_cells(latency["write_ack"], STEP_FIELDS),
                      *_latency_cells(latency["end_to_end"], STEP_FIELDS))
    return table


def summary_lines(results: dict[str, Any]) -> list[str]:
    """The lines under the table: the sequence check, drain, errors."""
    lines = []
    sequence = results.get("sequence")
    if sequence is not None:
        verdict = "OK" if sequence["ok"] else "FAILED"
        lines.append(f"sequence check ({sequence['mode']}): {verdict}: {sequence['events_checked']:,} events from "
                     f"{sequence['sources']:,} sources, {sequence['missing']:,} missing in {sequence['gaps']:,} gaps, "
                     f"{sequence['duplicates']:,} duplicates, {sequence['out_of_order']:,} out of order, "
                     f"{sequence['unexpected']:,} unexpected, {sequence['foreign']:,} not from a loadgen")
    drain = results["phases"]["drain"]
    if drain["complete"] is False:
        lines.append("readers did not get everything: stopped before they caught up" if results["interrupted"] else
                     f"readers did not get everything within the drain timeout "
                     f"({results['options']['drain_timeout']} s)")
    if results["interrupted"]:
        lines.append("interrupted: the run was stopped early")
    errors = results["errors"]
    if errors["count"]:
        lines.append(f"{errors['count']} error(s); first: {errors['first'][0]['where']}: {errors['first'][0]['error']}")
    return lines


def print_summary(console: Console, results: dict[str, Any]) -> None:
    """Prints the table (and with several steps, the steps table) and the lines under them."""
    console.print(summary_table(results))
    if len(results["steps"]) > 1:
        console.print(steps_table(results))
    for line in summary_lines(results):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


__all__ = ["LiveProgress", "PlainProgress", "Progress", "Snapshot", "make_progress", "print_summary",
           "steps_table", "summary_lines", "summary_table"]
