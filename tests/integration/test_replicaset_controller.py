"""The ReplicaSet controller in a real controller manager, against real etcd, RabbitMQ and apiserver.

No scheduler or kubelet runs here: pods stay unscheduled (so a deletion removes them at
once), and the tests play the kubelet's part where it matters by writing a pod's status
(Running, Ready) through the status subresource.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemons.api.client import ApiClient
from daemons.api.resources import require
from tests.conftest import (
    ApiServerProcess,
    ControllerManagerProcess,
    RabbitMQProcess,
    events,
    serving,
    upstream_kubectls,
    wait_for,
)

PODS = require("v1", "Pod")
REPLICASETS = require("apps/v1", "ReplicaSet")
KUBECTL = Path(sys.executable).with_name("kubectl")


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
            rabbitmq: RabbitMQProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                       "--controllers", "replicaset")
    with serving(process, rabbitmq):
        yield process


def replicaset(name: str, replicas: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}


def pods_of(api: ApiClient, namespace: str, rs: dict) -> list[dict]:
    """The pods the ReplicaSet controls, not terminating, by name."""
    uid = rs["metadata"]["uid"]
    pods = api.list(PODS, namespace)["items"]
    return sorted((pod for pod in pods if not pod["metadata"].get("deletionTimestamp") and any(
        ref.get("uid") == uid and ref.get("controller") for ref in pod["metadata"].get("ownerReferences") or [])),
        key=lambda pod: pod["metadata"]["name"])


def names(pods: list[dict]) -> list[str]:
    return [pod["metadata"]["name"] for pod in pods]


def counts(api: ApiClient, namespace: str, name: str) -> tuple[int, int, int, int]:
    """(replicas, readyReplicas, availableReplicas, observedGeneration - generation) as the status says."""
    rs = api.get(REPLICASETS, name, namespace)
    status = rs.get("status") or {}
    return (status.get("replicas", 0), status.get("readyReplicas", 0), status.get("availableReplicas", 0),
            status.get("observedGeneration", 0) - rs["metadata"]["generation"])


def set_ready(api: ApiClient, namespace: str, name: str, ready: bool) -> None:
    """Report the pod running and Ready as given, as its kubelet would."""
    condition = {"type": "Ready", "status": "True" if ready else "False",
                 "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    api.patch(PODS, name, {"status": {"phase": "Running", "conditions": [condition]}}, namespace,
              subresource="status")


def cli(apiserver: ApiServerProcess, namespace: str, *args: str) -> str:
    result = subprocess.run([str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), *args, "-n", namespace],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def upstream_get_rs(apiserver: ApiServerProcess, namespace: str, tmp_path: Path) -> list[list[str]]:
    """``kubectl get rs`` by the newest upstream kubectl on the machine, as rows of cells."""
    kubectls = upstream_kubectls()
    assert kubectls, "no upstream kubectl binary found (Cloud SDK or .tools/kubectl)"
    binary = list(kubectls.values())[-1]
    result = subprocess.run([str(binary), "--kubeconfig", str(apiserver.kubeconfig), "--cache-dir",
                             str(tmp_path / "kube-cache"), "-n", namespace, "get", "rs"],
                            capture_output=True, text=True, timeout=60, check=False, env={"HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    return [line.split() for line in result.stdout.splitlines()]


# --- tests --------------------------------------------------------------------------------------------


def test_a_replicaset_creates_replaces_and_scales_its_pods(manager, apiserver, api, namespace):
    rs = api.create(REPLICASETS, replicaset("web", 4), namespace)
    wait_for(lambda: len(pods_of(api, namespace, rs)), 4, manager)
    pods = pods_of(api, namespace, rs)
    for pod in pods:
        assert pod["metadata"]["name"].startswith("web-")
        assert pod["metadata"]["labels"] == {"app": "web"}
        assert pod["metadata"]["ownerReferences"] == [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}]
    wait_for(lambda: counts(api, namespace, "web"), (4, 0, 0, 0), manager)

    victim = pods[0]["metadata"]["name"]
    api.delete(PODS, victim, namespace)
    wait_for(lambda: len(pods_of(api, namespace, rs)), 4, manager)
    assert victim not in names(pods_of(api, namespace, rs))

    cli(apiserver, namespace, "scale", "rs", "web", "--replicas", "1")
    wait_for(lambda: len(pods_of(api, namespace, rs)), 1, manager)
    wait_for(lambda: counts(api, namespace, "web")[0], 1, manager)
    cli(apiserver, namespace, "scale", "rs", "web", "--replicas", "3")
    wait_for(lambda: len(pods_of(api, namespace, rs)), 3, manager)
    wait_for(lambda: counts(api, namespace, "web"), (3, 0, 0, 0), manager)
    reported = [(event["reason"], event["message"].split(":")[0]) for event in events(api, namespace, "web")]
    assert ("SuccessfulCreate", "Created pod") in reported
    assert ("SuccessfulDelete", "Deleted pod") in reported


def test_status_follows_pod_readiness_and_upstream_kubectl_shows_it(manager, apiserver, api, namespace, tmp_path):
    rs = api.create(REPLICASETS, replicaset("front", 3), namespace)
    wait_for(lambda: len(pods_of(api, namespace, rs)), 3, manager)
    first, second, _third = names(pods_of(api, namespace, rs))
    set_ready(api, namespace, first, True)
    set_ready(api, namespace, second, True)
    wait_for(lambda: counts(api, namespace, "front"), (3, 2, 2, 0), manager)
    header, row = upstream_get_rs(apiserver, namespace, tmp_path)
    assert header[:4] == ["NAME", "DESIRED", "CURRENT", "READY"]
    assert row[:4] == ["front", "3", "3", "2"]

    set_ready(api, namespace, second, False)
    wait_for(lambda: counts(api, namespace, "front"), (3, 1, 1, 0), manager)
    assert upstream_get_rs(apiserver, namespace, tmp_path)[1][:4] == ["front", "3", "3", "1"]


def test_orphans_are_adopted_and_relabelled_pods_released(manager, api, namespace):
    stray = api.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": "stray", "labels": {"app": "shop"}},
                              "spec": {"containers": [{"name": "main", "image": "busybox"}]}}, namespace)
    rs = api.create(REPLICASETS, replicaset("shop", 2), namespace)
    wait_for(lambda: len(pods_of(api, namespace, rs)), 2, manager)
    owned = pods_of(api, namespace, rs)
    assert "stray" in names(owned)
    assert next(pod for pod in owned if pod["metadata"]["name"] == "stray")["metadata"]["uid"] == \
        stray["metadata"]["uid"]

    api.patch(PODS, "stray", {"metadata": {"labels": {"app": "debugging"}}}, namespace)
    wait_for(lambda: api.get(PODS, "stray", namespace)["metadata"].get("ownerReferences"), None, manager)
    wait_for(lambda: len(pods_of(api, namespace, rs)), 2, manager)
    assert "stray" not in names(pods_of(api, namespace, rs))
    assert api.get(PODS, "stray", namespace)["metadata"]["labels"] == {"app": "debugging"}


def test_no_duplicate_pods_when_the_manager_is_killed_during_a_burst(manager, api, namespace):
    rs = api.create(REPLICASETS, replicaset("burst", 40), namespace)
    wait_for(lambda: len(pods_of(api, namespace, rs)) > 0, True, manager)
    manager.kill()
    manager.start()
    wait_for(lambda: counts(api, namespace, "burst"), (40, 0, 0, 0), manager)
    pods = api.list(PODS, namespace)["items"]
    assert len(pods) == 40
    assert not [pod for pod in pods if pod["metadata"].get("deletionTimestamp")]
    reasons = {event["reason"] for event in events(api, namespace, "burst")}
    assert "SuccessfulDelete" not in reasons  # nothing was created twice and then taken back
