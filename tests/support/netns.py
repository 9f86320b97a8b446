"""A virtual LAN of network namespaces for partition tests: each node its own namespace and address, and a
nemesis that cuts, isolates and degrades links with nftables rules inside the namespaces.

Layout: a Linux bridge in the test's own (root) namespace holds the subnet's first address, so the test
process reaches every node directly (to start, probe and read from them); each node is a namespace joined to
the bridge by a veth pair, with its own address and its own loopback. A partition *drops* packets (it does
not reject them): connections hang, as they do when a real network splits. Rules live in the nodes'
namespaces, so the test process's own traffic is never cut unless a node's rules name it.

Bounded and clean: at most MAX_NODES nodes; ``close()`` kills every process started through the network by
its PID, then deletes the namespaces and the bridge; ``sweep()`` removes what a test process that died left
behind (names carry the owner's PID). Names and the subnet are unique per process and per Network, so tests
on several pytest-xdist workers never collide.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables); ``available()`` says why not, for a skip. Delays need the
kernel's netem qdisc, which some kernels lack: ``delay()`` raises NetemUnavailable then.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence

from .processes import kill_process

MAX_NODES = 16
_counter = itertools.count(1)
_NAME = re.compile(r"^tn-(\d+)-\d+-")
_BRIDGE = re.compile(r"^tb(\d+)x\d+$")
TABLE = "nemesis"


class NetemUnavailable(RuntimeError):
    """The kernel has no netem qdisc: packets cannot be delayed."""


def _run(*argv: str, check: bool = True, namespace: str | None = None) -> subprocess.CompletedProcess:
    command = ["ip", "netns", "exec", namespace, *argv] if namespace else list(argv)
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def available() -> tuple[bool, str]:
    """(True, "") when namespaces, veth pairs, a bridge and nftables can be used here; else (False, why)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return False, f"{tool} is not installed (./dev.sh installs iproute2 and nftables)"
    probe = f"tn-{os.getpid()}-0-probe"
    try:
        _run("ip", "netns", "add", probe)
        _run("nft", "list", "ruleset", namespace=probe)
    except (RuntimeError, OSError) as error:
        return False, f"cannot use a network namespace with nftables here: {error}"
    finally:
        _run("ip", "netns", "delete", probe, check=False)
    return True, ""


def sweep() -> None:
    """Deletes namespaces and bridges left by test processes that are gone."""
    def gone(pid: int) -> bool:
        return pid != os.getpid() and not os.path.exists(f"/proc/{pid}")

    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAME.match(name)
        if match and gone(int(match.group(1))):
            _run("ip", "netns", "delete", name, check=False)
    for line in _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        match = _BRIDGE.match(name)
        if match and gone(int(match.group(1))):
            _run("ip", "link", "delete", name, check=False)


class Node:
    """One namespace of a Network, with its address."""

    def __init__(self, network: Network, name: str, namespace: str, address: str):
        self.network = network
        self.name = name
        self.namespace = namespace
        self.address = address

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.address}>"

    def popen(self, argv: Sequence[str], **options) -> subprocess.Popen:
        """Starts ``argv`` inside the namespace (``ip netns exec`` execs it: the Popen's pid is the process);
        ``close()`` kills it if it still runs."""
        process = subprocess.Popen(["ip", "netns", "exec", self.namespace, *argv], **options)
        self.network.processes.append(process)
        return process

    def run(self, argv: Sequence[str], timeout: float = 60.0, **options) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.namespace, *argv], timeout=timeout, **options)


class Network:
    """A bridge and up to MAX_NODES namespaces on a private /24 (see the module docstring)."""

    def __init__(self) -> None:
        sweep()
        self.id = f"{os.getpid()}-{next(_counter)}"
        pid, serial = self.id.split("-")
        self.bridge = f"tb{pid}x{serial}"
        self.subnet = self._free_subnet()
        self.gateway = f"{self.subnet}.1"
        self.nodes: dict[str, Node] = {}
        self.processes: list[subprocess.Popen] = []
        self._ruled: set[str] = set()  # namespaces with nemesis rules
        self._netem: set[str] = set()
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    @staticmethod
    def _free_subnet() -> str:
        routes = _run("ip", "-4", "route", "show", check=False).stdout
        for index in itertools.count(os.getpid() * 7 + next(_counter)):
            subnet = f"10.{100 + index % 100}.{(index // 100) % 250 + 1}"
            if f"{subnet}.0/24" not in routes:
                return subnet
        raise AssertionError("unreachable")

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def node(self, name: str) -> Node:
        """The node ``name``, made on first use."""
        if name in self.nodes:
            return self.nodes[name]
        if len(self.nodes) >= MAX_NODES:
            raise ValueError(f"a Network holds at most {MAX_NODES} nodes")
        index = len(self.nodes) + 2
        namespace = f"tn-{self.id}-{name}"
        outside, inside = f"tv{self.bridge[2:]}n{index}", f"ti{self.bridge[2:]}n{index}"
        address = f"{self.subnet}.{index}"
        _run("ip", "netns", "add", namespace)
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", namespace)
        _run("ip", "link", "set", outside, "master", self.bridge)
        _run("ip", "link", "set", outside, "up")
        for command in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", inside, "name", "eth0"],
                        ["ip", "addr", "add", f"{address}/24", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"],
                        ["ip", "route", "add", "default", "via", self.gateway]):
            _run(*command, namespace=namespace)
        node = Node(self, name, namespace, address)
        self.nodes[name] = node
        return node

    # ------------------------------------------------------------------ the nemesis

    def cut(self, a: Node, b: Node) -> None:
        """Drops every packet between ``a`` and ``b``, both ways."""
        self._drop(a, b.address)
        self._drop(b, a.address)

    def cut_one_way(self, source: Node, target: Node) -> None:
        """Drops what ``source`` sends to ``target`` (replies to ``target``'s packets included)."""
        self._rules(source)
        _run("nft", "add", "rule", "inet", TABLE, "output", "ip", "daddr", target.address, "drop",
             namespace=source.namespace)

    def isolate(self, node: Node, *, keep: Iterable[Node] = ()) -> None:
        """Cuts ``node`` from every other node except ``keep`` (the test process still reaches it)."""
        kept = {other.name for other in keep}
        for other in self.nodes.values():
            if other is not node and other.name not in kept:
                self.cut(node, other)

    def partition(self, group: Iterable[Node], other: Iterable[Node]) -> None:
        others = list(other)
        for a in group:
            for b in others:
                self.cut(a, b)

    def loss(self, node: Node, percent: int) -> None:
        """Drops ``percent`` % of the packets ``node`` sends and receives, at random."""
        if not 0 < percent <= 100:
            raise ValueError("percent is in 1..100")
        self._rules(node)
        for chain in ("input", "output"):
            _run("nft", "add", "rule", "inet", TABLE, chain, "numgen", "random", "mod", "100", "<", str(percent),
                 "drop", namespace=node.namespace)

    def delay(self, node: Node, milliseconds: int) -> None:
        """Delays every packet ``node`` sends by ``milliseconds`` (netem). Raises NetemUnavailable."""
        result = _run("tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", f"{milliseconds}ms",
                      check=False, namespace=node.namespace)
        if result.returncode != 0:
            raise NetemUnavailable(f"cannot delay packets here: {result.stderr.strip()}")
        self._netem.add(node.namespace)

    def heal(self) -> None:
        """Removes every rule and delay: the network is whole again."""
        for namespace in self._ruled:
            _run("nft", "flush", "table", "inet", TABLE, namespace=namespace, check=False)
        for namespace in self._netem:
            _run("tc", "qdisc", "del", "dev", "eth0", "root", namespace=namespace, check=False)
        self._netem.clear()

    def _drop(self, node: Node, address: str) -> None:
        self._rules(node)
        for chain, direction in (("input", "saddr"), ("output", "daddr")):
            _run("nft", "add", "rule", "inet", TABLE, chain, "ip", direction, address, "drop",
                 namespace=node.namespace)

    def _rules(self, node: Node) -> None:
        """Makes the node's nemesis table and its input and output chains (once)."""
        if node.namespace in self._ruled:
            _run("nft", "add", "table", "inet", TABLE, namespace=node.namespace)  # after a flush: chains stay
            return
        _run("nft", "add", "table", "inet", TABLE, namespace=node.namespace)
        for chain in ("input", "output"):
            _run("nft", f"add chain inet {TABLE} {chain} {{ type filter hook {chain} priority 0 ; }}",
                 namespace=node.namespace)
        self._ruled.add(node.namespace)

    # ------------------------------------------------------------------ cleaning up

    def close(self) -> None:
        for process in self.processes:
            kill_process(process)
        for node in self.nodes.values():
            _run("ip", "netns", "delete", node.namespace, check=False)
        _run("ip", "link", "delete", self.bridge, check=False)
        self.nodes.clear()
