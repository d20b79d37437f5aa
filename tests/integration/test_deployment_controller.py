"""Deployments rolled by the real controller-manager (replicaset and deployment controllers) against the apiserver.

No kubelet or scheduler runs: a stand-in thread plays the kubelet's part, reporting every
pod Running and Ready through the status subresource as it appears, and records how many
pods exist and how many are Ready at each look, so that the rollout's bounds can be
checked. Our ``kubectl rollout`` and upstream kubectl's drive the rollouts.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import APIError
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
DEPLOYMENTS = require("apps/v1", "Deployment")
KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"
UPSTREAM = upstream_kubectls()
REVISION = "deployment.kubernetes.io/revision"


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
            rabbitmq: RabbitMQProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                       "--controllers", "replicaset,deployment")
    with serving(process, rabbitmq):
        yield process


def is_ready(pod: dict) -> bool:
    return any(item.get("type") == "Ready" and item.get("status") == "True"
               for item in (pod.get("status") or {}).get("conditions") or [])


class Kubelet:
    """Reports each new pod of the namespace Running and Ready, and remembers (pods, ready pods) at every look."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.seen: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = [pod for pod in self.api.list(PODS, self.namespace)["items"]
                    if not pod["metadata"].get("deletionTimestamp")]
            self.seen.append((len(pods), sum(is_ready(pod) for pod in pods)))
            for pod in pods:
                if not is_ready(pod):
                    status = {"phase": "Running", "podIP": "10.244.9.9",
                              "conditions": [{"type": "Ready", "status": "True"}]}
                    with contextlib.suppress(APIError):  # deleted meanwhile: the next look no longer lists it
                        self.api.patch(PODS, pod["metadata"]["name"], {"status": status}, self.namespace,
                                       subresource="status")
            time.sleep(0.05)


@pytest.fixture
def kubelet(api: ApiClient, namespace: str) -> Iterator[Kubelet]:
    with Kubelet(api, namespace) as running:
        yield running


def deployment(image: str = "minik8s/busybox:1", replicas: int = 3, **rolling: Any) -> dict:
    rolling = rolling or {"maxSurge": 1, "maxUnavailable": 0}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}}


def set_image(api: ApiClient, namespace: str, image: str) -> None:
    api.patch(DEPLOYMENTS, "web", {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}},
              namespace, patch_type="strategic")


def kubectl(namespace: str, apiserver: ApiServerProcess, *args: str,
            binary: Path = KUBECTL) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def replica_sets(api: ApiClient, namespace: str) -> dict[str, dict]:
    return {rs["metadata"]["name"]: rs for rs in api.list(REPLICASETS, namespace)["items"]}


def images_by_revision(api: ApiClient, namespace: str) -> dict[int, tuple[str, int]]:
    """revision -> (image, replicas) of the ReplicaSets."""
    return {int(rs["metadata"]["annotations"][REVISION]):
            (rs["spec"]["template"]["spec"]["containers"][0]["image"], rs["spec"]["replicas"])
            for rs in replica_sets(api, namespace).values()}


def test_an_image_change_rolls_within_surge_and_availability(manager, api, namespace, apiserver, kubelet):
    api.create(DEPLOYMENTS, deployment(), namespace)
    out = ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    assert out.strip().endswith('deployment "web" successfully rolled out')
    (first,) = replica_sets(api, namespace).values()
    assert first["metadata"]["ownerReferences"][0]["name"] == "web"
    pod_hash = first["metadata"]["labels"]["pod-template-hash"]
    assert first["metadata"]["name"] == f"web-{pod_hash}"
    pods = api.list(PODS, namespace)["items"]
    assert len(pods) == 3 and all(pod["metadata"]["labels"]["pod-template-hash"] == pod_hash for pod in pods)

    seen_before = len(kubelet.seen)
    set_image(api, namespace, "minik8s/busybox:2")
    out = ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    assert 'deployment "web" successfully rolled out' in out
    wait_for(lambda: images_by_revision(api, namespace), {1: ("minik8s/busybox:1", 0), 2: ("minik8s/busybox:2", 3)},
             manager)
    during = kubelet.seen[seen_before:]
    assert max(total for total, _ in during) <= 4, during  # replicas + maxSurge
    assert min(ready for _, ready in during) >= 3, during  # replicas - maxUnavailable
    messages = {event["message"] for event in events(api, namespace, "web", "ScalingReplicaSet")}
    assert f"Scaled up replica set web-{pod_hash} to 3" in messages
    assert f"Scaled down replica set web-{pod_hash} to 0 from 1" in messages

    status = api.get(DEPLOYMENTS, "web", namespace)["status"]
    assert (status["replicas"], status["updatedReplicas"], status["readyReplicas"],
            status["availableReplicas"]) == (3, 3, 3, 3)
    conditions = {item["type"]: (item["status"], item["reason"]) for item in status["conditions"]}
    assert conditions == {"Available": ("True", "MinimumReplicasAvailable"),
                          "Progressing": ("True", "NewReplicaSetAvailable")}


def test_our_kubectl_rollout_history_undo_and_restart(manager, api, namespace, apiserver, kubelet):
    body = deployment()
    body["metadata"]["annotations"] = {"kubernetes.io/change-cause": "first release"}
    api.create(DEPLOYMENTS, body, namespace)
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    # The cause comes with the change it explains, as ``kubectl set image --record`` sends them.
    api.patch(DEPLOYMENTS, "web", {"metadata": {"annotations": {"kubernetes.io/change-cause": "busybox 2"}},
                                   "spec": {"template": {"spec": {"containers": [
                                       {"name": "web", "image": "minik8s/busybox:2"}]}}}},
              namespace, patch_type="strategic")
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))

    out = ok(kubectl(namespace, apiserver, "rollout", "history", "deployment/web"))
    assert out.splitlines()[:4] == ["deployment.apps/web", "REVISION  CHANGE-CAUSE", "1         first release",
                                    "2         busybox 2"]
    out = ok(kubectl(namespace, apiserver, "rollout", "history", "deployment/web", "--revision", "1"))
    assert "minik8s/busybox:1" in out and "pod-template-hash" not in out

    failed = kubectl(namespace, apiserver, "rollout", "undo", "deployment/web", "--to-revision", "9")
    assert failed.returncode != 0 and "unable to find specified revision 9 in history" in failed.stderr
    assert ok(kubectl(namespace, apiserver, "rollout", "undo", "deployment/web", "--to-revision", "1")) == (
        "deployment.apps/web rolled back\n")
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    wait_for(lambda: images_by_revision(api, namespace), {3: ("minik8s/busybox:1", 3), 2: ("minik8s/busybox:2", 0)},
             manager)
    deployed = api.get(DEPLOYMENTS, "web", namespace)
    assert deployed["metadata"]["annotations"]["kubernetes.io/change-cause"] == "first release"
    assert deployed["metadata"]["annotations"][REVISION] == "3"

    out = ok(kubectl(namespace, apiserver, "rollout", "restart", "deployment/web"))
    assert out == "deployment.apps/web restarted\n"
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    wait_for(lambda: sorted(images_by_revision(api, namespace)), [2, 3, 4], manager)
    restarted = next(rs for rs in replica_sets(api, namespace).values()
                     if rs["metadata"]["annotations"][REVISION] == "4")
    assert "kubectl.kubernetes.io/restartedAt" in restarted["spec"]["template"]["metadata"]["annotations"]
    wait_for(lambda: images_by_revision(api, namespace)[4], ("minik8s/busybox:1", 3), manager)

    assert ok(kubectl(namespace, apiserver, "rollout", "pause", "deployment/web")) == "deployment.apps/web paused\n"
    set_image(api, namespace, "minik8s/busybox:3")
    failed = kubectl(namespace, apiserver, "rollout", "undo", "deployment/web")
    assert failed.returncode != 0 and "resume it first" in failed.stderr
    assert ok(kubectl(namespace, apiserver, "rollout", "resume", "deployment/web")) == "deployment.apps/web resumed\n"
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    wait_for(lambda: images_by_revision(api, namespace)[5], ("minik8s/busybox:3", 3), manager)


@pytest.mark.parametrize("version", sorted(UPSTREAM) or ["none"])
def test_upstream_kubectl_rollout_verbs(version, manager, api, namespace, apiserver, kubelet):
    assert version in UPSTREAM, "no upstream kubectl found: run scripts/test.sh, which installs one"
    binary = UPSTREAM[version]
    api.create(DEPLOYMENTS, deployment(), namespace)
    out = ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout=60s", binary=binary))
    assert 'deployment "web" successfully rolled out' in out
    set_image(api, namespace, "minik8s/busybox:2")
    out = ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout=60s", binary=binary))
    assert 'deployment "web" successfully rolled out' in out

    out = ok(kubectl(namespace, apiserver, "rollout", "history", "deployment/web", binary=binary))
    assert [line.split() for line in out.splitlines()[1:4]] == [["REVISION", "CHANGE-CAUSE"], ["1", "<none>"],
                                                                 ["2", "<none>"]]
    out = ok(kubectl(namespace, apiserver, "rollout", "undo", "deployment/web", "--to-revision=1", binary=binary))
    assert out == "deployment.apps/web rolled back\n"
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout=60s", binary=binary))
    wait_for(lambda: images_by_revision(api, namespace), {3: ("minik8s/busybox:1", 3), 2: ("minik8s/busybox:2", 0)},
             manager)

    out = ok(kubectl(namespace, apiserver, "rollout", "restart", "deployment/web", binary=binary))
    assert out == "deployment.apps/web restarted\n"
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout=60s", binary=binary))
    wait_for(lambda: images_by_revision(api, namespace).get(4), ("minik8s/busybox:1", 3), manager)
    wait_for(lambda: kubectl(namespace, apiserver, "get", "deploy", "web", binary=binary).stdout.split()[:9],
             ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "web", "3/3", "3", "3"], manager)


def test_recreate_never_runs_old_and_new_pods_together_and_history_is_pruned(manager, api, namespace, apiserver,
                                                                               kubelet):
    body = deployment(replicas=2)
    body["spec"]["strategy"] = {"type": "Recreate"}
    body["spec"]["revisionHistoryLimit"] = 1
    api.create(DEPLOYMENTS, body, namespace)
    ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    mixed: list[set[str]] = []
    stop = threading.Event()

    def watch_images() -> None:
        while not stop.is_set():
            images = {pod["spec"]["containers"][0]["image"] for pod in api.list(PODS, namespace)["items"]}
            if len(images) > 1:
                mixed.append(images)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch_images, daemon=True)
    watcher.start()
    try:
        for image in ("minik8s/busybox:2", "minik8s/busybox:3"):
            set_image(api, namespace, image)
            ok(kubectl(namespace, apiserver, "rollout", "status", "deployment/web", "--timeout", "60s"))
    finally:
        stop.set()
        watcher.join(10)
    assert mixed == []
    wait_for(lambda: images_by_revision(api, namespace), {2: ("minik8s/busybox:2", 0), 3: ("minik8s/busybox:3", 2)},
             manager)
