"""The ``tributary`` command line.

This is the composition root: the only place allowed to import both the
server and the controller (for ``standalone``). Each subcommand prints a clear
error and exits non-zero when it cannot do its job.
"""

from __future__ import annotations

import sys

import click

from . import __version__


@click.group()
@click.version_option(__version__, prog_name="tributary")
def main() -> None:
    """Tributary, a Pravega-compatible streaming store."""


@main.command()
@click.option("--data-dir", default="./data", show_default=True, help="Where the standalone keeps its data.")
def standalone(data_dir: str) -> None:
    """Run the controller and the segment store in one process."""
    click.echo(
        f"tributary {__version__}: only the wire-protocol codec (package `wire`) is built so far; the segment "
        f"store and the controller are not, so there is no server to start yet (data dir {data_dir!r} unused).",
        err=True,
    )
    sys.exit(0)


if __name__ == "__main__":
    main()
