"""The kubelet against the real apiserver and the machine's Docker: pods run, restart, report and go away.

One kubelet (the console script) runs for the whole module under a node name of
its own, so it only ever sees and touches its own pods and containers; no
scheduler runs, so every pod names that node in ``spec.nodeName``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker as docker_sdk
import httpx
import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import NODE_LEASE_NAMESPACE, by_kind
from tests.conftest import NODE_LABEL, ApiServerProcess, KubeletProcess, upstream_kubectls

PODS = by_kind("v1", "Pod")
NODES = by_kind("v1", "Node")
LEASES = by_kind("coordination.k8s.io/v1", "Lease")
EVENTS = by_kind("v1", "Event")


# --- helpers ------------------------------------------------------------------------------------------


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail with the last value otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def make_pod(name: str, node: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": containers, **spec}}


def busybox(name: str, script: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:latest", "command": ["sh", "-c", script], **fields}


def status_of(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return api.get(PODS, name, namespace).get("status") or {}


def container_status(api: ApiClient, namespace: str, name: str, container: str) -> dict[str, Any]:
    for status in status_of(api, namespace, name).get("containerStatuses") or []:
        if status["name"] == container:
            return status
    return {}


def condition(status: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in status.get("conditions") or [] if c["type"] == kind), None)


def pod_containers(docker: docker_sdk.DockerClient, node: str, namespace: str, name: str) -> dict[str, str]:
    """Container name label -> id of the running containers of one pod."""
    found = docker.containers.list(filters={"label": [f"{NODE_LABEL}={node}", f"io.minik8s.pod.namespace={namespace}",
                                                      f"io.minik8s.pod.name={name}"]})
    return {container.labels["io.minik8s.container.name"]: container.id for container in found}


def reasons(api: ApiClient, namespace: str, name: str) -> set[str]:
    events = api.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")["items"]
    return {event["reason"] for event in events}


def running_pod(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        status = status_of(api, namespace, name)
        return status if status.get("phase") == "Running" and condition(status, "Ready") == "True" else None

    return wait_for(ready, 30, f"{namespace}/{name} Running and Ready")


WEB = [
    busybox("server", "mkdir -p /www && echo pong > /www/index.html && echo hello > /data/f && echo started "
            "&& exec httpd -f -p 8080 -h /www",
            env=[{"name": "MODE", "value": "prod"},
                 {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                 {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            ports=[{"containerPort": 8080}],
            resources={"limits": {"cpu": "500m", "memory": "64Mi"}},
            volumeMounts=[{"name": "shared", "mountPath": "/data"}],
            readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            livenessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 2}),
    busybox("sidecar", "while true; do sleep 1; done",
            volumeMounts=[{"name": "shared", "mountPath": "/data", "readOnly": True}],
            livenessProbe={"exec": {"command": ["true"]}, "periodSeconds": 2}),
]


# --- tests --------------------------------------------------------------------------------------------


def test_node_registers_and_heartbeats(kubelet: KubeletProcess, api: ApiClient) -> None:
    node = wait_for(lambda: _ready_node(api, kubelet.node_name), 20, "the node to be Ready")
    labels = node["metadata"]["labels"]
    assert labels["disk"] == "ssd"
    assert labels["node-role.kubernetes.io/worker"] == ""
    assert labels["kubernetes.io/hostname"] == kubelet.node_name
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "test", "effect": "PreferNoSchedule"}]
    status = node["status"]
    assert status["capacity"]["pods"] == "110"
    assert int(status["capacity"]["cpu"]) == os.cpu_count()
    assert status["allocatable"] == status["capacity"]
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == kubelet.port
    assert status["nodeInfo"]["kubeletVersion"] == "v1.30.0-minik8s"
    assert status["nodeInfo"]["containerRuntimeVersion"].startswith("docker://")
    # Heartbeats renew the node's Lease; an unchanged status is not posted again.
    lease = wait_for(lambda: _lease(api, kubelet.node_name), 10, "the node's Lease")
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseDurationSeconds"]) == (kubelet.node_name, 40)
    assert [(ref["kind"], ref["name"], ref["uid"]) for ref in lease["metadata"]["ownerReferences"]] == [
        ("Node", kubelet.node_name, node["metadata"]["uid"])]
    version = api.get(NODES, kubelet.node_name)["metadata"]["resourceVersion"]
    for _ in range(2):
        renewed = _lease(api, kubelet.node_name)["spec"]["renewTime"]
        wait_for(lambda since=renewed: _lease(api, kubelet.node_name)["spec"]["renewTime"] > since, 10,
                 "a renewed Lease")
    assert api.get(NODES, kubelet.node_name)["metadata"]["resourceVersion"] == version


def _ready_node(api: ApiClient, name: str) -> dict[str, Any] | None:
    with contextlib.suppress(NotFound):
        node = api.get(NODES, name)
        if condition(node.get("status") or {}, "Ready") == "True":
            return node
    return None


def _lease(api: ApiClient, name: str) -> dict[str, Any] | None:
    with contextlib.suppress(NotFound):
        return api.get(LEASES, name, NODE_LEASE_NAMESPACE)
    return None


def test_pod_containers_share_network_and_volume(kubelet: KubeletProcess, api: ApiClient, namespace: str,
                                                 docker: docker_sdk.DockerClient) -> None:
    api.create(PODS, make_pod("web", kubelet.node_name, WEB, volumes=[{"name": "shared", "emptyDir": {}}]),
               namespace)
    status = running_pod(api, namespace, "web")
    assert status["podIP"] and status["podIPs"] == [{"ip": status["podIP"]}]
    assert status["hostIP"] == "127.0.0.1"
    assert all(condition(status, kind) == "True" for kind in ("PodScheduled", "Initialized", "ContainersReady"))
    assert [(s["name"], s["ready"], s["restartCount"]) for s in status["containerStatuses"]] == [
        ("server", True, 0), ("sidecar", True, 0)]
    assert all(s["containerID"].startswith("docker://") and "running" in s["state"]
               for s in status["containerStatuses"])

    def run(container: str, *command: str) -> dict[str, Any]:
        response = kubelet.api("POST", f"/run/{namespace}/web/{container}", json={"command": list(command)})
        assert response.status_code == 200, response.text
        return response.json()

    assert run("sidecar", "wget", "-qO-", "http://localhost:8080/")["stdout"] == "pong\n"
    assert run("sidecar", "cat", "/data/f")["stdout"] == "hello\n"
    assert run("sidecar", "sh", "-c", "echo x > /data/g")["exitCode"] != 0  # mounted read-only there
    assert run("server", "sh", "-c", "echo $MODE $MY_POD $MY_IP")["stdout"] == f"prod web {status['podIP']}\n"
    assert run("server", "sh", "-c", "echo oops >&2; exit 3") == {"exitCode": 3, "stdout": "", "stderr": "oops\n"}
    uid = api.get(PODS, "web", namespace)["metadata"]["uid"]
    assert (kubelet.root_dir / "pods" / uid / "volumes" / "shared" / "f").read_text() == "hello\n"

    server = docker.containers.get(pod_containers(docker, kubelet.node_name, namespace, "web")["server"])
    assert server.attrs["HostConfig"]["Memory"] == 64 * 2**20
    assert server.attrs["HostConfig"]["NanoCpus"] == 500_000_000
    pause_id = pod_containers(docker, kubelet.node_name, namespace, "web")["POD"]
    assert server.attrs["HostConfig"]["NetworkMode"] == f"container:{pause_id}"


def test_security_context_and_host_path(kubelet: KubeletProcess, api: ApiClient, namespace: str,
                                       tmp_path: Path) -> None:
    host_dir = tmp_path / "made-by-kubelet"
    api.create(PODS, make_pod("secure", kubelet.node_name, [
        busybox("main", "id > /scratch/id; while true; do sleep 1; done", securityContext={"runAsUser": 1000},
                volumeMounts=[{"name": "host", "mountPath": "/host"}, {"name": "scratch", "mountPath": "/scratch"}])],
        securityContext={"runAsUser": 2000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]},
        volumes=[{"name": "host", "hostPath": {"path": str(host_dir), "type": "DirectoryOrCreate"}},
                 {"name": "scratch", "emptyDir": {}}]), namespace)
    running_pod(api, namespace, "secure")
    assert host_dir.is_dir()
    uid = api.get(PODS, "secure", namespace)["metadata"]["uid"]
    written = kubelet.root_dir / "pods" / uid / "volumes" / "scratch" / "id"
    identity = wait_for(lambda: written.exists() and written.read_text(), 20, "the container to write its id")
    assert identity.startswith("uid=1000 gid=3000"), identity
    assert {"2000", "4000"} <= {group.split("(")[0] for group in identity.split("groups=")[1].strip().split(",")}
    assert written.stat().st_gid == 2000  # the emptyDir belongs to the fsGroup


def test_logs_and_exec_through_the_kubelet_api(kubelet: KubeletProcess, api: ApiClient, namespace: str) -> None:
    api.create(PODS, make_pod("talk", kubelet.node_name, [
        busybox("main", "echo one; echo two; echo three >&2; while true; do sleep 1; done")]), namespace)
    running_pod(api, namespace, "talk")
    logs = wait_for(lambda: kubelet.api("GET", f"/containerLogs/{namespace}/talk/main").text.count("\n") == 3 and
                    kubelet.api("GET", f"/containerLogs/{namespace}/talk/main"), 10, "three log lines")
    assert logs.headers["content-type"].startswith("text/plain")
    assert sorted(logs.text.splitlines()) == ["one", "three", "two"]
    assert len(kubelet.api("GET", f"/containerLogs/{namespace}/talk/main?tailLines=1").text.splitlines()) == 1
    stamped = kubelet.api("GET", f"/containerLogs/{namespace}/talk/main?timestamps=true").text.splitlines()
    assert stamped[0].split(" ", 1)[0].endswith("Z")
    with httpx.stream("GET", f"https://127.0.0.1:{kubelet.port}/containerLogs/{namespace}/talk/main?follow=true",
                      headers={"Authorization": f"Bearer {kubelet.token}"}, verify=False, timeout=10) as stream:
        assert stream.status_code == 200
        received = b""
        for chunk in stream.iter_bytes():
            received += chunk
            if received.count(b"\n") >= 3:
                break
    assert b"one" in received

    assert kubelet.api("GET", "/healthz", token="").status_code == 200
    assert kubelet.api("GET", f"/containerLogs/{namespace}/talk/main", token="").status_code == 401
    assert kubelet.api("GET", f"/containerLogs/{namespace}/talk/main", token="wrong").status_code == 401
    missing = kubelet.api("POST", f"/run/{namespace}/nope/main", json={"command": ["ls"]})
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    assert kubelet.api("POST", f"/run/{namespace}/talk/other", json={"command": ["ls"]}).status_code == 404
    assert kubelet.api("POST", f"/run/{namespace}/talk/main", json={"command": "ls"}).status_code == 400
    assert kubelet.api("GET", f"/containerLogs/{namespace}/talk/main?previous=true").status_code == 400


def test_crashing_container_restarts_with_backoff(kubelet: KubeletProcess, api: ApiClient, namespace: str) -> None:
    api.create(PODS, make_pod("crash", kubelet.node_name, [busybox("main", "echo boom; exit 1")]), namespace)

    def backing_off() -> dict[str, Any] | None:
        status = container_status(api, namespace, "crash", "main")
        waiting = (status.get("state") or {}).get("waiting") or {}
        return status if status.get("restartCount", 0) >= 1 and waiting.get("reason") == "CrashLoopBackOff" else None

    status = wait_for(backing_off, 30, "a restart, then CrashLoopBackOff")
    last = status["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (1, "Error")
    assert last["startedAt"] and last["finishedAt"]
    assert status_of(api, namespace, "crash")["phase"] == "Running"
    assert "back-off 10s" in status["state"]["waiting"]["message"]
    assert kubelet.api("GET", f"/containerLogs/{namespace}/crash/main?previous=true").text == "boom\n"
    assert {"BackOff", "Started", "Created"} <= reasons(api, namespace, "crash")


def test_restart_policy_never_ends_the_pod(kubelet: KubeletProcess, api: ApiClient, namespace: str,
                                           docker: docker_sdk.DockerClient) -> None:
    api.create(PODS, make_pod("ok", kubelet.node_name, [busybox("main", "exit 0")], restartPolicy="Never"), namespace)
    api.create(PODS, make_pod("bad", kubelet.node_name, [busybox("main", "exit 3")], restartPolicy="Never"), namespace)
    wait_for(lambda: status_of(api, namespace, "ok").get("phase") == "Succeeded", 20, "ok to succeed")
    wait_for(lambda: status_of(api, namespace, "bad").get("phase") == "Failed", 20, "bad to fail")
    terminated = container_status(api, namespace, "bad", "main")["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert container_status(api, namespace, "ok", "main")["state"]["terminated"]["reason"] == "Completed"
    assert condition(status_of(api, namespace, "ok"), "Ready") == "False"
    wait_for(lambda: not pod_containers(docker, kubelet.node_name, namespace, "ok"), 10, "the sandbox to stop")
    time.sleep(1)
    assert container_status(api, namespace, "bad", "main")["restartCount"] == 0
    stopped = kubelet.api("POST", f"/run/{namespace}/bad/main", json={"command": ["true"]})
    assert (stopped.status_code, stopped.json()["reason"]) == (409, "Conflict")
    assert kubelet.api("GET", f"/containerLogs/{namespace}/bad/main").status_code == 200


def test_container_over_its_memory_limit_is_oom_killed(kubelet: KubeletProcess, api: ApiClient,
                                                       namespace: str) -> None:
    hog = busybox("hog", "head -c 200m /dev/zero | tail", resources={"limits": {"memory": "32Mi"}})
    api.create(PODS, make_pod("hog", kubelet.node_name, [hog], restartPolicy="OnFailure"), namespace)

    def oom_killed() -> dict[str, Any] | None:
        last = (container_status(api, namespace, "hog", "hog").get("lastState") or {}).get("terminated") or {}
        return last if last.get("reason") == "OOMKilled" else None

    assert wait_for(oom_killed, 30, "an OOMKilled lastState")["exitCode"] == 137


def test_bad_image_reports_pull_errors(kubelet: KubeletProcess, api: ApiClient, namespace: str) -> None:
    image = f"minik8s-no-such-image-{secrets.token_hex(3)}:1"
    api.create(PODS, make_pod("ghost", kubelet.node_name, [{"name": "main", "image": image}]), namespace)
    seen: dict[str, str] = {}

    def pull_back_off() -> bool:
        waiting = (container_status(api, namespace, "ghost", "main").get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            seen[waiting["reason"]] = waiting.get("message", "")
        return waiting.get("reason") == "ImagePullBackOff" and image in waiting.get("message", "")

    wait_for(pull_back_off, 30, "ImagePullBackOff")
    assert "ErrImagePull" in seen or "Failed" in reasons(api, namespace, "ghost")
    assert all(f'Failed to pull image "{image}"' in message for message in seen.values())
    assert status_of(api, namespace, "ghost")["phase"] == "Pending"
    events = api.list(EVENTS, namespace, field_selector="involvedObject.name=ghost")["items"]
    assert any(e["reason"] == "Failed" and e["type"] == "Warning" and image in e["message"] for e in events)


def test_failed_liveness_probe_restarts_the_container(kubelet: KubeletProcess, api: ApiClient,
                                                      namespace: str) -> None:
    flaky = busybox("main", "touch /tmp/healthy; sleep 2; rm /tmp/healthy; while true; do sleep 1; done",
                    livenessProbe={"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 1,
                                   "failureThreshold": 2})
    api.create(PODS, make_pod("flaky", kubelet.node_name, [flaky]), namespace)
    wait_for(lambda: container_status(api, namespace, "flaky", "main").get("restartCount", 0) >= 1, 30,
             "a restart after the liveness probe failed")
    assert {"Unhealthy", "Killing"} <= reasons(api, namespace, "flaky")


def test_readiness_drives_the_ready_condition(kubelet: KubeletProcess, api: ApiClient, namespace: str) -> None:
    gated = busybox("main", "while true; do sleep 1; done",
                    readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1})
    api.create(PODS, make_pod("gated", kubelet.node_name, [gated]), namespace)
    wait_for(lambda: status_of(api, namespace, "gated").get("phase") == "Running", 20, "Running")
    time.sleep(2)
    status = status_of(api, namespace, "gated")
    assert condition(status, "Ready") == "False" and condition(status, "ContainersReady") == "False"
    kubelet.api("POST", f"/run/{namespace}/gated/main", json={"command": ["touch", "/tmp/ready"]})
    running_pod(api, namespace, "gated")


def test_deleting_a_pod_stops_and_removes_it(kubelet: KubeletProcess, api: ApiClient, namespace: str,
                                             docker: docker_sdk.DockerClient) -> None:
    api.create(PODS, make_pod("doomed", kubelet.node_name, [busybox("main", "trap 'exit 0' TERM; "
                                                                    "while true; do sleep 1; done")],
                              volumes=[{"name": "scratch", "emptyDir": {}}]), namespace)
    uid = running_pod(api, namespace, "doomed") and api.get(PODS, "doomed", namespace)["metadata"]["uid"]
    assert pod_containers(docker, kubelet.node_name, namespace, "doomed").keys() == {"POD", "main"}
    api.delete(PODS, "doomed", namespace)

    def gone() -> bool:
        try:
            api.get(PODS, "doomed", namespace)
            return False
        except NotFound:
            return True

    wait_for(gone, 20, "the pod to be deleted")
    labels = [f"{NODE_LABEL}={kubelet.node_name}", "io.minik8s.pod.name=doomed"]
    assert docker.containers.list(all=True, filters={"label": labels}) == []
    assert not (kubelet.root_dir / "pods" / uid).exists()
    assert "Killing" in reasons(api, namespace, "doomed")


def test_restarted_kubelet_adopts_running_containers(kubelet: KubeletProcess, api: ApiClient, namespace: str,
                                                     docker: docker_sdk.DockerClient) -> None:
    for name in ("keep", "orphan"):
        api.create(PODS, make_pod(name, kubelet.node_name, [busybox("main", "while true; do sleep 1; done")]),
                   namespace)
    for name in ("keep", "orphan"):
        running_pod(api, namespace, name)
    before = pod_containers(docker, kubelet.node_name, namespace, "keep")
    kubelet.kill()
    api.delete(PODS, "orphan", namespace, grace_period_seconds=0)  # gone while no kubelet watched
    kubelet.start()
    wait_for(lambda: not pod_containers(docker, kubelet.node_name, namespace, "orphan"), 30,
             "the orphan's containers to be removed")
    time.sleep(2)
    assert pod_containers(docker, kubelet.node_name, namespace, "keep") == before
    status = running_pod(api, namespace, "keep")
    assert status["containerStatuses"][0]["restartCount"] == 0
    assert status["containerStatuses"][0]["containerID"] == f"docker://{before['main']}"


def test_kubectl_logs_and_exec_through_the_apiserver(kubelet: KubeletProcess, api: ApiClient, namespace: str,
                                                    apiserver_factory: Callable[..., ApiServerProcess],
                                                    tmp_path: Path) -> None:
    """Our kubectl (logs, exec) and upstream kubectl (logs) reach the container via the apiserver's proxy."""
    token_file = tmp_path / "kubelet-client-token"
    token_file.write_text(kubelet.token)
    proxying = apiserver_factory(extra_args=["--kubelet-client-token-file", str(token_file)])
    api.create(PODS, make_pod("chatty", kubelet.node_name, [busybox("main", "echo hello from chatty; sleep 3600")]),
               namespace)
    running_pod(api, namespace, "chatty")

    def kubectl(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, "--kubeconfig", str(proxying.kubeconfig), "-n", namespace, *args],
                              capture_output=True, text=True, timeout=60)

    ours = str(Path(sys.executable).with_name("kubectl"))
    logs = wait_for(lambda: kubectl(ours, "logs", "chatty").stdout, what="the pod's log through the apiserver")
    assert logs == "hello from chatty\n"
    result = kubectl(ours, "exec", "chatty", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    wrong = kubectl(ours, "logs", "chatty", "-c", "nope")
    assert (wrong.returncode, wrong.stderr) == (
        1, "Error from server (BadRequest): container nope is not valid for pod chatty\n")
    for binary in upstream_kubectls().values():
        upstream = kubectl(str(binary), "logs", "chatty", "--tail", "1")
        assert (upstream.returncode, upstream.stdout) == (0, "hello from chatty\n"), upstream.stderr
