"""``tributary loadgen`` without the option parsing: run, show progress, print and save results, exit status.

Exit statuses: 0 the run went well; 1 it could not run (the message says why) or it
ran with problems (errors, events missing or duplicated, the drain timed out); 130
stopped with Ctrl-C (results are still printed and written).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from rich.console import Console

from ..errors import TributaryError
from .options import LoadOptions
from .progress import make_progress, print_summary
from .runner import Interrupted, LoadError, LoadRun, StopSignal
from .stats import write_results

OK, FAILED, INTERRUPTED = 0, 1, 130
PLAIN_WIDTH = 160


def progress_mode(progress: bool | None, quiet: bool, console: Console) -> str:
    """``"none"`` with ``quiet``; ``"live"`` if asked for, or by default on a terminal; else ``"plain"``."""
    if quiet:
        return "none"
    if progress is None:
        return "live" if console.is_terminal else "plain"
    return "live" if progress else "plain"


def problems(results: dict[str, Any]) -> list[str]:
    """What went wrong in a finished run (empty: nothing)."""
    found = []
    if results["errors"]["count"]:
        found.append(f"{results['errors']['count']} error(s)")
    sequence = results["sequence"]
    if sequence is not None and not sequence["ok"]:
        found.append(f"the sequence check failed ({sequence['missing']} missing, {sequence['duplicates']} "
                     f"duplicates, {sequence['out_of_order']} out of order, {sequence['unexpected']} unexpected)")
    if results["phases"]["drain"]["complete"] is False:
        found.append("the readers did not get every event within --drain-timeout")
    return found


async def run_command(options: LoadOptions, *, progress: bool | None = None, quiet: bool = False,
                      version: str = "") -> int:
    """Runs the load as the command does; returns the exit status."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=PLAIN_WIDTH)  # logs and pipes: wide enough for the summary tables
    errors = Console(stderr=True, soft_wrap=True)
    stop = StopSignal()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.request)
    run = LoadRun(options, stop, make_progress(progress_mode(progress, quiet, console), console))
    try:
        results = await run.run()
    except Interrupted as error:
        errors.print(f"error: {error}", markup=False, highlight=False)
        return INTERRUPTED
    except (LoadError, TributaryError) as error:
        errors.print(f"error: {error}", markup=False, highlight=False)
        return FAILED
    finally:
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(number)
    if version:
        results = {"tool": results.pop("tool"), "version": version, **results}
    if not quiet:
        print_summary(console, results)
    if options.output is not None:
        try:
            write_results(options.output, results)
        except OSError as error:
            errors.print(f"error: cannot write the results to {options.output}: {error}", markup=False,
                         highlight=False)
            return FAILED
    if results["interrupted"]:
        return INTERRUPTED
    found = problems(results)
    if found:
        errors.print(f"error: the run had problems: {'; '.join(found)}", markup=False, highlight=False)
        return FAILED
    return OK


__all__ = ["FAILED", "INTERRUPTED", "OK", "problems", "progress_mode", "run_command"]
