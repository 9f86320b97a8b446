"""The ``tributary`` command line.

This is the composition root: the only place allowed to import both the
server and the controller (for ``standalone``). Each subcommand prints a clear
error and exits non-zero when it cannot do its job.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal
import sys

import click

from . import __version__, logs

_LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)


@click.group()
@click.version_option(__version__, prog_name="tributary")
def main() -> None:
    """Tributary, a Pravega-compatible streaming store."""


def _segment_store_options(function):
    for option in reversed([
        click.option("--data-dir", type=click.Path(file_okay=False, path_type=pathlib.Path), default="./data",
                     show_default=True, help="Directory for the container logs (and later Tier-2)."),
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on."),
        click.option("--port", default=12345, show_default=True, type=click.IntRange(0, 65535),
                     help="Wire-protocol port."),
        click.option("--containers", "container_count", default=4, show_default=True,
                     type=click.IntRange(1, 4096), help="Segment containers (fixed per data dir)."),
        click.option("--log-level", default="warning", show_default=True, type=_LOG_LEVELS),
    ]):
        function = option(function)
    return function


@main.command()
@_segment_store_options
def segmentstore(data_dir, host, port, container_count, log_level) -> None:
    """Run one segment store."""
    _run_segment_store(data_dir, host, port, container_count, log_level, banner="segment store")


@main.command()
@_segment_store_options
def standalone(data_dir, host, port, container_count, log_level) -> None:
    """Run the controller and the segment store in one process (the controller is not built yet)."""
    click.echo("note: the controller is not built yet; starting the segment store alone", err=True)
    _run_segment_store(data_dir, host, port, container_count, log_level, banner="standalone segment store")


def _run_segment_store(data_dir, host, port, container_count, log_level, banner: str) -> None:
    from server.config import SegmentStoreConfig
    from server.service import SegmentStoreService, StartupError

    logs.configure(log_level)
    config = SegmentStoreConfig(data_dir=data_dir, host=host, port=port, container_count=container_count)
    try:
        _run(_serve(SegmentStoreService(config), banner))
    except StartupError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


async def _serve(service, banner: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    await service.start()
    click.echo(f"tributary {__version__}: {banner} listening on {service.config.host}:{service.port} "
               f"(data dir {service.config.data_dir})", err=True)
    await stop.wait()
    await service.stop()
    click.echo("stopped", err=True)


def _run(coroutine) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; fall back for odd platforms
        asyncio.run(coroutine)
        return
    uvloop.run(coroutine)


if __name__ == "__main__":
    main()
