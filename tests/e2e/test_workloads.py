"""ReplicaSets and Deployments on the installed cluster: self-healing, scaling, rolling updates and cascading delete."""

from __future__ import annotations

import json
import threading
import time

import httpx

from daemons.api.resources import resolve
from tests.conftest import upstream_kubectls
from tests.e2e.conftest import run_kubectl, wait_for

PODS = resolve("pods")
SERVICES = resolve("services")
REPLICASETS = resolve("replicasets")
DEPLOYMENTS = resolve("deployments")

# Serves its pod's name; on SIGTERM it keeps serving for two seconds, as a preStop sleep would, so the Service
# stops sending it requests before it exits.
WEB_COMMAND = ("mkdir -p /www && hostname > /www/index.html && httpd -f -p 8080 -h /www & pid=$!; "
               "trap 'sleep 2; kill $pid; exit 0' TERM; wait $pid")


def web_template(labels: dict[str, str], image: str = "busybox") -> dict:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "httpd", "image": image, "command": ["sh", "-c", WEB_COMMAND],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
            }],
        },
    }


def running_pods(cluster, namespace: str, selector: str) -> list[dict]:
    """The selected pods that run, are ready and are not being deleted."""
    pods = cluster.list(PODS, namespace, label_selector=selector)["items"]
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
            and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])]


def pod_names(cluster, namespace: str, selector: str) -> set[str]:
    return {pod["metadata"]["name"] for pod in cluster.list(PODS, namespace, label_selector=selector)["items"]}


def test_a_replica_set_keeps_its_pods_through_kills_and_scaling(cluster, e2e_namespace):
    replica_set = {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "keeper"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "keeper"}}, "template": web_template(
            {"app": "keeper"})},
    }
    created = cluster.create(REPLICASETS, replica_set, e2e_namespace)
    first = wait_for(lambda: len(pods := running_pods(cluster, e2e_namespace, "app=keeper")) == 4 and pods, 120,
                     what="4 ready pods")
    for pod in first:
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "ReplicaSet", "keeper", created["metadata"]["uid"], True)

    killed = sorted(pod["metadata"]["name"] for pod in first)[:2]
    run_kubectl("-n", e2e_namespace, "delete", "pod", *killed, "--grace-period", "0")
    wait_for(lambda: len(pods := running_pods(cluster, e2e_namespace, "app=keeper")) == 4
             and not {pod["metadata"]["name"] for pod in pods} & set(killed), 120,
             what="two replacements for the killed pods")

    run_kubectl("-n", e2e_namespace, "scale", "rs", "keeper", "--replicas", "2")
    wait_for(lambda: len(pod_names(cluster, e2e_namespace, "app=keeper")) == 2, 60, what="the surplus pods to go")
    run_kubectl("-n", e2e_namespace, "scale", "rs/keeper", "--replicas", "5")
    wait_for(lambda: len(running_pods(cluster, e2e_namespace, "app=keeper")) == 5, 120, what="5 ready pods")
    wait_for(lambda: (cluster.get(REPLICASETS, "keeper", e2e_namespace).get("status") or {}).get("readyReplicas")
             == 5, 30, what="the status to count 5 ready replicas")

    row = run_kubectl("-n", e2e_namespace, "get", "rs", "keeper").stdout.splitlines()[1].split()
    assert row[:4] == ["keeper", "5", "5", "5"], row
    for version, binary in upstream_kubectls().items():
        upstream = run_kubectl("-n", e2e_namespace, "get", "rs", "keeper", binary=binary).stdout.splitlines()
        assert upstream[1].split()[:4] == ["keeper", "5", "5", "5"], (version, upstream)

    status = cluster.get(REPLICASETS, "keeper", e2e_namespace)["status"]
    assert (status["replicas"], status["availableReplicas"], status["observedGeneration"]) == (5, 5, 3)
    events = run_kubectl("-n", e2e_namespace, "get", "events").stdout
    assert "SuccessfulCreate" in events and "SuccessfulDelete" in events, events


class ServiceProbe(threading.Thread):
    """Requests a URL back to back on fresh connections until stopped, counting answers by body and failures."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.answers: dict[str, int] = {}
        self.failures: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                response = httpx.get(self.url, timeout=3, headers={"Connection": "close"})
                if response.status_code == 200:
                    body = response.text.strip()
                    self.answers[body] = self.answers.get(body, 0) + 1
                else:
                    self.failures.append(f"HTTP {response.status_code}")
            except httpx.HTTPError as error:
                self.failures.append(f"{type(error).__name__}: {error}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def deployment_images(cluster, namespace: str, selector: str) -> set[str]:
    return {pod["spec"]["containers"][0]["image"] for pod in cluster.list(PODS, namespace,
                                                                           label_selector=selector)["items"]}


def test_a_rolling_update_replaces_pods_one_by_one_without_a_failed_request_and_undo_goes_back(cluster,
                                                                                              e2e_namespace):
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": web_template({"app": "web"}),
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
    }
    cluster.create(DEPLOYMENTS, deployment, e2e_namespace)
    service = cluster.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80,
                                                                                        "targetPort": "http"}]}},
                             e2e_namespace)
    run_kubectl("-n", e2e_namespace, "rollout", "status", "deployment/web", "--timeout", "120s", timeout=150)
    url = f"http://{service['spec']['clusterIP']}/"
    wait_for(lambda: len({httpx.get(url, timeout=3).text for _ in range(20)}) == 3, 30,
             what="the three pods to answer through the Service")

    probe = ServiceProbe(url)
    probe.start()
    try:
        # The image changes through upstream kubectl, the independent client; the rollout is watched with ours.
        upstream = next(iter(upstream_kubectls().values()))
        run_kubectl("-n", e2e_namespace, "set", "image", "deployment/web", "httpd=minik8s/busybox", binary=upstream)
        most, least = 0, 3
        deadline = time.monotonic() + 180
        while deployment_images(cluster, e2e_namespace, "app=web") != {"minik8s/busybox"} \
                or len(running_pods(cluster, e2e_namespace, "app=web")) != 3:
            assert time.monotonic() < deadline, "the rollout did not finish in 180 s"
            pods = [pod for pod in cluster.list(PODS, e2e_namespace, label_selector="app=web")["items"]
                    if not pod["metadata"].get("deletionTimestamp")]
            most = max(most, len(pods))
            least = min(least, len(running_pods(cluster, e2e_namespace, "app=web")))
            time.sleep(0.2)
        run_kubectl("-n", e2e_namespace, "rollout", "status", "deployment/web", "--timeout", "60s", timeout=90)
    finally:
        probe.stop()
    assert not probe.failures, f"{len(probe.failures)} failed requests during the rollout: {probe.failures[:5]}"
    assert len(probe.answers) > 3, f"old and new pods should both have answered: {probe.answers}"
    assert most <= 4, f"maxSurge 1 allows 4 pods, {most} were seen"
    assert least == 3, f"maxUnavailable 0 keeps 3 ready pods, {least} were seen"

    replica_sets = cluster.list(REPLICASETS, e2e_namespace, label_selector="app=web")["items"]
    sizes = sorted((rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"], rs["spec"]["replicas"])
                   for rs in replica_sets)
    assert sizes == [("1", 0), ("2", 3)], sizes
    history = run_kubectl("-n", e2e_namespace, "rollout", "history", "deployment/web").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"], history

    run_kubectl("-n", e2e_namespace, "rollout", "undo", "deployment/web")
    run_kubectl("-n", e2e_namespace, "rollout", "status", "deployment/web", "--timeout", "120s", timeout=150)
    wait_for(lambda: deployment_images(cluster, e2e_namespace, "app=web") == {"busybox"}, 60,
             what="the pods to run the first image again")
    status = cluster.get(DEPLOYMENTS, "web", e2e_namespace)["status"]
    assert (status["replicas"], status["updatedReplicas"], status["availableReplicas"]) == (3, 3, 3), status
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions["Available"][0] == "True" and conditions["Progressing"] == ("True", "NewReplicaSetAvailable")
    row = run_kubectl("-n", e2e_namespace, "get", "deploy", "web").stdout.splitlines()[1].split()
    assert row[:4] == ["web", "3/3", "3", "3"], row
    events = run_kubectl("-n", e2e_namespace, "describe", "deployment", "web").stdout
    assert "ScalingReplicaSet" in events, events


def test_deleting_a_deployment_leaves_no_replica_set_or_pod_behind(cluster, e2e_namespace):
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gone"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "gone"}},
                 "template": web_template({"app": "gone"})},
    }
    cluster.create(DEPLOYMENTS, deployment, e2e_namespace)
    wait_for(lambda: len(running_pods(cluster, e2e_namespace, "app=gone")) == 2, 120, what="2 ready pods")
    run_kubectl("-n", e2e_namespace, "delete", "deployment", "gone")
    wait_for(lambda: not cluster.list(REPLICASETS, e2e_namespace)["items"], 60, what="the ReplicaSet to go")
    wait_for(lambda: not cluster.list(PODS, e2e_namespace)["items"], 60, what="the pods to go")
    listed = json.loads(run_kubectl("-n", e2e_namespace, "get", "all", "-o", "json").stdout)
    assert listed["items"] == [], listed["items"]
