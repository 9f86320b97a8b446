"""The network-namespace support of the partition tests (tests/support/netns.py, netns_cluster.py), tried on
real namespaces: a process started in a node is that process, in that namespace; a cut makes connections hang
(not refused) both ways while the test process still reaches both nodes, and a heal lets even a connection
opened before the cut carry on; isolate and partition cut what they say and nothing else; a packet loss drops
a plausible share of datagrams, and setting it again replaces it; delays need netem (skipped, saying so, where
the kernel lacks it); a Network holds at most 16 nodes; ``close()`` and ``sweep()`` leave no namespace,
interface or process behind; and the cluster of netns_cluster starts in its namespaces and serves an SDK
client in a node of its own.

Needs root, iproute2 and nftables, as CI has (./dev.sh test installs them); skipped with the reason elsewhere.
The probes in the nodes are small Python programs (ECHO_SERVER, AGENT) talking over pipes, each step bounded
by its own socket timeout and by the pipe read's.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import psutil
import pytest

from tests.support import netns, zookeeper
from tests.support.netns_cluster import NetnsCluster

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]

PORT = 7000
TIMEOUT = 1.0  # a connect or an echo that gets no answer within this hangs, as far as the tests are concerned

ECHO_SERVER = r"""
import socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((host, port))

def echo_datagrams():
    while True:
        data, peer = udp.recvfrom(2048)
        udp.sendto(data, peer)

def echo(connection):
    with connection:
        while data := connection.recv(4096):
            connection.sendall(data)

threading.Thread(target=echo_datagrams, daemon=True).start()
server = socket.create_server((host, port))
print("ready", flush=True)
while True:
    connection, _ = server.accept()
    threading.Thread(target=echo, args=(connection,), daemon=True).start()
"""

AGENT = r"""
import socket, sys, time
from concurrent.futures import ThreadPoolExecutor
kept = None

def datagrams_echoed(host, port, count):
    # sends COUNT numbered datagrams (one a millisecond) and answers the share of them echoed
    received = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.connect((host, port))
        udp.setblocking(False)
        def drain():
            while True:
                try:
                    received.add(udp.recv(64))
                except BlockingIOError:
                    return
        for number in range(count):
            udp.send(str(number).encode())
            time.sleep(0.001)
            drain()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            drain()
            time.sleep(0.01)
    return f"{len(received) / count:.3f}"

def outcome(step):
    try:
        return step()
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as error:
        return f"error {error!r}"

def probe(target, timeout):
    host, port = target.split(":")
    socket.create_connection((host, int(port)), timeout=timeout).close()
    return "connected"

def answer(command, args):
    global kept
    if command == "probe":  # probe TIMEOUT HOST:PORT...: new connections (closed again), all at once
        with ThreadPoolExecutor(len(args) - 1) as pool:
            return " ".join(pool.map(lambda target: outcome(lambda: probe(target, float(args[0]))), args[1:]))
    if command == "connect":  # connect HOST PORT TIMEOUT: a connection kept for echo and receive
        kept = socket.create_connection((args[0], int(args[1])), timeout=float(args[2]))
        return "connected"
    if command == "echo":  # echo TIMEOUT: one byte there and back on the kept connection
        kept.settimeout(float(args[0]))
        kept.sendall(b"x")
        return "echoed" if kept.recv(1) == b"x" else "closed"
    if command == "receive":  # receive TIMEOUT: the echo of an earlier byte
        kept.settimeout(float(args[0]))
        return "echoed" if kept.recv(1) == b"x" else "closed"
    if command == "udp":  # udp HOST PORT COUNT
        return datagrams_echoed(args[0], int(args[1]), int(args[2]))
    return f"unknown command {command}"

for line in sys.stdin:
    command, *args = line.split()
    print(outcome(lambda: answer(command, args)), flush=True)
"""


class Agent:
    """The AGENT program in a node, asked one command at a time."""

    def __init__(self, node: netns.Node):
        self.node = node
        self.process = node.popen([sys.executable, "-u", "-c", AGENT], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)

    def tell(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def answer(self, within: float = 10.0) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], within + TIMEOUT)
        assert ready, f"the agent in {self.node} did not answer within {within + TIMEOUT} s"
        return self.process.stdout.readline().strip()

    def ask(self, command: str, within: float = 10.0) -> str:
        self.tell(command)
        return self.answer(within)

    def probe(self, target: netns.Node, port: int = PORT) -> str:
        """"connected", "timeout" or "refused": a new connection to ``target``."""
        return self.ask(f"probe {TIMEOUT} {target.address}:{port}")


def echo_server(node: netns.Node) -> subprocess.Popen:
    """ECHO_SERVER in ``node`` (TCP and UDP on PORT at its address), once it listens."""
    server = node.popen([sys.executable, "-u", "-c", ECHO_SERVER, node.address, str(PORT)],
                        stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], 20)
    assert ready and server.stdout.readline().strip() == "ready", f"the echo server in {node} did not start"
    return server


def host_connects(node: netns.Node) -> bool:
    """The test process (the root namespace) connects to ``node``'s echo server."""
    import socket

    try:
        socket.create_connection((node.address, PORT), timeout=TIMEOUT).close()
        return True
    except OSError:
        return False


def wait_for_exec(pid: int, program: str, timeout: float = 10.0) -> list[str]:
    """The command line of ``pid`` once ``ip netns exec`` has exec'd ``program``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        command_line = psutil.Process(pid).cmdline()
        if command_line and os.path.basename(command_line[0]) == program:
            return command_line
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never became {program}: {psutil.Process(pid).cmdline()}")


def gone(pid: int) -> bool:
    """No such process (or only its zombie, waiting for a parent that is not ours to reap it)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def namespaces() -> list[str]:
    return [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                                       timeout=10).stdout.splitlines() if line.split()]


def links() -> list[str]:
    output = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in output.splitlines() if ":" in line]


@pytest.fixture
def usable():
    available, why = netns.available()
    if not available:
        pytest.skip(why)


@pytest.fixture
def network(usable):
    with netns.Network() as made:
        yield made


def test_a_process_started_in_a_node_is_that_process_in_that_namespace(network):
    """``ip netns exec`` execs: the Popen's pid is the program itself (so it can be signalled by PID), and its
    network namespace is the node's, with the node's address on eth0 and loopback up."""
    node = network.node("a")
    sleeper = node.popen(["sleep", "30"])
    assert wait_for_exec(sleeper.pid, "sleep") == ["sleep", "30"]
    assert os.stat(f"/proc/{sleeper.pid}/ns/net").st_ino == os.stat(f"/run/netns/{node.namespace}").st_ino
    assert os.stat(f"/proc/{sleeper.pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    addresses = node.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
    assert f"eth0    inet {node.address}/24" in addresses and "lo    inet 127.0.0.1/8" in addresses
    assert node.address.startswith(str(network.subnet.network_address)[:-1]) and node.address != network.host_address


def test_a_cut_hangs_connections_both_ways_and_a_heal_restores_them(network):
    a, b = network.node("a"), network.node("b")
    echo_server(a)
    agent, other_way = Agent(b), Agent(a)
    assert agent.ask(f"connect {a.address} {PORT} {TIMEOUT}") == "connected"
    assert agent.ask(f"echo {TIMEOUT}") == "echoed"
    assert agent.probe(a, PORT + 1) == "refused"  # the control: a closed port answers at once

    network.cut(a, b)
    network.cut(b, a)  # again, the other way round: the same cut
    agent.tell(f"probe {TIMEOUT} {a.address}:{PORT} {a.address}:{PORT + 1}")
    other_way.tell(f"probe {TIMEOUT} {b.address}:{PORT}")
    assert agent.answer() == "timeout timeout", f"a dropped SYN is never answered, not even refused: {network.rules()}"
    assert other_way.answer() == "timeout", "the cut is one way only"
    assert agent.ask(f"echo {TIMEOUT}") == "timeout", "an established connection's send went through"
    assert host_connects(a), "the test process is cut off from a node"

    network.heal()
    assert agent.ask("receive 15", within=15) == "echoed", "the connection did not carry on after the heal"
    assert agent.probe(a) == "connected"
    assert agent.ask(f"echo {TIMEOUT}") == "echoed"


def test_isolate_and_partition_cut_what_they_say_and_nothing_else(network):
    nodes = [network.node(name) for name in ("a", "b", "c")]
    for node in nodes:
        echo_server(node)
    agents = {node.name: Agent(node) for node in nodes}
    a, b, c = nodes

    def reachable() -> set[tuple[str, str]]:
        """(from, to) for every pair of nodes that connect (all probes at once)."""
        targets = {source: [node for node in nodes if node.name != source] for source in agents}
        for source, agent in agents.items():
            agent.tell(f"probe {TIMEOUT} " + " ".join(f"{node.address}:{PORT}" for node in targets[source]))
        return {(source, target.name) for source, agent in agents.items()
                for target, result in zip(targets[source], agent.answer().split()) if result == "connected"}

    everything = {(x.name, y.name) for x in nodes for y in nodes if x is not y}
    assert reachable() == everything
    network.isolate(a)
    network.isolate("a")  # idempotent, and a name will do
    assert reachable() == {("b", "c"), ("c", "b")}, network.rules()
    network.isolate(a, keep=[b])  # replaces the isolation
    assert reachable() == everything - {("a", "c"), ("c", "a")}
    network.heal()
    network.partition([a, b], [c])
    assert reachable() == {("a", "b"), ("b", "a")}, network.rules()
    assert all(host_connects(node) for node in nodes)
    network.heal()
    assert reachable() == everything


def test_loss_drops_a_plausible_share_of_datagrams(network):
    """30% of a node's packets each way: about 0.7 * 0.7 = 49% of the datagrams come back echoed (300 of them:
    the bounds are five standard deviations away). Set twice it stays 30% (twice over would leave 24%)."""
    a, b = network.node("a"), network.node("b")
    echo_server(a)
    agent = Agent(b)

    def echoed() -> float:
        return float(agent.ask(f"udp {a.address} {PORT} 300", within=20))

    assert echoed() >= 0.98
    network.loss(a, 30)
    network.loss(a, 30)
    share = echoed()
    assert 0.3 <= share <= 0.68, f"{share:.0%} echoed with 30% loss each way: {network.rules()}"
    assert host_connects(a), "the loss touched the test process's packets"
    network.loss(a, 0)
    assert echoed() >= 0.98
    network.loss(b, 100)
    assert echoed() == 0.0
    network.heal()
    assert echoed() >= 0.98


def test_a_delay_needs_netem(network):
    """Delays are netem's; where the kernel has none, delay() says so (NetemUnavailable) and this is skipped
    with its message: the partition tests leave delays out then."""
    a, b = network.node("a"), network.node("b")
    echo_server(a)
    agent = Agent(b)
    try:
        network.delay(a, 200)
    except netns.NetemUnavailable as error:
        assert "netem" in str(error)
        pytest.skip(f"no packet delays on this machine: {error}")
    started = time.monotonic()
    assert agent.ask(f"connect {a.address} {PORT} 5") == "connected"
    assert time.monotonic() - started >= 0.2  # the SYN-ACK left a 200 ms late
    network.heal()


def test_a_network_holds_at_most_16_nodes_with_simple_names(network):
    for index in range(netns.MAX_NODES):
        network.node(f"n{index}")
    assert network.node("n3") is network.nodes["n3"]  # made once
    with pytest.raises(ValueError, match="at most 16"):
        network.node(f"n{netns.MAX_NODES}")
    with pytest.raises(ValueError, match="bad node name"):
        network.node("Bad Name")


def test_close_leaves_no_namespace_interface_or_process_behind(usable):
    network = netns.Network()
    a, b = network.node("a"), network.node("b")
    server = echo_server(a)
    shell = b.popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    assert shell.stdout is not None
    stray = int(shell.stdout.readline())  # not started through the network: only its namespace says it is ours
    assert {network.switch, a.namespace, b.namespace} <= set(namespaces())
    assert network.host_link in links()

    network.close()
    network.close()  # idempotent
    assert server.poll() is not None and shell.poll() is not None
    assert gone(stray)
    assert not [name for name in namespaces() if name.startswith(network.switch)]
    assert network.host_link not in links()
    assert str(network.subnet.network_address)[:-1] not in subprocess.run(
        ["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
    with pytest.raises(RuntimeError, match="closed"):
        network.node("c")


def test_sweep_removes_only_what_dead_test_processes_left(usable):
    """What a test process killed before its close() left (namespaces, a process in one, the host interface) is
    removed by the next sweep (every new Network runs one); a live process's namespaces are not touched."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "60"])
    left = [f"tn-{dead.pid}-1", f"tn-{dead.pid}-1-zk"]
    kept = f"tn-{alive.pid}-1"
    try:
        for name in [*left, kept]:
            subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
        subprocess.run(["ip", "link", "add", f"th{dead.pid}x1", "type", "veth", "peer", "name", f"tp{dead.pid}"],
                       check=True, timeout=10)
        orphan = subprocess.Popen(["ip", "netns", "exec", left[1], "sleep", "60"])
        wait_for_exec(orphan.pid, "sleep")

        netns.sweep()
        assert orphan.wait(10) == -9
        assert not set(left) & set(namespaces())
        assert f"th{dead.pid}x1" not in links()
        assert kept in namespaces()
    finally:
        for name in [*left, kept]:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "delete", f"th{dead.pid}x1"], capture_output=True, timeout=10)
        alive.kill()
        alive.wait()


ROUND_TRIP = r"""
import asyncio, sys
import tributary
from tests.support.sdk import check_each_once_in_key_order, read_all, write_keyed

async def round_trip(uri):
    async with tributary.connect(uri) as client:
        await client.create_scope("smoke")
        await client.create_stream("smoke", "events", tributary.StreamConfiguration(tributary.ScalingPolicy.fixed(2)))
        async with client.create_writer("smoke", "events") as writer:
            await write_keyed(writer, 100, keys=4)
        (events,) = await read_all(client, "smoke", "events", "check")
        check_each_once_in_key_order([event.data for event in events], 100, 4)
        print(f"read back {len(events)} events")

asyncio.run(asyncio.wait_for(round_trip(sys.argv[1]), 60))
"""


@pytest.mark.slow
@pytest.mark.zk  # its own ZooKeeper, in a namespace
@pytest.mark.timeout(240)
def test_a_netns_cluster_serves_an_sdk_client_in_a_node_of_its_own(tmp_path, network):
    """ZooKeeper, 3 log stores, 2 segment stores and 2 controllers, each in its own namespace, advertising its
    node's address: `tributary status` run in the client node sees every container served by stores at their
    nodes' addresses, and an SDK program there writes 100 events to a new stream and reads them back."""
    if not zookeeper.available():
        pytest.skip(f"ZooKeeper is not installed ({zookeeper.ZOOKEEPER_JAR}); ./dev.sh test installs it")
    started = time.monotonic()
    cluster = NetnsCluster(tmp_path, network).start()
    print(f"cluster up in {time.monotonic() - started:.1f} s")
    status = cluster.client.run([sys.executable, "-m", "tributary", "status", "--zk", cluster.zk_hosts],
                                capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.strip().splitlines()[-1] == f"all {cluster.containers} containers served"
    for process in [*cluster.segment_stores, *cluster.controllers]:
        assert process.endpoint in status.stdout, status.stdout
    code, state = cluster.status(launcher=cluster.client.launcher)
    assert code == 0 and set(state["segment_stores"]) == {store.endpoint for store in cluster.segment_stores}

    started = time.monotonic()
    result = cluster.run_client_program(["-c", ROUND_TRIP, cluster.controller_uri], timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "read back 100 events" in result.stdout
    print(f"100 events written and read back from the client node in {time.monotonic() - started:.1f} s")
    cluster.stop()
    assert not any(process.alive for process in [*cluster.segment_stores, *cluster.controllers,
                                                 *cluster.log_stores])
