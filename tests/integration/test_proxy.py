"""minik8s-proxy as it runs on a node, inside a network namespace of its own, against the real apiserver.

The namespace plays the node: a bridge (10.244.7.1/24) with three "pod" namespaces behind veth pairs, each
serving its own name over HTTP on port 8080, and a few rules that are not ours (a chain and a jump in nat,
a FORWARD policy of DROP, as Docker leaves them). The apiserver and RabbitMQ listen on the host's loopback;
a forwarder makes them answer on the node's loopback too, on the same ports. Services and Endpoints are
written through the API (no endpoints controller runs: these services have no selector, so their Endpoints
are the user's), and the test looks at ``iptables-save`` in the node and at what answers on the ClusterIP.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import resolve
from daemons.proxy.rules import NodeFacts, render
from tests.conftest import (
    ApiServerProcess,
    RabbitMQProcess,
    ServiceProcess,
    daemon_environment,
    delete_queues,
    free_port,
)

SERVICES = resolve("services")
ENDPOINTS = resolve("endpoints")
NODE_IP = "10.244.7.1"
POD_IPS = ("10.244.7.2", "10.244.7.3", "10.244.7.4")
POD_PORT = 8080
SYNC_PERIOD = 2
CLONE_NEWNET = 0x40000000
PROXY = str(Path(sys.executable).with_name("minik8s-proxy"))

# Runs inside the node: GETs a URL `count` times on fresh connections, prints each answer or error name.
PROBE = """
import json, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
answers = []
for _ in range(int(sys.argv[2])):
    try:
        answers.append(opener.open(sys.argv[1], timeout=5).read().decode().strip())
    except Exception as error:
        answers.append(type(getattr(error, "reason", error)).__name__)
print(json.dumps(answers))
"""


def run(*argv: str, check: bool = True) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stdout}{result.stderr}")
    return result.stdout


def eventually(condition: Callable[[], object], timeout: float = 30.0, message: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {message}")
        time.sleep(0.2)


# --- the node: network namespaces, pods, forwarders ---------------------------------------------------


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(path: str) -> None:
    with open(path) as namespace:
        if _libc.setns(namespace.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")


def listen_in(netns: str, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` inside ``netns``: made by a thread that steps in and back out
    (a socket stays in the namespace it was made in; the thread's switch touches no other thread)."""
    made: dict[str, object] = {}

    def make() -> None:
        home = "/proc/thread-self/ns/net"
        with open(home) as back:
            try:
                _setns(f"/run/netns/{netns}")
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", port))
                listener.listen(64)
                listener.settimeout(0.5)
                made["socket"] = listener
            except OSError as error:
                made["error"] = error
            finally:
                if _libc.setns(back.fileno(), CLONE_NEWNET) != 0:
                    made["error"] = OSError(ctypes.get_errno(), "setns back home")

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]  # type: ignore[misc]
    return made["socket"]  # type: ignore[return-value]


class Forwarder:
    """Makes 127.0.0.1:``port`` in ``netns`` reach 127.0.0.1:``port`` on the host."""

    def __init__(self, netns: str, port: int) -> None:
        self.port = port
        self.listener = listen_in(netns, port)
        self.stopping = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                inside, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                outside = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except OSError:
                inside.close()
                continue
            for source, sink in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        source.settimeout(None)
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()


class Node:
    """A network namespace standing in for a node, with three pods answering their names on port 8080."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.workdir = workdir
        self.pods = [f"{name}-p{index}" for index in range(len(POD_IPS))]
        self.servers: list[subprocess.Popen[bytes]] = []
        self.forwarders: list[Forwarder] = []

    def exec(self, *argv: str, check: bool = True) -> str:
        return run("ip", "netns", "exec", self.name, *argv, check=check)

    def create(self) -> None:
        run("ip", "netns", "add", self.name)
        node = ("ip", "-n", self.name)
        run(*node, "link", "set", "lo", "up")
        run(*node, "link", "add", "br0", "type", "bridge")
        run(*node, "addr", "add", f"{NODE_IP}/24", "dev", "br0")
        run(*node, "link", "set", "br0", "up")
        run(*node, "route", "add", "10.96.0.0/12", "dev", "br0")  # ClusterIPs route somewhere, as on a node
        for index, (pod, ip) in enumerate(zip(self.pods, POD_IPS, strict=True)):
            run("ip", "netns", "add", pod)
            # `ip netns exec` gives the pod this resolv.conf instead of the host's, whose nameservers it cannot
            # reach: http.server looks its own address up as it starts, which would wait out every one of them.
            resolv_conf = Path("/etc/netns") / pod / "resolv.conf"
            resolv_conf.parent.mkdir(parents=True, exist_ok=True)
            resolv_conf.write_text("nameserver 127.0.0.1\n")
            run(*node, "link", "add", f"vp{index}", "type", "veth", "peer", "name", "eth0", "netns", pod)
            run(*node, "link", "set", f"vp{index}", "master", "br0", "up")
            for step in (("addr", "add", f"{ip}/24", "dev", "eth0"), ("link", "set", "eth0", "up"),
                         ("link", "set", "lo", "up"), ("route", "add", "default", "via", NODE_IP)):
                run("ip", "-n", pod, *step)
            root = self.workdir / pod
            root.mkdir()
            (root / "index.html").write_text(pod + "\n")
            self.servers.append(subprocess.Popen(
                ["ip", "netns", "exec", pod, sys.executable, "-m", "http.server", str(POD_PORT), "--bind", ip,
                 "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # Rules that are not ours, which nothing we do may disturb.
        self.exec("iptables", "-t", "nat", "-N", "FOREIGN")
        self.exec("iptables", "-t", "nat", "-A", "FOREIGN", "-d", "192.0.2.1/32", "-j", "RETURN")
        self.exec("iptables", "-t", "nat", "-A", "PREROUTING", "-j", "FOREIGN")
        self.exec("iptables", "-P", "FORWARD", "DROP")

    def forward(self, port: int) -> None:
        self.forwarders.append(Forwarder(self.name, port))

    def destroy(self) -> None:
        for forwarder in self.forwarders:
            forwarder.close()
        for server in self.servers:
            server.terminate()
            server.wait(10)
        for namespace in (*self.pods, self.name):
            run("ip", "netns", "del", namespace, check=False)
        for pod in self.pods:
            shutil.rmtree(Path("/etc/netns") / pod, ignore_errors=True)

    def save(self, table: str) -> list[str]:
        """``iptables-save -t table`` without its time-stamped comments, and chain counters zeroed (the probes'
        own connections move them)."""
        return [re.sub(r"\[\d+:\d+\]$", "[0:0]", line)
                for line in self.exec("iptables-save", "-t", table).splitlines() if not line.startswith("#")]

    def probe(self, url: str, count: int) -> list[str]:
        return json.loads(self.exec(sys.executable, "-c", PROBE, url, str(count)))


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    with tempfile.TemporaryDirectory(prefix="minik8s-proxy-") as workdir:
        node = Node(f"mk8s-proxy-{uuid.uuid4().hex[:6]}", Path(workdir))
        try:
            node.create()
            yield node
        finally:
            node.destroy()


# --- the proxy ----------------------------------------------------------------------------------------


class ProxyProcess(ServiceProcess):
    """``minik8s-proxy`` inside the node, fed by RabbitMQ, syncing every two seconds."""

    name = "proxy"

    def __init__(self, workdir: Path, node: Node, apiserver: ApiServerProcess, amqp_url: str) -> None:
        super().__init__(workdir)
        self.node = node
        self.apiserver = apiserver
        self.amqp_url = amqp_url
        self.node_name = node.name
        self.metrics_port = free_port()

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.node.name, PROXY, "--kubeconfig", str(self.apiserver.kubeconfig),
                "--amqp-url", self.amqp_url, "--node-name", self.node_name, "--metrics-port", str(self.metrics_port),
                "--sync-period-seconds", str(SYNC_PERIOD), "--log-level", "DEBUG",
                # The node namespace shares the host's files: nginx and dnsmasq are tested in test_proxy_dns.
                "--nginx-config", "", "--dns-hosts-file", ""]

    def environment(self) -> dict[str, str]:
        return daemon_environment()

    def is_ready(self) -> bool:
        return self.last_sync() > 0

    def last_sync(self) -> float:
        """The proxy's own figure for its last complete sync (Unix time), read from /metrics inside the node."""
        script = ("import urllib.request; print(urllib.request.build_opener(urllib.request.ProxyHandler({}))"
                  f".open('http://127.0.0.1:{self.metrics_port}/metrics', timeout=2).read().decode())")
        for line in self.node.exec(sys.executable, "-c", script).splitlines():
            if line.startswith("minik8s_proxy_sync_proxy_rules_last_timestamp_seconds "):
                return float(line.split()[1])
        return 0.0

    def wait_for_syncs(self, count: int = 2) -> None:
        """Until ``count`` more full syncs have completed."""
        for _ in range(count):
            seen = self.last_sync()
            eventually(lambda seen=seen: self.last_sync() > seen, timeout=SYNC_PERIOD * 10,
                       message="the proxy's periodic sync")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, node: Node, apiserver: ApiServerProcess,
          rabbitmq: RabbitMQProcess) -> Iterator[ProxyProcess]:
    node.forward(apiserver.port)
    node.forward(rabbitmq.port)
    process = ProxyProcess(tmp_path_factory.mktemp("proxy"), node, apiserver, rabbitmq.url)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        delete_queues(rabbitmq.url, [f"proxy.{process.node_name}.{resource}" for resource in ("services", "endpoints")])


# --- services through the API -------------------------------------------------------------------------


def make_service(api: ApiClient, namespace: str, name: str, node_port: bool = False) -> dict:
    """A Service without selector (its Endpoints are ours to write); the apiserver allocates its addresses."""
    spec = {"type": "NodePort" if node_port else "ClusterIP",
            "ports": [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}]}
    return api.create(SERVICES, {"apiVersion": "v1", "kind": "Service",
                                 "metadata": {"name": name, "namespace": namespace}, "spec": spec}, namespace)


def set_endpoints(api: ApiClient, namespace: str, name: str, ips: tuple[str, ...]) -> None:
    body = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace},
            "subsets": [{"addresses": [{"ip": ip} for ip in ips],
                         "ports": [{"name": "http", "port": POD_PORT, "protocol": "TCP"}]}] if ips else []}
    try:
        current = api.get(ENDPOINTS, name, namespace)
    except NotFound:
        api.create(ENDPOINTS, body, namespace)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    api.replace(ENDPOINTS, body, namespace)


def ours(lines: list[str], namespace: str) -> list[str]:
    """The rules of ``lines`` that belong to services of ``namespace`` (their comments name it)."""
    return [line for line in lines if f'"{namespace}/' in line]


def expected_rules(api: ApiClient, namespace: str, table: str) -> list[str]:
    """What the renderer makes of the namespace's Services and Endpoints as the API serves them now."""
    ruleset = render(api.list(SERVICES, namespace)["items"], api.list(ENDPOINTS, namespace)["items"], NodeFacts())
    return ours(ruleset.lines(table), namespace)


def in_kernel(node: Node, namespace: str, table: str) -> list[str]:
    return ours(node.save(table), namespace)


def same_rules(expected: list[str], present: list[str]) -> bool:
    """Same rules chain by chain (iptables-save lists chains by name, the renderer by service)."""
    def by_chain(lines: list[str]) -> dict[str, list[str]]:
        chains: dict[str, list[str]] = {}
        for line in lines:
            chains.setdefault(line.split()[1], []).append(line)
        return chains
    return by_chain(expected) == by_chain(present)


# --- tests --------------------------------------------------------------------------------------------


def test_cluster_ip_and_node_port_spread_over_every_ready_endpoint(proxy, node, api, namespace):
    service = make_service(api, namespace, "web", node_port=True)
    cluster_ip, node_port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["nodePort"]
    set_endpoints(api, namespace, "web", POD_IPS)
    eventually(lambda: same_rules(expected_rules(api, namespace, "nat"), in_kernel(node, namespace, "nat")),
               message="the service's nat rules")
    nat = "\n".join(node.save("nat"))
    for ip in POD_IPS:
        assert f"-j DNAT --to-destination {ip}:{POD_PORT}" in nat
    assert (f'-d {cluster_ip}/32 -p tcp -m comment --comment "{namespace}/web:http" -m tcp --dport 80 '
            "-j KUBE-SVC-") in nat
    assert f'-m tcp --dport {node_port} -j KUBE-SVC-' in nat
    assert in_kernel(node, namespace, "filter") == []  # nothing to reject

    answers = node.probe(f"http://{cluster_ip}/", 60)
    assert set(answers) == set(node.pods), answers
    answers = node.probe(f"http://{NODE_IP}:{node_port}/", 30)
    assert set(answers) <= set(node.pods) and len(set(answers)) >= 2, answers


def test_endpoint_changes_move_traffic_and_no_endpoints_fails_fast(proxy, node, api, namespace):
    cluster_ip = make_service(api, namespace, "web")["spec"]["clusterIP"]
    set_endpoints(api, namespace, "web", POD_IPS)
    eventually(lambda: len([line for line in in_kernel(node, namespace, "nat") if "DNAT" in line]) == 3)

    set_endpoints(api, namespace, "web", POD_IPS[:2])
    eventually(lambda: same_rules(expected_rules(api, namespace, "nat"), in_kernel(node, namespace, "nat")),
               message="two endpoints left")
    assert f"{POD_IPS[2]}:{POD_PORT}" not in "\n".join(node.save("nat"))
    assert set(node.probe(f"http://{cluster_ip}/", 40)) == set(node.pods[:2])

    set_endpoints(api, namespace, "web", ())
    eventually(lambda: in_kernel(node, namespace, "filter") == expected_rules(api, namespace, "filter") != [],
               message="the REJECT for a service without endpoints")
    assert in_kernel(node, namespace, "nat") == []
    assert node.probe(f"http://{cluster_ip}/", 3) == ["ConnectionRefusedError"] * 3


def test_a_sync_with_nothing_new_changes_nothing_and_repairs_what_was_removed(proxy, node, api, namespace):
    make_service(api, namespace, "web")
    set_endpoints(api, namespace, "web", POD_IPS)
    eventually(lambda: len(in_kernel(node, namespace, "nat")) == 2 + 3 + 3 * 2)
    proxy.wait_for_syncs(1)
    before = {table: node.save(table) for table in ("nat", "filter")}
    proxy.wait_for_syncs(2)
    assert {table: node.save(table) for table in ("nat", "filter")} == before

    # Someone removes a jump and empties a chain of ours: the next periodic sync puts them back, once.
    node.exec("iptables", "-t", "nat", "-D", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals",
              "-j", "KUBE-SERVICES")
    service_chain = next(line.split()[-1] for line in in_kernel(node, namespace, "nat") if "-j KUBE-SVC-" in line)
    node.exec("iptables", "-t", "nat", "-F", service_chain)
    node.exec("iptables", "-t", "nat", "-I", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals",
              "-j", "KUBE-SERVICES")  # a duplicate
    eventually(lambda: {table: node.save(table) for table in ("nat", "filter")} == before,
               message="the rules repaired to what they were")


def test_deleting_a_service_removes_its_rules_and_foreign_rules_survive(proxy, node, api, namespace):
    make_service(api, namespace, "web", node_port=True)
    set_endpoints(api, namespace, "web", POD_IPS)
    eventually(lambda: in_kernel(node, namespace, "nat") != [])
    chains = {line.split()[-1] for line in in_kernel(node, namespace, "nat") if "-j KUBE-S" in line}
    api.delete(SERVICES, "web", namespace)
    api.delete(ENDPOINTS, "web", namespace)
    eventually(lambda: in_kernel(node, namespace, "nat") == [], message="the service's rules gone")
    nat = node.save("nat")
    assert not [line for line in nat if any(chain in line for chain in chains)]
    assert ":FOREIGN - [0:0]" in nat and "-A PREROUTING -j FOREIGN" in nat
    assert "-A FOREIGN -d 192.0.2.1/32 -j RETURN" in nat
    assert ":FORWARD DROP [0:0]" in node.save("filter")


def test_stopping_leaves_the_rules_and_cleanup_removes_only_ours(proxy, node, api, namespace):
    make_service(api, namespace, "web")
    set_endpoints(api, namespace, "web", POD_IPS)
    eventually(lambda: in_kernel(node, namespace, "nat") != [])
    before = {table: node.save(table) for table in ("nat", "filter")}
    proxy.stop()
    assert {table: node.save(table) for table in ("nat", "filter")} == before

    node.exec(PROXY, "--cleanup")
    nat, filter_ = node.save("nat"), node.save("filter")
    assert not [line for line in nat + filter_ if "KUBE-" in line]
    assert ":FOREIGN - [0:0]" in nat and "-A PREROUTING -j FOREIGN" in nat
    assert ":FORWARD DROP [0:0]" in filter_
    node.exec(PROXY, "--cleanup")  # a second cleanup finds nothing to do and succeeds
    assert node.save("nat") == nat


def test_the_proxy_needs_no_cluster_to_clean_up(node):
    """``--cleanup`` reads no kubeconfig: reset playbooks run it on nodes whose control plane is gone."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MINIK8S_")}
    result = subprocess.run(["ip", "netns", "exec", node.name, PROXY, "--cleanup", "--kubeconfig", "/nonexistent"],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
