"""Pods on the installed cluster: real containers in Docker, as a user drives them with kubectl."""

import json
import signal
import subprocess
from pathlib import Path

import pytest

from daemons.api.resources import resolve
from tests.conftest import upstream_kubectls
from tests.e2e.conftest import run_kubectl, wait_for

EXAMPLES = Path(__file__).parents[2] / "examples"
PODS = resolve("pods")


def pod_status(cluster, namespace, name):
    return cluster.get(PODS, name, namespace).get("status") or {}


def container_status(cluster, namespace, name, container):
    for status in pod_status(cluster, namespace, name).get("containerStatuses") or []:
        if status["name"] == container:
            return status
    return {}


def docker_ids(pod_uid):
    result = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"label=io.minik8s.pod.uid={pod_uid}"],
                            capture_output=True, text=True, check=True)
    return sorted(result.stdout.split())


def ready_pod(cluster, namespace, name, timeout=90):
    def ready():
        status = pod_status(cluster, namespace, name)
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return status.get("phase") == "Running" and conditions.get("Ready") == "True"
    wait_for(ready, timeout, what=f"pod {namespace}/{name} to be Running and Ready")


def test_two_containers_share_localhost_and_a_volume(cluster, e2e_namespace):
    run_kubectl("-n", e2e_namespace, "apply", "-f", str(EXAMPLES / "pod.yaml"))
    ready_pod(cluster, e2e_namespace, "web")
    page = wait_for(lambda: run_kubectl("-n", e2e_namespace, "exec", "web", "-c", "sidecar", "--", "cat",
                                        "/data/last", check=False).stdout, 30,
                    what="the sidecar to fetch the server's page over localhost into the shared volume")
    assert "Directory listing" in page
    status = pod_status(cluster, e2e_namespace, "web")
    assert status["podIP"] and all(c["ready"] for c in status["containerStatuses"])
    ours = run_kubectl("-n", e2e_namespace, "get", "pods").stdout.splitlines()
    assert ours[1].split()[:3] == ["web", "2/2", "Running"]
    for version, binary in upstream_kubectls().items():
        theirs = run_kubectl("-n", e2e_namespace, "get", "pods", binary=str(binary)).stdout.splitlines()
        assert theirs[1].split()[:3] == ["web", "2/2", "Running"], version


def test_a_crashing_container_is_restarted_and_logs_show_it(cluster, e2e_namespace):
    run_kubectl("-n", e2e_namespace, "apply", "-f", str(EXAMPLES / "crash.yaml"))
    wait_for(lambda: container_status(cluster, e2e_namespace, "crasher", "crash").get("restartCount", 0) >= 1, 60,
             what="the crashing container to be restarted")
    last = container_status(cluster, e2e_namespace, "crasher", "crash")["lastState"]["terminated"]
    assert last["exitCode"] == 3
    row = run_kubectl("-n", e2e_namespace, "get", "pod", "crasher").stdout.splitlines()[1].split()
    assert int(row[3]) >= 1, row
    logs = run_kubectl("-n", e2e_namespace, "logs", "crasher").stdout
    assert "starting" in logs


def test_a_container_past_its_memory_limit_is_oom_killed_and_restarted(cluster, e2e_namespace):
    run_kubectl("-n", e2e_namespace, "apply", "-f", str(EXAMPLES / "limits.yaml"))

    def oom_killed():
        status = container_status(cluster, e2e_namespace, "memory-hog", "hog")
        last = (status.get("lastState") or {}).get("terminated") or {}
        return last.get("reason") == "OOMKilled" and status.get("restartCount", 0) >= 1

    wait_for(oom_killed, 90, what="the hog to be OOMKilled and restarted")
    described = run_kubectl("-n", e2e_namespace, "describe", "pod", "memory-hog").stdout
    assert "OOMKilled" in described


def test_exec_returns_output_and_exit_code(cluster, e2e_namespace):
    run_kubectl("-n", e2e_namespace, "apply", "-f", str(EXAMPLES / "pod.yaml"))
    ready_pod(cluster, e2e_namespace, "web")
    result = run_kubectl("-n", e2e_namespace, "exec", "web", "-c", "sidecar", "--", "sh", "-c",
                         "echo out; echo err >&2; exit 4", check=False)
    assert (result.returncode, result.stdout, result.stderr) == (4, "out\n", "err\n")
    upstream = upstream_kubectls()
    for binary in upstream.values():
        logs = run_kubectl("-n", e2e_namespace, "logs", "web", "-c", "sidecar", "--tail", "5", binary=str(binary),
                           check=False)
        assert logs.returncode == 0, logs.stderr


def test_deleting_a_pod_removes_its_containers(cluster, e2e_namespace):
    run_kubectl("-n", e2e_namespace, "apply", "-f", str(EXAMPLES / "pod.yaml"))
    ready_pod(cluster, e2e_namespace, "web")
    uid = cluster.get(PODS, "web", e2e_namespace)["metadata"]["uid"]
    assert len(docker_ids(uid)) == 3  # pause, server, sidecar
    run_kubectl("-n", e2e_namespace, "delete", "pod", "web", "--grace-period", "1", timeout=90)
    wait_for(lambda: not docker_ids(uid), 60, what="the pod's containers to be removed")
    assert run_kubectl("-n", e2e_namespace, "get", "pod", "web", check=False).returncode == 1


def test_killing_the_kubelet_leaves_containers_running(cluster, e2e_namespace):
    run_kubectl("-n", e2e_namespace, "apply", "-f", str(EXAMPLES / "pod.yaml"))
    ready_pod(cluster, e2e_namespace, "web")
    uid = cluster.get(PODS, "web", e2e_namespace)["metadata"]["uid"]
    before = docker_ids(uid)
    killed = subprocess.run(["pkill", f"-{signal.SIGKILL.value}", "-f", "bin/minik8s-kubelet"], check=False)
    assert killed.returncode == 0, "no kubelet process to kill"
    wait_for(lambda: subprocess.run(["pgrep", "-f", "bin/minik8s-kubelet"], capture_output=True).returncode == 0, 20,
             what="the process manager to restart the kubelet")
    ready_pod(cluster, e2e_namespace, "web", timeout=60)
    assert docker_ids(uid) == before
    assert all(c["restartCount"] == 0 for c in pod_status(cluster, e2e_namespace, "web")["containerStatuses"])


def test_an_unknown_image_says_why_in_the_pod_status(cluster, e2e_namespace):
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ghost"},
                "spec": {"containers": [{"name": "main", "image": "no-such-image-anywhere:1.0"}]}}
    run_kubectl("-n", e2e_namespace, "apply", "-f", "-", stdin=json.dumps(manifest))

    def waiting_reason():
        waiting = (container_status(cluster, e2e_namespace, "ghost", "main").get("state") or {}).get("waiting") or {}
        return waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff") and waiting

    waiting = wait_for(waiting_reason, 90, what="the pod status to say the image cannot be pulled")
    assert "no-such-image-anywhere" in waiting.get("message", "")


@pytest.mark.parametrize(("change", "field"), [
    ({"volumeMounts": [{"name": "missing", "mountPath": "/data"}]}, "spec.containers[main].volumeMounts"),
    ({"resources": {"limits": {"memory": "-1Mi"}}}, "spec.containers[0].resources.limits[memory]"),
])
def test_bad_manifests_are_refused_naming_the_field(cluster, e2e_namespace, change, field):
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
                "spec": {"containers": [{"name": "main", "image": "busybox", **change}]}}
    result = run_kubectl("-n", e2e_namespace, "apply", "-f", "-", stdin=json.dumps(manifest), check=False)
    assert result.returncode == 1
    assert field in result.stderr
    assert run_kubectl("-n", e2e_namespace, "get", "pods", check=False).stdout == ""

