"""What every benchmark shares: figures over several runs (min/median/max), percentiles, and bars that set
the exit status.

A benchmark measures its same-run baselines and its figures once per run, records them in a
``Figures``, prints them, and judges its bars on the spread: ``Bars.check`` prints one line
per bar and ``Bars.exit_code()`` is 1 when any bar missed (a benchmark ends with
``sys.exit(bars.exit_code())``).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable


def percentile(samples: list[float], fraction: float) -> float:
    """The sample at ``fraction`` (0.99: p99) of the sorted samples (nearest rank, no interpolation)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Figures:
    """Named figures, one value per run."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}
        self.formats: dict[str, Callable[[float], str]] = {}

    def add(self, name: str, value: float, fmt: Callable[[float], str] = "{:,.2f}".format) -> None:
        self.values.setdefault(name, []).append(value)
        self.formats.setdefault(name, fmt)

    def min(self, name: str) -> float:
        return min(self.values[name])

    def median(self, name: str) -> float:
        return statistics.median(self.values[name])

    def max(self, name: str) -> float:
        return max(self.values[name])

    def spread(self, name: str) -> str:
        """``min / median / max`` of the figure (its one value after a single run)."""
        values, fmt = self.values[name], self.formats[name]
        if len(values) == 1:
            return fmt(values[0])
        return f"{fmt(min(values))} / {fmt(statistics.median(values))} / {fmt(max(values))}"

    def print(self, title: str) -> None:
        runs = max(len(values) for values in self.values.values())
        print(f"{title} ({runs} run{'s' if runs > 1 else ''}{', min / median / max' if runs > 1 else ''}):")
        width = max(len(name) for name in self.values)
        for name in self.values:
            print(f"  {name:<{width}}  {self.spread(name)}")


class Bars:
    """Bars judged once, each printed as PASS or FAIL."""

    def __init__(self) -> None:
        self.missed: list[str] = []

    def check(self, name: str, passed: bool, measured: str = "") -> bool:
        print(f"bar: {name}{f' (measured {measured})' if measured else ''}: {'PASS' if passed else 'FAIL'}")
        if not passed:
            self.missed.append(name)
        return passed

    def exit_code(self) -> int:
        if self.missed:
            print(f"{len(self.missed)} bar(s) missed: " + "; ".join(self.missed))
        return 1 if self.missed else 0


def run_benchmark(title: str, description: str, one_run: Callable[..., None],
                  judge: Callable[[Figures], Bars], add_options: Callable[[argparse.ArgumentParser], None] | None = None,
                  seconds: float = 3.0) -> None:
    """The usual ``main``: ``--seconds``, ``--runs`` and ``--dir`` options, ``one_run(scratch, seconds, figures)``
    per run in a fresh scratch directory on the disk under test, then the figures, the bars and the exit status.
    A benchmark with options of its own adds them with ``add_options`` and gets the parsed arguments as a
    fourth argument of ``one_run``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=float, default=seconds, help="duration of each throughput phase")
    parser.add_argument("--runs", type=int, default=1, help="repetitions (figures reported as min/median/max)")
    parser.add_argument("--dir", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2] / ".bench",
                        help="scratch directory (on the disk under test)")
    if add_options is not None:
        add_options(parser)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    figures = Figures()
    for run in range(args.runs):
        scratch = pathlib.Path(tempfile.mkdtemp(dir=args.dir))
        try:
            if add_options is not None:
                one_run(scratch, args.seconds, figures, args)
            else:
                one_run(scratch, args.seconds, figures)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"run {run + 1} of {args.runs} done", file=sys.stderr)
    figures.print(title)
    sys.exit(judge(figures).exit_code())
