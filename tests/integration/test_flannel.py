"""minik8s-flanneld on three hosts made of network namespaces, against the session's real etcd.

The underlay is a bridge in a "switch" namespace with one veth per host
(192.168.77.0/24). Each host runs its own ``minik8s-flanneld`` under
``ip netns exec`` and reaches etcd, which listens on the loopback of this
namespace, through a relay listening on the same address inside the host
(nothing is added to the machine's own namespace). Once a host's subnet file
exists, a bridge standing in for docker0 takes FLANNEL_SUBNET and a "pod"
namespace hangs off it with the subnet's .2, as Docker would do. The hosts'
FORWARD policy is DROP, as Docker leaves it, so pod traffic crosses only
through flanneld's rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import aetcd
import pytest

from tests.conftest import EtcdProcess, ServiceProcess, daemon_environment, tail

CLONE_NEWNET = 0x40000000
UNDERLAY = IPv4Network("192.168.77.0/24")
HOSTS = {"a": IPv4Address("192.168.77.11"), "b": IPv4Address("192.168.77.12"), "c": IPv4Address("192.168.77.13")}
FLANNELD = str(Path(sys.executable).with_name("minik8s-flanneld"))
FOREIGN_RULE = ["-s", "10.99.0.0/16", "-j", "MASQUERADE"]  # someone else's rule that flanneld must leave alone

# An ICMP echo from inside a namespace (the machine has no ping): exit status 0 when the reply comes.
PING = """
import socket, struct, sys
def checksum(data):
    total = sum(struct.unpack('!%dH' % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xffff)
    return ~(total + (total >> 16)) & 0xffff
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock.settimeout(2)
header = struct.pack('!BBHHH', 8, 0, 0, 4242, 1)
packet = struct.pack('!BBHHH', 8, 0, checksum(header + b'minik8s!'), 4242, 1) + b'minik8s!'
sock.sendto(packet, (sys.argv[1], 0))
while True:
    data, (source, _) = sock.recvfrom(2048)
    if source == sys.argv[1] and data[20] == 0:
        sys.exit(0)
"""

# A one-shot TCP server: answers the first connection with the address it came from.
ECHO_PEER = """
import socket, sys
server = socket.create_server(('0.0.0.0', int(sys.argv[1])))
print('listening', flush=True)
connection, (peer, _) = server.accept()
connection.sendall(peer.encode())
connection.close()
"""


def ip(*args: str) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def in_netns(netns: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, timeout=timeout,
                          check=False)


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 60) -> None:
    """Poll ``condition`` until it holds; the timeout only bounds a broken run, it is not what is tested."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.3)


class NamespaceRelay:
    """Accepts TCP connections on ``127.0.0.1:<port>`` inside ``netns`` and relays them to the same address here."""

    def __init__(self, netns: str, port: int) -> None:
        self.port = port
        self.listener = self._listen_in(netns)
        self.connections: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _listen_in(self, netns: str) -> socket.socket:
        """A socket belongs to the namespace of the thread that creates it: make it in a thread moved there."""
        made: list[socket.socket | BaseException] = []

        def make() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {netns}")
                finally:
                    os.close(fd)
                made.append(socket.create_server(("127.0.0.1", self.port)))
            except BaseException as error:
                made.append(error)

        thread = threading.Thread(target=make)
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]

    def _accept(self) -> None:
        while not self.closed:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return
            try:
                outside = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                inside.close()  # etcd is down: the client sees a reset and retries, as it would without the relay
                continue
            outside.settimeout(None)
            self.connections += [inside, outside]
            for source, target in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        for sock in [self.listener, *self.connections]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Flanneld(ServiceProcess):
    """``minik8s-flanneld`` inside a host namespace; ready once it has written its subnet file."""

    name = "flanneld"

    def __init__(self, workdir: Path, netns: str, etcd: EtcdProcess, prefix: str) -> None:
        super().__init__(workdir)
        self.netns = netns
        self.etcd = etcd
        self.prefix = prefix
        self.subnet_file = workdir / "subnet.env"

    def flags(self) -> list[str]:
        return ["--etcd-endpoints", self.etcd.endpoint, "--etcd-prefix", self.prefix,
                "--subnet-file", str(self.subnet_file), "--resync-seconds", "2", "--subnet-lease-ttl-seconds", "10",
                "--log-level", "DEBUG"]

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns, FLANNELD, *self.flags()]

    def environment(self) -> dict[str, str]:
        return daemon_environment()

    def is_ready(self) -> bool:
        return self.subnet_file.exists()

    def subnet_env(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.subnet_file.read_text().splitlines())

    def subnet(self) -> IPv4Network:
        return IPv4Network(self.subnet_env()["FLANNEL_SUBNET"], strict=False)

    def release(self) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["ip", "netns", "exec", self.netns, FLANNELD, *self.flags(), "--release"],
                                capture_output=True, text=True, timeout=60, env=self.environment(), check=False)
        with self.log_file.open("a") as log:
            log.write(f"===== --release: status {result.returncode}\n{result.stdout}{result.stderr}")
        return result


@dataclass
class Host:
    letter: str
    netns: str
    pod_netns: str
    address: IPv4Address
    flanneld: Flanneld
    relay: NamespaceRelay | None = None
    pod_ip: IPv4Address | None = None

    def routes(self) -> set[str]:
        """The destinations routed over flannel.1, as ``ip route`` shows them."""
        shown = json.loads(ip("-j", "-n", self.netns, "route", "show", "dev", "flannel.1") or "[]")
        return {route["dst"] for route in shown}

    def iptables(self, *args: str) -> str:
        result = in_netns(self.netns, "iptables", *args)
        return result.stdout + result.stderr


@dataclass
class Cluster:
    prefix: str
    etcd: EtcdProcess
    hosts: dict[str, Host] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    async def _read(self, key: str) -> dict[str, bytes]:
        async with aetcd.Client(host=self.etcd.host, port=self.etcd.port) as client:
            found = await client.get_prefix(key.encode())
            return {kv.key.decode(): kv.value for kv in found}

    def etcd_get(self, key: str) -> dict[str, bytes]:
        """Every key under ``key`` (a prefix) and its value."""
        return asyncio.run(self._read(key))

    async def _write(self, key: str, value: bytes | None) -> None:
        async with aetcd.Client(host=self.etcd.host, port=self.etcd.port) as client:
            if value is None:
                await client.delete(key.encode())
            else:
                await client.put(key.encode(), value)

    def etcd_put(self, key: str, value: bytes | None) -> None:
        asyncio.run(self._write(key, value))

    async def _remaining_ttl(self, key: str) -> int:
        async with aetcd.Client(host=self.etcd.host, port=self.etcd.port) as client:
            found = await client.get(key.encode())
            assert found is not None, f"{key} is gone"
            return (await client.get_lease_info(found.lease, keys=False)).TTL

    def remaining_ttl(self, key: str) -> int:
        """Seconds left on the etcd lease ``key`` is attached to."""
        return asyncio.run(self._remaining_ttl(key))

    def leases(self) -> dict[str, dict[str, object]]:
        return {key.rsplit("/", 1)[-1]: json.loads(value)
                for key, value in self.etcd_get(f"{self.prefix}/subnets/").items()}


def add_netns(cluster: Cluster, name: str) -> str:
    ip("netns", "add", name)
    cluster.namespaces.append(name)
    ip("-n", name, "link", "set", "lo", "up")
    return name


def build_underlay(cluster: Cluster, tag: str) -> str:
    switch = add_netns(cluster, f"fl{tag}-sw")
    ip("-n", switch, "link", "add", "br0", "type", "bridge")
    ip("-n", switch, "link", "set", "br0", "up")
    for letter, address in HOSTS.items():
        netns = add_netns(cluster, f"fl{tag}-{letter}")
        ip("-n", switch, "link", "add", f"port-{letter}", "type", "veth", "peer", "name", "eth0", "netns", netns)
        ip("-n", switch, "link", "set", f"port-{letter}", "master", "br0", "up")
        ip("-n", netns, "addr", "add", f"{address}/{UNDERLAY.prefixlen}", "dev", "eth0")
        ip("-n", netns, "link", "set", "eth0", "up")
        ip("-n", netns, "route", "add", "default", "via", str(UNDERLAY.network_address + 1))
        for sysctl in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"):
            result = in_netns(netns, "sysctl", "-w", sysctl)
            assert result.returncode == 0, result.stderr
        for command in (["-P", "FORWARD", "DROP"], ["-t", "nat", "-A", "POSTROUTING", *FOREIGN_RULE]):
            result = in_netns(netns, "iptables", *command)
            assert result.returncode == 0, result.stderr
    return switch


def attach_pod(cluster: Cluster, host: Host) -> None:
    """What Docker does with bip=FLANNEL_SUBNET and mtu=FLANNEL_MTU: a bridge, and a container on it."""
    env = host.flanneld.subnet_env()
    subnet = host.flanneld.subnet()
    host.pod_ip = subnet.network_address + 2
    add_netns(cluster, host.pod_netns)
    ip("-n", host.netns, "link", "add", "docker0", "type", "bridge")
    ip("-n", host.netns, "addr", "add", env["FLANNEL_SUBNET"], "dev", "docker0")
    ip("-n", host.netns, "link", "set", "docker0", "up")
    ip("-n", host.netns, "link", "add", "veth-pod", "mtu", env["FLANNEL_MTU"], "type", "veth", "peer", "name", "eth0",
       "mtu", env["FLANNEL_MTU"], "netns", host.pod_netns)
    ip("-n", host.netns, "link", "set", "veth-pod", "master", "docker0", "up")
    ip("-n", host.pod_netns, "addr", "add", f"{host.pod_ip}/{subnet.prefixlen}", "dev", "eth0")
    ip("-n", host.pod_netns, "link", "set", "eth0", "up")
    ip("-n", host.pod_netns, "route", "add", "default", "via", str(subnet.network_address + 1))


def ping(source: Host, target: Host) -> bool:
    assert target.pod_ip is not None
    return in_netns(source.pod_netns, sys.executable, "-c", PING, str(target.pod_ip)).returncode == 0


@pytest.fixture(scope="module")
def cluster(etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tag = uuid.uuid4().hex[:6]
    cluster = Cluster(f"/test-{tag}/coreos.com/network", etcd)
    try:
        build_underlay(cluster, tag)
        for letter, address in HOSTS.items():
            netns = f"fl{tag}-{letter}"
            host = Host(letter, netns, f"fl{tag}-pod{letter}", address,
                        Flanneld(tmp_path_factory.mktemp(f"flanneld-{letter}"), netns, etcd, cluster.prefix))
            host.relay = NamespaceRelay(netns, etcd.port)
            cluster.hosts[letter] = host
        for host in cluster.hosts.values():
            host.flanneld.start()
            attach_pod(cluster, host)
        yield cluster
    finally:
        for host in cluster.hosts.values():
            host.flanneld.stop()
            if host.relay is not None:
                host.relay.close()
        for netns in reversed(cluster.namespaces):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        assert not [name for name in ip("netns", "list").split() if name.startswith(f"fl{tag}")]


def logs(cluster: Cluster) -> str:
    return "\n".join(f"--- flanneld {letter} ---\n{tail(host.flanneld.log_file, 40)}"
                     for letter, host in cluster.hosts.items())


def test_each_host_leases_its_own_subnet_and_writes_flannels_subnet_file(cluster):
    config = json.loads(cluster.etcd_get(f"{cluster.prefix}/config")[f"{cluster.prefix}/config"])
    assert config == {"Network": "10.244.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1, "Port": 8472}}
    subnets = {letter: host.flanneld.subnet() for letter, host in cluster.hosts.items()}
    assert len(set(subnets.values())) == 3
    leases = cluster.leases()
    for letter, host in cluster.hosts.items():
        env = host.flanneld.subnet_env()
        subnet = subnets[letter]
        assert env == {"FLANNEL_NETWORK": "10.244.0.0/16", "FLANNEL_SUBNET": f"{subnet.network_address + 1}/24",
                       "FLANNEL_MTU": "1450", "FLANNEL_IPMASQ": "true"}
        assert subnet.subnet_of(IPv4Network("10.244.0.0/16")) and subnet != IPv4Network("10.244.0.0/24")
        device = json.loads(ip("-j", "-d", "-n", host.netns, "link", "show", "flannel.1"))[0]
        assert device["linkinfo"]["info_data"]["id"] == 1
        assert device["linkinfo"]["info_data"]["local"] == str(host.address)
        assert device["linkinfo"]["info_data"]["port"] == 8472
        assert device["mtu"] == 1450
        assert leases[f"{subnet.network_address}-24"] == {
            "PublicIP": str(host.address), "BackendType": "vxlan",
            "BackendData": {"VNI": 1, "VtepMAC": device["address"]},
        }
        addresses = json.loads(ip("-j", "-n", host.netns, "addr", "show", "flannel.1"))[0]["addr_info"]
        assert [(a["local"], a["prefixlen"]) for a in addresses if a["family"] == "inet"] == [
            (str(subnet.network_address), 32)]


def test_every_host_routes_the_others_subnets_over_vxlan(cluster):
    for letter, host in cluster.hosts.items():
        others = {str(other.flanneld.subnet()) for other_letter, other in cluster.hosts.items()
                  if other_letter != letter}
        wait_for(f"host {letter} routes {others}", lambda host=host, others=others: host.routes() == others)
        fdb = in_netns(host.netns, "bridge", "fdb", "show", "dev", "flannel.1").stdout
        for other_letter, other in cluster.hosts.items():
            if other_letter != letter:
                assert f"dst {other.address} self permanent" in fdb
        neighbours = ip("-n", host.netns, "neigh", "show", "dev", "flannel.1")
        assert neighbours.count("PERMANENT") == 2


def test_pods_reach_pods_on_other_hosts_by_pod_ip(cluster):
    a, b, c = (cluster.hosts[letter] for letter in "abc")
    wait_for("pod a pings pod b", lambda: ping(a, b), timeout=30)
    assert ping(b, a) and ping(a, c) and ping(c, b)
    server = subprocess.Popen(["ip", "netns", "exec", b.pod_netns, sys.executable, "-c", ECHO_PEER, "8080"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        client = in_netns(a.pod_netns, sys.executable, "-c",
                          "import socket, sys; print(socket.create_connection((sys.argv[1], 8080), 10).recv(64)"
                          ".decode())", str(b.pod_ip))
        assert client.returncode == 0, client.stderr
        assert client.stdout.strip() == str(a.pod_ip)  # pod to pod keeps its source address: no masquerading
    finally:
        server.kill()
        server.wait()


def test_iptables_chains_are_flanneld_own_and_written_once(cluster):
    host = cluster.hosts["a"]
    assert host.iptables("-t", "nat", "-S", "FLANNEL-POSTRTG").splitlines() == [
        "-N FLANNEL-POSTRTG",
        "-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
        "-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 224.0.0.0/4 -j RETURN",
        "-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE",
    ]
    assert host.iptables("-S", "FLANNEL-FWD").splitlines() == [
        "-N FLANNEL-FWD", "-A FLANNEL-FWD -s 10.244.0.0/16 -j ACCEPT", "-A FLANNEL-FWD -d 10.244.0.0/16 -j ACCEPT"]
    postrouting = host.iptables("-t", "nat", "-S", "POSTROUTING").splitlines()
    assert postrouting.count("-A POSTROUTING -j FLANNEL-POSTRTG") == 1
    assert "-A POSTROUTING " + " ".join(FOREIGN_RULE) in postrouting
    assert host.iptables("-S", "FORWARD").splitlines().count("-A FORWARD -j FLANNEL-FWD") == 1


def test_a_deleted_route_neighbour_or_fdb_entry_is_put_back(cluster):
    a, b = cluster.hosts["a"], cluster.hosts["b"]
    subnet = b.flanneld.subnet()
    ip("-n", a.netns, "route", "del", str(subnet))
    ip("-n", a.netns, "neigh", "del", str(subnet.network_address), "dev", "flannel.1")
    wait_for("the route to b is back", lambda: str(subnet) in a.routes())
    wait_for("pod a pings pod b again", lambda: ping(a, b))


def test_routes_follow_leases_through_an_etcd_restart(cluster):
    a, b = cluster.hosts["a"], cluster.hosts["b"]
    cluster.etcd.stop()
    try:
        assert ping(a, b), "the data path does not need etcd"
    finally:
        cluster.etcd.start()
    # A node that joins after the restart: its lease must reach the others through the renewed watch.
    key = f"{cluster.prefix}/subnets/10.244.250.0-24"
    joined = {"PublicIP": "192.168.77.14", "BackendType": "vxlan",
              "BackendData": {"VNI": 1, "VtepMAC": "0e:00:00:00:00:14"}}
    cluster.etcd_put(key, json.dumps(joined).encode())
    try:
        wait_for("a routes the new node's subnet", lambda: "10.244.250.0/24" in a.routes())
        fdb = in_netns(a.netns, "bridge", "fdb", "show", "dev", "flannel.1").stdout
        assert "0e:00:00:00:00:14 dst 192.168.77.14 self permanent" in fdb
    finally:
        cluster.etcd_put(key, None)
    wait_for("a forgets the departed node's subnet", lambda: "10.244.250.0/24" not in a.routes())
    assert ping(a, b), logs(cluster)


def test_an_older_lease_of_a_running_host_is_given_back(cluster):
    a = cluster.hosts["a"]
    key = f"{cluster.prefix}/subnets/10.244.251.0-24"
    older = {"PublicIP": str(a.address), "BackendType": "vxlan",
             "BackendData": {"VNI": 1, "VtepMAC": "0e:00:00:00:00:0a"}}
    cluster.etcd_put(key, json.dumps(older).encode())
    wait_for("a deletes its older lease", lambda: "10.244.251.0-24" not in cluster.leases())
    assert f"{a.flanneld.subnet().network_address}-24" in cluster.leases()


def test_leases_are_renewed_before_they_expire(cluster):
    host = cluster.hosts["b"]
    key = f"{cluster.prefix}/subnets/{host.flanneld.subnet().network_address}-24"
    lowest = cluster.remaining_ttl(key)

    def renewed() -> bool:
        nonlocal lowest
        remaining = cluster.remaining_ttl(key)
        if remaining > lowest:
            return True
        lowest = remaining
        return False

    wait_for(f"{key}'s 10 s lease is renewed", renewed)


def test_a_restarted_flanneld_keeps_its_subnet_and_lease(cluster):
    a, b = cluster.hosts["a"], cluster.hosts["b"]
    before = a.flanneld.subnet_file.read_text()
    lease_key = f"{a.flanneld.subnet().network_address}-24"
    a.flanneld.stop()
    assert ping(a, b), "stopping flanneld leaves the kernel routing"
    # Down longer than its lease: etcd forgot the subnet, the subnet file still names it.
    cluster.etcd_put(f"{cluster.prefix}/subnets/{lease_key}", None)
    a.flanneld.start()
    wait_for("a leases its old subnet again", lambda: lease_key in cluster.leases())
    assert a.flanneld.subnet_file.read_text() == before
    wait_for("pod a pings pod b after the restart", lambda: ping(a, b))
    # A reboot empties /run: the subnet comes back from the lease carrying this host's address.
    a.flanneld.stop()
    a.flanneld.subnet_file.unlink()
    a.flanneld.start()
    assert a.flanneld.subnet_file.read_text() == before
    leases = cluster.leases()
    assert len(leases) == 3 and leases[lease_key]["PublicIP"] == str(a.address)
    assert a.iptables("-t", "nat", "-S", "POSTROUTING").splitlines().count("-A POSTROUTING -j FLANNEL-POSTRTG") == 1
    assert a.iptables("-S", "FORWARD").splitlines().count("-A FORWARD -j FLANNEL-FWD") == 1
    assert ping(a, b)


def test_release_removes_the_node_from_etcd_and_from_every_other_host(cluster):
    a, b, c = (cluster.hosts[letter] for letter in "abc")
    subnet = str(c.flanneld.subnet())
    c.flanneld.stop()
    result = c.flanneld.release()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{c.flanneld.subnet_file.name}" not in os.listdir(c.flanneld.workdir)
    assert f"{subnet.split('/')[0]}-24" not in cluster.leases()
    wait_for("a and b drop c's subnet", lambda: subnet not in a.routes() and subnet not in b.routes())
    assert "flannel.1" not in ip("-n", c.netns, "link", "show")
    assert "FLANNEL" not in c.iptables("-t", "nat", "-S") + c.iptables("-S")
    assert "-A POSTROUTING " + " ".join(FOREIGN_RULE) in c.iptables("-t", "nat", "-S", "POSTROUTING").splitlines()
    assert ping(a, b)
