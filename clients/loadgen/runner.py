"""One loadgen run from start to results: set up, write for ``duration``, flush, drain, check.

Phases: *setup* (scope, streams, reader groups at the streams' tails, writers and
readers connected: before the clock starts), *write* (``duration`` seconds per step of
the rate schedule, whose start times are fixed as the clock starts; or until
stopped), *flush* (writers make every accepted event durable; transactional writers
commit their last transaction) and *drain* (readers read on until they have every
event this run wrote). Flush and drain share one budget, ``drain_timeout`` seconds
from the end of writing. A first stop request (Ctrl-C) ends the write phase early;
a second one skips what is left. Results are the JSON document of ``stats``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from coordination.retry import Backoff

from ..client import connect
from ..config import ClientConfig
from ..controller_client import parse_controller_uri
from ..errors import ControllerUnavailable, TributaryError
from ..model import ScalingPolicy, StreamConfiguration
from ..reader.reader_group import ReaderGroupConfig
from .events import EventCodec
from .options import LoadOptions
from .pacing import StepPacer
from .progress import Progress, Snapshot
from .sequence import SequenceChecker
from .stats import RunStats, Timings, results_document
from .steps import StepSchedule
from .workload import AckSampler, LoadReader, LoadWriter, TransactionalLoadWriter

if TYPE_CHECKING:
    from ..client import Client
    from ..reader.reader_group import ReaderGroup

T = TypeVar("T")

_POLL_SECONDS = 0.02
OPEN_TIMEOUT_SECONDS = 60.0  # connecting writers and readers, on top of --connect-timeout
CLOSE_TIMEOUT_SECONDS = 10.0  # leaving reader groups, deleting them
ACK_SAMPLES_PER_SECOND = 2000  # across all writers


class LoadError(Exception):
    """The run could not be done (controller unreachable, stream missing, ...); the message says why."""


class Interrupted(LoadError):
    """Stopped (Ctrl-C) before the run started: there are no results."""


class StopSignal:
    """Stop requests (Ctrl-C): the first ends writing early, the second skips flushing and draining."""

    def __init__(self) -> None:
        self.soft = asyncio.Event()
        self.hard = asyncio.Event()
        self.requests = 0

    def request(self) -> None:
        """One more request to stop."""
        self.requests += 1
        self.soft.set()
        if self.requests >= 2:
            self.hard.set()


class LoadRun:
    """One run of the load described by ``options``; ``await LoadRun(options).run()`` gives the results."""

    def __init__(self, options: LoadOptions, stop: StopSignal | None = None, progress: Progress | None = None):
        self.options = options
        self.stop = stop or StopSignal()
        self.progress = progress
        self.phase = "setup"
        self.schedule = StepSchedule(options.rate_steps, options.duration)
        self.stats = RunStats(options.stream_names, self.schedule)
        self.checker = SequenceChecker(ordered=options.keys > 0)
        self.timings: Timings | None = None
        self.tag = random.getrandbits(32)
        self.writers: list[LoadWriter] = []
        self.readers: list[LoadReader] = []
        self.groups: list[ReaderGroup] = []
        self._sampler: AckSampler | None = None
        self._stop_writing = asyncio.Event()
        self._started = 0.0

    # ------------------------------------------------------------------ the run

    async def run(self) -> dict[str, Any]:
        """Runs the load; returns the results document.

        Raises:
            LoadError: the run could not start (Interrupted if stopped while setting up).
        """
        options = self.options
        config = ClientConfig(controller_retry=Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=1.0,
                                                       attempts=None, total_seconds=options.connect_timeout))
        async with connect(options.controller, config) as client:
            try:
                await self._unless_stopped(self._setup(client))
                await self._unless_stopped(self._open(client))
                return await self._load()
            finally:
                if self._sampler is not None:
                    await self._sampler.close(timeout=0)
                await self._close_readers(client)

    async def _setup(self, client: Client) -> None:
        options = self.options
        host, port = parse_controller_uri(options.controller)
        address = f"{host}:{port}"
        try:
            async with asyncio.timeout(options.connect_timeout):
                exists = await (client.create_scope(options.scope) if options.create
                                else client.scope_exists(options.scope))
        except (TimeoutError, ControllerUnavailable) as error:
            detail = f": {error}" if str(error) else ""
            raise LoadError(f"cannot reach the controller at {address} within {options.connect_timeout:g} s "
                            f"(--connect-timeout){detail}") from None
        if not options.create and not exists:
            raise LoadError(f"scope {options.scope} does not exist (leave out --no-create to create it)")
        for name in options.stream_names:
            if options.create:
                await client.create_stream(options.scope, name,
                                           StreamConfiguration(ScalingPolicy.fixed(options.segments)))
            elif not await client.stream_exists(options.scope, name):
                raise LoadError(f"stream {options.scope}/{name} does not exist (leave out --no-create to create it)")

    async def _open(self, client: Client) -> None:
        """Makes the reader groups, readers and writers, and connects them all."""
        options, names = self.options, self.options.stream_names
        codec = EventCodec(options.event_size)
        if options.writers and not options.transaction_size:
            self._sampler = AckSampler(self.stats)
        interval_ns = int(max(1, options.writers) * 1e9 / ACK_SAMPLES_PER_SECOND)
        for index in range(options.writers):
            writer_id = (self.tag + index) % 2**32
            arguments = (index, writer_id, options.scope, names[index % len(names)], options.keys,
                         StepPacer(self.schedule, options.writers), codec, self.stats, self._sampler, interval_ns)
            if options.transaction_size:
                self.writers.append(TransactionalLoadWriter(*arguments, transaction_size=options.transaction_size,
                                                            commit_latency=self.stats.commit))
            else:
                self.writers.append(LoadWriter(*arguments))
        local = {writer.writer_id for writer in self.writers}
        if options.readers:
            group_config = ReaderGroupConfig(refresh_ms=500, reader_timeout_ms=10_000)
            for number, name in enumerate(names):
                self.groups.append(await client.create_reader_group(
                    options.scope, f"loadgen-{self.tag:08x}-{number}", [name], start_at="tail", config=group_config))
            self.readers = [LoadReader(index, self.groups[index % len(names)], names[index % len(names)], local,
                                       self.stats, self.checker) for index in range(options.readers)]
        try:
            async with asyncio.timeout(options.connect_timeout + OPEN_TIMEOUT_SECONDS):
                await asyncio.gather(*(reader.open() for reader in self.readers))
                await asyncio.gather(*(writer.open(client) for writer in self.writers))
        except TimeoutError:
            raise LoadError(f"the writers and readers could not connect within "
                            f"{options.connect_timeout + OPEN_TIMEOUT_SECONDS:g} s") from None

    async def _load(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        options = self.options
        self.timings = Timings(time.time_ns())
        self.schedule.start(self.timings.started_ns)
        self._started = loop.time()
        self.phase = "write"
        writer_tasks = [loop.create_task(self._guard(writer.run(self._stop_writing), writer.name))
                        for writer in self.writers]
        reader_tasks = [loop.create_task(self._guard(reader.run(), reader.name)) for reader in self.readers]
        progress_task = loop.create_task(self.progress.run(self.snapshot)) if self.progress else None
        drained = False
        try:
            await self._until(lambda: self.stop.soft.is_set()
                              or (bool(writer_tasks) and all(t.done() for t in writer_tasks)),
                              self._started + self.schedule.total_seconds)
            self._stop_writing.set()
            deadline = loop.time() + options.drain_timeout
            await self._until(lambda: all(task.done() for task in writer_tasks), deadline)
            self.timings.write_end_ns = time.time_ns()
            self.phase = "flush"
            await self._finish_writers(writer_tasks, deadline)
            self.timings.flush_end_ns = time.time_ns()
            self.phase = "drain"
            drained = await self._until(lambda: self._drained() or all(t.done() for t in reader_tasks), deadline) \
                and self._drained()
            self.timings.drain_end_ns = time.time_ns()
            self.phase = "done"
        finally:
            for task in [*writer_tasks, *reader_tasks, *([progress_task] if progress_task else [])]:
                task.cancel()
            await asyncio.gather(*writer_tasks, *reader_tasks, *([progress_task] if progress_task else []),
                                 return_exceptions=True)
            if self.progress:
                self.progress.close()
        return self.results(drained)

    async def _finish_writers(self, writer_tasks: list[asyncio.Task[None]], deadline: float) -> None:
        loop = asyncio.get_running_loop()
        for task in writer_tasks:
            task.cancel()  # any still stuck in a write
        finishing = [loop.create_task(self._guard(writer.finish(), f"{writer.name} flush")) for writer in self.writers]
        if not await self._until(lambda: all(task.done() for task in finishing), deadline):
            self.stats.error("flush", "the writers did not flush within --drain-timeout"
                             if not self.stop.hard.is_set() else "flush skipped (stopped)")
            for task in finishing:
                task.cancel()
            await asyncio.wait(finishing, timeout=CLOSE_TIMEOUT_SECONDS)
            await asyncio.gather(*(writer.abandon() for writer in self.writers), return_exceptions=True)
        if self._sampler is not None:
            await self._sampler.close(timeout=1.0)

    # ------------------------------------------------------------------ helpers

    async def _guard(self, coroutine: Awaitable[object], where: str) -> None:
        """Runs a worker; a failure is recorded (the run goes on without it)."""
        try:
            await coroutine
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - one worker failing is a result to report, not a crash
            self.stats.error(where, error)

    async def _until(self, condition: Callable[[], bool], deadline: float | None) -> bool:
        """Waits until ``condition()`` (True), or ``deadline`` or a hard stop (False)."""
        loop = asyncio.get_running_loop()
        while not condition():
            if self.stop.hard.is_set() or (deadline is not None and loop.time() >= deadline):
                return False
            await asyncio.sleep(_POLL_SECONDS if deadline is None else
                                max(0.0, min(_POLL_SECONDS, deadline - loop.time())))
        return True

    async def _unless_stopped(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs a setup step; a stop request abandons it (raises Interrupted)."""
        loop = asyncio.get_running_loop()
        task, stopped = loop.create_task(coroutine), loop.create_task(self.stop.soft.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_SECONDS)
            raise Interrupted("interrupted while setting up; nothing was measured")
        try:
            return task.result()
        except TributaryError as error:
            raise LoadError(str(error)) from error

    def _expected(self) -> dict[str, int]:
        expected = dict.fromkeys(self.options.stream_names, 0)
        for writer in self.writers:
            expected[writer.stream] += sum(writer.sequences.values())
        return expected

    def _drained(self) -> bool:
        if not self.readers:
            return True
        read = dict.fromkeys(self.options.stream_names, 0)
        for reader in self.readers:
            read[reader.stream] += reader.own_read
        return all(read[name] >= count for name, count in self._expected().items())

    async def _close_readers(self, client: Client) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                await asyncio.gather(*(reader.close() for reader in self.readers if hasattr(reader, "reader")),
                                     return_exceptions=True)
                for group in self.groups:
                    await client.delete_reader_group(group.scope, group.name)
        except (TimeoutError, TributaryError):
            pass  # groups are named per run: a leftover one harms nothing

    # ------------------------------------------------------------------ reporting

    def snapshot(self) -> Snapshot:
        """The run so far, for the progress line."""
        stats = self.stats
        written = stats.written
        own = sum(reader.own_read for reader in self.readers)
        step = self.schedule.step_at(time.time_ns())
        return Snapshot(self.phase, asyncio.get_running_loop().time() - self._started, self.schedule.total_seconds,
                        written, stats.written_bytes, stats.read_events, stats.read_bytes,
                        max(0, written - own) if self.readers else 0, stats.write_ack.percentile_ms(99),
                        stats.end_to_end.percentile_ms(99), stats.error_count,
                        step, len(self.schedule), self.schedule.rates[step])

    def results(self, drained: bool) -> dict[str, Any]:
        """The results document of the run (also of one cut short)."""
        sequence = None
        if self.readers:
            expected = {source: count for writer in self.writers for source, count in writer.expected().items()}
            sequence = self.checker.result(expected, {writer.writer_id for writer in self.writers})
        assert self.timings is not None, "results come after the load started"
        return results_document(self.options.as_dict(), self.stats, self.timings, sequence,
                                readers=len(self.readers), drained=drained,
                                interrupted=self.stop.requests > 0)


async def run_load(options: LoadOptions, stop: StopSignal | None = None,
                   progress: Progress | None = None) -> dict[str, Any]:

    """Runs one load (see :class:`LoadRun`) and returns its results document."""
    return await LoadRun(options, stop, progress).run()


__all__ = ["Interrupted", "LoadError", "LoadRun", "StopSignal", "run_load"]
