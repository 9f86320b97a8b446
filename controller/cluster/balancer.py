"""Which segment store runs which container: the controller leader's pure balancing rule.

``balance`` keeps every container where it is while its store is alive (or only briefly gone:
``keep``), gives containers without a live owner to the least loaded live stores, and then moves
containers one at a time from the most to the least loaded store until their counts differ by at
most one. So a store's death moves only its own containers, and a store's arrival moves only as many
as it takes to even out the counts. Ties go to the smallest store id; the result depends only on
the arguments.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def balance(container_count: int, current: Mapping[int, str], live: Collection[str],
            keep: Collection[str] = ()) -> dict[int, str]:
    """The new owner of every container.

    Args:
        container_count: containers 0 .. count - 1 exist.
        current: the map as it is (containers missing from it have no owner).
        live: the segment stores registered now.
        keep: stores that are gone but within their grace period: their containers stay theirs, and
            they take no others.
    Returns:
        container -> store id; ``current`` unchanged if no store is live.
    """
    live = sorted(set(live))
    if not live:
        return {container: owner for container, owner in current.items() if 0 <= container < container_count}
    kept = set(keep) - set(live)
    owners: dict[int, str] = {}
    load: dict[str, list[int]] = {store: [] for store in live}
    orphans = []
    for container in range(container_count):
        owner = current.get(container)
        if owner in load:
            load[owner].append(container)
            owners[container] = owner
        elif owner in kept:
            owners[container] = owner
        else:
            orphans.append(container)
    for container in orphans:
        store = min(live, key=lambda candidate: (len(load[candidate]), candidate))
        load[store].append(container)
        owners[container] = store
    while True:
        fullest = max(live, key=lambda candidate: (len(load[candidate]), candidate))
        emptiest = min(live, key=lambda candidate: (len(load[candidate]), candidate))
        if len(load[fullest]) - len(load[emptiest]) <= 1:
            return owners
        container = max(load[fullest])
        load[fullest].remove(container)
        load[emptiest].append(container)
        owners[container] = emptiest
