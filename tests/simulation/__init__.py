"""A deterministic simulation of a whole cluster, in the style of FoundationDB's simulator and TigerBeetle's VOPR.

The production asyncio code runs unchanged in a ``World``: an event loop on virtual time (loop.py),
one seeded random source, an in-memory TCP network with a nemesis (network.py; its connections in
tcp.py), and simulated processes that can crash, restart and pause (processes.py). The same seed
gives the same run, checked by the hash of the world's trace (world.py).
"""

from tests.simulation.errors import Deadlock, NotSimulated, Quiescent, SimulationError, SimulationTimeout
from tests.simulation.loop import OWNER, Owner, VirtualLoop
from tests.simulation.network import OUTSIDE_HOST, Network, SimServer
from tests.simulation.processes import Process
from tests.simulation.tcp import SimTransport
from tests.simulation.world import WALL_EPOCH, World

__all__ = ["OUTSIDE_HOST", "OWNER", "WALL_EPOCH", "Deadlock", "Network", "NotSimulated", "Owner", "Process",
           "Quiescent", "SimServer", "SimTransport", "SimulationError", "SimulationTimeout", "VirtualLoop", "World"]
