"""Cascading deletion: the apiserver's propagation policies and the garbage collector in the controller manager.

The controller manager runs only the garbage collector, on RabbitMQ, against the real
apiserver. No ReplicaSet controller runs: the tests write the pods and their
ownerReferences themselves, as that controller would, so only the collector acts.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import Invalid, NotFound
from daemons.api.resources import Resource, require
from tests.conftest import (
    CLOUD_SDK_KUBECTLS,
    ApiServerProcess,
    ControllerManagerProcess,
    RabbitMQProcess,
    serving,
    wait_for,
)

pytestmark = pytest.mark.integration

PODS = require("v1", "Pod")
REPLICASETS = require("apps/v1", "ReplicaSet")
DEPLOYMENTS = require("apps/v1", "Deployment")
NODES = require("v1", "Node")
LEASES = require("coordination.k8s.io/v1", "Lease")
KUBECTL = Path(sys.executable).with_name("kubectl")
HOLD = "example.com/hold"


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
            rabbitmq: RabbitMQProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                       "--controllers", "garbagecollector")
    with serving(process, rabbitmq):
        yield process


# --- objects ----------------------------------------------------------------------------------------


def template(app: str) -> dict:
    return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def reference(owner: dict) -> dict:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def create_replicaset(api: ApiClient, namespace: str, name: str, owner: dict | None = None) -> dict:
    body: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
                            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                                     "template": template(name)}}
    if owner is not None:
        body["metadata"]["ownerReferences"] = [reference(owner)]
    return api.create(REPLICASETS, body, namespace)


def create_pod(api: ApiClient, namespace: str, name: str, *owners: dict, finalizers: list[str] | None = None) -> dict:
    """An unscheduled pod (no kubelet runs here, so its deletion is immediate) owned by ``owners``."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name, "labels": {"app": name.rsplit("-", 1)[0]},
                                         "ownerReferences": [reference(owner) for owner in owners]},
                            "spec": template(name)["spec"]}
    if finalizers:
        body["metadata"]["finalizers"] = finalizers
    return api.create(PODS, body, namespace)


def replicaset_with_pods(api: ApiClient, namespace: str, name: str = "web", pods: int = 2) -> dict:
    replicaset = create_replicaset(api, namespace, name)
    for index in range(pods):
        create_pod(api, namespace, f"{name}-{index}", replicaset)
    return replicaset


# --- reading ----------------------------------------------------------------------------------------


def names(api: ApiClient, resource: Resource, namespace: str) -> list[str]:
    return sorted(item["metadata"]["name"] for item in api.list(resource, namespace)["items"])


def get(api: ApiClient, resource: Resource, namespace: str, name: str) -> dict | None:
    try:
        return api.get(resource, name, namespace)
    except NotFound:
        return None


# --- tests --------------------------------------------------------------------------------------------


def test_background_deletion_removes_the_owner_at_once_and_then_its_pods(manager, api, namespace):
    replicaset_with_pods(api, namespace)
    create_pod(api, namespace, "alone-0")
    api.delete(REPLICASETS, "web", namespace, propagation_policy="Background")
    assert get(api, REPLICASETS, namespace, "web") is None
    wait_for(lambda: names(api, PODS, namespace), ["alone-0"], manager)


def test_deletion_without_a_policy_is_background(manager, api, namespace):
    replicaset_with_pods(api, namespace)
    api.delete(REPLICASETS, "web", namespace)
    assert get(api, REPLICASETS, namespace, "web") is None
    wait_for(lambda: names(api, PODS, namespace), [], manager)


def test_foreground_deletion_keeps_the_owner_until_its_pods_are_gone(manager, api, namespace):
    replicaset = create_replicaset(api, namespace, "web")
    create_pod(api, namespace, "web-0", replicaset)
    create_pod(api, namespace, "web-1", replicaset, finalizers=[HOLD])  # stays until the test lets it go
    api.delete(REPLICASETS, "web", namespace, propagation_policy="Foreground")
    api.delete(REPLICASETS, "web", namespace, propagation_policy="Foreground")  # again: no error

    wait_for(lambda: names(api, PODS, namespace), ["web-1"], manager)
    held = api.get(PODS, "web-1", namespace)
    assert held["metadata"]["deletionTimestamp"]
    pending = api.get(REPLICASETS, "web", namespace)
    assert pending["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in pending["metadata"]["finalizers"]

    api.patch(PODS, "web-1", {"metadata": {"finalizers": None}}, namespace)
    wait_for(lambda: (names(api, PODS, namespace), get(api, REPLICASETS, namespace, "web")), ([], None), manager)


def test_orphan_deletion_keeps_the_pods_without_the_reference(manager, api, namespace):
    replicaset_with_pods(api, namespace)
    api.delete(REPLICASETS, "web", namespace, propagation_policy="Orphan")
    wait_for(lambda: get(api, REPLICASETS, namespace, "web"), None, manager)
    pods = api.list(PODS, namespace)["items"]
    assert sorted(pod["metadata"]["name"] for pod in pods) == ["web-0", "web-1"]
    assert all(not pod["metadata"].get("ownerReferences") for pod in pods)


def test_orphan_dependents_in_delete_options_means_orphan(manager, api, namespace):
    replicaset_with_pods(api, namespace)
    api.request("DELETE", REPLICASETS.path(namespace, "web"), json={"orphanDependents": True})
    wait_for(lambda: get(api, REPLICASETS, namespace, "web"), None, manager)
    pods = api.list(PODS, namespace)["items"]
    assert sorted(pod["metadata"]["name"] for pod in pods) == ["web-0", "web-1"]
    assert all(not pod["metadata"].get("ownerReferences") for pod in pods)


def test_a_deployment_chain_deleted_in_the_background_leaves_nothing(manager, api, namespace):
    deployment = api.create(DEPLOYMENTS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "front"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "front"}}, "template": template("front")}},
        namespace)
    replicaset = create_replicaset(api, namespace, "front-7d4b9", owner=deployment)
    for index in range(2):
        create_pod(api, namespace, f"front-7d4b9-{index}", replicaset)
    api.delete(DEPLOYMENTS, "front", namespace, propagation_policy="Background")
    wait_for(lambda: (names(api, DEPLOYMENTS, namespace), names(api, REPLICASETS, namespace),
                      names(api, PODS, namespace)), ([], [], []), manager)


def test_pods_whose_owner_never_existed_are_collected(manager, api, namespace):
    live = create_replicaset(api, namespace, "web")
    create_pod(api, namespace, "web-0", live)
    impostor = {**live, "metadata": {**live["metadata"], "uid": "00000000-0000-0000-0000-000000000000"}}
    create_pod(api, namespace, "web-1", impostor)  # the right name, another uid
    nowhere = {**live, "metadata": {**live["metadata"], "name": "never",
                                    "uid": "11111111-1111-1111-1111-111111111111"}}
    create_pod(api, namespace, "never-0", nowhere)
    create_pod(api, namespace, "mixed-0", live, nowhere)  # one live owner: only the dangling reference goes
    wait_for(lambda: names(api, PODS, namespace), ["mixed-0", "web-0"], manager)
    wait_for(lambda: [ref["name"] for ref in api.get(PODS, "mixed-0", namespace)["metadata"]["ownerReferences"]],
             ["web"], manager)


def test_a_deleted_nodes_lease_goes_with_it(manager, api, namespace):
    name = f"gc-node-{namespace}"
    node = api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    try:
        api.create(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": name, "ownerReferences": [reference(node)]},
                            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}}, namespace)
        api.delete(NODES, name)
    finally:
        if get(api, NODES, None, name) is not None:
            api.delete(NODES, name)
    wait_for(lambda: get(api, LEASES, namespace, name), None, manager)


def test_an_unknown_policy_is_refused(manager, api, namespace):
    replicaset_with_pods(api, namespace, pods=0)
    with pytest.raises(Invalid, match="propagationPolicy"):
        api.request("DELETE", REPLICASETS.path(namespace, "web"), json={"propagationPolicy": "Sideways"})
    with pytest.raises(Invalid, match="propagationPolicy"):
        api.request("DELETE", REPLICASETS.path(namespace, "web"), params={"propagationPolicy": "Sideways"})
    assert get(api, REPLICASETS, namespace, "web") is not None


def test_our_kubectl_cascades_as_asked(manager, api, apiserver, namespace):
    replicaset_with_pods(api, namespace)

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, *args],
                              capture_output=True, text=True, timeout=60, check=False)

    result = kubectl("delete", "rs", "web", "--cascade=false")
    assert result.returncode == 0, result.stderr
    assert result.stdout == 'replicaset.apps "web" deleted\n'
    assert "--cascade=orphan" in result.stderr
    wait_for(lambda: get(api, REPLICASETS, namespace, "web"), None, manager)
    assert names(api, PODS, namespace) == ["web-0", "web-1"]
    assert all(not pod["metadata"].get("ownerReferences") for pod in api.list(PODS, namespace)["items"])
    refused = kubectl("delete", "pod", "web-0", "--cascade=sometimes")
    assert refused.returncode == 1 and "invalid cascade value" in refused.stderr


@pytest.mark.parametrize("cascade", ["foreground", "orphan"])
def test_upstream_kubectl_cascades_as_asked(manager, api, apiserver, namespace, tmp_path, cascade):
    binary = CLOUD_SDK_KUBECTLS["1.33"]
    assert binary.exists(), f"{binary} is missing"
    replicaset_with_pods(api, namespace)
    result = subprocess.run([str(binary), "--kubeconfig", str(apiserver.kubeconfig), "--cache-dir",
                             str(tmp_path / "cache"), "-n", namespace, "delete", "rs", "web", f"--cascade={cascade}"],
                            capture_output=True, text=True, timeout=60, check=False, env={"HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('replicaset.apps "web" deleted')
    assert get(api, REPLICASETS, namespace, "web") is None  # kubectl waits until it is gone
    if cascade == "foreground":
        assert names(api, PODS, namespace) == []
    else:
        pods = api.list(PODS, namespace)["items"]
        assert sorted(pod["metadata"]["name"] for pod in pods) == ["web-0", "web-1"]
        assert all(not pod["metadata"].get("ownerReferences") for pod in pods)


def test_a_restarted_collector_finishes_the_job(manager, api, namespace):
    replicaset_with_pods(api, namespace, "gone")
    replicaset_with_pods(api, namespace, "front")
    replicaset_with_pods(api, namespace, "keep")
    manager.kill()  # as a crash: nothing is left running to collect
    try:
        api.delete(REPLICASETS, "gone", namespace, propagation_policy="Background")
        api.delete(REPLICASETS, "front", namespace, propagation_policy="Foreground")
        api.delete(REPLICASETS, "keep", namespace, propagation_policy="Orphan")
        assert names(api, PODS, namespace) == ["front-0", "front-1", "gone-0", "gone-1", "keep-0", "keep-1"]
    finally:
        manager.start()
    wait_for(lambda: (names(api, REPLICASETS, namespace), names(api, PODS, namespace)), ([], ["keep-0", "keep-1"]),
             manager)
    assert all(not pod["metadata"].get("ownerReferences") for pod in api.list(PODS, namespace)["items"])
