"""Runs simulated clusters: ``python -m tests.simulation --seeds 1000`` runs seeds 1..1000 and prints every
failing seed; ``--seed N`` replays one (the same run, checked by its trace hash); ``--shrink`` shrinks a failing
seed to the fewest of its faults that still fail the same way, and ``--seed N --keep 2,5`` replays those;
``--plant BUG`` plants a test-only bug (``plants.PLANTS``) to show the simulation finds it; ``--topology cluster``
runs a whole cluster (ZooKeeper, log stores, two segment stores, two controllers: scenario.py) instead of a
standalone store and controller.

Every seed runs in an interpreter of its own, started the same canonical way whatever the command line,
environment and working directory were (tests/simulation/replay.py says why), so ``--seed N`` replays
exactly the run that ``--seeds`` reported.
"""

from __future__ import annotations

import compileall
import concurrent.futures
import ctypes
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import threading
import time
import warnings

import click

from tests.simulation.plants import PLANTS
from tests.simulation.plants import check as check_plants
from tests.simulation.scenario import TOPOLOGIES, RunResult
from tests.simulation.shrink import failure_kind, shrink


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--seeds", type=click.IntRange(min=1), help="run seeds FIRST..FIRST+N-1")
@click.option("--first", type=int, default=1, show_default=True, help="the first seed of --seeds")
@click.option("--seed", type=int, help="replay one seed, printing its faults")
@click.option("--keep", help="with --seed: only these of the seed's faults (their #indexes, comma-separated; "
              "'none' for none), as --shrink prints them")
@click.option("--shrink", "shrinking", is_flag=True,
              help="shrink each failing seed to the fewest of its faults that still fail the same way")
@click.option("--plant", type=click.Choice(sorted(PLANTS)), multiple=True, help="plant a test-only bug")
@click.option("--fault-seconds", type=float, default=30.0, show_default=True,
              help="virtual seconds of faults per run")
@click.option("--topology", type=click.Choice(TOPOLOGIES), default="standalone", show_default=True,
              help="what runs: a standalone store and controller, or a whole cluster")
@click.option("--stop-at-first", is_flag=True, help="stop at the first failing seed")
@click.option("--json", "as_json", is_flag=True, help="with --seed: print the result as one JSON object")
@click.option("--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default=True,
              help="seeds run at once (each in its own interpreter)")
def main(seeds: int | None, first: int, seed: int | None, keep: str | None, shrinking: bool,
         plant: tuple[str, ...], fault_seconds: float, topology: str, stop_at_first: bool, as_json: bool,
         jobs: int) -> None:
    """Deterministic simulation of a Tributary cluster (tests/simulation)."""
    if (seeds is None) == (seed is None):
        raise click.UsageError("give exactly one of --seeds N and --seed N")
    if keep is not None and seed is None:
        raise click.UsageError("--keep goes with --seed")
    try:
        check_plants(plant, topology)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    if seed is not None:
        kept = None if keep is None else _indexes(keep)
        result = _replay(seed, plant, fault_seconds, kept, topology)
        if as_json:
            click.echo(json.dumps(dataclasses.asdict(result)))
        else:
            click.echo(result.line())
            for fault in result.faults:
                click.echo(f"  {fault}")
        if shrinking and not result.ok:
            _shrink(result, plant, fault_seconds, kept, topology)
        sys.exit(0 if result.ok else 1)
    assert seeds is not None
    failed: list[RunResult] = []
    started = time.perf_counter()
    simulated = 0.0
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        runs = pool.map(lambda number: _replay(number, plant, fault_seconds, None, topology),
                        range(first, first + seeds))
        for done, result in enumerate(runs, start=1):
            simulated += result.virtual_seconds
            if not result.ok:
                failed.append(result)
                click.echo(result.line())
                if stop_at_first:
                    pool.shutdown(wait=False, cancel_futures=True)
                    break
            if done % 10 == 0 or done == seeds:
                elapsed = time.perf_counter() - started
                click.echo(f"{done}/{seeds} seeds, {len(failed)} failed, {elapsed:.0f} s, "
                           f"{simulated / elapsed:.1f} simulated seconds per wall second", err=True)
    if failed:
        click.echo(f"failing seeds: {' '.join(str(result.seed) for result in failed)} (replay: python -m "
                   f"tests.simulation --seed N{_plants(plant)}{_topology(topology)})")
        if shrinking:
            for result in failed:
                _shrink(result, plant, fault_seconds, None, topology)
        sys.exit(1)
    click.echo(f"all {seeds} seeds passed")


def _indexes(text: str) -> list[int]:
    try:
        return [] if text == "none" else sorted({int(index) for index in text.split(",")})
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of fault indexes",
                                 param_hint="--keep") from None


def _faults(count: int) -> str:
    return f"{count} fault" if count == 1 else f"{count} faults"


def _plants(plant: tuple[str, ...]) -> str:
    return "".join(f" --plant {bug}" for bug in plant)


def _topology(topology: str) -> str:
    return "" if topology == "standalone" else f" --topology {topology}"


def _shrink(failed: RunResult, plant: tuple[str, ...], fault_seconds: float, kept: list[int] | None,
            topology: str) -> None:
    """Prints the fewest of ``failed``'s faults that still fail the same way, and the command replaying them."""
    kind = failure_kind(failed.failure)
    start = list(range(failed.schedule)) if kept is None else kept
    click.echo(f"shrinking seed {failed.seed} ({len(start)} faults; each try is one run)", err=True)
    tries = 0

    def fails(subset: list[int]) -> bool:
        nonlocal tries
        tries += 1
        result = _replay(failed.seed, plant, fault_seconds, subset, topology)
        return not result.ok and failure_kind(result.failure) == kind

    def progress(subset: list[int]) -> None:
        click.echo(f"  seed {failed.seed}: still fails with {_faults(len(subset))}", err=True)

    smallest = shrink(start, fails, progress)
    keep = ",".join(map(str, smallest)) or "none"
    click.echo(f"seed {failed.seed} shrunk from {len(start)} to {_faults(len(smallest))} in {tries} runs "
               f"({kind}): python -m tests.simulation --seed {failed.seed} --keep {keep}"
               f"{_plants(plant)}{_fault_seconds(fault_seconds)}{_topology(topology)}")


def _fault_seconds(fault_seconds: float) -> str:
    return "" if fault_seconds == 30.0 else f" --fault-seconds {fault_seconds:g}"


ROOT = pathlib.Path(__file__).resolve().parents[2]
ADDR_NO_RANDOMIZE = 0x0040000  # personality(2): the kernel places memory at the same addresses every run


def _no_randomization() -> None:
    """In the child before it executes Python: address-space randomization off, where the kernel allows it."""
    libc = ctypes.CDLL(None)
    libc.personality(libc.personality(0xFFFFFFFF) | ADDR_NO_RANDOMIZE)


_COMPILED = threading.Lock()
_compiled = False
_NOT_IN_THE_CHECKOUT = r"/(\.venv|\.git|\.hypothesis|node_modules)(/|$)"


def _compile_everything_importable() -> None:
    """Writes the .pyc file of every module a run can import (the checkout's, the environment's, the standard
    library's), once per process. An interpreter that compiles a module allocates differently from one that loads
    its .pyc, so without this the first run after a change (a fresh clone: every run of CI) differs from its
    replay, and so does any run during which another process (a pytest worker) wrote .pyc files. Runs themselves
    write none (PYTHONDONTWRITEBYTECODE): what they find is what the last call of this left."""
    global _compiled
    with _COMPILED:
        if _compiled:
            return
        checkout = re.compile(re.escape(str(ROOT)) + _NOT_IN_THE_CHECKOUT)
        paths = sysconfig.get_paths()
        with warnings.catch_warnings():  # (the standard library's test data warns as it compiles)
            warnings.simplefilter("ignore")
            compileall.compile_dir(ROOT, quiet=2, rx=checkout)
            for directory in dict.fromkeys([paths["purelib"], paths["platlib"], paths["stdlib"]]):
                compileall.compile_dir(directory, quiet=2)  # (a read-only one: nothing written, and no error)
        _compiled = True


def canonical_command(seed: int, plant: tuple[str, ...] | list[str], fault_seconds: float,
                      keep: list[int] | None = None, topology: str = "standalone") -> list[str]:
    kept = "all" if keep is None else ",".join(map(str, keep)) or "none"
    return [sys.executable, "-m", "tests.simulation.replay", str(seed), ",".join(sorted(plant)), repr(fault_seconds),
            kept, topology]


def _replay(seed: int, plant: tuple[str, ...] | list[str], fault_seconds: float,
            keep: list[int] | None = None, topology: str = "standalone") -> RunResult:
    """One seed in the canonical interpreter (tests/simulation/replay.py says why); ``keep``: its faults to apply."""
    _compile_everything_importable()
    environment = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin",
                   "LANG": "C.UTF-8"}
    completed = subprocess.run(canonical_command(seed, plant, fault_seconds, keep, topology), cwd=ROOT,
                               env=environment,
                               capture_output=True, text=True, check=False, preexec_fn=_no_randomization)
    lines = completed.stdout.splitlines()
    if not lines:
        tail = completed.stderr.strip().splitlines()[-3:]
        return RunResult(seed, ok=False, failure=f"the run crashed (exit {completed.returncode}): {tail}",
                         topology=topology)
    return RunResult(**json.loads(lines[-1]))


if __name__ == "__main__":
    main()
