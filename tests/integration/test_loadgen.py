"""`tributary loadgen` as a child process against a standalone: counts, latencies, achieved rate and the
sequence check in its JSON results; a schedule of rate steps, each measured on its own; transactions; Ctrl-C;
nonsense options and an unreachable controller refused with a message naming the option or the address. Plus
the pieces whose verdicts the runs rely on (the sequence checker sees losses, duplicates and reordering; the
token bucket paces without a sleep per event; a schedule is parsed, paced and measured step by step)."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from clients.loadgen import pacing
from clients.loadgen.events import HEADER_SIZE, EventCodec, decode
from clients.loadgen.options import MAX_RATE_STEPS, LoadOptions, OptionError, parse_rate
from clients.loadgen.pacing import StepPacer, TokenBucket
from clients.loadgen.sequence import SequenceChecker
from clients.loadgen.stats import RunStats, step_results
from clients.loadgen.steps import StepSchedule
from tests.support.processes import free_port
from tests.support.standalone import serve

pytestmark = pytest.mark.process

PERCENTILE_FIELDS = ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99_9_ms", "max_ms")
SECOND_NS = 1_000_000_000


def loadgen(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tributary", "loadgen", *args], capture_output=True, text=True,
                          check=False, timeout=timeout)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "loadgen")


def assert_sane_latency(summary: dict, count_at_least: int) -> None:
    assert summary["count"] >= count_at_least
    values = [summary[field] for field in PERCENTILE_FIELDS]
    assert all(isinstance(value, (int, float)) for value in values), summary
    assert 0 < values[0] and values[-1] < 10_000, summary
    assert all(lower <= higher for lower, higher in zip(values, values[1:])), summary
    assert 0 < summary["mean_ms"] <= summary["max_ms"]


def assert_everything_read_once(results: dict) -> None:
    totals, sequence = results["totals"], results["sequence"]
    assert totals["events_written"] > 0
    assert totals["events_read"] == totals["events_written"]
    assert totals["bytes_read"] == totals["bytes_written"] == totals["events_written"] * results["options"][
        "event_size"]
    assert totals["duplicates_read"] == 0
    assert sequence["ok"] is True, sequence
    assert (sequence["missing"], sequence["gaps"], sequence["duplicates"], sequence["out_of_order"],
            sequence["unexpected"], sequence["foreign"]) == (0, 0, 0, 0, 0, 0)
    assert sequence["events_checked"] == totals["events_written"]
    assert results["phases"]["drain"]["complete"] is True
    assert results["errors"]["count"] == 0, results["errors"]


def test_keyed_run_at_a_rate_reads_everything_once_in_order(standalone, tmp_path):
    """2 writers and 2 readers over 2 streams, 8 keys, 2000 events/s for 3 s: exit 0, every event read
    once and in key order, write and end-to-end latencies recorded, the target rate achieved."""
    output = tmp_path / "results.json"
    result = loadgen("--controller", standalone.controller_uri, "--stream", "keyed", "--streams", "2",
                     "--writers", "2", "--readers", "2", "--keys", "8", "--rate", "2000", "--duration", "3",
                     "--event-size", "200", "--output", str(output))
    assert result.returncode == 0, result.stderr
    results = json.loads(output.read_text())
    assert_everything_read_once(results)
    assert results["sequence"]["mode"] == "per writer and key, in order"
    assert results["sequence"]["sources"] == 2 * 8
    assert [stream["stream"] for stream in results["streams"]] == ["keyed-0", "keyed-1"]
    assert all(stream["written"] > 0 and stream["read"] == stream["written"] for stream in results["streams"])
    assert 0.8 * 2000 <= results["rates"]["write_events_per_second"] <= 1.2 * 2000
    assert 0.8 * 2000 * 3 <= results["totals"]["events_written"] <= 1.2 * 2000 * 3
    assert results["rates"]["write_mb_per_second"] == pytest.approx(
        results["rates"]["write_events_per_second"] * 200 / 1e6, rel=0.01)
    assert_sane_latency(results["latency_ms"]["write_ack"], 100)
    assert_sane_latency(results["latency_ms"]["end_to_end"], results["totals"]["events_read"])
    assert results["latency_ms"]["transaction_commit"]["count"] == 0
    assert results["options"]["keys"] == 8 and results["interrupted"] is False
    assert results["options"]["rate"] == 2000 and results["rates"]["target_events_per_second"] == 2000
    assert "sequence check (per writer and key, in order): OK" in result.stdout
    assert "end-to-end" in result.stdout and "p95 ms" in result.stdout
    # One rate is a schedule of one step: the step is the whole run, and there is no steps table.
    [step] = results["steps"]
    assert step["offered_events_per_second"] == 2000
    assert step["seconds"] == results["phases"]["write"]["seconds"]
    assert step["events_written"] == results["totals"]["events_written"]
    assert step["write_events_per_second"] == results["rates"]["write_events_per_second"]
    assert step["events_read"] == results["totals"]["events_read"]
    assert step["latency_ms"] == {kind: results["latency_ms"][kind] for kind in ("write_ack", "end_to_end")}
    assert "steps (" not in result.stdout


def test_rate_schedule_measures_each_step(standalone, tmp_path):
    """--rate 500,1500,3000 --duration 2: three steps of 2 s, each written at its own rate, with its own
    counts and write-ack and end-to-end percentiles that add up to the run's; the summary has a row per step
    and the progress line names the step."""
    offered = [500, 1500, 3000]
    output = tmp_path / "results.json"
    result = loadgen("--controller", standalone.controller_uri, "--stream", "steps", "--writers", "2",
                     "--readers", "2", "--keys", "4", "--rate", ",".join(map(str, offered)), "--duration", "2",
                     "--output", str(output))
    assert result.returncode == 0, result.stderr
    results = json.loads(output.read_text())
    assert_everything_read_once(results)
    assert results["options"]["rate"] == offered
    assert results["rates"]["target_events_per_second"] == pytest.approx(sum(offered) / 3, abs=0.001)
    steps, totals, latency = results["steps"], results["totals"], results["latency_ms"]
    assert [step["offered_events_per_second"] for step in steps] == offered
    assert [step["seconds"] for step in steps[:2]] == [2.0, 2.0]
    assert sum(step["seconds"] for step in steps) == pytest.approx(results["phases"]["write"]["seconds"], abs=0.002)
    for step in steps:
        assert 0.8 * step["offered_events_per_second"] <= step["write_events_per_second"] \
            <= 1.2 * step["offered_events_per_second"], step
        assert step["write_events_per_second"] == pytest.approx(step["events_written"] / step["seconds"], rel=0.001)
        assert_sane_latency(step["latency_ms"]["end_to_end"], step["events_read"])
        assert_sane_latency(step["latency_ms"]["write_ack"], 50)
    assert sum(step["events_written"] for step in steps) == totals["events_written"]
    assert sum(step["events_read"] for step in steps) == totals["events_read"]
    for kind in ("write_ack", "end_to_end"):
        assert sum(step["latency_ms"][kind]["count"] for step in steps) == latency[kind]["count"]
        assert max(step["latency_ms"][kind]["max_ms"] for step in steps) == latency[kind]["max_ms"]
    for number, step in enumerate(steps, 1):
        row = rf"│\s+{number} │\s+{step['offered_events_per_second']:,.0f} │\s+{step['write_events_per_second']:,.0f} │"
        assert re.search(row, result.stdout), result.stdout
    progress = [line for line in result.stdout.splitlines() if line.startswith("[write]")]
    assert progress and "| step 3/3 3,000 ev/s |" in progress[0], result.stdout


def test_transactions_commit_as_they_fill(standalone, tmp_path):
    """--transaction-size 25: events are committed 25 at a time (the last one partly filled), the commit
    latency is measured per transaction, and readers get every committed event once, in key order."""
    output = tmp_path / "results.json"
    result = loadgen("--controller", standalone.controller_uri, "--stream", "txn", "--writers", "2",
                     "--readers", "1", "--keys", "4", "--rate", "500", "--duration", "2",
                     "--transaction-size", "25", "--output", str(output), "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    results = json.loads(output.read_text())
    assert_everything_read_once(results)
    committed = results["totals"]["transactions_committed"]
    written = results["totals"]["events_written"]
    assert written / 25 <= committed <= written / 25 + 2  # each writer's last one may be partial
    assert results["totals"]["transactions_failed"] == 0
    assert_sane_latency(results["latency_ms"]["transaction_commit"], committed)
    assert results["latency_ms"]["write_ack"]["count"] == 0


def test_unlimited_rate_without_keys(standalone, tmp_path):
    """--rate 0 --keys 0: writers go flat out with no routing keys; the check is per writer in any order and
    still finds every event exactly once."""
    output = tmp_path / "results.json"
    result = loadgen("--controller", standalone.controller_uri, "--stream", "flat", "--writers", "2",
                     "--readers", "2", "--keys", "0", "--rate", "0", "--duration", "2", "--output", str(output))
    assert result.returncode == 0, result.stderr
    results = json.loads(output.read_text())
    assert_everything_read_once(results)
    assert results["sequence"]["mode"].startswith("per writer, in any order")
    assert results["sequence"]["sources"] == 2
    assert results["rates"]["target_events_per_second"] == 0
    assert results["rates"]["write_events_per_second"] > 2000  # far above any paced test rate


def lines_until(stream, prefix: str, timeout: float) -> str:
    """What ``stream`` gives up to and including the first line starting with ``prefix``; fails after
    ``timeout`` seconds without one (a thread reads, so a silent process cannot block the test)."""
    lines: list[str] = []

    def read() -> None:
        for line in stream:
            lines.append(line)
            if line.startswith(prefix):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert not reader.is_alive() and lines and lines[-1].startswith(prefix), f"no {prefix} line: {lines}"
    return "".join(lines)


def test_ctrl_c_stops_early_and_still_reports(standalone, tmp_path):
    """SIGINT during a 60 s run ends writing at once; the run still flushes, drains, prints the summary and
    writes its results (marked interrupted), and exits 130. Not on a terminal, progress came as plain lines
    every 5 s meanwhile."""
    output = tmp_path / "results.json"
    process = subprocess.Popen([sys.executable, "-m", "tributary", "loadgen", "--controller",
                                standalone.controller_uri, "--stream", "interrupted", "--duration", "60",
                                "--rate", "1000", "--output", str(output)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before_the_signal = lines_until(process.stdout, "[write]", timeout=30)  # the first progress line, at 5 s
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=30)
        stdout = before_the_signal + rest
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    results = json.loads(output.read_text())
    assert results["interrupted"] is True
    assert results["phases"]["write"]["seconds"] < 10
    assert_everything_read_once(results)
    assert "interrupted: the run was stopped early" in stdout
    progress = [line for line in stdout.splitlines() if line.startswith("[write]")]
    assert len(progress) == 1 and "ev/s" in progress[0] and "p99 ack" in progress[0], stdout


@pytest.mark.parametrize("args, option", [
    (["--event-size", "3"], "--event-size"),
    (["--event-size", str(8 * 1024 * 1024 + 1)], "--event-size"),
    (["--writers", "0", "--readers", "0"], "--writers"),
    (["--rate", "-5"], "--rate"),
    (["--duration", "0"], "--duration"),
    (["--segments", "1001"], "--segments"),
    (["--writers", "-1"], "--writers"),
    (["--writers", "0", "--transaction-size", "10"], "--transaction-size"),
    (["--streams", "3", "--readers", "2"], "--readers"),
    (["--controller", "http://127.0.0.1:9090"], "--controller"),
    (["--drain-timeout", "-1"], "--drain-timeout"),
    (["--rate", "1000,fast"], "--rate"),
    (["--rate", "1000,-5"], "--rate"),
    (["--rate", "1000,,2000"], "--rate"),
    (["--rate", "1000,inf"], "--rate"),
    (["--rate", ",".join(["1000"] * (MAX_RATE_STEPS + 1))], "--rate"),
])
def test_nonsense_options_are_refused_naming_the_option(args, option):
    """Options that make no sense exit with status 2 and an `error:` line naming the option, before
    connecting to anything."""
    result = loadgen("--controller", "tcp://127.0.0.1:1", *args, "--connect-timeout", "1") \
        if "--controller" not in args else loadgen(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith(f"error: {option}:"), result.stderr


def test_unreachable_controller_fails_within_the_connect_timeout():
    """Nothing listens at the controller address: exit 1 within --connect-timeout (plus start-up), with a
    message naming the address."""
    port = free_port()
    started = time.monotonic()
    result = loadgen("--controller", f"tcp://127.0.0.1:{port}", "--connect-timeout", "2", timeout=30)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"error: cannot reach the controller at 127.0.0.1:{port}" in result.stderr
    assert elapsed < 2 + 8


def test_missing_stream_without_create_is_a_clear_error(standalone):
    """--no-create on a stream that does not exist: exit 1 naming the stream. The scope is made here, so that
    the verdict does not hang on another test having made it first (it ran alone, it named the scope)."""
    import clients

    async def make_scope() -> None:
        async with clients.connect(standalone.controller_uri) as client:
            await client.create_scope("loadgen")

    asyncio.run(make_scope())
    result = loadgen("--controller", standalone.controller_uri, "--no-create", "--scope", "loadgen",
                     "--stream", "no-such-stream", "--duration", "1")
    assert result.returncode == 1
    assert "no-such-stream does not exist" in result.stderr


def test_sequence_checker_sees_losses_duplicates_and_reordering():
    """The verdict the runs assert on is not vacuous: a hole, a repeat, a late event and an event beyond
    the writer's count are each reported, and in keyless mode reordering alone is no failure."""
    checker = SequenceChecker(ordered=True)
    for sequence in (0, 1, 2, 4, 3, 3, 7, 5, 12):
        checker.observe(1, 0, sequence)
    result = checker.result({(1, 0): 10}, {1})
    assert (result["duplicates"], result["out_of_order"], result["missing"], result["gaps"],
            result["unexpected"], result["ok"]) == (1, 2, 3, 2, 1, False)
    keyless = SequenceChecker(ordered=False)
    for sequence in (2, 0, 1, 3):
        keyless.observe(7, 0xFFFFFFFF, sequence)
    verdict = keyless.result({(7, 0xFFFFFFFF): 4}, {7})
    assert verdict["ok"] is True and verdict["reordered"] == 2
    assert keyless.result({(7, 0xFFFFFFFF): 4, (8, 0xFFFFFFFF): 2}, {7, 8})["missing"] == 2


def test_token_bucket_paces_in_batches_and_events_round_trip():
    """The bucket hands out ``rate`` permits per second in batches (not one sleep per event) and caps a
    catch-up burst; an event's header decodes back to what was encoded."""
    now = [0.0]
    bucket = TokenBucket(1000, burst_seconds=0.1, clock=lambda: now[0])
    assert bucket.available(256) == 1
    now[0] = 0.050
    assert bucket.available(256) == 50
    now[0] = 10.0  # a long stall: at most one burst (100 events) is made up
    assert bucket.available(1000) == 100
    assert bucket.available(1000) == 0
    event = EventCodec(64).encode(5, 3, 42, 123456789)
    assert len(event) == 64 and HEADER_SIZE <= 64
    assert tuple(decode(event)) == (5, 3, 42, 123456789)
    assert decode(b"x" * 64) is None


async def test_a_fast_writer_sleeps_a_whole_timer_tick_not_a_spin(monkeypatch):
    """At 5,000 events/s the next token is 0.2 ms away; the loop's timers fire after 1 ms at the earliest,
    so a shorter sleep would return at once and the writer would spin. It sleeps a tick and batches."""
    sleeps: list[float] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    now = [0.0]
    monkeypatch.setattr(pacing.asyncio, "sleep", record)
    schedule = StepSchedule([5000.0], 60.0)
    schedule.start(0)
    pacer = StepPacer(schedule, writers=1, clock_ns=lambda: int(now[0] * 1e9), bucket_clock=lambda: now[0])
    assert await pacer.take(256) == 1
    sleeps.clear()
    assert await pacer.take(256) == 5  # one tick's worth, after one sleep
    assert sleeps == [0, pacing.TICK_SECONDS]  # the yield to the loop, then the tick


def test_rate_schedule_is_parsed_and_checked():
    """One number stays one rate (a run's options and JSON as before); a list is a schedule of steps; an
    element that is no number, negative or not finite, or too many steps, is refused naming --rate."""
    assert parse_rate("5000") == 5000.0
    assert parse_rate("1000, 10000,0") == (1000.0, 10000.0, 0.0)
    assert LoadOptions(rate=parse_rate("5000")).rate_steps == (5000.0,)
    assert LoadOptions(rate=(1000.0, 0.0)).rate_steps == (1000.0, 0.0)
    for text in ("", "fast", "1000,", "1000;2000"):
        with pytest.raises(OptionError, match="^--rate: "):
            parse_rate(text)
    for rate in ((1000.0, -1.0), (float("nan"),), (1000.0, float("inf")), (), (1.0,) * (MAX_RATE_STEPS + 1)):
        with pytest.raises(OptionError, match="^--rate: "):
            LoadOptions(rate=rate)
    assert len(LoadOptions(rate=(1.0,) * MAX_RATE_STEPS).rate_steps) == MAX_RATE_STEPS


def test_schedule_steps_are_found_by_wall_clock_time():
    """Steps start ``duration`` apart from the start the runner fixes; a time belongs to the step it falls
    in (a boundary to the step it starts, times before and after to the first and last), and a step's
    seconds end at the next step or, for the last, at the end of writing."""
    schedule = StepSchedule([1000.0, 5000.0, 0.0], 2.0)
    assert schedule.step_at(123) == 0 and schedule.next_start_ns(0) is None  # not started yet
    start = 1_700_000_000 * SECOND_NS
    schedule.start(start)
    assert schedule.starts_ns == (start, start + 2 * SECOND_NS, start + 4 * SECOND_NS)
    assert [schedule.step_at(start + offset) for offset in (-1, 0, 2 * SECOND_NS - 1, 2 * SECOND_NS,
                                                              4 * SECOND_NS, 100 * SECOND_NS)] == [0, 0, 0, 1, 2, 2]
    assert schedule.next_start_ns(1) == start + 4 * SECOND_NS and schedule.next_start_ns(2) is None
    write_end = start + 6 * SECOND_NS + 20_000_000
    assert [schedule.seconds_of(step, write_end) for step in range(3)] == [2.0, 2.0, 2.02]
    assert [schedule.seconds_of(step, start + SECOND_NS) for step in range(3)] == [1.0, 0.0, 0.0]  # stopped early
    assert schedule.total_seconds == 6.0
    assert schedule.average_rate == 0.0  # a step is unlimited
    assert StepSchedule([1000.0, 5000.0], 1.0).average_rate == 3000.0


def test_events_count_in_the_step_they_were_sent_in():
    """An event sent in step 1 and read (or acknowledged) in step 2 counts in step 1; writes count in the
    step of their time; the steps add up to the run's totals."""
    schedule = StepSchedule([100.0, 200.0], 1.0)
    stats = RunStats(["s"], schedule)
    start = 1_700_000_000 * SECOND_NS
    schedule.start(start)
    stats.wrote("s", 10, 1000, start + 500_000_000)
    stats.wrote("s", 7, 700, start + 1_500_000_000)
    stats.read("s", 100, start + 900_000_000, start + 1_100_000_000)  # sent in step 1, read in step 2: 200 ms
    stats.acked(start + 950_000_000, start + 1_010_000_000)  # 60 ms
    stats.read("s", 100, start + 1_200_000_000, start + 1_205_000_000)  # 5 ms
    [first, second] = step_results(stats, start + 2 * SECOND_NS)
    assert (first["events_written"], first["events_read"], second["events_written"], second["events_read"]) == \
        (10, 1, 7, 1)
    assert (first["write_events_per_second"], second["write_events_per_second"]) == (10.0, 7.0)
    milliseconds = functools.partial(pytest.approx, rel=0.001)  # HdrHistogram: 3 significant digits
    assert first["latency_ms"]["end_to_end"]["max_ms"] == milliseconds(200)
    assert first["latency_ms"]["write_ack"]["p95_ms"] == milliseconds(60)
    assert second["latency_ms"]["end_to_end"]["p50_ms"] == milliseconds(5)
    assert second["latency_ms"]["write_ack"]["count"] == 0
    assert stats.end_to_end.count == 2 and stats.written == 17 and stats.acks_sampled == 1


def test_step_pacer_switches_to_a_fresh_bucket_at_each_step():
    """Each writer gets its share of the step's rate; at a step boundary nothing saved up is carried over
    (the first permit of a step is one event, however long the writer was away), and an unlimited step hands
    out whole batches."""
    now_ns, now = [0], [0.0]
    schedule = StepSchedule([1000.0, 400.0, 0.0], 1.0)
    schedule.start(0)
    pacer = StepPacer(schedule, writers=4, clock_ns=lambda: now_ns[0], bucket_clock=lambda: now[0])

    def take() -> int:
        return asyncio.run(pacer.take(256))

    assert take() == 1 and (pacer.step, pacer.rate) == (0, 250.0)
    now[0] = 0.05
    assert take() == 12  # 250 events/s
    now[0], now_ns[0] = 10.0, SECOND_NS + 1  # away for long: a bucket kept on would have a whole burst saved up
    assert take() == 1 and (pacer.step, pacer.rate) == (1, 100.0)
    now[0] += 0.05
    assert take() == 5  # 100 events/s
    now_ns[0] = 2 * SECOND_NS
    assert take() == 256 and (pacer.step, pacer.rate) == (2, 0.0)
