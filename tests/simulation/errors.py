"""The errors of the simulated world: each names what the world cannot or will not do, and why.

``NotSimulated`` is also a ``NotImplementedError``: code that already copes with a loop lacking a
feature (``add_signal_handler`` on Windows, say) copes with the world the same way.
"""

from __future__ import annotations


class SimulationError(RuntimeError):
    """Something the simulation itself refuses or detects (not an error of the code under test)."""


class Quiescent(SimulationError):
    """Nothing is ready and no timer is scheduled, yet the coroutine being run has not finished.

    In a real process this is a hang: every task waits on something nobody will ever do."""


Deadlock = Quiescent  # the other name the literature uses for it


class SimulationTimeout(SimulationError):
    """The run reached the virtual-time limit given to ``World.run(until=...)``."""


class NotSimulated(SimulationError, NotImplementedError):
    """Real I/O (sockets, pipes, subprocesses, TLS, threads) that the world does not simulate."""


class Livelock(SimulationError):
    """Callbacks keep running at one virtual instant and the clock never moves: a busy loop (in a real process,
    a core spinning while nothing makes progress)."""
