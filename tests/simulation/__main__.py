"""Runs simulated clusters: ``python -m tests.simulation --seeds 1000`` runs seeds 1..1000 and prints every
failing seed; ``--seed N`` replays one (the same run, checked by its trace hash); ``--plant BUG`` plants a
test-only bug (``ack_before_durable``) to show the simulation finds it.

A run is a pure function of its seed only in a fresh interpreter with fixed string hashing: the production
code iterates a few sets of objects (hashed by their address) and keeps weak caches (emptied when the
garbage collector runs), and both depend on what the interpreter did before. So the command starts itself
again with ``PYTHONHASHSEED=0`` and address-space randomization off (``personality(ADDR_NO_RANDOMIZE)``,
as ``setarch -R`` does) when that is not already so, and ``--seeds`` runs every seed in an interpreter of
its own (``--jobs`` at a time), exactly as ``--seed`` replays it.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time

import click

from tests.simulation.scenario import PLANTS, RunResult, run_seed


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--seeds", type=click.IntRange(min=1), help="run seeds FIRST..FIRST+N-1")
@click.option("--first", type=int, default=1, show_default=True, help="the first seed of --seeds")
@click.option("--seed", type=int, help="replay one seed, printing its faults")
@click.option("--plant", type=click.Choice(sorted(PLANTS)), multiple=True, help="plant a test-only bug")
@click.option("--fault-seconds", type=float, default=30.0, show_default=True,
              help="virtual seconds of faults per run")
@click.option("--stop-at-first", is_flag=True, help="stop at the first failing seed")
@click.option("--json", "as_json", is_flag=True, help="with --seed: print the result as one JSON object")
@click.option("--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default=True,
              help="seeds run at once (each in its own interpreter)")
def main(seeds: int | None, first: int, seed: int | None, plant: tuple[str, ...], fault_seconds: float,
         stop_at_first: bool, as_json: bool, jobs: int) -> None:
    """Deterministic simulation of a Tributary cluster (tests/simulation)."""
    if (seeds is None) == (seed is None):
        raise click.UsageError("give exactly one of --seeds N and --seed N")
    logging.disable(logging.WARNING)  # the processes' own logs: failed seeds are replayed for details
    if seed is not None:
        result = run_seed(seed, plant=plant, fault_seconds=fault_seconds)
        if as_json:
            click.echo(json.dumps(dataclasses.asdict(result)))
        else:
            click.echo(result.line())
            for fault in result.faults:
                click.echo(f"  {fault}")
        sys.exit(0 if result.ok else 1)
    assert seeds is not None
    failed: list[int] = []
    started = time.perf_counter()
    simulated = 0.0
    options = [*(f"--plant={bug}" for bug in plant), f"--fault-seconds={fault_seconds}"]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        runs = pool.map(lambda number: _replay(number, options), range(first, first + seeds))
        for done, result in enumerate(runs, start=1):
            simulated += result.virtual_seconds
            if not result.ok:
                failed.append(result.seed)
                click.echo(result.line())
                if stop_at_first:
                    pool.shutdown(wait=False, cancel_futures=True)
                    break
            if done % 10 == 0 or done == seeds:
                elapsed = time.perf_counter() - started
                click.echo(f"{done}/{seeds} seeds, {len(failed)} failed, {elapsed:.0f} s, "
                           f"{simulated / elapsed:.1f} simulated seconds per wall second", err=True)
    if failed:
        click.echo(f"failing seeds: {' '.join(map(str, failed))} (replay: python -m tests.simulation --seed N"
                   f"{''.join(f' --plant {bug}' for bug in plant)})")
        sys.exit(1)
    click.echo(f"all {seeds} seeds passed")


def _replay(seed: int, options: list[str]) -> RunResult:
    """One seed in a fresh interpreter (see the module docstring)."""
    completed = subprocess.run([sys.executable, "-m", "tests.simulation", f"--seed={seed}", "--json", *options],
                               capture_output=True, text=True, check=False)
    lines = completed.stdout.splitlines()
    if not lines:
        return RunResult(seed, ok=False, failure=f"the run crashed: {completed.stderr.strip().splitlines()[-1:]}")
    return RunResult(**json.loads(lines[-1]))


ADDR_NO_RANDOMIZE = 0x0040000  # personality(2): the kernel places memory at the same addresses every run


_RANDOMIZED_OK = "TRIBUTARY_SIMULATION_RANDOMIZED"  # set when randomization cannot be turned off here


def _deterministic_interpreter() -> bool:
    """Whether string hashing is fixed and address-space randomization is off (or cannot be) for this process."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        return False
    with open("/proc/self/personality") as personality:
        return int(personality.read(), 16) & ADDR_NO_RANDOMIZE != 0 or _RANDOMIZED_OK in os.environ


def _restart_deterministic() -> None:
    """Starts this command again with PYTHONHASHSEED=0 and without address-space randomization: objects hashed
    by their address then land in the same order in every run of a seed. Where the kernel refuses (a container
    whose seccomp profile allows only some personalities), runs go on with randomization, and a replay may
    then differ from the run it replays: said once on stderr."""
    os.environ["PYTHONHASHSEED"] = "0"
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if current & ADDR_NO_RANDOMIZE == 0 and libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
        os.environ[_RANDOMIZED_OK] = "1"
        sys.stderr.write(f"address-space randomization stays on ({os.strerror(ctypes.get_errno())}): "
                         "a replay may differ from the run it replays\n")
    os.execv(sys.executable, [sys.executable, "-m", "tests.simulation", *sys.argv[1:]])


if __name__ == "__main__":
    if not _deterministic_interpreter():
        _restart_deterministic()
    main()
