"""Upstream kubectl (1.27 and 1.33, the binaries the Cloud SDK ships) against our apiserver.

Every test runs the real binary as a subprocess with ``--kubeconfig`` and ``-n`` and asserts on what a
user sees: the text kubectl prints, its exit status, and the objects the apiserver then holds.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from daemons.api.errors import NotFound
from daemons.api.resources import by_kind
from tests.conftest import parse_table

PODS = by_kind("v1", "Pod")
DEPLOYMENTS = by_kind("apps/v1", "Deployment")
LEASES = by_kind("coordination.k8s.io/v1", "Lease")
SERVICES = by_kind("v1", "Service")
NAMESPACES = by_kind("v1", "Namespace")


# --- manifests and helpers --------------------------------------------------------------------------


def without_namespace_suffix(line: str) -> str:
    """kubectl 1.34 and later add "from <ns> namespace" to delete messages; older ones do not."""
    return re.sub(r" from \S+ namespace$", "", line)


def pod_manifest(name: str, labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "busybox:latest", "command": ["sleep", "3600"]}]},
    }


def deployment_manifest(name: str, image: str = "nginx:1.25", replicas: int = 1) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": image, "ports": [{"containerPort": 80}]}]},
            },
        },
    }


def write_manifest(path: Path, *documents: dict) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def names_in(table_text: str) -> set[str]:
    _columns, rows = parse_table(table_text)
    return {row["NAME"] for row in rows}


# --- create / apply ---------------------------------------------------------------------------------


def test_create_pod_from_file(kubectl, api, namespace, tmp_path):
    manifest = write_manifest(tmp_path / "pod.yaml", pod_manifest("hello", {"app": "hello", "team": "a"}))

    out = kubectl("create", "-f", str(manifest))

    assert out.strip() == "pod/hello created"
    pod = api.get(PODS, "hello", namespace)
    assert pod["metadata"]["labels"] == {"app": "hello", "team": "a"}
    assert pod["spec"]["containers"][0]["image"] == "busybox:latest"
    assert pod["status"]["phase"] == "Pending"

    again = kubectl.run("create", "-f", str(manifest))
    assert again.returncode == 1
    assert "AlreadyExists" in again.stderr
    assert '"hello" already exists' in again.stderr


def test_apply_deployment_then_reapply_changed_image(kubectl, api, namespace, tmp_path):
    manifest = tmp_path / "web.yaml"
    write_manifest(manifest, deployment_manifest("web", image="nginx:1.25"))

    assert kubectl("apply", "-f", str(manifest)).strip() == "deployment.apps/web created"
    first = api.get(DEPLOYMENTS, "web", namespace)
    assert "kubectl.kubernetes.io/last-applied-configuration" in first["metadata"].get("annotations", {})

    assert kubectl("apply", "-f", str(manifest)).strip() == "deployment.apps/web unchanged"

    write_manifest(manifest, deployment_manifest("web", image="nginx:1.27"))
    assert kubectl("apply", "-f", str(manifest)).strip() == "deployment.apps/web configured"

    image = kubectl("get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
    assert image == "nginx:1.27"
    stored = api.get(DEPLOYMENTS, "web", namespace)
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    assert stored["metadata"]["uid"] == first["metadata"]["uid"]
    assert int(stored["metadata"]["generation"]) > int(first["metadata"]["generation"])


def test_apply_server_side(kubectl, api, namespace, tmp_path):
    manifest = write_manifest(tmp_path / "ssa.yaml", deployment_manifest("ssa", image="nginx:1.25", replicas=2))

    assert kubectl("apply", "--server-side", "-f", str(manifest)).strip() == "deployment.apps/ssa serverside-applied"
    stored = api.get(DEPLOYMENTS, "ssa", namespace)
    assert stored["spec"]["replicas"] == 2
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.25"

    write_manifest(manifest, deployment_manifest("ssa", image="nginx:1.27", replicas=2))
    assert kubectl("apply", "--server-side", "-f", str(manifest)).strip() == "deployment.apps/ssa serverside-applied"
    assert api.get(DEPLOYMENTS, "ssa", namespace)["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"


# --- get --------------------------------------------------------------------------------------------


def test_get_pods_table(kubectl, api, namespace):
    api.create(PODS, pod_manifest("table-pod"), namespace)

    out = kubectl("get", "pods")

    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    columns, rows = parse_table(out)
    assert columns == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert len(rows) == 1
    fields = lines[1].split()
    assert fields[:4] == ["table-pod", "0/1", "Pending", "0"]
    assert re.fullmatch(r"\d+[smhd]", fields[4]), fields
    # The cells line up under their headers, as kubectl's tab writer aligns them.
    assert rows[0] == {"NAME": "table-pod", "READY": "0/1", "STATUS": "Pending", "RESTARTS": "0", "AGE": fields[4]}


def test_get_leases_shows_their_holders(kubectl, api, namespace):
    api.create(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "node-a"},
                        "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40,
                                 "renewTime": "2026-01-01T12:00:00.000000Z"}}, namespace)

    columns, rows = parse_table(kubectl("get", "leases"))

    assert columns == ["NAME", "HOLDER", "AGE"]
    assert [(row["NAME"], row["HOLDER"]) for row in rows] == [("node-a", "node-a")]
    renewed = json.loads(kubectl("get", "lease", "node-a", "-o", "json"))
    assert renewed["spec"]["renewTime"] == "2026-01-01T12:00:00.000000Z"


def test_get_pods_wide(kubectl, api, namespace):
    api.create(PODS, pod_manifest("wide-pod"), namespace)
    api.create(PODS, pod_manifest("wide-bound"), namespace)
    api.request("POST", PODS.path(namespace, "wide-bound", "binding"), json={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "wide-bound"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"},
    })
    api.patch(PODS, "wide-bound", {"status": {"podIP": "10.244.7.12"}}, namespace, subresource="status")

    out = kubectl("get", "pods", "-o", "wide")

    columns, rows = parse_table(out)
    assert columns[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert "IP" in columns
    assert "NODE" in columns
    by_name = {row["NAME"]: row for row in rows}
    assert set(by_name) == {"wide-pod", "wide-bound"}
    assert by_name["wide-pod"]["IP"] == "<none>"
    assert by_name["wide-pod"]["NODE"] == "<none>"
    assert by_name["wide-bound"]["IP"] == "10.244.7.12"
    assert by_name["wide-bound"]["NODE"] == "node-7"


def test_get_pod_yaml(kubectl, api, namespace):
    created = api.create(PODS, pod_manifest("yaml-pod"), namespace)

    pod = yaml.safe_load(kubectl("get", "pod", "yaml-pod", "-o", "yaml"))

    assert pod["apiVersion"] == "v1"
    assert pod["kind"] == "Pod"
    metadata = pod["metadata"]
    assert metadata["name"] == "yaml-pod"
    assert metadata["namespace"] == namespace
    assert metadata["uid"] == created["metadata"]["uid"]
    assert metadata["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", metadata["creationTimestamp"])
    assert pod["spec"]["containers"][0]["name"] == "main"
    assert pod["status"]["phase"] == "Pending"


def test_get_pods_label_selector(kubectl, api, namespace):
    api.create(PODS, pod_manifest("web-1", {"app": "web"}), namespace)
    api.create(PODS, pod_manifest("web-2", {"app": "web", "tier": "front"}), namespace)
    api.create(PODS, pod_manifest("db-1", {"app": "db"}), namespace)

    assert names_in(kubectl("get", "pods", "-l", "app=web")) == {"web-1", "web-2"}
    assert names_in(kubectl("get", "pods", "-l", "app!=web")) == {"db-1"}
    assert names_in(kubectl("get", "pods", "-l", "app in (web,db),!tier")) == {"web-1", "db-1"}
    assert kubectl("get", "pods", "-o", "name", "-l", "tier=front").split() == ["pod/web-2"]
    empty = kubectl.run("get", "pods", "-l", "app=nothing")
    assert empty.returncode == 0
    assert empty.stdout == ""
    assert f"No resources found in {namespace} namespace." in empty.stderr


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _wait_for_line(lines: queue.Queue, needle: str, seen: list[str], timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{needle!r} did not show up within {timeout}s; kubectl printed:\n{''.join(seen)}"
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        assert line is not None, f"kubectl exited before {needle!r} showed up; it printed:\n{''.join(seen)}"
        seen.append(line)
        if line.split() and line.split()[0] == needle:
            return line


def test_get_pods_watch_streams_new_pod(kubectl, api, namespace):
    api.create(PODS, pod_manifest("watch-1"), namespace)
    process = kubectl.popen("get", "pods", "-w")
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        _wait_for_line(lines, "watch-1", seen)  # the initial list, then the watch begins
        assert seen[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]

        api.create(PODS, pod_manifest("watch-2"), namespace)
        row = _wait_for_line(lines, "watch-2", seen)
        assert row.split()[1:4] == ["0/1", "Pending", "0"]

        api.patch(PODS, "watch-1", {"metadata": {"labels": {"touched": "yes"}}}, namespace)
        _wait_for_line(lines, "watch-1", seen)
    finally:
        process.kill()
        process.wait(10)
        process.stdout.close()
        reader.join(10)


# --- label / scale / replace ------------------------------------------------------------------------


def test_label_pod(kubectl, api, namespace):
    api.create(PODS, pod_manifest("label-pod"), namespace)

    assert kubectl("label", "pod", "label-pod", "tier=x").strip() == "pod/label-pod labeled"
    assert api.get(PODS, "label-pod", namespace)["metadata"]["labels"] == {"app": "label-pod", "tier": "x"}

    refused = kubectl.run("label", "pod", "label-pod", "tier=y")
    assert refused.returncode == 1
    assert "already has a value (x)" in refused.stderr

    assert kubectl("label", "pod", "label-pod", "tier=y", "--overwrite").strip() == "pod/label-pod labeled"
    assert kubectl("label", "pod", "label-pod", "tier-").strip() == "pod/label-pod unlabeled"
    assert api.get(PODS, "label-pod", namespace)["metadata"]["labels"] == {"app": "label-pod"}


def test_scale_deployment(kubectl, api, namespace):
    api.create(DEPLOYMENTS, deployment_manifest("web", replicas=1), namespace)

    assert kubectl("scale", "deployment", "web", "--replicas=3").strip() == "deployment.apps/web scaled"

    assert api.get(DEPLOYMENTS, "web", namespace)["spec"]["replicas"] == 3
    assert kubectl("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}") == "3"
    scale = api.get(DEPLOYMENTS, "web", namespace, subresource="scale")
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 3


def test_replace_with_stale_object_conflicts(kubectl, api, namespace, tmp_path):
    api.create(PODS, pod_manifest("stale-pod"), namespace)
    saved = tmp_path / "stale-pod.yaml"
    saved.write_text(kubectl("get", "pod", "stale-pod", "-o", "yaml"))
    api.patch(PODS, "stale-pod", {"metadata": {"labels": {"changed": "by-api"}}}, namespace)

    result = kubectl.run("replace", "-f", str(saved))

    assert result.returncode == 1, result.stdout
    assert "Conflict" in result.stderr
    assert "the object has been modified" in result.stderr
    assert api.get(PODS, "stale-pod", namespace)["metadata"]["labels"]["changed"] == "by-api"

    fresh = yaml.safe_load(kubectl("get", "pod", "stale-pod", "-o", "yaml"))
    fresh["metadata"]["labels"]["replaced"] = "yes"
    write_manifest(saved, fresh)
    assert kubectl("replace", "-f", str(saved)).strip() == "pod/stale-pod replaced"
    assert api.get(PODS, "stale-pod", namespace)["metadata"]["labels"]["replaced"] == "yes"


# --- delete -----------------------------------------------------------------------------------------


def test_delete_pod(kubectl, api, namespace):
    api.create(PODS, pod_manifest("doomed"), namespace)

    assert without_namespace_suffix(kubectl("delete", "pod", "doomed").strip()) == 'pod "doomed" deleted'

    with pytest.raises(NotFound):
        api.get(PODS, "doomed", namespace)
    missing = kubectl.run("delete", "pod", "doomed")
    assert missing.returncode == 1
    assert 'pods "doomed" not found' in missing.stderr


def test_delete_from_file(kubectl, api, namespace, tmp_path):
    manifest = write_manifest(tmp_path / "app.yaml", pod_manifest("file-pod"), deployment_manifest("file-deploy"))
    created = kubectl("create", "-f", str(manifest)).splitlines()
    assert created == ["pod/file-pod created", "deployment.apps/file-deploy created"]

    deleted = [without_namespace_suffix(line) for line in kubectl("delete", "-f", str(manifest)).splitlines()]

    assert deleted == ['pod "file-pod" deleted', 'deployment.apps "file-deploy" deleted']
    with pytest.raises(NotFound):
        api.get(PODS, "file-pod", namespace)
    with pytest.raises(NotFound):
        api.get(DEPLOYMENTS, "file-deploy", namespace)


# --- discovery --------------------------------------------------------------------------------------


def test_api_resources(kubectl):
    out = kubectl("api-resources")

    columns, rows = parse_table(out)
    assert columns == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    by_name = {row["NAME"]: row for row in rows}
    assert by_name["pods"] == {"NAME": "pods", "SHORTNAMES": "po", "APIVERSION": "v1", "NAMESPACED": "true",
                               "KIND": "Pod"}
    assert by_name["deployments"] == {"NAME": "deployments", "SHORTNAMES": "deploy", "APIVERSION": "apps/v1",
                                      "NAMESPACED": "true", "KIND": "Deployment"}
    assert by_name["namespaces"]["NAMESPACED"] == "false"
    assert by_name["services"]["SHORTNAMES"] == "svc"

    # Short names resolve through discovery.
    assert kubectl("get", "po").strip() == ""
    assert kubectl("get", "deploy").strip() == ""


def test_version(kubectl):
    out = kubectl("version")
    assert "Client Version:" in out
    server_line = next((line for line in out.splitlines() if line.startswith("Server Version:")), None)
    assert server_line is not None, out
    assert re.search(r"v1\.\d+\.\d+", server_line), server_line

    info = yaml.safe_load(kubectl("version", "-o", "yaml"))
    assert info["serverVersion"]["major"] == "1"
    assert info["serverVersion"]["gitVersion"].startswith("v1.")


# --- imperative create (the object is built in the client) -------------------------------------


def test_create_deployment_imperatively(kubectl, api, namespace):
    """``kubectl create deployment`` builds the object in the client and POSTs it through the typed clientset.

    kubectl 1.33's clientset sends built-in kinds as protobuf (``Content-Type: application/vnd.kubernetes.protobuf``),
    which the apiserver has to accept as a real one does; 1.27 sends JSON.
    """
    out = kubectl("create", "deployment", "imp", "--image=nginx:1.25", "--replicas=2", "--port=80")

    assert out.strip() == "deployment.apps/imp created"
    stored = api.get(DEPLOYMENTS, "imp", namespace)
    assert stored["metadata"]["labels"] == {"app": "imp"}
    assert stored["spec"]["replicas"] == 2
    assert stored["spec"]["selector"] == {"matchLabels": {"app": "imp"}}
    assert stored["spec"]["template"]["metadata"]["labels"] == {"app": "imp"}
    container = stored["spec"]["template"]["spec"]["containers"][0]
    assert container["name"] == "nginx"
    assert container["image"] == "nginx:1.25"
    assert container["ports"][0]["containerPort"] == 80
    # kubectl's protobuf carries every unset string as "" and every unset int as 0; none of them may land.
    assert "generateName" not in stored["metadata"]
    assert "workingDir" not in container
    assert "minReadySeconds" not in stored["spec"]
    assert kubectl("get", "deploy", "imp", "-o", "jsonpath={.spec.replicas}") == "2"

    # --replicas=0 is a pointer set to zero, which must survive rather than default to 1.
    assert kubectl("create", "deployment", "idle", "--image=nginx:1.25", "--replicas=0").strip() == (
        "deployment.apps/idle created"
    )
    assert api.get(DEPLOYMENTS, "idle", namespace)["spec"]["replicas"] == 0

    again = kubectl.run("create", "deployment", "imp", "--image=nginx:1.25")
    assert again.returncode == 1
    assert 'deployments.apps "imp" already exists' in again.stderr


def test_create_namespace_imperatively(kubectl, api):
    name = f"imp-ns-{uuid.uuid4().hex[:8]}"
    try:
        out = kubectl("create", "namespace", name)

        assert out.strip() == f"namespace/{name} created"
        stored = api.get(NAMESPACES, name)
        assert stored["metadata"]["name"] == name
        assert "namespace" not in stored["metadata"]
        assert stored["status"]["phase"] == "Active"
        assert name in names_in(kubectl("get", "namespaces"))
    finally:
        with contextlib.suppress(NotFound):
            api.delete(NAMESPACES, name)


def test_create_service_clusterip_imperatively(kubectl, api, namespace):
    out = kubectl("create", "service", "clusterip", "web", "--tcp=80:8080")

    assert out.strip() == "service/web created"
    stored = api.get(SERVICES, "web", namespace)
    assert stored["metadata"]["labels"] == {"app": "web"}
    assert stored["spec"]["type"] == "ClusterIP"
    assert stored["spec"]["selector"] == {"app": "web"}
    assert stored["spec"]["ports"] == [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}]

    # A named target port travels as the string half of an IntOrString.
    assert kubectl("create", "service", "clusterip", "named", "--tcp=81:http").strip() == "service/named created"
    assert api.get(SERVICES, "named", namespace)["spec"]["ports"][0]["targetPort"] == "http"
