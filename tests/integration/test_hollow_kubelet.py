"""The hollow kubelet against a real control plane: 20 simulated nodes in one process, over RabbitMQ.

The module runs its own etcd, apiserver and RabbitMQ virtual host, so the
scheduler sees only the hollow nodes, plus the scheduler and the controller
manager (ReplicaSets, node lifecycle). The nodes must register and stay Ready,
a ReplicaSet's pods must be placed on them and reported Running, scaled-down
pods must go away, and a hollow process killed with SIGKILL must, once
restarted, adopt its nodes and pods rather than duplicate them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemons.api.client import ApiClient
from daemons.api.resources import NODE_LEASE_NAMESPACE, require
from daemons.kubelet.hollow import hollow_node_names
from tests.conftest import (
    ApiServerProcess,
    ControllerManagerProcess,
    EtcdProcess,
    Pki,
    RabbitMQProcess,
    SchedulerProcess,
    ServiceProcess,
    daemon_environment,
    serving,
)

pytestmark = pytest.mark.integration

PODS = require("v1", "Pod")
NODES = require("v1", "Node")
LEASES = require("coordination.k8s.io/v1", "Lease")
NAMESPACES = require("v1", "Namespace")
REPLICASETS = require("apps/v1", "ReplicaSet")

NODE_COUNT = 20
GROUP = "hollow-test"
NAMES = hollow_node_names(GROUP, NODE_COUNT)
KUBECTL = Path(sys.executable).with_name("kubectl")


class HollowKubeletProcess(ServiceProcess):
    """``minik8s-kubelet --hollow`` for 20 nodes; ready once every one of them is registered."""

    name = "hollow-kubelet"

    def __init__(self, workdir: Path, apiserver: ApiServerProcess, amqp_url: str) -> None:
        super().__init__(workdir)
        self.apiserver = apiserver
        self.amqp_url = amqp_url
        (workdir / "node.yaml").write_text(yaml.safe_dump({
            "name": GROUP, "labels": {"disk": "ssd"}, "roles": ["worker"], "address": "127.0.0.1",
            "taints": [{"key": "dedicated", "value": "test", "effect": "PreferNoSchedule"}],
        }))

    def command(self) -> list[str]:
        return [str(Path(sys.executable).with_name("minik8s-kubelet")), "--hollow",
                "--hollow-nodes", str(NODE_COUNT), "--node-config", str(self.workdir / "node.yaml"),
                "--kubeconfig", str(self.apiserver.kubeconfig), "--amqp-url", self.amqp_url,
                "--status-interval", "2", "--resync-seconds", "10"]

    def environment(self) -> dict[str, str]:
        return daemon_environment()

    def is_ready(self) -> bool:
        with self.apiserver.client() as api:
            return len(api.list(NODES)["items"]) == NODE_COUNT


@dataclass
class Cluster:
    apiserver: ApiServerProcess
    api: ApiClient
    hollow: HollowKubeletProcess
    daemons: tuple[ServiceProcess, ...]
    namespace: str

    def logs(self) -> str:
        return "\n".join(process.logs() for process in (*self.daemons, self.hollow))


def wait_until(check: Callable[[], Any], cluster: Cluster, what: str, timeout: float = 90.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail with the daemons' logs otherwise."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(0.25)
        value = check()
    assert value, f"timed out waiting for {what}\n{cluster.logs()}"
    return value


def ready_condition(node: dict[str, Any]) -> dict[str, Any]:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {"status": None})


def heartbeats(api: ApiClient) -> dict[str, str]:
    """Node name -> renewTime of its Lease (every node has one once it heartbeats)."""
    leases = {lease["metadata"]["name"]: lease["spec"].get("renewTime", "")
              for lease in api.list(LEASES, NODE_LEASE_NAMESPACE)["items"]}
    return {node["metadata"]["name"]: leases.get(node["metadata"]["name"], "") for node in api.list(NODES)["items"]}


def running_and_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready") == conditions.get("ContainersReady") == "True"


def replicaset(name: str, replicas: int) -> dict[str, Any]:
    container = {"name": "app", "image": "nginx:latest", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": 30, "containers": [container]}}}}


def pods_of(api: ApiClient, namespace: str, app: str) -> list[dict[str, Any]]:
    return api.list(PODS, namespace, label_selector=f"app={app}")["items"]


def all_running(api: ApiClient, namespace: str, app: str, count: int) -> list[dict[str, Any]]:
    """The app's pods once there are exactly ``count``, every one Running and Ready; else an empty list."""
    pods = pods_of(api, namespace, app)
    return pods if len(pods) == count and all(running_and_ready(pod) for pod in pods) else []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, rabbitmq: RabbitMQProcess, pki: Pki) -> Iterator[Cluster]:
    vhost = f"hollow-{uuid.uuid4().hex[:8]}"
    for command in (("add_vhost", vhost), ("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")):
        result = rabbitmq.rabbitmqctl(*command)
        assert result.returncode == 0, result.stdout + result.stderr
    amqp_url = f"amqp://guest:guest@{rabbitmq.host}:{rabbitmq.port}/{vhost}"
    etcd = EtcdProcess(tmp_path_factory.mktemp("etcd"))
    started: list[ServiceProcess] = []
    try:
        etcd.start()
        started.append(etcd)
        apiserver = ApiServerProcess(tmp_path_factory.mktemp("apiserver"), etcd.endpoint, amqp_url, pki)
        apiserver.start()
        started.append(apiserver)
        manager = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                           "--amqp-url", amqp_url, "--controllers", "replicaset,nodelifecycle")
        scheduler = SchedulerProcess(tmp_path_factory.mktemp("scheduler"), apiserver, "--amqp-url", amqp_url)
        hollow = HollowKubeletProcess(tmp_path_factory.mktemp("hollow"), apiserver, amqp_url)
        with serving(manager), serving(scheduler):
            hollow.start()
            api = apiserver.client()
            namespace = f"test-{uuid.uuid4().hex[:12]}"
            api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            try:
                yield Cluster(apiserver, api, hollow, (manager, scheduler), namespace)
            finally:
                api.close()
                hollow.stop()
    finally:
        for process in reversed(started):
            process.stop()
        rabbitmq.rabbitmqctl("delete_vhost", vhost)


def test_twenty_hollow_nodes_register_ready_and_keep_heartbeating(cluster: Cluster) -> None:
    api = cluster.api
    nodes = wait_until(lambda: (listed := api.list(NODES)["items"]) and all(
        ready_condition(node)["status"] == "True" for node in listed) and listed, cluster, "every node Ready")
    assert sorted(node["metadata"]["name"] for node in nodes) == NAMES
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["disk"] == "ssd" and "node-role.kubernetes.io/worker" in labels
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert {"key": "dedicated", "value": "test", "effect": "PreferNoSchedule"} in node["spec"]["taints"]
        assert node["status"]["capacity"] == {"cpu": "4", "memory": "16777216Ki", "pods": "110"}
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("hollow://")
    first = heartbeats(api)
    wait_until(lambda: all(beat > first[name] for name, beat in heartbeats(api).items()), cluster,
               "a newer heartbeat from every node")


def test_a_replicaset_runs_on_the_hollow_nodes_and_scales_down(cluster: Cluster) -> None:
    api, namespace = cluster.api, cluster.namespace
    api.create(REPLICASETS, replicaset("web", 60), namespace)
    pods = wait_until(lambda: all_running(api, namespace, "web", 60), cluster, "60 pods Running", timeout=120)

    placed = Counter(pod["spec"]["nodeName"] for pod in pods)
    assert sorted(placed) == NAMES  # spread over every hollow node
    for pod in pods:
        status, uid = pod["status"], pod["metadata"]["uid"]
        assert status["containerStatuses"][0]["containerID"] == f"hollow://{uid}/app"
        assert "running" in status["containerStatuses"][0]["state"]
        assert status["hostIP"] == "127.0.0.1" and status["podIP"]
    addresses = [pod["status"]["podIP"] for pod in pods]
    assert len(set(addresses)) == len(addresses)

    result = subprocess.run([str(KUBECTL), "--kubeconfig", str(cluster.apiserver.kubeconfig), "get", "pods",
                             "-n", namespace, "-o", "wide"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    header, *rows = (re.split(r"\s{2,}", line.strip()) for line in result.stdout.splitlines())
    shown = {cells[0]: dict(zip(header, cells, strict=True)) for cells in rows}
    assert sorted(shown) == sorted(pod["metadata"]["name"] for pod in pods)
    assert all(row["STATUS"] == "Running" and row["NODE"] in NAMES for row in shown.values())
    assert {row["NODE"] for row in shown.values()} == set(NAMES)

    api.patch(REPLICASETS, "web", {"spec": {"replicas": 10}}, namespace)
    kept = wait_until(lambda: all_running(api, namespace, "web", 10), cluster, "10 pods left, Running")
    gone = {pod["metadata"]["name"] for pod in pods} - {pod["metadata"]["name"] for pod in kept}
    assert len(gone) == 50
    api.delete(REPLICASETS, "web", namespace)


def test_a_killed_hollow_kubelet_adopts_its_nodes_and_pods_when_restarted(cluster: Cluster) -> None:
    api, namespace = cluster.api, cluster.namespace
    api.create(REPLICASETS, replicaset("db", 10), namespace)
    before = {pod["metadata"]["uid"]: pod for pod in
              wait_until(lambda: all_running(api, namespace, "db", 10), cluster, "10 pods Running")}
    nodes = {node["metadata"]["name"]: node["metadata"]["uid"] for node in api.list(NODES)["items"]}

    cluster.hollow.kill()
    last = heartbeats(api)
    cluster.hollow.start()
    wait_until(lambda: all(beat > last[name] for name, beat in heartbeats(api).items()), cluster,
               "every node heartbeating again")
    assert {node["metadata"]["name"]: node["metadata"]["uid"] for node in api.list(NODES)["items"]} == nodes

    # A pod created after the restart runs; those from before were looked at first and kept as they were.
    api.patch(REPLICASETS, "db", {"spec": {"replicas": 11}}, namespace)
    after = wait_until(lambda: all_running(api, namespace, "db", 11), cluster, "11 pods Running")
    old = {pod["metadata"]["uid"]: pod for pod in after if pod["metadata"]["uid"] in before}
    assert old.keys() == before.keys()
    for uid, pod in old.items():
        assert pod["spec"]["nodeName"] == before[uid]["spec"]["nodeName"]
        assert pod["status"] == before[uid]["status"]
        assert pod["metadata"]["resourceVersion"] == before[uid]["metadata"]["resourceVersion"]  # not rewritten
    new = next(pod for pod in after if pod["metadata"]["uid"] not in before)
    same_node = [pod["status"]["podIP"] for pod in old.values() if pod["spec"]["nodeName"] == new["spec"]["nodeName"]]
    assert new["status"]["podIP"] not in same_node
