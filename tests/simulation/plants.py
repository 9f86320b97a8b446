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
* ``skip_fence`` (the cluster topology): a new owner opening a container's replicated log does not fence the
  previous owner's last ledger on the log stores. It still finds where the ledger ends (by reading the replicas
  instead of asking the FENCE for their last-add-confirmed), makes that tail whole and closes the ledger there in
  ZooKeeper, as the real recovery does (``ledgers.recover`` runs unchanged over replicas whose FENCE is answered
  without being sent). But the replicas still take the old owner's appends. A store that does not know it lost
  its containers appends on: the cluster nemesis's zombie (a store cut off from ZooKeeper and paused past its
  session timeout, which resumes still cut off and serves for the half second its last probe of ZooKeeper takes)
  gets its writers' events acknowledged by the log stores after the new owner closed the ledger before them:
  those events are never read. (A store cut off from ZooKeeper without a pause stops serving before its session
  expires, and one that reaches ZooKeeper when it resumes learns within milliseconds that its session expired:
  the fence is the second line of defence, which these rarely or never reach.) Without faults it behaves: no
  ledger is ever taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from server import errors
from server.containers import attributes as attrs
from server.containers.mutations import ContainerMutations
from server.tier1 import replicated
from server.tier1.logstore import protocol as p
from server.tier1.logstore.ledgers import StoreClient, recover
from wire.fields import BytesLike

PLANTS = {
    "ack_before_durable": "the Tier-1 log acknowledges an append before it is durable",
    "commit_twice": "a merge copies the source and deletes it later: a retried commit is applied again",
    "skip_fence": "a new owner of a replicated log does not fence the previous owner's last ledger on the log "
                  "stores (cluster topology)",
}
TOPOLOGIES = {  # where each plant can show (scenario.py's topologies): the part it breaks runs there only
    "ack_before_durable": ("standalone",),  # the simulated disk of the standalone store's Tier-1
    "commit_twice": ("standalone", "cluster"),
    "skip_fence": ("cluster",),  # the replicated Tier-1
}
CLEANUP_DELAY = 10.0  # seconds after a planted copying merge before its source is deleted


def check(names: Iterable[str], topology: str | None = None) -> set[str]:
    """The plants named, or ValueError naming the unknown ones (and, given a ``topology``, those that cannot show
    in it)."""
    plants = set(names)
    unknown = plants - set(PLANTS)
    if unknown:
        raise ValueError(f"unknown planted bugs {sorted(unknown)}; known: {sorted(PLANTS)}")
    misplaced = sorted(plant for plant in plants if topology is not None and topology not in TOPOLOGIES[plant])
    if misplaced:
        raise ValueError(f"planted bugs {misplaced} cannot show in the {topology} topology "
                         f"({', '.join(f'{plant}: {TOPOLOGIES[plant][0]}' for plant in misplaced)})")
    return plants


@contextlib.contextmanager
def planted(names: Iterable[str]) -> Iterator[None]:
    """Swaps in the wrong production methods of the plants named, for the ``with`` block."""
    with contextlib.ExitStack() as stack:
        if "commit_twice" in check(names):
            original = ContainerMutations.merge
            ContainerMutations.merge = _merge_by_copy  # type: ignore[method-assign]
            stack.callback(setattr, ContainerMutations, "merge", original)
        if "skip_fence" in check(names):
            stack.callback(setattr, replicated, "recover", replicated.recover)
            replicated.recover = _recover_without_fence  # type: ignore[assignment]
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


async def _recover_without_fence(ledger: int, replicas: list[StoreClient], ack_quorum: int,
                                 ensemble_size: int | None = None) -> int:
    """The planted ``skip_fence``: ``ledgers.recover`` (what ``ReplicatedDurableDataLog._recover_last_ledger``
    calls) over replicas whose FENCE is never sent (module docstring). Each replica's answer to it is made up from
    what the replica holds: the entries every reachable replica has stand for the last-add-confirmed, from which
    the real recovery reads, writes back and closes the ledger's tail."""
    held = await asyncio.gather(*(_entries_held(replica, ledger) for replica in replicas), return_exceptions=True)
    answering = [(replica, count) for replica, count in zip(replicas, held, strict=True) if isinstance(count, int)]
    confirmed = min((count for _, count in answering), default=0) - 1
    return await recover(ledger, [_Unfenced(replica, confirmed) for replica, _ in answering], ack_quorum,
                         len(replicas) if ensemble_size is None else ensemble_size)


async def _entries_held(replica: StoreClient, ledger: int, batch: int = 256) -> int:
    """How many entries of ``ledger`` the replica holds, from entry 0 on without a gap (READs, which fence nothing)."""
    count = 0
    while True:
        reply = await replica.call(p.Read(_request_id(), ledger, count, count + batch - 1))
        if not isinstance(reply, p.Entries) or reply.status != p.Status.OK or not reply.entries:
            return count
        count = reply.entries[-1][0] + 1


class _Unfenced:
    """A replica as the planted recovery sees it: a FENCE is answered here, as if the replica had taken it, and
    never sent; every other request goes to the replica."""

    def __init__(self, replica: StoreClient, last_add_confirmed: int) -> None:
        self._replica = replica
        self._last_add_confirmed = last_add_confirmed

    def call(self, message: p.Message, frame: list[BytesLike] | None = None) -> asyncio.Future[p.Message]:
        if not isinstance(message, p.Fence):
            return self._replica.call(message, frame)
        answer: asyncio.Future[p.Message] = asyncio.get_running_loop().create_future()
        answer.set_result(p.FenceResult(message.request_id, p.Status.OK, message.ledger, self._last_add_confirmed,
                                        self._last_add_confirmed))
        return answer


_request_ids = iter(range(1 << 62, 1 << 63))


def _request_id() -> int:
    return next(_request_ids)
