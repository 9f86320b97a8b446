"""A virtual LAN of network namespaces for partition tests: each node its own namespace and address, and a
nemesis that cuts, isolates and degrades the links between them with nftables rules.

Layout: a *switch* namespace holds a Linux bridge; each node is a namespace joined to the bridge by a veth
pair (``eth0`` inside, with the node's address on a private /24; loopback up; no default route, so a node
reaches nothing outside the LAN). One more veth pair joins the test's own (root) namespace to the bridge with
the subnet's first address (``host_address``), so the test process reaches every node directly to start,
probe and read them. The root namespace gets only that one interface and its /24: no bridge, and no bridged
traffic through the host's firewall (br_netfilter would hand it to the host's iptables FORWARD chain, which
Docker hosts set to DROP).

The nemesis is one nftables table in the switch namespace (family ``bridge``, hook ``forward``), rendered
from what the test asked for and replaced atomically on every change: so each call is idempotent, ``heal()``
removes everything at once, and a drop is a frame lost between two nodes, as on a real network: the sender
gets no error, connections hang rather than being refused (a drop in the sender's own output chain would
fail its ``sendto`` with EPERM instead). Rules match IPv4 addresses only: ARP still resolves, so a cut looks
like silence, not "no route to host". Traffic from and to ``host_address`` (the test process) is never
dropped: the test stays an observer. Delays need the kernel's netem qdisc, which some kernels lack (the one
this was written on does): ``delay()`` raises NetemUnavailable then.

Bounded and clean: at most MAX_NODES nodes; ``close()`` kills every process started through the network by
its PID (and then any other process left in its namespaces, by PID), deletes the host's interface and the
namespaces; ``sweep()`` (run by every new Network) removes what a test process that died left behind: names
carry the owner's PID (namespaces ``tn-PID-SERIAL[-NODE]``, the host interface ``thPIDxSERIAL``). Names are
unique per process and per Network, and the subnet is chosen under a file lock among those the host does not
use, so Networks in several pytest-xdist workers never collide.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables); ``available()`` says why not, for a skip.
"""

from __future__ import annotations

import fcntl
import functools
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from .processes import kill_process

MAX_NODES = 16
TABLE = "nemesis"
_serials = itertools.count(1)
_NAMESPACE = re.compile(r"^tn-(\d+)-\d+(-.*)?$")
_HOST_LINK = re.compile(r"^t[hb](\d+)x\d+$")  # tb: the bridges an earlier layout put in the root namespace
_NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.]{0,31}$")
_LOCK = Path("/run/lock" if os.path.isdir("/run/lock") else tempfile.gettempdir()) / "tributary-netns.lock"


class NetemUnavailable(RuntimeError):
    """The kernel (or the machine) has no netem qdisc: packets cannot be delayed."""


def _run(*argv: str, namespace: str | None = None, check: bool = True, input: str | None = None,
         timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Runs a command (inside ``namespace``); raises RuntimeError with its message if it fails and ``check``."""
    command = ["ip", "netns", "exec", namespace, *argv] if namespace else list(argv)
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _ip_batch(namespace: str | None, commands: Iterable[str]) -> None:
    """Runs ``ip`` commands in one process (``ip -n NS -batch -``)."""
    _run("ip", *(["-n", namespace] if namespace else []), "-batch", "-", input="\n".join(commands) + "\n")


@functools.cache
def available() -> tuple[bool, str]:
    """(True, "") when namespaces, veth pairs, a bridge and nftables can be used here; else (False, why)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return False, f"{tool} is not installed (./dev.sh test installs iproute2 and nftables)"
    probe = f"tn-{os.getpid()}-0-probe"
    try:
        _run("ip", "netns", "add", probe)
        _ip_batch(probe, ["link add br0 type bridge", "link add v0 type veth peer name v1"])
        _run("nft", f"add table bridge {TABLE}", namespace=probe)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        return False, f"cannot make a namespace with a bridge, veth pairs and nftables here: {error}"
    finally:
        _run("ip", "netns", "delete", probe, check=False)
    return True, ""


def _pid_gone(pid: int) -> bool:
    return pid != os.getpid() and not os.path.exists(f"/proc/{pid}")


def _kill_namespace_processes(namespace: str, timeout: float = 10.0) -> None:
    """SIGKILLs, by PID, every process still in ``namespace``, and waits until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [int(pid) for pid in _run("ip", "netns", "pids", namespace, check=False).stdout.split()]
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def sweep() -> None:
    """Removes the namespaces (killing what still runs in them) and host interfaces of test processes that are
    gone. Another live process's are never touched (their owner's PID still exists)."""
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAMESPACE.match(name)
        if match and _pid_gone(int(match.group(1))):
            _kill_namespace_processes(name)
            _run("ip", "netns", "delete", name, check=False)
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        fields = line.split(":")
        name = fields[1].strip().split("@")[0] if len(fields) > 1 else ""
        match = _HOST_LINK.match(name)
        if match and _pid_gone(int(match.group(1))):
            _run("ip", "link", "delete", name, check=False)


def _used_networks() -> list[ipaddress.IPv4Network]:
    """The host's own IPv4 networks (addresses and routes; /16 or narrower: a broad route does not forbid a
    /24 inside it, whose route is the more specific)."""
    words = _run("ip", "-4", "-o", "addr", "show", check=False).stdout.split()
    prefixes = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "inet"]
    routes = _run("ip", "-4", "route", "show", "table", "all", check=False).stdout.splitlines()
    prefixes += [line.split()[0] for line in routes if line.split() and line.split()[0][0].isdigit()]
    networks = []
    for prefix in prefixes:
        try:
            network = ipaddress.IPv4Network(prefix, strict=False)
        except ValueError:
            continue
        if network.prefixlen >= 16:
            networks.append(network)
    return networks


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /24 in 10.100.0.0-10.199.255.0 that the host uses nowhere (call it under the lock)."""
    used = _used_networks()
    for offset in range(25_000):
        index = (seed + offset) % 25_000
        subnet = ipaddress.IPv4Network(f"10.{100 + index // 250}.{index % 250 + 1}.0/24")
        if not any(subnet.overlaps(network) for network in used):
            return subnet
    raise RuntimeError("no free /24 in 10.100.0.0/9 for a test network")


class Node:
    """One namespace of a Network: ``name``, ``namespace`` (for ``ip netns exec``), ``address`` (its IPv4
    address on the LAN)."""

    def __init__(self, network: Network, name: str, namespace: str, address: str, port: str):
        self.network = network
        self.name = name
        self.namespace = namespace
        self.address = address
        self.port = port  # its veth's end on the bridge, in the switch namespace

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.address}>"

    @property
    def launcher(self) -> list[str]:
        """The command prefix that runs a program in this node (for helpers that take one)."""
        return ["ip", "netns", "exec", self.namespace]

    def popen(self, argv: Sequence[str], **options) -> subprocess.Popen:
        """Starts ``argv`` inside the namespace (``subprocess.Popen`` options pass through). ``ip netns exec``
        execs it, so the Popen's pid is the process itself; ``Network.close()`` kills it if it still runs."""
        if self.network.closed:
            raise RuntimeError(f"{self.network} is closed")
        process = subprocess.Popen([*self.launcher, *argv], **options)
        self.network.processes.append(process)
        return process

    def run(self, argv: Sequence[str], timeout: float = 60.0, **options) -> subprocess.CompletedProcess:
        """Runs ``argv`` inside the namespace to its end (killed after ``timeout`` seconds: TimeoutExpired)."""
        return subprocess.run([*self.launcher, *argv], timeout=timeout, **options)


class Network:
    """A switch and up to MAX_NODES nodes on a private /24, and the nemesis (see the module docstring).

    Every nemesis call takes nodes or node names, is idempotent, and lasts until ``heal()``."""

    def __init__(self) -> None:
        sweep()
        serial = next(_serials)
        self.id = f"{os.getpid()}-{serial}"
        self.switch = f"tn-{self.id}"
        self.host_link = f"th{os.getpid()}x{serial}"
        self.nodes: dict[str, Node] = {}
        self.processes: list[subprocess.Popen] = []
        self.closed = False
        self._cuts: set[tuple[str, str]] = set()  # (from address, to address)
        self._isolated: dict[str, frozenset[str]] = {}  # address -> addresses it still reaches
        self._loss: dict[str, int] = {}  # address -> percent
        self._delayed: set[str] = set()  # namespaces with a netem qdisc
        try:
            self._make_switch(seed=os.getpid() * 131 + serial * 7)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"<Network {self.id}>"

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _make_switch(self, seed: int) -> None:
        _run("ip", "netns", "add", self.switch)
        _ip_batch(self.switch, ["link set lo up", "link add br0 type bridge", "link set br0 up"])
        with open(_LOCK, "a") as lock:  # choosing a subnet and taking it is one step for every process
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = _free_subnet(seed)
            self.host_address = str(self.subnet.network_address + 1)
            _run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "host", "netns", self.switch)
            _ip_batch(None, [f"addr add {self.host_address}/24 dev {self.host_link}",
                             f"link set {self.host_link} up"])
        _ip_batch(self.switch, ["link set host master br0", "link set host up"])

    def node(self, name: str) -> Node:
        """The node ``name`` (lower-case letters, digits, ``_`` and ``.``), made on first use."""
        if name in self.nodes:
            return self.nodes[name]
        if self.closed:
            raise RuntimeError(f"{self} is closed")
        if not _NODE_NAME.match(name):
            raise ValueError(f"bad node name {name!r}")
        if len(self.nodes) >= MAX_NODES:
            raise ValueError(f"a Network holds at most {MAX_NODES} nodes")
        index = len(self.nodes) + 2
        namespace, port = f"{self.switch}-{name}", f"n{index}"
        address = str(self.subnet.network_address + index)
        _run("ip", "netns", "add", namespace)
        node = Node(self, name, namespace, address, port)
        self.nodes[name] = node  # from here on, close() deletes it
        _ip_batch(self.switch, [f"link add {port} type veth peer name eth0 netns {namespace}",
                                f"link set {port} master br0", f"link set {port} up"])
        _ip_batch(namespace, ["link set lo up", f"addr add {address}/24 dev eth0", "link set eth0 up"])
        return node

    def _node(self, node: Node | str) -> Node:
        return self.nodes[node] if isinstance(node, str) else node

    # ------------------------------------------------------------------ the nemesis

    def cut(self, a: Node | str, b: Node | str) -> None:
        """Drops every packet between ``a`` and ``b``, both ways."""
        a, b = self._node(a), self._node(b)
        self._cuts |= {(a.address, b.address), (b.address, a.address)}
        self._apply()

    def cut_one_way(self, source: Node | str, target: Node | str) -> None:
        """Drops what ``source`` sends to ``target`` (its replies to ``target``'s packets included)."""
        self._cuts.add((self._node(source).address, self._node(target).address))
        self._apply()

    def isolate(self, node: Node | str, *, keep: Iterable[Node | str] = ()) -> None:
        """Cuts ``node`` from every other node but ``keep``, nodes made later included (the test process
        still reaches it). Again on the same node: ``keep`` is replaced."""
        self._isolated[self._node(node).address] = frozenset(self._node(other).address for other in keep)
        self._apply()

    def partition(self, group: Iterable[Node | str], other: Iterable[Node | str]) -> None:
        """Cuts every node of ``group`` from every node of ``other``; within each group all still talk."""
        others = [self._node(node) for node in other]
        for a in map(self._node, group):
            for b in others:
                self._cuts |= {(a.address, b.address), (b.address, a.address)}
        self._apply()

    def loss(self, node: Node | str, percent: int) -> None:
        """Drops ``percent`` % of the packets ``node`` sends to other nodes and as many of those it receives
        from them, at random; again on the same node: the new share replaces the old (0: none)."""
        if not 0 <= percent <= 100:
            raise ValueError("percent is in 0..100")
        address = self._node(node).address
        if percent:
            self._loss[address] = percent
        else:
            self._loss.pop(address, None)
        self._apply()

    def delay(self, node: Node | str, milliseconds: int) -> None:
        """Delays every packet ``node`` sends by ``milliseconds`` (a netem qdisc on its eth0; the test
        process's packets too). Raises NetemUnavailable where the kernel has no netem."""
        node = self._node(node)
        try:
            result = _run("tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", f"{milliseconds}ms",
                          namespace=node.namespace, check=False)
        except FileNotFoundError as error:
            raise NetemUnavailable(f"cannot delay packets here: {error}") from error
        if result.returncode != 0:
            raise NetemUnavailable(f"cannot delay packets here (no netem qdisc in this kernel?): "
                                   f"{result.stderr.strip() or result.stdout.strip()}")
        self._delayed.add(node.namespace)

    def heal(self) -> None:
        """Removes every cut, loss and delay: the network is whole again."""
        self._cuts.clear()
        self._isolated.clear()
        self._loss.clear()
        self._apply()
        for namespace in self._delayed:
            _run("tc", "qdisc", "del", "dev", "eth0", "root", namespace=namespace, check=False)
        self._delayed.clear()

    def rules(self) -> str:
        """The nemesis's nftables table as the switch has it now (for a test's failure message)."""
        return _run("nft", "list", "ruleset", namespace=self.switch, check=False).stdout

    def _apply(self) -> None:
        """Replaces the switch's nemesis table with one rendered from the faults asked for, atomically."""
        _run("nft", "-f", "-", namespace=self.switch, input=self._render())

    def _render(self) -> str:
        host = self.host_address
        rules = []
        if self._cuts:
            pairs = ", ".join(f"{source} . {target}" for source, target in sorted(self._cuts))
            rules.append(f"ip saddr . ip daddr {{ {pairs} }} drop")
        for address, keep in sorted(self._isolated.items()):
            spared = ", ".join(sorted({host, *keep}))
            rules += [f"ip saddr {address} ip daddr != {{ {spared} }} drop",
                      f"ip daddr {address} ip saddr != {{ {spared} }} drop"]
        for address, percent in sorted(self._loss.items()):
            chance = f"numgen random mod 100 < {percent} " if percent < 100 else ""
            rules += [f"ip saddr {address} ip daddr != {host} {chance}drop",
                      f"ip daddr {address} ip saddr != {host} {chance}drop"]
        text = f"add table bridge {TABLE}\ndelete table bridge {TABLE}\n"
        if rules:
            body = "\n".join(f"    {rule}" for rule in rules)
            text += (f"table bridge {TABLE} {{\n  chain forward {{\n"
                     f"    type filter hook forward priority 0; policy accept;\n{body}\n  }}\n}}\n")
        return text

    # ------------------------------------------------------------------ cleaning up

    def close(self) -> None:
        """Kills, by PID, every process started through the network that still runs and anything else left in
        its namespaces; deletes the host's interface and the namespaces. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for process in self.processes:
            kill_process(process)
        for namespace in [node.namespace for node in self.nodes.values()] + [self.switch]:
            _kill_namespace_processes(namespace)
        _run("ip", "link", "delete", self.host_link, check=False)
        for namespace in [node.namespace for node in self.nodes.values()] + [self.switch]:
            _run("ip", "netns", "delete", namespace, check=False)
