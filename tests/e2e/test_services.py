"""Services on the installed cluster: ClusterIP and NodePort reach the ready pods, from the host and from pods."""

from __future__ import annotations

import collections
import json
import subprocess

import httpx
import pytest

from daemons.api.errors import NotFound
from daemons.api.resources import resolve
from tests.conftest import upstream_kubectls
from tests.e2e.conftest import client_pod, fetch_from_pod, is_ready, run_kubectl, wait_for

PODS = resolve("pods")
SERVICES = resolve("services")
ENDPOINTS = resolve("endpoints")
NODES = resolve("nodes")
BACKENDS = ("echo-0", "echo-1", "echo-2")

# Each backend serves its own name (the pod's hostname) on its named port `http`, and is ready while
# /tmp/ready exists, so a test can take one out of the rotation without stopping it.
BACKEND_COMMAND = ("mkdir -p /www && hostname > /www/index.html && touch /tmp/ready && "
                   "exec httpd -f -p 8080 -h /www")


def backend(name: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "echo"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "httpd", "image": "busybox", "command": ["sh", "-c", BACKEND_COMMAND],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]},
                                   "periodSeconds": 1, "failureThreshold": 1},
            }],
        },
    }


def echo_service(service_type: str = "ClusterIP") -> dict:
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
        "spec": {"type": service_type, "selector": {"app": "echo"},
                 "ports": [{"name": "web", "port": 80, "targetPort": "http"}]},
    }


def ready_addresses(cluster, namespace, name) -> set[str]:
    try:
        subsets = cluster.get(ENDPOINTS, name, namespace).get("subsets") or []
    except NotFound:  # the controller has not written them yet
        return set()
    return {address["ip"] for subset in subsets for address in subset.get("addresses") or []}


def fetch_from_host(url: str) -> str | None:
    try:
        return httpx.get(url, timeout=2).text.strip()
    except httpx.HTTPError:
        return None


def answering(fetch, url: str, requests: int) -> collections.Counter[str]:
    return collections.Counter(answer for answer in (fetch(url) for _ in range(requests)) if answer)


@pytest.fixture
def echo(cluster, e2e_namespace):
    """Three ready backends and a client pod in the test's namespace."""
    for name in BACKENDS:
        cluster.create(PODS, backend(name), e2e_namespace)
    cluster.create(PODS, client_pod(), e2e_namespace)
    for name in (*BACKENDS, "client"):
        wait_for(lambda name=name: is_ready(cluster, e2e_namespace, name), 120,
                 what=f"pod {e2e_namespace}/{name} to be Running and Ready")
    return {name: cluster.get(PODS, name, e2e_namespace)["status"]["podIP"] for name in BACKENDS}


def test_a_cluster_ip_spreads_requests_over_every_ready_pod(cluster, e2e_namespace, echo):
    service = cluster.create(SERVICES, echo_service(), e2e_namespace)
    cluster_ip = service["spec"]["clusterIP"]
    assert cluster_ip.startswith("10.96."), cluster_ip
    wait_for(lambda: ready_addresses(cluster, e2e_namespace, "echo") == set(echo.values()), 30,
             what="the Endpoints to list the three backends")
    url = f"http://{cluster_ip}/"
    wait_for(lambda: set(answering(fetch_from_host, url, 30)) == set(BACKENDS), 30,
             what="all three backends to answer on the ClusterIP from the host")
    wait_for(lambda: set(answering(lambda u: fetch_from_pod(e2e_namespace, u), url, 24)) == set(BACKENDS), 60,
             what="all three backends to answer on the ClusterIP from a pod")

    row = run_kubectl("-n", e2e_namespace, "get", "svc", "echo").stdout.splitlines()[1].split()
    assert row[:5] == ["echo", "ClusterIP", cluster_ip, "<none>", "80/TCP"], row
    endpoints = run_kubectl("-n", e2e_namespace, "get", "endpoints", "echo").stdout.splitlines()[1]
    assert all(f"{ip}:8080" in endpoints for ip in echo.values()), endpoints
    for version, binary in upstream_kubectls().items():
        theirs = run_kubectl("-n", e2e_namespace, "get", "svc", "echo", binary=str(binary)).stdout.splitlines()
        assert theirs[1].split()[:5] == row[:5], version


def test_a_pod_reaches_itself_through_its_own_service(cluster, e2e_namespace, echo):
    service = cluster.create(SERVICES, echo_service(), e2e_namespace)
    url = f"http://{service['spec']['clusterIP']}/"
    wait_for(lambda: "echo-0" in answering(lambda u: fetch_from_pod(e2e_namespace, u, "echo-0"), url, 12), 60,
             what="echo-0 to get its own answer back through the ClusterIP")


def test_a_node_port_answers_on_the_node_address_from_the_host_and_from_pods(cluster, e2e_namespace, echo):
    service = cluster.create(SERVICES, echo_service("NodePort"), e2e_namespace)
    node_port = service["spec"]["ports"][0]["nodePort"]
    assert 30000 <= node_port <= 32767, node_port
    row = run_kubectl("-n", e2e_namespace, "get", "svc", "echo").stdout.splitlines()[1].split()
    assert row[1] == "NodePort" and row[4] == f"80:{node_port}/TCP", row
    node = cluster.list(NODES)["items"][0]
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    url = f"http://{node_ip}:{node_port}/"
    wait_for(lambda: set(answering(fetch_from_host, url, 30)) == set(BACKENDS), 30,
             what=f"all three backends to answer on {url} from the host")
    wait_for(lambda: set(answering(lambda u: fetch_from_pod(e2e_namespace, u), url, 24)) == set(BACKENDS), 60,
             what=f"all three backends to answer on {url} from a pod")


def test_a_pod_that_stops_being_ready_leaves_the_rotation_and_comes_back(cluster, e2e_namespace, echo):
    service = cluster.create(SERVICES, echo_service(), e2e_namespace)
    url = f"http://{service['spec']['clusterIP']}/"
    wait_for(lambda: set(answering(fetch_from_host, url, 30)) == set(BACKENDS), 30,
             what="all three backends to answer")

    run_kubectl("-n", e2e_namespace, "exec", "echo-1", "--", "rm", "/tmp/ready")
    wait_for(lambda: not is_ready(cluster, e2e_namespace, "echo-1"), 30, what="echo-1 to turn not ready")
    wait_for(lambda: echo["echo-1"] not in ready_addresses(cluster, e2e_namespace, "echo"), 10,
             what="echo-1 to leave the Endpoints' ready addresses")
    subsets = cluster.get(ENDPOINTS, "echo", e2e_namespace)["subsets"]
    assert echo["echo-1"] in {a["ip"] for s in subsets for a in s.get("notReadyAddresses") or []}
    wait_for(lambda: set(answering(fetch_from_host, url, 30)) == {"echo-0", "echo-2"}, 10,
             what="only echo-0 and echo-2 to answer")

    run_kubectl("-n", e2e_namespace, "exec", "echo-1", "--", "touch", "/tmp/ready")
    wait_for(lambda: set(answering(fetch_from_host, url, 30)) == set(BACKENDS), 30,
             what="echo-1 to answer again once ready")


def test_deleting_a_backing_pod_drops_it_and_deleting_the_service_removes_its_rules(cluster, e2e_namespace, echo):
    service = cluster.create(SERVICES, echo_service(), e2e_namespace)
    cluster_ip = service["spec"]["clusterIP"]
    url = f"http://{cluster_ip}/"
    wait_for(lambda: set(answering(fetch_from_host, url, 30)) == set(BACKENDS), 30,
             what="all three backends to answer")
    cluster.delete(PODS, "echo-2", e2e_namespace)
    wait_for(lambda: set(answering(fetch_from_host, url, 30)) == {"echo-0", "echo-1"}, 10,
             what="the deleted pod to leave the rotation")

    cluster.delete(SERVICES, "echo", e2e_namespace)
    wait_for(lambda: cluster_ip not in iptables_nat(), 10, what="the Service's rules to go away")
    # Without rules the address is nobody's (this network may still answer port 80 for any address).
    assert fetch_from_host(url) not in BACKENDS


def iptables_nat() -> str:
    return subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True).stdout


def test_a_service_ip_already_in_use_is_refused_naming_the_field(cluster, e2e_namespace):
    first = cluster.create(SERVICES, echo_service(), e2e_namespace)
    taken = dict(echo_service(), metadata={"name": "echo-again"})
    taken["spec"] = dict(taken["spec"], clusterIP=first["spec"]["clusterIP"])
    result = run_kubectl("-n", e2e_namespace, "create", "-f", "-", stdin=json.dumps(taken), check=False)
    assert result.returncode != 0
    assert "spec.clusterIP" in result.stderr and "already allocated" in result.stderr, result.stderr
    assert run_kubectl("-n", e2e_namespace, "get", "svc", "echo-again", check=False).returncode != 0
