"""The DaemonSet controller in a real controller manager, against real etcd, RabbitMQ and apiserver.

The nodes are plain Node objects labelled for this test only (the session's apiserver holds other tests'
nodes too), and a thread plays their kubelets: it reports each daemon pod Running and Ready and finishes the
graceful deletion of the pods the controller deletes. Nodes join and leave, one is tainted, and the template
changes under a rolling update of one node at a time, watched by our kubectl and upstream kubectl 1.33.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, MiniK8sError, NotFound
from daemons.api.kinds.daemonset import HASH_LABEL
from daemons.api.resources import require
from tests.conftest import (
    ApiServerProcess,
    ControllerManagerProcess,
    RabbitMQProcess,
    serving,
    upstream_kubectls,
    wait_for,
)

PODS = require("v1", "Pod")
NODES = require("v1", "Node")
DAEMONSETS = require("apps/v1", "DaemonSet")
KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
            rabbitmq: RabbitMQProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                       "--controllers", "daemonset")
    with serving(process, rabbitmq):
        yield process


def is_ready(pod: dict) -> bool:
    return any(item.get("type") == "Ready" and item.get("status") == "True"
               for item in (pod.get("status") or {}).get("conditions") or [])


class Nodes:
    """This test's nodes (created, deleted, tainted) and their kubelets' part for the namespace's pods.

    At every look it remembers how many of the nodes that should run the daemon lack a Ready pod, so the
    rolling update's bound can be checked."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.label = f"daemonset-test-{uuid.uuid4().hex[:8]}"
        self.names: set[str] = set()
        self.unavailable: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, name: str) -> str:
        full = f"{self.label}-{name}"
        self.api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": full, "labels": {self.label: "yes"}}})
        self.names.add(full)
        return full

    def remove(self, full: str) -> None:
        self.api.delete(NODES, full)
        self.names.discard(full)

    def taint(self, full: str, taints: list[dict]) -> None:
        self.api.patch(NODES, full, {"spec": {"taints": taints or None}})

    def pods(self) -> dict[str, list[dict]]:
        """The namespace's live pods by node."""
        by_node: dict[str, list[dict]] = {}
        for pod in self.api.list(PODS, self.namespace)["items"]:
            if not pod["metadata"].get("deletionTimestamp"):
                by_node.setdefault(pod["spec"].get("nodeName") or "", []).append(pod)
        return by_node

    def __enter__(self) -> Nodes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for full in list(self.names):
            with contextlib.suppress(NotFound):
                self.remove(full)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                pods = self.api.list(PODS, self.namespace)["items"]
            except MiniK8sError:  # a slow or busy apiserver, or a lost connection: look again
                continue
            ready_nodes = {pod["spec"].get("nodeName") for pod in pods
                           if is_ready(pod) and not pod["metadata"].get("deletionTimestamp")}
            self.unavailable.append(len(self.names - ready_nodes))
            for pod in pods:
                name = pod["metadata"]["name"]
                with contextlib.suppress(APIError):  # gone meanwhile: the next look no longer lists it
                    if pod["metadata"].get("deletionTimestamp"):
                        self.api.delete(PODS, name, self.namespace, grace_period_seconds=0)
                    elif not is_ready(pod):
                        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                        self.api.patch(PODS, name, {"status": status}, self.namespace, subresource="status")


@pytest.fixture
def nodes(api: ApiClient, namespace: str) -> Iterator[Nodes]:
    with Nodes(api, namespace) as running:
        yield running


def daemonset(label: str, image: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"nodeSelector": {label: "yes"},
                                           "containers": [{"name": "agent", "image": image}]}}}}


def placement(nodes: Nodes) -> dict[str, list[str]]:
    """Node -> images of its live daemon pods, for this test's nodes."""
    return {node: sorted(pod["spec"]["containers"][0]["image"] for pod in pods)
            for node, pods in nodes.pods().items()}


def counts(api: ApiClient, namespace: str) -> tuple[int, ...]:
    """(desired, current, ready, up-to-date, available, misscheduled) as the status says, once observed."""
    ds = api.get(DAEMONSETS, "agent", namespace)
    status = ds.get("status") or {}
    if status.get("observedGeneration") != ds["metadata"]["generation"]:
        return ()
    return tuple(int(status.get(field) or 0) for field in (
        "desiredNumberScheduled", "currentNumberScheduled", "numberReady", "updatedNumberScheduled",
        "numberAvailable", "numberMisscheduled"))


def kubectl(apiserver: ApiServerProcess, namespace: str, *args: str, binary: Path = KUBECTL,
            home: Path | None = None) -> str:
    argv = [str(binary), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, *args]
    env: dict[str, Any] | None = {"HOME": str(home)} if home else None
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def test_one_pod_per_node_through_joins_leaves_taints_and_a_rolling_update(manager, apiserver, api, namespace,
                                                                             nodes, tmp_path):
    kubectls = upstream_kubectls()
    assert kubectls, "no upstream kubectl binary found (Cloud SDK or .tools/kubectl)"
    upstream = list(kubectls.values())[-1]
    a, b = nodes.add("a"), nodes.add("b")
    api.create(DAEMONSETS, daemonset(nodes.label, "agent:1"), namespace)
    wait_for(lambda: placement(nodes), {a: ["agent:1"], b: ["agent:1"]}, manager)
    wait_for(lambda: counts(api, namespace), (2, 2, 2, 2, 2, 0), manager)
    out = kubectl(apiserver, namespace, "rollout", "status", "daemonset/agent", "--timeout", "60s",
                  binary=upstream, home=tmp_path)
    assert out.strip().endswith('daemon set "agent" successfully rolled out')

    c = nodes.add("c")  # a node joins
    wait_for(lambda: placement(nodes), {a: ["agent:1"], b: ["agent:1"], c: ["agent:1"]}, manager)
    nodes.remove(b)  # a node leaves
    wait_for(lambda: placement(nodes), {a: ["agent:1"], c: ["agent:1"]}, manager)
    nodes.taint(c, [{"key": "dedicated", "value": "db", "effect": "NoExecute"}])  # evicts: not tolerated
    wait_for(lambda: placement(nodes), {a: ["agent:1"]}, manager)
    wait_for(lambda: counts(api, namespace), (1, 1, 1, 1, 1, 0), manager)
    nodes.taint(c, [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])  # tolerated by daemons
    wait_for(lambda: placement(nodes), {a: ["agent:1"], c: ["agent:1"]}, manager)
    d = nodes.add("d")
    wait_for(lambda: counts(api, namespace), (3, 3, 3, 3, 3, 0), manager)

    nodes.unavailable.clear()
    api.patch(DAEMONSETS, "agent", {"spec": {"template": {"spec": {"containers": [
        {"name": "agent", "image": "agent:2"}]}}}}, namespace, patch_type="strategic")
    out = kubectl(apiserver, namespace, "rollout", "status", "ds/agent", "--timeout", "90s")
    assert out.strip().endswith('daemon set "agent" successfully rolled out')
    assert placement(nodes) == {a: ["agent:2"], c: ["agent:2"], d: ["agent:2"]}
    assert max(nodes.unavailable) <= 1, f"more than maxUnavailable nodes went without a ready pod: {nodes.unavailable}"
    hashes = {pod["metadata"]["labels"][HASH_LABEL] for pods in nodes.pods().values() for pod in pods}
    assert len(hashes) == 1

    wait_for(lambda: kubectl(apiserver, namespace, "rollout", "history", "ds/agent").split(),
             ["daemonset.apps/agent", "REVISION", "CHANGE-CAUSE", "1", "<none>", "2", "<none>"], manager)
    assert kubectl(apiserver, namespace, "rollout", "undo", "ds/agent").strip() == "daemonset.apps/agent rolled back"
    out = kubectl(apiserver, namespace, "rollout", "status", "ds/agent", "--timeout", "90s", binary=upstream,
                  home=tmp_path)
    assert out.strip().endswith('daemon set "agent" successfully rolled out')
    assert placement(nodes) == {a: ["agent:1"], c: ["agent:1"], d: ["agent:1"]}
    assert {pod["metadata"]["labels"][HASH_LABEL] for pods in nodes.pods().values() for pod in pods} != hashes
