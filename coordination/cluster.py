"""How the processes of a cluster describe it to each other in ZooKeeper (docs/cluster.md).

Under the installation's root (default ``/tributary``, shared with the replicated log's nodes):

    cluster/settings               persistent  {"container_count"}: fixed for the cluster's life; the first
                                               process creates it, every later one must agree
    cluster/segmentstores/<id>     ephemeral   a live segment store: its advertised address, the containers
                                               it runs (serving) and those it is starting; rewritten every
                                               second or so as its heartbeat (its mtime says when it was heard)
    cluster/controllers/<id>       ephemeral   a live controller: its advertised gRPC address
    cluster/leader/n_<seq>         ephemeral   leader election among controllers: the lowest sequence leads
    cluster/container-map          persistent  container -> segment store id, written only by the leader
                                               (conditional on the version it read)
    cluster/leases/<kind>:<name>   ephemeral   who runs a piece of controller work now (a stream's workflow,
                                               its transaction commits): a crashed holder's lease goes with
                                               its session, and another controller takes the work over

A segment store's id is the address clients must use, ``host:port``; a controller's is a random hex
string per process. Records are JSON; a record that does not parse raises ValueError.
``agree_on_settings`` is the one call on ZooKeeper here: every process makes it at start.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from .zookeeper import NodeExistsError, ZooKeeper

DEFAULT_ROOT = "/tributary"


class ClusterPaths:
    def __init__(self, root: str = DEFAULT_ROOT):
        self.root = root.rstrip("/")
        base = f"{self.root}/cluster"
        self.settings = f"{base}/settings"
        self.segment_stores = f"{base}/segmentstores"
        self.controllers = f"{base}/controllers"
        self.leader = f"{base}/leader"
        self.container_map = f"{base}/container-map"
        self.leases = f"{base}/leases"

    def segment_store(self, store_id: str) -> str:
        return f"{self.segment_stores}/{store_id}"

    def controller(self, controller_id: str) -> str:
        return f"{self.controllers}/{controller_id}"

    def lease(self, kind: str, name: str) -> str:
        """A lease's znode: ``name`` may hold any characters (a scoped stream name has a '/')."""
        return f"{self.leases}/{kind}:{name.replace('%', '%25').replace('/', '%2F')}"

    def directories(self) -> tuple[str, ...]:
        return (self.segment_stores, self.controllers, self.leader, self.leases)


def store_id(host: str, port: int) -> str:
    """A segment store's id: the address it advertises."""
    return f"{host}:{port}"


def endpoint_of(store: str) -> tuple[str, int]:
    """(host, port) of a segment store id."""
    host, _, port = store.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not a segment store id: {store!r}")
    return host, int(port)


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{what}: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{what}: not a JSON object")
    return document


def _dump(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    container_count: int

    def to_json(self) -> bytes:
        return _dump({"container_count": self.container_count})

    @classmethod
    def from_json(cls, data: bytes) -> ClusterSettings:
        document = _load(data, "cluster settings")
        count = document.get("container_count")
        if not isinstance(count, int) or count <= 0:
            raise ValueError(f"cluster settings: bad container_count {count!r}")
        return cls(count)


@dataclasses.dataclass(frozen=True)
class StoreRegistration:
    """What a live segment store says of itself."""

    host: str
    port: int
    containers: tuple[int, ...] = ()  # running and serving
    starting: tuple[int, ...] = ()  # assigned to it, being recovered
    started: float = 0.0  # wall-clock seconds

    @property
    def store_id(self) -> str:
        return store_id(self.host, self.port)

    def to_json(self) -> bytes:
        return _dump({"host": self.host, "port": self.port, "containers": sorted(self.containers),
                      "starting": sorted(self.starting), "started": self.started})

    @classmethod
    def from_json(cls, data: bytes) -> StoreRegistration:
        document = _load(data, "segment store registration")
        try:
            return cls(str(document["host"]), int(document["port"]),
                       tuple(int(c) for c in document.get("containers", ())),
                       tuple(int(c) for c in document.get("starting", ())), float(document.get("started", 0.0)))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"segment store registration: {error!r}") from None


@dataclasses.dataclass(frozen=True)
class ControllerRegistration:
    host: str
    port: int
    started: float = 0.0

    def to_json(self) -> bytes:
        return _dump({"host": self.host, "port": self.port, "started": self.started})

    @classmethod
    def from_json(cls, data: bytes) -> ControllerRegistration:
        document = _load(data, "controller registration")
        try:
            return cls(str(document["host"]), int(document["port"]), float(document.get("started", 0.0)))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"controller registration: {error!r}") from None


@dataclasses.dataclass(frozen=True)
class ContainerMap:
    """Which segment store owns each container (a container missing from it has no owner yet)."""

    owners: Mapping[int, str] = dataclasses.field(default_factory=dict)

    def containers_of(self, store: str) -> frozenset[int]:
        return frozenset(container for container, owner in self.owners.items() if owner == store)

    def to_json(self) -> bytes:
        return _dump({"owners": {str(container): owner for container, owner in sorted(self.owners.items())}})

    @classmethod
    def from_json(cls, data: bytes) -> ContainerMap:
        document = _load(data, "container map")
        owners = document.get("owners", {})
        if not isinstance(owners, dict):
            raise ValueError("container map: owners is not an object")
        try:
            return cls({int(container): str(owner) for container, owner in owners.items()})
        except ValueError as error:
            raise ValueError(f"container map: {error}") from None


class ClusterMismatch(Exception):
    """This process's settings disagree with the cluster's (its container count)."""


async def agree_on_settings(zk: ZooKeeper, paths: ClusterPaths, container_count: int) -> None:
    """Creates the cluster's settings if none exist; raises ClusterMismatch if they differ from ours."""
    for directory in paths.directories():
        await zk.ensure_path(directory)
    mine = ClusterSettings(container_count)
    try:
        await zk.create(paths.settings, mine.to_json(), makepath=True)
        return
    except NodeExistsError:
        pass
    data, _ = await zk.get(paths.settings)
    theirs = ClusterSettings.from_json(data)
    if theirs != mine:
        raise ClusterMismatch(f"the cluster has {theirs.container_count} containers; this process was started "
                              f"with {container_count} (give every process the same --containers)")
