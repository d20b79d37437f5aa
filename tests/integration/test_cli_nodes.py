"""Nodes through both kubectls against a real apiserver: the ``get nodes`` table, cordon, uncordon and drain, and
the pod CIDR the kubelet's node reporter puts on its Node.

There is no kubelet here: a pod deleted with a grace period stays Terminating until the test removes it as the
kubelet would (a second DELETE with grace period 0).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import by_kind
from daemons.kubelet.node import NodeReporter
from daemons.kubelet.settings import NodeConfig
from tests.conftest import upstream_kubectls

pytestmark = pytest.mark.integration

KUBECTL = Path(sys.executable).with_name("kubectl")
NODES = by_kind("v1", "Node")
PODS = by_kind("v1", "Pod")
assert NODES is not None and PODS is not None

Run = Callable[..., subprocess.CompletedProcess[str]]
MakeNode = Callable[..., str]


@pytest.fixture
def kubectl(apiserver) -> Run:
    """Our kubectl with the test's kubeconfig; nodes are cluster-wide, so no namespace is given."""
    assert KUBECTL.exists(), f"{KUBECTL} is missing: install the project (pip install -e .)"

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), *args], capture_output=True,
                              text=True, timeout=timeout, check=False)

    return run


@pytest.fixture
def make_node(api: ApiClient) -> Iterator[MakeNode]:
    """Create uniquely named Nodes (spec through POST, status through the status subresource); deleted after."""
    made: list[str] = []

    def make(ready: str | None = "True", labels: dict[str, str] | None = None, unschedulable: bool = False,
             pod_cidr: str | None = None, address: str = "192.0.2.10") -> str:
        name = f"node-{uuid.uuid4().hex[:8]}"
        spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
        if pod_cidr:
            spec.update(podCIDR=pod_cidr, podCIDRs=[pod_cidr])
        api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
                           "spec": spec})
        made.append(name)
        status: dict[str, Any] = {
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.30.0-minik8s", "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "docker://20.10.24"},
        }
        if ready:
            status["conditions"] = [{"type": "Ready", "status": ready, "reason": "KubeletReady"}]
        api.patch(NODES, name, {"status": status}, subresource="status")
        return name

    yield make
    for name in made:
        with contextlib.suppress(NotFound):
            api.delete(NODES, name)


def make_pod(api: ApiClient, namespace: str, name: str, node: str, owner: str | None = None,
             empty_dir: bool = False, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner",
                                        "uid": str(uuid.uuid4()), "controller": True}]
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "busybox:latest"}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}, namespace)


def pod_names(api: ApiClient, namespace: str) -> set[str]:
    return {pod["metadata"]["name"] for pod in api.list(PODS, namespace)["items"]}


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def failed(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 1, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result


def table(text: str) -> list[list[str]]:
    """Rows of cells; cells are at least three spaces apart, while an OS image has single spaces inside."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def without_age(rows: list[list[str]]) -> list[list[str]]:
    return [row[:3] + row[4:] for row in rows]


# --- get nodes ------------------------------------------------------------------------------------------

WIDE_HEADER = ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
               "KERNEL-VERSION", "CONTAINER-RUNTIME", "POD-CIDR"]


def test_get_nodes_shows_status_roles_version_and_wide_columns(kubectl: Run, make_node: MakeNode) -> None:
    control = make_node(labels={"node-role.kubernetes.io/control-plane": ""}, pod_cidr="10.244.0.0/24")
    worker = make_node(ready="False", unschedulable=True, address="192.0.2.11")
    silent = make_node(ready=None, labels={"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "gpu"})

    rows = table(ok(kubectl("get", "nodes", control, worker, silent)))
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert without_age(rows[1:]) == [
        [control, "Ready", "control-plane", "v1.30.0-minik8s"],
        [worker, "NotReady,SchedulingDisabled", "<none>", "v1.30.0-minik8s"],
        [silent, "Unknown", "gpu,worker", "v1.30.0-minik8s"],
    ]
    wide = table(ok(kubectl("get", "nodes", control, worker, "-o", "wide")))
    assert wide[0] == WIDE_HEADER
    assert without_age(wide[1:]) == [
        [control, "Ready", "control-plane", "v1.30.0-minik8s", "192.0.2.10", "<none>",
         "Debian GNU/Linux 12 (bookworm)", "6.1.0-18-amd64", "docker://20.10.24", "10.244.0.0/24"],
        [worker, "NotReady,SchedulingDisabled", "<none>", "v1.30.0-minik8s", "192.0.2.11", "<none>",
         "Debian GNU/Linux 12 (bookworm)", "6.1.0-18-amd64", "docker://20.10.24", "<none>"],
    ]


def test_upstream_kubectl_shows_the_same_node_table(kubectl: Run, make_node: MakeNode, apiserver,
                                                    tmp_path: Path) -> None:
    binaries = upstream_kubectls()
    assert binaries, "no upstream kubectl found: run scripts/test.sh, which installs one into .tools/kubectl"
    nodes = [make_node(labels={"node-role.kubernetes.io/control-plane": ""}, pod_cidr="10.244.0.0/24"),
             make_node(ready="Unknown", unschedulable=True)]
    env = {key: value for key, value in os.environ.items() if not key.startswith("KUBE")}
    env["HOME"] = str(tmp_path)
    for wide in ([], ["-o", "wide"]):
        ours = table(ok(kubectl("get", "nodes", *nodes, *wide)))
        for version, binary in binaries.items():
            result = subprocess.run([str(binary), "--kubeconfig", str(apiserver.kubeconfig), "--cache-dir",
                                     str(tmp_path / version), "get", "nodes", *nodes, *wide],
                                    capture_output=True, text=True, env=env, timeout=60, check=False)
            theirs = table(ok(result))
            assert theirs[0] == ours[0], f"kubectl {version}"
            assert without_age(theirs[1:]) == without_age(ours[1:]), f"kubectl {version}"
        assert ours[0] == (WIDE_HEADER if wide else WIDE_HEADER[:5])


# --- cordon and uncordon ---------------------------------------------------------------------------------

def test_cordon_and_uncordon(kubectl: Run, make_node: MakeNode, api: ApiClient) -> None:
    node = make_node()
    assert ok(kubectl("cordon", node)) == f"node/{node} cordoned\n"
    assert api.get(NODES, node)["spec"]["unschedulable"] is True
    assert table(ok(kubectl("get", "nodes", node)))[1][1] == "Ready,SchedulingDisabled"
    assert ok(kubectl("cordon", node)) == f"node/{node} already cordoned\n"

    assert ok(kubectl("uncordon", node)) == f"node/{node} uncordoned\n"
    assert not api.get(NODES, node)["spec"].get("unschedulable")
    assert table(ok(kubectl("get", "nodes", node)))[1][1] == "Ready"
    assert ok(kubectl("uncordon", node)) == f"node/{node} already uncordoned\n"


def test_cordon_by_selector_and_missing_nodes(kubectl: Run, make_node: MakeNode, api: ApiClient) -> None:
    group = f"g{uuid.uuid4().hex[:8]}"
    first, second = make_node(labels={"pool": group}), make_node(labels={"pool": group})
    assert sorted(ok(kubectl("cordon", "-l", f"pool={group}")).splitlines()) == sorted(
        [f"node/{first} cordoned", f"node/{second} cordoned"])
    assert all(api.get(NODES, name)["spec"]["unschedulable"] for name in (first, second))

    missing = failed(kubectl("cordon", "no-such-node"))
    assert missing.stderr.strip() == 'Error from server (NotFound): nodes "no-such-node" not found'
    assert "USAGE: uncordon NODE" in failed(kubectl("uncordon")).stderr


# --- drain -----------------------------------------------------------------------------------------------

def test_drain_refuses_pods_that_would_not_come_back_and_deletes_nothing(
        kubectl: Run, make_node: MakeNode, api: ApiClient, namespace: str) -> None:
    node = make_node()
    make_pod(api, namespace, "bare", node)
    make_pod(api, namespace, "cache", node, owner="ReplicaSet", empty_dir=True)
    make_pod(api, namespace, "proxy", node, owner="DaemonSet")
    make_pod(api, namespace, "web", node, owner="ReplicaSet")

    result = failed(kubectl("drain", node, "--grace-period", "0"))
    assert result.stdout == f"node/{node} cordoned\n"
    bare = f"cannot delete Pods that declare no controller (use --force to override): {namespace}/bare"
    cache = f"cannot delete Pods with local storage (use --delete-emptydir-data to override): {namespace}/cache"
    proxy = f"cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): {namespace}/proxy"
    assert result.stderr.splitlines() == [
        f'error: unable to drain node "{node}" due to error: [{bare}, {cache}, {proxy}], continuing command...',
        "There are pending nodes to be drained:",
        f" {node}",
        bare, cache, proxy,
    ]
    assert pod_names(api, namespace) == {"bare", "cache", "proxy", "web"}
    assert api.get(NODES, node)["spec"]["unschedulable"] is True

    forced = failed(kubectl("drain", node, "--force", "--ignore-daemonsets", "--grace-period", "0"))
    assert forced.stdout == f"node/{node} already cordoned\n"
    assert f'due to error: {cache}, continuing command...' in forced.stderr
    assert pod_names(api, namespace) == {"bare", "cache", "proxy", "web"}


def test_drain_evicts_what_the_flags_allow_and_leaves_the_rest(
        kubectl: Run, make_node: MakeNode, api: ApiClient, namespace: str) -> None:
    node, other = make_node(), make_node()
    make_pod(api, namespace, "bare", node)
    make_pod(api, namespace, "cache", node, owner="ReplicaSet", empty_dir=True)
    make_pod(api, namespace, "proxy", node, owner="DaemonSet")
    make_pod(api, namespace, "static", node, annotations={"kubernetes.io/config.mirror": "hash"})
    make_pod(api, namespace, "web", node, owner="ReplicaSet")
    make_pod(api, namespace, "elsewhere", other)

    result = ok(kubectl("drain", node, "--force", "--ignore-daemonsets", "--delete-emptydir-data",
                        "--grace-period", "0", "--timeout", "1m"))
    lines = result.splitlines()
    assert lines[0] == f"node/{node} cordoned"
    assert lines[-1] == f"node/{node} drained"
    evicted = {"bare", "cache", "web"}
    assert sorted(lines[1:-1]) == sorted([f"evicting pod {namespace}/{name}" for name in evicted]
                                         + [f"pod/{name} evicted" for name in evicted])
    assert pod_names(api, namespace) == {"proxy", "static", "elsewhere"}
    assert not api.get(NODES, other)["spec"].get("unschedulable")


def test_drain_warns_about_what_it_takes_and_ignores(kubectl: Run, make_node: MakeNode, api: ApiClient,
                                                      namespace: str) -> None:
    node = make_node()
    make_pod(api, namespace, "bare", node)
    make_pod(api, namespace, "proxy", node, owner="DaemonSet")
    result = kubectl("drain", node, "--force", "--ignore-daemonsets", "--grace-period", "0")
    assert ok(result).splitlines()[-1] == f"node/{node} drained"
    assert result.stderr.splitlines() == [
        f"Warning: deleting Pods that declare no controller: {namespace}/bare; "
        f"ignoring DaemonSet-managed Pods: {namespace}/proxy"]


def test_drain_only_takes_pods_matching_the_pod_selector(kubectl: Run, make_node: MakeNode, api: ApiClient,
                                                          namespace: str) -> None:
    node = make_node()
    make_pod(api, namespace, "web", node, owner="ReplicaSet", labels={"app": "web"})
    make_pod(api, namespace, "bare", node, labels={"app": "db"})
    result = ok(kubectl("drain", node, "--pod-selector", "app=web", "--grace-period", "0"))
    assert result.splitlines() == [f"node/{node} cordoned", f"evicting pod {namespace}/web", "pod/web evicted",
                                   f"node/{node} drained"]
    assert pod_names(api, namespace) == {"bare"}

    refused = failed(kubectl("drain", node, "--pod-selector", "app in"))
    assert refused.stderr.startswith(
        f'error: unable to drain node "{node}" due to error: Error from server (BadRequest)')


def test_drain_waits_for_a_graceful_deletion_to_finish(kubectl: Run, make_node: MakeNode, api: ApiClient,
                                                        namespace: str, apiserver) -> None:
    node = make_node()
    make_pod(api, namespace, "web", node, owner="ReplicaSet")
    drain = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "drain", node,
                              "--grace-period", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert drain.stdout is not None
        assert drain.stdout.readline() == f"node/{node} cordoned\n"
        assert drain.stdout.readline() == f"evicting pod {namespace}/web\n"
        pod = api.get(PODS, "web", namespace)
        assert pod["metadata"]["deletionTimestamp"] and pod["metadata"]["deletionGracePeriodSeconds"] == 30
        assert drain.poll() is None, "drain returned while the pod was still terminating"
        api.delete(PODS, "web", namespace, grace_period_seconds=0)  # what the kubelet does once the pod stopped
        out, err = drain.communicate(timeout=60)
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.wait()
    assert drain.returncode == 0, err
    assert out == f"pod/web evicted\nnode/{node} drained\n"


def test_drain_gives_up_after_its_timeout(kubectl: Run, make_node: MakeNode, api: ApiClient,
                                          namespace: str) -> None:
    node = make_node()
    make_pod(api, namespace, "web", node, owner="ReplicaSet")
    result = failed(kubectl("drain", node, "--timeout", "2s"))
    assert result.stdout.splitlines() == [f"node/{node} cordoned", f"evicting pod {namespace}/web"]
    assert result.stderr.splitlines() == [
        f'There are pending pods in node "{node}" when an error occurred: drain did not complete within 2s',
        "pod/web",
        f'error: unable to drain node "{node}" due to error: drain did not complete within 2s, continuing command...',
        "There are pending nodes to be drained:",
        f" {node}",
        "drain did not complete within 2s",
    ]
    assert api.get(PODS, "web", namespace)["metadata"]["deletionTimestamp"]
    assert "invalid duration" in failed(kubectl("drain", node, "--timeout", "soon")).stderr


# --- the kubelet's pod CIDR ----------------------------------------------------------------------------

def test_the_node_reporter_puts_the_overlays_subnet_on_its_node(api: ApiClient, kubectl: Run,
                                                                 tmp_path: Path) -> None:
    name = f"node-{uuid.uuid4().hex[:8]}"
    subnet_file = tmp_path / "subnet.env"
    # No container runtime in this test: the reporter only registers and follows the subnet file here.
    reporter = NodeReporter(api, NodeConfig(name=name, roles=["control-plane"]), "192.0.2.20", 10250, 10.0,
                            lambda: None, pod_cidr_file=str(subnet_file))
    try:
        reporter.register()
        node = api.get(NODES, name)
        assert "podCIDR" not in node["spec"]
        assert node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] == ""

        subnet_file.write_text("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\n")
        reporter.update_pod_cidr()
        spec = api.get(NODES, name)["spec"]
        assert (spec["podCIDR"], spec["podCIDRs"]) == ("10.244.3.0/24", ["10.244.3.0/24"])
        row = table(ok(kubectl("get", "nodes", name, "-o", "wide")))[1]
        assert (row[2], row[-1]) == ("control-plane", "10.244.3.0/24")

        api.patch(NODES, name, {"spec": {"unschedulable": True}})
        subnet_file.write_text("FLANNEL_SUBNET=10.244.9.1/24\n")
        again = NodeReporter(api, NodeConfig(name=name), "192.0.2.20", 10250, 10.0, lambda: None,
                             pod_cidr_file=str(subnet_file))
        again.register()  # a restarted kubelet finds its node and brings the pod CIDR up to date
        spec = api.get(NODES, name)["spec"]
        assert (spec["podCIDR"], spec["podCIDRs"], spec["unschedulable"]) == (
            "10.244.9.0/24", ["10.244.9.0/24"], True)
    finally:
        with contextlib.suppress(NotFound):
            api.delete(NODES, name)

