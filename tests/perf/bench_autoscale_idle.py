"""What idle segments cost the controller once auto-scaling is driven by load reports (issue 16, must-show 2).

`tributary segmentstore` and `tributary controller` run as separate processes. Each measurement creates
four streams with an events/s scaling policy (target 100, minNumSegments = their segment count, so nothing
merges) holding 100 segments in all, or 10,000; no event is written. The segment store's idle window is
shortened to ``--idle-window`` seconds (the other windows, the cooldown, the mute and the 5 s tick keep their
defaults), so every segment is reported idle once -- the one report an idle segment ever costs -- and the
controller records the cold marks; the benchmark waits until the report segments hold a report per
segment and a settle pause has passed. Then it reads the controller's CPU time (utime + stime of
/proc/<pid>/stat, all threads) before and after ``--intervals`` intervals of ``--interval`` seconds (the
old sampler's period was 10 s) and divides by their count: an idle controller uses about a millisecond
per second, so one interval alone is a tick or two of /proc's 10 ms resolution. The same figure from every
thread's schedstat (ns) and the segment store's CPU are printed for information. Runs alternate which
size goes first.

Bar: the controller's CPU per interval with 10,000 idle segments is at most 2.0 x its CPU with 100
(median over ``--runs``; min / median / max printed). Exits 1 when the bar misses.

Usage: python tests/perf/bench_autoscale_idle.py [--runs N] [--interval S] [--intervals K] [--idle-window S]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.perf.bars import Bars, Figures, run_benchmark
from tests.support.processes import ServerProcess, free_port, kill_process, listening, wait_until_ready

STREAMS = 4
CONTAINERS = 4
SIZES = (100, 10_000)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_seconds_precise(pid: int) -> float:
    """Time on CPU of every thread of a process so far, in ns resolution (first field of each thread's schedstat)."""
    total = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def start_controller(store_port: int, log_path: pathlib.Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "tributary", "controller", "--port", str(port),
                                    "--segment-store", f"127.0.0.1:{store_port}", "--containers", str(CONTAINERS)],
                                   stdout=log, stderr=log)
    wait_until_ready(process, listening(port), f"controller on port {port}", 60)
    return process, port


async def create_streams(controller_port: int, segments: int) -> None:
    from clients.model import ScalingPolicy, StreamConfiguration
    from tests.support.sdk import sdk

    per_stream = segments // STREAMS
    async with sdk.connect(f"tcp://127.0.0.1:{controller_port}") as client:
        await client.create_scope("idle")
        for index in range(STREAMS):
            policy = ScalingPolicy.by_event_rate(100, 2, per_stream)
            assert await client.create_stream("idle", f"s{index}", StreamConfiguration(policy))


async def reports_stored(store_port: int) -> int:
    """How many load reports the store's report segments hold."""
    from clients import errors
    from clients.segment_store_client import SegmentStoreClient
    from wire import naming
    from wire.load_reports import ReportSplitter

    client = SegmentStoreClient(("127.0.0.1", store_port))
    total = 0
    try:
        for container in range(CONTAINERS):
            name = naming.load_report_segment_name(container)
            try:
                info = await client.segment_info(name)
            except errors.NoSuchSegment:
                continue
            splitter, offset = ReportSplitter(), info.start_offset
            while offset < info.write_offset:
                read = await client.read_segment(name, offset, min(1 << 20, info.write_offset - offset))
                total += len(splitter.feed(read.data))
                offset += len(read.data)
    finally:
        await client.close()
    return total


def wait_for_reports(store_port: int, expected: int, timeout: float) -> float:
    """Waits until the report segments hold ``expected`` reports. Returns the seconds it took."""
    import uvloop

    started = time.monotonic()
    while uvloop.run(reports_stored(store_port)) < expected:
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"fewer than {expected} load reports after {timeout} s")
        time.sleep(1.0)
    return time.monotonic() - started


def measure(scratch: pathlib.Path, segments: int, args: argparse.Namespace) -> dict[str, float]:
    """The controller's and the segment store's CPU seconds per interval (the total over the measured
    intervals divided by their count: /proc/<pid>/stat counts in 10 ms ticks) with ``segments`` idle
    rate-policy segments, the controller's also from every thread's schedstat (ns), and the seconds until
    every segment was reported idle."""
    import uvloop

    home = scratch / str(segments)
    home.mkdir()
    store = ServerProcess("segmentstore", home / "data", log_path=home / "store.log", extra_args=[
        "--containers", str(CONTAINERS), "--auto-scale-windows", f"120,300,600,{args.idle_window}"]).start(60)
    controller = None
    try:
        controller, controller_port = start_controller(store.port, home / "controller.log")
        uvloop.run(create_streams(controller_port, segments))
        reported = wait_for_reports(store.port, segments, timeout=args.idle_window + 120)
        time.sleep(args.settle)
        assert store.process is not None
        pids = (controller.pid, store.process.pid)
        before = [cpu_seconds(pid) for pid in pids] + [cpu_seconds_precise(controller.pid)]
        time.sleep(args.interval * args.intervals)
        after = [cpu_seconds(pid) for pid in pids] + [cpu_seconds_precise(controller.pid)]
        if controller.poll() is not None:
            raise RuntimeError(f"the controller exited ({controller.returncode}); see {home / 'controller.log'}")
        controller_cpu, store_cpu, controller_precise = ((b - a) / args.intervals for a, b in zip(before, after,
                                                                                                   strict=True))
        return {"controller": controller_cpu, "store": store_cpu, "precise": controller_precise, "reported": reported}
    finally:
        kill_process(controller)
        store.kill()


_runs = [0]


def one_run(scratch: pathlib.Path, seconds: float, figures: Figures, args: argparse.Namespace) -> None:
    _runs[0] += 1
    order = SIZES if _runs[0] % 2 else tuple(reversed(SIZES))
    found = {segments: measure(scratch, segments, args) for segments in order}
    per = f"per {args.interval:g} s"
    for segments in SIZES:
        figures.add(f"{segments:,} idle segments: controller CPU ms {per} (stat)", found[segments]["controller"] * 1000,
                    "{:,.1f}".format)
        figures.add(f"{segments:,} idle segments: controller CPU ms {per} (schedstat)",
                    found[segments]["precise"] * 1000, "{:,.2f}".format)
        figures.add(f"{segments:,} idle segments: segment store CPU ms {per} (stat)", found[segments]["store"] * 1000,
                    "{:,.1f}".format)
        figures.add(f"{segments:,} idle segments: s until all reported idle", found[segments]["reported"],
                    "{:,.1f}".format)
    small, large = found[SIZES[0]], found[SIZES[1]]
    tick = 1 / CLOCK_TICKS / args.intervals  # one tick over the measurement: the ratio's floor
    figures.add(RATIO, large["controller"] / max(small["controller"], tick))
    figures.add(RATIO_PRECISE, large["precise"] / small["precise"])


RATIO = "controller CPU ratio 10,000 / 100 (stat)"
RATIO_PRECISE = "controller CPU ratio 10,000 / 100 (schedstat)"


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds of one interval (the figures are per interval)")
    parser.add_argument("--intervals", type=int, default=12, help="intervals measured per size")
    parser.add_argument("--idle-window", type=float, default=20.0,
                        help="the segment store's idle window (seconds): every segment is reported idle this long "
                             "after its creation, before the measurement")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between the reports and the measurement")


def judge(figures: Figures) -> Bars:
    verdict = Bars()
    verdict.check("controller CPU per interval with 10,000 idle segments <= 2.0 x with 100 (median, stat)",
                  figures.median(RATIO) <= 2.0, figures.spread(RATIO))
    return verdict


if __name__ == "__main__":
    run_benchmark("Controller CPU with idle rate-policy segments (report-driven auto-scaling)", __doc__ or "",
                  one_run, judge, add_options)
