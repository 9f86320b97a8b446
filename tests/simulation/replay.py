"""One seed, run in the canonical interpreter: ``python -m tests.simulation.replay SEED PLANTS FAULT_SECONDS KEEP
TOPOLOGY`` prints the run's result as one JSON object (KEEP: ``all``, or the indexes of the faults to keep,
comma-separated, ``none`` for none; TOPOLOGY: ``standalone`` or ``cluster``, always given). ``python -m
tests.simulation`` starts it; run it through that.

Where objects hashed by their address land in a set, and when the garbage collector runs, depends on every
allocation the interpreter made before the run: its arguments, its environment, its working directory. So the
runner starts this module always the same way (canonical_command): the same argument shape, a fixed minimal
environment with PYTHONHASHSEED=0 and no writing of .pyc files, the repository root as working directory, and
address-space randomization off; and before the first run it compiles every module a run can import, because
compiling a module allocates differently from loading its .pyc. A wall-clock alarm ends a run that would hang
in real time (a busy loop the world cannot see).
"""

from __future__ import annotations

import sys

# Kept out of a replay: ``cryptography`` (PyJWT imports it when it is installed; Tributary's tokens use HMAC, which
# needs only hashlib). Its Rust core seeds hash maps from the kernel's entropy, out of the world's reach, and the
# interpreter's heap then differed from run to run in the cluster topology, and with it the order in which sets
# of objects hashed by address are iterated: about one run in three of a cluster seed took another course.
sys.modules["cryptography"] = None  # type: ignore[assignment]  # (import raises ModuleNotFoundError)

import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402

from tests.simulation.errors import SimulationError  # noqa: E402
from tests.simulation.scenario import run_seed  # noqa: E402

WALL_SECONDS_MAX = 600


def _out_of_time(signum: int, frame: object) -> None:
    raise SimulationError(f"the run took more than {WALL_SECONDS_MAX} s of wall-clock time")


def main() -> None:
    seed, plants, fault_seconds = int(sys.argv[1]), [p for p in sys.argv[2].split(",") if p], float(sys.argv[3])
    keep = None if sys.argv[4] == "all" else [int(index) for index in sys.argv[4].split(",") if index != "none"]
    topology = sys.argv[5]
    logging.disable(logging.WARNING)
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(WALL_SECONDS_MAX)
    result = run_seed(seed, plant=plants, fault_seconds=fault_seconds, keep=keep, topology=topology)
    sys.stdout.write(json.dumps(dataclasses.asdict(result)) + "\n")


if __name__ == "__main__":
    main()
