"""Losing a node, for real: two kubelets on Docker, a scheduler, and the node lifecycle controller.

The module runs its own etcd, apiserver and RabbitMQ virtual host, so that no
node or pod of another test is judged, and the controller manager runs with
short periods (grace 6 s, eviction after 3 s). Kubelet A is SIGKILLed as a
lost machine would stop answering: its containers keep running. A must go
Unknown and be tainted, its pods evicted and replaced on B, and everything must
heal when A's kubelet comes back. An apiserver outage longer than the grace
period, on the other hand, must not cost any node its Ready condition or pod.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import docker as docker_sdk
import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import require
from daemons.kubelet.spec import LABEL_NODE, LABEL_POD_UID
from tests.conftest import (
    ApiServerProcess,
    ControllerManagerProcess,
    EtcdProcess,
    KubeletProcess,
    Pki,
    RabbitMQProcess,
    SchedulerProcess,
    ServiceProcess,
    serving,
)

pytestmark = pytest.mark.integration

PODS = require("v1", "Pod")
NODES = require("v1", "Node")
NAMESPACES = require("v1", "Namespace")
REPLICASETS = require("apps/v1", "ReplicaSet")
EVENTS = require("v1", "Event")

GRACE = 6
EVICTION_TIMEOUT = 3
UNREACHABLE = "node.kubernetes.io/unreachable"
TOLERATE_FOREVER = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}


@dataclass
class Cluster:
    apiserver: ApiServerProcess
    api: ApiClient
    manager: ControllerManagerProcess
    scheduler: SchedulerProcess
    a: KubeletProcess
    b: KubeletProcess
    namespace: str

    def logs(self) -> str:
        return "\n".join(process.logs() for process in (self.manager, self.scheduler, self.a, self.b))


def wait_until(check: Callable[[], Any], cluster: Cluster, what: str, timeout: float = 90.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail with the daemons' logs otherwise."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(0.25)
        value = check()
    assert value, f"timed out waiting for {what}\n{cluster.logs()}"
    return value


def ready(api: ApiClient, name: str) -> dict[str, Any]:
    """The node's Ready condition; an empty one before its kubelet first reports."""
    conditions = (api.get(NODES, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {"status": None})


def taints(api: ApiClient, name: str) -> list[dict[str, Any]]:
    return api.get(NODES, name).get("spec", {}).get("taints") or []


def has_unreachable_taint(api: ApiClient, name: str) -> bool:
    return any(taint["key"] == UNREACHABLE and taint["effect"] == "NoExecute" for taint in taints(api, name))


def pods(api: ApiClient, namespace: str) -> list[dict[str, Any]]:
    return api.list(PODS, namespace)["items"]


def running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def busybox_spec(**spec: Any) -> dict[str, Any]:
    return {"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox:latest", "command": ["sh", "-c", "sleep 3600"]}],
            **spec}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, rabbitmq: RabbitMQProcess, pki: Pki,
            docker: docker_sdk.DockerClient, kubelet_images: dict[str, str]) -> Iterator[Cluster]:
    vhost = f"node-lifecycle-{uuid.uuid4().hex[:8]}"
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
        manager = ControllerManagerProcess(
            tmp_path_factory.mktemp("controller-manager"), apiserver, "--amqp-url", amqp_url,
            "--controllers", "nodelifecycle,replicaset", "--node-monitor-period", "1",
            "--node-monitor-grace-period", str(GRACE), "--pod-eviction-timeout", str(EVICTION_TIMEOUT))
        scheduler = SchedulerProcess(tmp_path_factory.mktemp("scheduler"), apiserver, "--amqp-url", amqp_url)
        a = KubeletProcess(tmp_path_factory.mktemp("kubelet-a"), apiserver, amqp_url)
        b = KubeletProcess(tmp_path_factory.mktemp("kubelet-b"), apiserver, amqp_url)
        with serving(manager), serving(scheduler):
            for kubelet in (a, b):
                kubelet.start()
                started.append(kubelet)
            api = apiserver.client()
            namespace = f"test-{uuid.uuid4().hex[:12]}"
            api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            result = Cluster(apiserver, api, manager, scheduler, a, b, namespace)
            for kubelet in (a, b):
                wait_until(lambda k=kubelet: ready(api, k.node_name)["status"] == "True", result,
                           f"node {kubelet.node_name} Ready")
            try:
                yield result
            finally:
                api.close()
                for kubelet in (a, b):
                    kubelet.stop()
                    for container in docker.containers.list(all=True,
                                                            filters={"label": f"{LABEL_NODE}={kubelet.node_name}"}):
                        container.remove(force=True)
    finally:
        for process in reversed(started):
            process.stop()
        rabbitmq.rabbitmqctl("delete_vhost", vhost)


def test_a_lost_node_is_tainted_its_pods_move_and_it_heals_when_its_kubelet_returns(
        cluster: Cluster, docker: docker_sdk.DockerClient) -> None:
    api, namespace, a, b = cluster.api, cluster.namespace, cluster.a.node_name, cluster.b.node_name
    # B is cordoned while the pods are placed, so they all land on A.
    api.patch(NODES, b, {"spec": {"unschedulable": True}})
    rs = api.create(REPLICASETS, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": busybox_spec()}}}, namespace)
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tolerant"},
                      "spec": busybox_spec(tolerations=[TOLERATE_FOREVER])}, namespace)
    on_a = wait_until(lambda: len(placed := [p for p in pods(api, namespace) if running(p)]) == 3 and placed,
                      cluster, "three pods running on A")
    assert {pod["spec"]["nodeName"] for pod in on_a} == {a}
    first = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in on_a if pod["metadata"]["name"] != "tolerant"}
    api.patch(NODES, b, {"spec": {"unschedulable": False}})

    cluster.a.kill()  # the machine is gone: nothing stops its containers

    condition = wait_until(lambda: (c := ready(api, a))["status"] == "Unknown" and c, cluster, "A Unknown")
    assert condition["reason"] == "NodeStatusUnknown"
    assert condition["message"] == "Kubelet stopped posting node status."
    wait_until(lambda: has_unreachable_taint(api, a), cluster, "A tainted unreachable")
    assert any(taint["key"] == "dedicated" for taint in taints(api, a))  # the kubelet's own taint stays
    assert ready(api, b)["status"] == "True"
    assert not has_unreachable_taint(api, b)
    not_ready = wait_until(lambda: [e for e in api.list(EVENTS, "default")["items"]
                                    if e["involvedObject"]["name"] == a and e["reason"] == "NodeNotReady"],
                           cluster, "a NodeNotReady event")
    assert not_ready[0]["involvedObject"]["kind"] == "Node"

    # Past the timeout, the ReplicaSet's pods on A are being deleted; they wait there for A's kubelet.
    def evicted() -> list[dict[str, Any]]:
        listed = [p for p in pods(api, namespace) if p["metadata"]["name"] in first]
        return listed if len(listed) == 2 and all(p["metadata"].get("deletionTimestamp") for p in listed) else []

    wait_until(evicted, cluster, "A's ReplicaSet pods marked for deletion")
    for name in first:
        reasons = [e["reason"] for e in api.list(EVENTS, namespace)["items"] if e["involvedObject"]["name"] == name]
        assert "TaintManagerEviction" in reasons

    # Their replacements, and any new pod, run on B.
    def replacements() -> list[dict[str, Any]]:
        fresh = [p for p in pods(api, namespace)
                 if p["metadata"]["name"] not in first and p["metadata"]["name"] != "tolerant"]
        return fresh if len(fresh) == 2 and all(running(p) for p in fresh) else []

    assert {pod["spec"]["nodeName"] for pod in wait_until(replacements, cluster, "two replacements running")} == {b}
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "newcomer"}, "spec": busybox_spec()},
               namespace)
    newcomer = wait_until(lambda: running(p := api.get(PODS, "newcomer", namespace)) and p, cluster, "newcomer")
    assert newcomer["spec"]["nodeName"] == b
    tolerant = api.get(PODS, "tolerant", namespace)
    assert not tolerant["metadata"].get("deletionTimestamp")
    assert tolerant["spec"]["nodeName"] == a

    cluster.a.start()  # the machine is back

    wait_until(lambda: ready(api, a)["status"] == "True", cluster, "A Ready again")
    wait_until(lambda: not has_unreachable_taint(api, a), cluster, "A's taint removed")
    assert any(taint["key"] == "dedicated" for taint in taints(api, a))

    def gone(name: str) -> bool:
        try:
            api.get(PODS, name, namespace)
        except NotFound:
            return True
        return False

    wait_until(lambda: all(gone(name) for name in first), cluster, "the evicted pods gone")
    wait_until(lambda: running(api.get(PODS, "tolerant", namespace)), cluster, "the tolerant pod running on A")
    assert not api.get(PODS, "tolerant", namespace)["metadata"].get("deletionTimestamp")

    def strays() -> set[str]:
        live = {pod["metadata"]["uid"] for pod in pods(api, namespace)}
        containers = docker.containers.list(all=True, filters={"label": f"{LABEL_NODE}={a}"})
        return {c.labels.get(LABEL_POD_UID, "") for c in containers} - live

    wait_until(lambda: not strays(), cluster, "no container on A of a pod that is gone")
    assert set(first.values()).isdisjoint(
        c.labels.get(LABEL_POD_UID) for c in docker.containers.list(all=True, filters={"label": f"{LABEL_NODE}={a}"}))
    assert api.get(REPLICASETS, "web", namespace)["spec"]["replicas"] == rs["spec"]["replicas"]


def test_an_apiserver_outage_longer_than_the_grace_period_marks_no_node_and_evicts_nothing(cluster: Cluster) -> None:
    api, namespace = cluster.api, cluster.namespace
    if not cluster.a.running:  # the test above stopped half-way
        cluster.a.start()
    nodes = [cluster.a.node_name, cluster.b.node_name]
    for name in nodes:
        wait_until(lambda n=name: ready(api, n)["status"] == "True" and not has_unreachable_taint(api, n), cluster,
                   f"{name} Ready and untainted")
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bystander"}, "spec": busybox_spec()},
               namespace)
    wait_until(lambda: running(api.get(PODS, "bystander", namespace)), cluster, "bystander running")
    transitions = {name: ready(api, name)["lastTransitionTime"] for name in nodes}

    cluster.apiserver.kill()
    time.sleep(GRACE * 2)  # every heartbeat the controller saw is now older than the grace period
    cluster.apiserver.start()

    # Watch for longer than the grace and eviction periods together: nothing may happen.
    deadline = time.monotonic() + GRACE + EVICTION_TIMEOUT + 5
    while time.monotonic() < deadline:
        for name in nodes:
            condition = ready(api, name)
            assert condition["status"] == "True", f"{name} went {condition}\n{cluster.logs()}"
            assert not has_unreachable_taint(api, name), f"{name} was tainted\n{cluster.logs()}"
        assert not any(pod["metadata"].get("deletionTimestamp") for pod in pods(api, namespace))
        time.sleep(0.5)
    assert {name: ready(api, name)["lastTransitionTime"] for name in nodes} == transitions
    assert not [e for e in api.list(EVENTS, "default")["items"]
                if e["reason"] == "NodeNotReady" and e["involvedObject"]["name"] == cluster.b.node_name]
    with contextlib.suppress(NotFound):
        api.delete(PODS, "bystander", namespace)
