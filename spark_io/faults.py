"""A fault point for crash tests of the streaming sink, armed only by an environment variable.

``TRIBUTARY_SPARK_FAULT=<point>:<batch id>`` makes the driver's whole session die by SIGKILL
when the sink reaches ``<point>`` in that micro-batch: the driver, its JVM and every Python
worker at once, as a machine loss would. Points:

* ``sink-committed``: the batch's transactions are committed and its fence record written, and
  Spark has not yet recorded the batch (``commits/<batch>``).

Only for a driver started in a session of its own (``setsid``; ``start_new_session=True`` in
Python), which is what the tests do: every process of the session is killed. (Spark's Python
workers put themselves in process groups of their own, but stay in the driver's session.)
Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import os
import signal

VARIABLE = "TRIBUTARY_SPARK_FAULT"
POINTS = ("sink-committed",)


def kill_session(session_id: int) -> None:
    """SIGKILLs every process of the session ``session_id`` (the caller too, if it is one of them)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getsid(int(entry)) == session_id:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if os.getsid(0) == session_id:
        os.kill(me, signal.SIGKILL)


def reach(point: str, batch_id: int) -> None:
    """Kills the driver's session if ``TRIBUTARY_SPARK_FAULT`` names this point and batch."""
    if os.environ.get(VARIABLE) == f"{point}:{batch_id}":
        kill_session(os.getsid(0))


__all__ = ["POINTS", "VARIABLE", "kill_session", "reach"]
