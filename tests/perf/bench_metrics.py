"""What metrics cost: a segment store's append throughput with its metrics off, and on while a scraper
reads /metrics every second (as Prometheus would), measured in the same run.

1 KiB events from 8 batching writers (bench_appends.py) against `tributary segmentstore`, once with no
``--metrics-port`` (hot-path metrics off) and once with one (on, scraped by a separate process). Bar (issue #15): the
throughput with metrics on is at least 0.98 x the throughput with them off (median of ``--runs``).
Exits 1 when the bar misses.

Usage: python tests/perf/bench_metrics.py [--seconds S] [--runs N] [--dir DIR]
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.perf.bars import Bars, Figures, run_benchmark  # noqa: E402
from tests.perf.bench_appends import throughput  # noqa: E402
from tests.support.processes import ServerProcess, free_port, kill_process  # noqa: E402


_SCRAPER = """
import sys, time, urllib.request
url, count = sys.argv[1], 0
while True:
    time.sleep(1.0)
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()
    count += 1
    print(count, flush=True)
"""


def measure(scratch: pathlib.Path, seconds: float, metrics_port: int | None) -> tuple[float, int]:
    """(events/s, scrapes made) of one segment store; the scraper is a process of its own, as Prometheus is."""
    import uvloop

    extra = ["--metrics-port", str(metrics_port)] if metrics_port is not None else []
    server = ServerProcess("segmentstore", scratch / ("on" if extra else "off"), extra_args=extra).start(timeout=60)
    scraper = None
    if metrics_port is not None:
        scraper = subprocess.Popen([sys.executable, "-c", _SCRAPER, f"http://127.0.0.1:{metrics_port}/metrics"],
                                   stdout=subprocess.PIPE, text=True)
    try:
        events, _ = uvloop.run(throughput(server.port, 8, 1024, seconds, "metrics"))
    finally:
        scrapes = 0
        if scraper is not None:
            kill_process(scraper)
            lines = scraper.stdout.read().split() if scraper.stdout is not None else []
            scrapes = int(lines[-1]) if lines else 0
        server.terminate()
    return events, scrapes


_runs = [0]


def one_run(scratch: pathlib.Path, seconds: float, figures: Figures) -> None:
    """Off then on in even runs, on then off in odd ones (whatever the order itself costs evens out)."""
    _runs[0] += 1
    if _runs[0] % 2:
        off, _ = measure(scratch, seconds, None)
        on, scrapes = measure(scratch, seconds, free_port())
    else:
        on, scrapes = measure(scratch, seconds, free_port())
        off, _ = measure(scratch, seconds, None)
    figures.add("metrics off: 1 KiB x 8 writers, events/s", off, "{:,.0f}".format)
    figures.add("metrics on, scraped every second: events/s", on, "{:,.0f}".format)
    figures.add("scrapes during the run", scrapes, "{:.0f}".format)
    figures.add("on / off", on / off)


def judge(figures: Figures) -> Bars:
    verdict = Bars()
    verdict.check("metrics on >= 0.98 x off (median)", figures.median("on / off") >= 0.98, figures.spread("on / off"))
    return verdict


def main() -> None:
    run_benchmark("bench_metrics", __doc__.splitlines()[0], one_run, judge, seconds=5.0)


if __name__ == "__main__":
    main()
