"""``tributary status``: what a cluster runs, read from ZooKeeper (docs/cluster.md).

One line per process: each segment store (the containers it serves, those it is recovering, and
those the map gives it that it does not run yet, and how long ago it was last seen), each controller
(the leader marked), each log store; then one line for containers no live store serves. The exit status
says whether every container is served by the store the map assigns it to.

A segment store rewrites its registration every second or so (its heartbeat: server/cluster.py), and
its age is read from the znode's modification time. A store not seen for longer than ``stale_after``
seconds is reported *unknown*, and its containers are not counted as served: it may be dead or paused
while its ZooKeeper session has not expired yet (its registration stays until then), or cut off from
ZooKeeper. The age compares the ZooKeeper server's clock (at the write) with this machine's: on
machines whose clocks differ by a good part of ``stale_after``, raise it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from coordination.cluster import ClusterPaths, ClusterSettings, ContainerMap, ControllerRegistration, StoreRegistration
from coordination.zookeeper import NoNodeError, ZooKeeper, ZooKeeperUnavailable
from server.tier1.logstore.registry import Paths as LogPaths
from server.tier1.logstore.registry import live_logstores

SERVING, NOT_SERVING, UNREACHABLE = 0, 1, 2
WAIT_POLL_SECONDS = 0.2  # --wait: how often the cluster is read again
STALE_AFTER_SECONDS = 3.0  # a segment store not seen for longer (three heartbeats) is unknown; --stale-after


def store_state(registration: StoreRegistration, assigned: list[int], age: float, stale_after: float) -> dict:
    """One segment store's entry: ``state`` "serving", or "unknown" when its heartbeat is older than
    ``stale_after``; ``last_seen``: seconds since its registration was last written; ``serving`` and
    ``starting``: what it last reported."""
    return {"state": "serving" if age <= stale_after else "unknown", "last_seen": round(age, 1),
            "serving": sorted(registration.containers), "starting": sorted(registration.starting),
            "assigned": assigned,
            "waiting": sorted(set(assigned) - set(registration.containers) - set(registration.starting))}


def unserved_containers(count: int, container_map: ContainerMap, stores: dict[str, dict]) -> list[int]:
    """The containers not served by the store the map gives them to (or whose store is unknown)."""
    def served_by_owner(container: int) -> bool:
        owner = stores.get(container_map.owners.get(container, ""))
        return owner is not None and owner["state"] == "serving" and container in owner["serving"]

    return [container for container in range(count) if not served_by_owner(container)]


async def read_cluster(zk: ZooKeeper, root: str, stale_after: float = STALE_AFTER_SECONDS) -> dict:
    """The cluster as a JSON-able document."""
    paths = ClusterPaths(root)
    try:
        settings = ClusterSettings.from_json((await zk.get(paths.settings))[0])
    except NoNodeError:
        return {"container_count": 0, "segment_stores": {}, "controllers": {}, "leader": None, "log_stores": {},
                "unserved": []}
    try:
        container_map = ContainerMap.from_json((await zk.get(paths.container_map))[0])
    except NoNodeError:
        container_map = ContainerMap()
    stores: dict[str, dict] = {}
    for store in await zk.get_children(paths.segment_stores):
        try:
            data, written = await zk.get_with_mtime(paths.segment_store(store))
            registration = StoreRegistration.from_json(data)
        except (NoNodeError, ValueError):
            continue
        stores[store] = store_state(registration, sorted(container_map.containers_of(store)),
                                    max(0.0, time.time() - written), stale_after)
    controllers: dict[str, dict] = {}
    for controller in await zk.get_children(paths.controllers):
        try:
            known = ControllerRegistration.from_json((await zk.get(paths.controller(controller)))[0])
        except (NoNodeError, ValueError):
            continue
        controllers[controller] = {"address": f"{known.host}:{known.port}"}
    leader = None
    candidates = sorted(await zk.get_children(paths.leader))
    if candidates:
        try:
            leader = (await zk.get(f"{paths.leader}/{candidates[0]}"))[0].decode()
        except NoNodeError:
            pass
    log_stores = {replica: f"{host}:{port}" for replica, (host, port) in
                  (await live_logstores(zk, LogPaths(root))).items()} if await zk.exists(LogPaths(root).logstores) \
        else {}
    unserved = unserved_containers(settings.container_count, container_map, stores)
    return {"container_count": settings.container_count, "segment_stores": stores, "controllers": controllers,
            "leader": leader, "log_stores": log_stores, "unserved": unserved}


def describe_store(store: str, state: dict) -> str:
    """One store's line. An unknown store's containers are what it last said, not what it serves; an entry
    without ``state`` and ``last_seen`` (a document of an older ``status``) reads as serving, without an age."""
    if state.get("state", "serving") != "serving":
        return (f"segment store {store}: unknown, not seen for {state['last_seen']:.1f} s (it last reported "
                f"serving containers {_list(state['serving'])})")
    line = f"segment store {store}: serving containers {_list(state['serving'])}"
    if state["starting"]:
        line += f", recovering {_list(state['starting'])}"
    if state["waiting"]:
        line += f", assigned but not started {_list(state['waiting'])}"
    if "last_seen" in state:
        line += f" (last seen {state['last_seen']:.1f} s ago)"
    return line


def describe(cluster: dict) -> list[str]:
    lines = [describe_store(store, state) for store, state in sorted(cluster["segment_stores"].items())]
    for controller, state in sorted(cluster["controllers"].items()):
        role = " (leader)" if controller == cluster["leader"] else ""
        lines.append(f"controller {controller} at {state['address']}: serving{role}")
    for replica, address in sorted(cluster["log_stores"].items()):
        lines.append(f"log store {replica} at {address}: serving")
    if not cluster["container_count"]:
        lines.append("no cluster here: nothing has registered under this root")
    elif cluster["unserved"]:
        lines.append(f"NOT SERVED: containers {_list(cluster['unserved'])} of {cluster['container_count']}")
    else:
        lines.append(f"all {cluster['container_count']} containers served")
    return lines


def served(cluster: dict) -> bool:
    return bool(cluster["container_count"]) and not cluster["unserved"]


async def read_cluster_until_served(zk: ZooKeeper, root: str, wait_seconds: float,
                                    stale_after: float = STALE_AFTER_SECONDS) -> dict:
    """The cluster once every container is served, or as it is after ``wait_seconds``."""
    deadline = asyncio.get_running_loop().time() + wait_seconds
    while True:
        cluster = await read_cluster(zk, root, stale_after)
        if served(cluster) or asyncio.get_running_loop().time() >= deadline:
            return cluster
        await asyncio.sleep(WAIT_POLL_SECONDS)


async def print_status(zk_hosts: str, root: str, as_json: bool, echo: Callable[[str], None],
                       wait_seconds: float = 0.0, stale_after: float = STALE_AFTER_SECONDS) -> int:
    zk = ZooKeeper(zk_hosts, session_timeout=5.0, operation_timeout=5.0, quiet=True)  # the error is our one line
    try:
        await zk.start(timeout=5.0)
    except ZooKeeperUnavailable as error:
        echo(f"error: {error}")
        return UNREACHABLE
    try:
        cluster = await read_cluster_until_served(zk, root, wait_seconds, stale_after)
    except ZooKeeperUnavailable as error:
        echo(f"error: {error}")
        return UNREACHABLE
    finally:
        await zk.stop()
    if as_json:
        echo(json.dumps(cluster, sort_keys=True))
    else:
        for line in describe(cluster):
            echo(line)
    return SERVING if served(cluster) else NOT_SERVING


def _list(containers: list[int]) -> str:
    return ",".join(map(str, containers)) if containers else "none"
