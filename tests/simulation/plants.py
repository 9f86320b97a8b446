"""Planted bugs: deliberate mistakes a run can switch on, to prove that the simulation finds that kind of bug.

Theory of operation
-------------------
A plant is a test-only switch; production code carries none. Either a simulated part offers it (the
simulated disk's ``ack_before_durable``), or ``planted(names)`` swaps a production method for a wrong
version of it for the length of a run (a ``with`` block around ``World.run``), and puts the right one back
after.

* ``ack_before_durable``: the Tier-1 log acknowledges an append before its fsync (``disk.SimDisk``). Found by
  a power loss that drops an acknowledged event.
* ``commit_twice``: a transaction commit can be applied twice. The segment store's merge copies the source
  into the target as an ordinary append, and deletes the source in a later, separate step ("cleanup in the
  background"), instead of moving it in one logged operation. A merge retried before the cleanup (the
  controller re-drives a commit whose answer it lost: the store crashed or was paused, the controller
  restarted) finds the source still there and copies it again: the transaction's events are read twice.
  Without faults it behaves: one merge, one copy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from server import errors
from server.containers import attributes as attrs
from server.containers.mutations import ContainerMutations
from wire.fields import BytesLike

PLANTS = {
    "ack_before_durable": "the Tier-1 log acknowledges an append before it is durable",
    "commit_twice": "a merge copies the source and deletes it later: a retried commit is applied again",
}
CLEANUP_DELAY = 1.0  # seconds after a planted copying merge before its source is deleted


def check(names: Iterable[str]) -> set[str]:
    """The plants named, or ValueError naming the unknown ones."""
    plants = set(names)
    unknown = plants - set(PLANTS)
    if unknown:
        raise ValueError(f"unknown planted bugs {sorted(unknown)}; known: {sorted(PLANTS)}")
    return plants


@contextlib.contextmanager
def planted(names: Iterable[str]) -> Iterator[None]:
    """Swaps in the wrong production methods of the plants named, for the ``with`` block."""
    with contextlib.ExitStack() as stack:
        if "commit_twice" in check(names):
            original = ContainerMutations.merge
            ContainerMutations.merge = _merge_by_copy  # type: ignore[method-assign]
            stack.callback(setattr, ContainerMutations, "merge", original)
        yield


async def _merge_by_copy(self: ContainerMutations, target: str, source: str,
                         attribute_updates: Iterable[attrs.AttributeUpdate] = (), header: BytesLike = b"") -> int:
    """The planted ``commit_twice``: ``ContainerMutations.merge`` as a copy and a later delete (module docstring)."""
    if not self._state.exists(source) and self._state.merged_sources.get(source) == target:
        return self.get_info(target).length  # the real merge's answer to a retry, kept: the bug is the copy
    try:
        length = await self.seal(source)
    except errors.SegmentIsSealed:
        length = self.get_info(source).length
    data = await self._reader.read_range(source, 0, length)
    new_length = await self.append(target, bytes(header) + data, attribute_updates)

    def clean_up() -> None:
        asyncio.ensure_future(self.delete_soon(source)).add_done_callback(
            lambda done: done.cancelled() or done.exception())

    asyncio.get_running_loop().call_later(CLEANUP_DELAY, clean_up)
    return new_length
