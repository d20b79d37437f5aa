"""DNS objects become routes in a real nginx and names in a real dnsmasq, programmed by ``minik8s-proxy``.

The apiserver hands out ClusterIPs from 127.77.0.0/16, a loopback range, so each Service's backend is an HTTP
server bound to the Service's ClusterIP and port, answering its own name and the path it was asked for. The
proxy runs as a subprocess with iptables off and every nginx and dnsmasq path under the test's directory; nginx
listens on 127.0.0.1 (the node's address here) and dnsmasq on 127.0.0.1, both on free ports. The test asks them
as a user would: HTTP requests with a Host header, DNS queries over UDP.
"""

from __future__ import annotations

import contextlib
import http.server
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import require
from tests.conftest import ApiDaemonProcess, ApiServerProcess, RabbitMQProcess, ServiceProcess, free_port, serving

pytestmark = pytest.mark.integration

DNS = require("minik8s.io/v1", "DNS")
SERVICES = require("v1", "Service")
NAMESPACES = require("v1", "Namespace")
SERVICE_RANGE = "127.77.0.0/16"
NODE_IP = "127.0.0.1"
NGINX = "/usr/sbin/nginx"
DNSMASQ = "/usr/sbin/dnsmasq"
NOERROR, NXDOMAIN = 0, 3
AAAA = 28  # the query type of an IPv6 address


# --- the processes ------------------------------------------------------------------------------------


class ProxyProcess(ApiDaemonProcess):
    """``minik8s-proxy`` programming only nginx and dnsmasq, with their files under ``workdir``."""

    name = "proxy"
    program = "minik8s-proxy"


class NginxProcess(ServiceProcess):
    """nginx in the foreground, run from the configuration the proxy writes."""

    name = "nginx"

    def __init__(self, workdir: Path, config: Path, port: int) -> None:
        super().__init__(workdir)
        self.config = config
        self.port = port

    def command(self) -> list[str]:
        return [NGINX, "-c", str(self.config), "-g", "daemon off;"]

    def is_ready(self) -> bool:
        with socket.create_connection((NODE_IP, self.port), timeout=1):
            return True


class DnsmasqProcess(ServiceProcess):
    """dnsmasq answering from the proxy's hosts file; no upstream servers."""

    name = "dnsmasq"

    def __init__(self, workdir: Path, hosts: Path, port: int) -> None:
        super().__init__(workdir)
        self.hosts = hosts
        self.port = port

    def command(self) -> list[str]:
        return [DNSMASQ, "--keep-in-foreground", "--log-facility=-", "--conf-file=/dev/null", f"--port={self.port}",
                f"--listen-address={NODE_IP}", "--bind-interfaces", "--user=root", "--no-resolv", "--no-hosts",
                "--no-negcache", "--filter-AAAA", f"--hostsdir={self.hosts.parent}",
                f"--pid-file={self.workdir / 'dnsmasq.pid'}",
                "--local=/cluster.local/",
                # Stands in for the upstream resolvers a node forwards to, which know no example.com names.
                "--local=/example.com/"]

    def is_ready(self) -> bool:
        return resolve("ready.example.com", self.port)[0] == NXDOMAIN


# --- asking like a user -------------------------------------------------------------------------------


def resolve(name: str, port: int, qtype: int = 1) -> tuple[int, list[str]]:
    """A query (A unless ``qtype``) for ``name`` to dnsmasq: the response code and the IPv4 addresses answered."""
    ident = random.randrange(1 << 16)
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    query = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(2)
        client.sendto(query, (NODE_IP, port))
        while True:
            reply, _ = client.recvfrom(4096)
            if struct.unpack("!H", reply[:2])[0] == ident:
                break
    flags, questions, answers = struct.unpack("!HHH", reply[2:8])
    offset = 12
    for _ in range(questions):
        offset = _skip_name(reply, offset) + 4
    addresses = []
    for _ in range(answers):
        offset = _skip_name(reply, offset)
        kind, _klass, _ttl, length = struct.unpack("!HHIH", reply[offset:offset + 10])
        offset += 10
        if kind == 1 and length == 4:
            addresses.append(socket.inet_ntoa(reply[offset:offset + 4]))
        offset += length
    return flags & 0xF, sorted(addresses)


def _skip_name(message: bytes, offset: int) -> int:
    while True:
        length = message[offset]
        if length >= 0xC0:  # a pointer ends the name
            return offset + 2
        if length == 0:
            return offset + 1
        offset += length + 1


def get(port: int, host: str, path: str) -> tuple[int, str]:
    response = httpx.get(f"http://{NODE_IP}:{port}{path}", headers={"Host": host}, timeout=5)
    return response.status_code, response.text.strip()


def eventually(read: Callable[[], object], wanted: object, logs: Callable[[], str], timeout: float = 60.0) -> None:
    """Poll ``read()`` until it returns ``wanted``; fail with the last value and the processes' logs."""
    deadline = time.monotonic() + timeout
    value: object = None
    while time.monotonic() < deadline:
        try:
            value = read()
        except (OSError, httpx.HTTPError) as error:
            value = error
        if value == wanted:
            return
        time.sleep(0.2)
    raise AssertionError(f"wanted {wanted!r}, last saw {value!r}\n{logs()}")


# --- backends -----------------------------------------------------------------------------------------


class Backend:
    """An HTTP server on ``ip:port`` answering ``<name> <path>``: what a Service's pods would serve."""

    def __init__(self, name: str, ip: str, port: int) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"{name} {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((ip, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- the node -----------------------------------------------------------------------------------------


@dataclass
class Node:
    api: ApiClient
    namespace: str
    proxy: ProxyProcess
    nginx: NginxProcess
    dnsmasq: DnsmasqProcess
    workdir: Path
    cluster_ips: dict[str, str]
    ports: dict[str, int]

    def logs(self) -> str:
        return "\n".join(process.logs() for process in (self.proxy, self.nginx, self.dnsmasq))

    def get(self, host: str, path: str) -> tuple[int, str]:
        return get(self.nginx.port, host, path)

    def resolve(self, name: str, qtype: int = 1) -> tuple[int, list[str]]:
        return resolve(name, self.dnsmasq.port, qtype)

    def eventually(self, read: Callable[[], object], wanted: object) -> None:
        eventually(read, wanted, self.logs)

    def dns(self, name: str, host: str, *paths: tuple[str, str]) -> dict:
        """A DNS object routing each (path, service) to the service's port."""
        return {"apiVersion": "minik8s.io/v1", "kind": "DNS", "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"host": host, "paths": [{"path": path, "serviceName": svc, "servicePort": self.ports[svc]}
                                                 for path, svc in paths]}}

    def reloads(self, result: str) -> float:
        """The proxy's count of nginx configurations with this result, from its /metrics."""
        for line in httpx.get(self.proxy.metrics_url, timeout=5).text.splitlines():
            if line.startswith(f'minik8s_proxy_nginx_reloads_total{{result="{result}"}}'):
                return float(line.split()[-1])
        return 0.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, apiserver_factory: Callable[..., ApiServerProcess],
         rabbitmq: RabbitMQProcess) -> Iterator[Node]:
    apiserver = apiserver_factory(extra_args=["--service-cluster-ip-range", SERVICE_RANGE])
    workdir = tmp_path_factory.mktemp("proxy-dns")
    files = {name: workdir / name for name in ("nginx.conf", "nginx.d")}
    files["hosts"] = workdir / "dns" / "hosts"  # alone in the folder dnsmasq watches
    files["nginx.pid"] = workdir / "run" / "nginx.pid"  # a directory the proxy has to make, as /run after a boot
    files["nginx.d"].mkdir()
    api = apiserver.client()
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    backends: list[Backend] = []
    cluster_ips: dict[str, str] = {}
    ports: dict[str, int] = {}
    try:
        for name in ("cart", "pay"):
            ports[name] = free_port()
            created = api.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                                            "spec": {"ports": [{"port": ports[name]}]}}, namespace)
            cluster_ips[name] = created["spec"]["clusterIP"]
            backends.append(Backend(name, cluster_ips[name], ports[name]))
        nginx_port, dns_port = free_port(), free_port()
        proxy = ProxyProcess(
            workdir / "proxy", apiserver, "--node-name", f"dns-{uuid.uuid4().hex[:8]}", "--no-iptables",
            "--node-ip", NODE_IP, "--sync-period-seconds", "5", "--log-level", "DEBUG",
            "--nginx-config", str(files["nginx.conf"]), "--nginx-pid-file", str(files["nginx.pid"]),
            "--nginx-port", str(nginx_port), "--nginx-listen-address", NODE_IP,
            "--nginx-snippets-dir", str(files["nginx.d"]), "--nginx-binary", NGINX,
            "--dns-hosts-file", str(files["hosts"]))
        nginx = NginxProcess(workdir / "nginx", files["nginx.conf"], nginx_port)
        dnsmasq = DnsmasqProcess(workdir / "dnsmasq", files["hosts"], dns_port)
        with serving(proxy, rabbitmq):
            # Like the node's roles: nginx and dnsmasq start once the proxy has written their files.
            eventually(lambda: files["nginx.conf"].exists() and files["hosts"].exists(), True, proxy.logs)
            nginx.start()
            try:
                dnsmasq.start()
                try:
                    yield Node(api, namespace, proxy, nginx, dnsmasq, workdir, cluster_ips, ports)
                finally:
                    dnsmasq.stop()
            finally:
                nginx.stop()
    finally:
        for backend in backends:
            backend.close()
        with contextlib.suppress(NotFound):
            api.delete(NAMESPACES, namespace)
        api.close()


# --- the tests ----------------------------------------------------------------------------------------


def test_services_resolve_to_their_cluster_ip_and_unknown_cluster_names_do_not(node: Node):
    cart = [node.cluster_ips["cart"]]
    node.eventually(lambda: node.resolve(f"cart.{node.namespace}.svc.cluster.local"), (NOERROR, cart))
    assert node.resolve(f"cart.{node.namespace}") == (NOERROR, cart)
    assert node.resolve(f"pay.{node.namespace}.svc.cluster.local") == (NOERROR, [node.cluster_ips["pay"]])
    assert node.resolve(f"nothing.{node.namespace}.svc.cluster.local")[0] == NXDOMAIN
    # The AAAA half of a dual-stack lookup is answered here (no such address), as roles/dnsmasq configures it
    # (filter-AAAA), not sent upstream: this dnsmasq has none, so a forwarded query would come back REFUSED.
    assert node.resolve(f"cart.{node.namespace}", AAAA) == (NOERROR, [])


def test_a_new_service_resolves_without_touching_nginx(node: Node):
    handed_over = node.reloads("reloaded") + node.reloads("written")
    created = node.api.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "extra"},
                                         "spec": {"ports": [{"port": 80}]}}, node.namespace)
    node.eventually(lambda: node.resolve(f"extra.{node.namespace}.svc.cluster.local"),
                    (NOERROR, [created["spec"]["clusterIP"]]))
    assert node.reloads("reloaded") + node.reloads("written") == handed_over  # nginx's configuration is the same


def test_a_dns_object_routes_its_host_by_path_follows_edits_and_goes_away_when_deleted(node: Node):
    node.api.create(DNS, node.dns("shop", "shop.example.com", ("/cart", "cart"), ("/pay/", "pay")))
    # A request right after the reload may still meet an old nginx worker: the answers are read until all agree.
    node.eventually(lambda: (node.get("shop.example.com", "/cart"), node.get("shop.example.com", "/cart/items?id=3"),
                             node.get("shop.example.com", "/pay"), node.get("shop.example.com", "/pay/now"),
                             node.get("shop.example.com", "/cartx")[0], node.get("shop.example.com", "/")[0],
                             node.get("elsewhere.example.com", "/cart")[0]),
                    ((200, "cart /cart"), (200, "cart /cart/items?id=3"), (200, "pay /pay"), (200, "pay /pay/now"),
                     404, 404, 404))
    # dnsmasq's file is written after nginx's, in the same sync.
    node.eventually(lambda: node.resolve("shop.example.com"), (NOERROR, [NODE_IP]))

    # Pointing /cart at the pay Service moves its requests there.
    node.api.replace(DNS, node.dns("shop", "shop.example.com", ("/cart", "pay"), ("/pay/", "pay")))
    node.eventually(lambda: node.get("shop.example.com", "/cart"), (200, "pay /cart"))

    node.api.delete(DNS, "shop", node.namespace)
    node.eventually(lambda: node.get("shop.example.com", "/cart")[0], 404)
    node.eventually(lambda: node.resolve("shop.example.com")[0], NXDOMAIN)


def test_a_configuration_nginx_rejects_never_reaches_it_and_the_next_good_one_does(node: Node):
    node.api.create(DNS, node.dns("old", "old.example.com", ("/", "cart")))
    node.eventually(lambda: node.get("old.example.com", "/x"), (200, "cart /x"))
    rejected = node.reloads("rejected")
    snippet = node.workdir / "nginx.d" / "broken.conf"
    snippet.write_text("this_is_not_a_directive on;\n")
    try:
        node.api.create(DNS, node.dns("new", "new.example.com", ("/", "pay")))
        node.eventually(lambda: node.reloads("rejected") > rejected, True)
        assert "new.example.com" not in (node.workdir / "nginx.conf").read_text()
        # (read until they agree: the reload that added old.example.com may still have an old worker answering)
        node.eventually(lambda: (node.get("new.example.com", "/x")[0], node.get("old.example.com", "/x")),
                        (404, (200, "cart /x")))
    finally:
        snippet.unlink()
    node.eventually(lambda: node.get("new.example.com", "/x"), (200, "pay /x"))
    assert node.get("old.example.com", "/x") == (200, "cart /x")
