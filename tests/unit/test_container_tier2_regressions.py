"""Sequences the Tier-2 container state machine (test_container_tier2_state_machine) once found, kept
as plain tests so they run every time, not only when hypothesis happens to draw them."""

from __future__ import annotations

from tests.unit.test_container_tier2_state_machine import Tier2ContainerMachine

T0, T1 = "sc/t0_kvtable/0.#epoch.0", "sc/t1_kvtable/0.#epoch.0"

# Found on 2026-11-24 by the state machine, minimized by deleting steps while it failed. Bytes of T1
# below its compaction's truncation offset, not yet in Tier-2, were evictable from the cache (the
# eviction rule treated "below the start offset" as "no longer needed"); the storage writer, which
# writes every byte in order before truncating Tier-2, then found them neither in the cache nor in
# the log, and the container failed after the restart.
COMPACTION_ACROSS_RESTARTS = [
    ("create_table", {"name": T0}),
    ("table_update", {"batch": [(b"k1", "none", b"")], "name": T0}),
    ("table_remove", {"conditional": False, "key": b"k2", "name": T0}),
    ("flush_to_tier2", {}),
    ("compact_table", {"name": T0}),
    ("flush_to_tier2", {}),
    ("restart", {}),
    ("create_table", {"name": T1}),
    ("table_remove", {"conditional": True, "key": b"k1", "name": T1}),
    ("compact_table", {"name": T0}),
    ("restart", {}),
    ("table_update", {"batch": [(b"k2", "current", b"x" * 17), (b"k3", "none", b"y" * 9),
                                (b"longer-key-4", "none", b"F<R")], "name": T1}),
    ("compact_table", {"name": T1}),
    ("restart", {}),
    ("compact_table", {"name": T1}),
]


def test_compaction_across_restarts_keeps_the_container_consistent():
    machine = Tier2ContainerMachine()
    try:
        for rule, arguments in COMPACTION_ACROSS_RESTARTS:
            getattr(machine, rule)(**arguments)
            machine.committed_state_equals_model()
    finally:
        machine.teardown()
