"""Our ``kubectl`` (the console script beside this interpreter) against a real apiserver, as a user runs it."""

from __future__ import annotations

import json
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from daemons.api.errors import NotFound
from daemons.api.resources import resolve

pytestmark = pytest.mark.integration

KUBECTL = Path(sys.executable).with_name("kubectl")
PODS = resolve("pods")
DEPLOYMENTS = resolve("deployments")
EVENTS = resolve("events")

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  containers:
  - name: server
    image: minik8s/python:latest
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: front}
spec:
  replicas: 2
  selector: {matchLabels: {app: front}}
  template:
    metadata: {labels: {app: front}}
    spec:
      containers:
      - {name: c, image: minik8s/busybox:latest}
"""

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kubectl(apiserver, namespace) -> Kubectl:
    """Run kubectl with the test's kubeconfig, the namespace given after the verb (as users often do)."""
    assert KUBECTL.exists(), f"{KUBECTL} is missing: install the project (pip install -e .)"

    def run(*args: str, stdin: str | None = None, namespaced: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), *args]
        if namespaced:
            argv += ["-n", namespace]
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60, check=False)

    return run


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def failed(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stderr


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_apply_creates_then_configures(kubectl, api, namespace, tmp_path):
    path = write(tmp_path, "app.yaml", f"{POD}---\n{DEPLOYMENT}")
    assert ok(kubectl("apply", "-f", path)) == "pod/web created\ndeployment.apps/front created\n"
    write(tmp_path, "app.yaml", f"{POD.replace('tier: front', 'tier: back')}")
    assert ok(kubectl("apply", "-f", str(tmp_path))) == "pod/web configured\n"
    assert api.get(PODS, "web", namespace)["metadata"]["labels"]["tier"] == "back"


def test_apply_of_the_same_manifest_later_is_unchanged(kubectl, tmp_path):
    path = write(tmp_path, "app.yaml", f"{POD}---\n{DEPLOYMENT}")
    ok(kubectl("apply", "-f", path))
    time.sleep(1.1)  # managedFields times have one-second resolution
    assert ok(kubectl("apply", "-f", path)) == "pod/web unchanged\ndeployment.apps/front unchanged\n"


def test_apply_from_stdin_and_create_conflict(kubectl, namespace):
    assert ok(kubectl("apply", "-f", "-", stdin=POD)) == "pod/web created\n"
    result = kubectl("create", "-f", "-", stdin=POD)
    assert failed(result) == 'Error from server (AlreadyExists): pods "web" already exists\n'


def test_get_table_wide_yaml_json_name_and_selector(kubectl, namespace, tmp_path):
    ok(kubectl("apply", "-f", write(tmp_path, "app.yaml", f"{POD}---\n{POD.replace('web', 'db')}")))
    lines = ok(kubectl("get", "pods")).splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [line.split()[0] for line in lines[1:]] == ["db", "web"]
    assert {line.index(line.split()[1]) for line in lines} == {lines[0].index("READY")}  # columns align
    assert lines[0].index("READY") == len("NAME") + 3  # widest cell ("NAME") plus three spaces
    assert ok(kubectl("get", "pods", "-o", "wide")).splitlines()[0].split()[5:7] == ["IP", "NODE"]

    pod = yaml.safe_load(ok(kubectl("get", "pod", "web", "-o", "yaml")))
    assert (pod["kind"], pod["metadata"]["name"], pod["metadata"]["namespace"]) == ("Pod", "web", namespace)
    assert "managedFields" not in pod["metadata"]
    listed = json.loads(ok(kubectl("get", "pods", "-o", "json")))
    assert listed["kind"] == "List"
    assert [(item["kind"], item["metadata"]["name"]) for item in listed["items"]] == [("Pod", "db"), ("Pod", "web")]
    assert ok(kubectl("get", "po", "-o", "name")) == "pod/db\npod/web\n"
    assert ok(kubectl("get", "pods", "-l", "app=db", "-o", "name")) == "pod/db\n"
    assert ok(kubectl("get", "pod/web", "--no-headers")).split()[:3] == ["web", "0/1", "Pending"]
    labels = ok(kubectl("get", "pods", "--show-labels")).splitlines()
    assert labels[0].split()[-1] == "LABELS"
    assert labels[2].split()[-1] == "app=web,tier=front"


def test_get_all_namespaces_missing_and_empty(kubectl, namespace):
    ok(kubectl("apply", "-f", "-", stdin=POD))
    all_namespaces = ok(kubectl("get", "pods", "-A", namespaced=False)).splitlines()
    assert all_namespaces[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [namespace, "web"] in [line.split()[:2] for line in all_namespaces]
    assert failed(kubectl("get", "pod", "nope")) == 'Error from server (NotFound): pods "nope" not found\n'
    for output in ((), ("-o", "name")):
        missing = kubectl("get", "pod", "nope", "--ignore-not-found", *output)
        assert (ok(missing), missing.stderr) == ("", ""), output
    assert json.loads(ok(kubectl("get", "pod", "nope", "--ignore-not-found", "-o", "json")))["items"] == []
    assert ok(kubectl("get", "pod", "web", "nope", "--ignore-not-found", "-o", "name")) == "pod/web\n"
    empty = kubectl("get", "deployments")
    assert (ok(empty), empty.stderr) == ("", f"No resources found in {namespace} namespace.\n")
    assert "Server Version: v" in ok(kubectl("version", namespaced=False))


def test_label_and_annotate(kubectl, api, namespace):
    ok(kubectl("apply", "-f", "-", stdin=POD))
    assert ok(kubectl("label", "pod", "web", "env=prod")) == "pod/web labeled\n"
    assert failed(kubectl("label", "pod", "web", "env=dev")) == (
        "error: 'env' already has a value (prod), and --overwrite is false\n")
    assert ok(kubectl("label", "pod/web", "env=dev", "--overwrite")) == "pod/web labeled\n"
    assert ok(kubectl("label", "pod", "web", "tier-")) == "pod/web unlabeled\n"
    assert api.get(PODS, "web", namespace)["metadata"]["labels"] == {"app": "web", "env": "dev"}
    assert ok(kubectl("annotate", "pod", "web", "note=first one")) == "pod/web annotated\n"
    assert "--overwrite is false" in failed(kubectl("annotate", "pod", "web", "note=second"))
    ok(kubectl("annotate", "pod", "web", "note=second", "--overwrite"))
    assert api.get(PODS, "web", namespace)["metadata"]["annotations"]["note"] == "second"


def test_scale_and_patch(kubectl, api, namespace):
    ok(kubectl("apply", "-f", "-", stdin=DEPLOYMENT))
    assert ok(kubectl("scale", "deployment", "front", "--replicas", "5")) == "deployment.apps/front scaled\n"
    assert api.get(DEPLOYMENTS, "front", namespace)["spec"]["replicas"] == 5
    assert ok(kubectl("patch", "deploy", "front", "--type", "merge", "-p", '{"spec":{"replicas":3}}')) == (
        "deployment.apps/front patched\n")
    assert ok(kubectl("patch", "deploy", "front", "--type", "json",
                      "-p", '[{"op": "replace", "path": "/spec/replicas", "value": 4}]')) == (
        "deployment.apps/front patched\n")
    assert api.get(DEPLOYMENTS, "front", namespace)["spec"]["replicas"] == 4
    patch = '{"metadata": {"labels": {"release": "one"}}}'
    assert ok(kubectl("patch", "deployment.apps/front", "-p", patch)) == "deployment.apps/front patched\n"
    assert ok(kubectl("patch", "deployment.apps/front", "-p", patch)) == "deployment.apps/front patched (no change)\n"


def test_create_namespace_by_name(kubectl, api):
    name = f"made-{uuid.uuid4().hex[:8]}"
    assert ok(kubectl("create", "namespace", name, namespaced=False)) == f"namespace/{name} created\n"
    assert api.get(resolve("namespaces"), name)["status"]["phase"] == "Active"
    assert "already exists" in failed(kubectl("create", "ns", name, namespaced=False))
    assert "metadata.name" in failed(kubectl("create", "namespace", "Bad_Name", namespaced=False))
    unknown = kubectl("create", "deployment", "x", namespaced=False)
    assert unknown.returncode == 2 and "No such command 'deployment'" in unknown.stderr  # a usage error
    ok(kubectl("delete", "namespace", name, namespaced=False))


def test_set_image_changes_the_named_container_of_the_template(kubectl, api, namespace):
    ok(kubectl("apply", "-f", "-", stdin=DEPLOYMENT))
    assert ok(kubectl("set", "image", "deployment/front", "c=busybox")) == "deployment.apps/front image updated\n"
    deployment = api.get(DEPLOYMENTS, "front", namespace)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"
    assert deployment["metadata"]["generation"] == 2
    assert ok(kubectl("set", "image", "deployment/front", "*=busybox")) == ""
    assert 'unable to find container named "nope"' in failed(kubectl("set", "image", "deploy", "front", "nope=x"))
    assert api.get(DEPLOYMENTS, "front", namespace)["metadata"]["generation"] == 2


def test_describe_shows_fields_and_events(kubectl, api, namespace):
    ok(kubectl("apply", "-f", "-", stdin=POD))
    assert ok(kubectl("describe", "pod", "web")).splitlines()[-1].split() == ["Events:", "<none>"]
    api.create(EVENTS, {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.1", "namespace": namespace},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": namespace},
        "type": "Normal", "reason": "Scheduled", "message": "Successfully assigned it",
        "source": {"component": "default-scheduler"}, "count": 1,
    })
    lines = ok(kubectl("describe", "pod", "web")).splitlines()
    assert lines[:2] == ["Name:         web", f"Namespace:    {namespace}"]
    assert lines[2:4] == ["Labels:       app=web", "              tier=front"]
    assert "  Containers:" in lines
    assert lines[lines.index("Events:") + 1].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert lines[-1].split()[:2] == ["Normal", "Scheduled"]
    assert lines[-1].endswith("default-scheduler  Successfully assigned it")


def test_delete_by_name_file_and_selector(kubectl, api, namespace, tmp_path):
    path = write(tmp_path, "app.yaml", f"{POD}---\n{DEPLOYMENT}")
    ok(kubectl("apply", "-f", path))
    assert ok(kubectl("delete", "-f", path, "--now")) == 'pod "web" deleted\ndeployment.apps "front" deleted\n'
    with pytest.raises(NotFound):
        api.get(DEPLOYMENTS, "front", namespace)
    ok(kubectl("apply", "-f", "-", stdin=f"{POD}---\n{POD.replace('web', 'db').replace('front', 'back')}"))
    assert ok(kubectl("delete", "pods", "-l", "tier=back", "--grace-period", "0")) == 'pod "db" deleted\n'
    result = kubectl("delete", "pod", "nope", "web")
    assert failed(result) == 'Error from server (NotFound): pods "nope" not found\n'
    assert result.stdout == 'pod "web" deleted\n'


def test_bad_manifests_name_the_field_and_create_nothing(kubectl, api, namespace, tmp_path):
    missing_kind = write(tmp_path, "missing.yaml", f"{POD}---\napiVersion: v1\nmetadata: {{name: x}}\n")
    result = kubectl("apply", "-f", missing_kind)
    assert failed(result) == f'error: {missing_kind}: document 2: missing required field "kind"\n'
    assert result.stdout == ""
    with pytest.raises(NotFound):
        api.get(PODS, "web", namespace)

    no_name = write(tmp_path, "noname.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {labels: {a: b}}\n")
    assert 'document 1: missing required field "metadata.name"' in failed(kubectl("create", "-f", no_name))
    broken = write(tmp_path, "broken.yaml", f"{POD}  bad: [\n")
    assert re.match(rf"error: {re.escape(broken)}: document 1: yaml: line \d+, column \d+: ",
                    failed(kubectl("apply", "-f", broken)))
    unknown = write(tmp_path, "foo.yaml", "apiVersion: v1\nkind: Foo\nmetadata: {name: x}\n")
    assert failed(kubectl("apply", "-f", unknown)) == (
        f'error: resource mapping not found for name: "x" namespace: "" from "{unknown}": '
        'no matches for kind "Foo" in version "v1"\n')
    invalid = write(tmp_path, "invalid.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n"
                                              "spec: {containers: [{name: c}]}\n")
    assert "spec.containers[0].image" in failed(kubectl("apply", "-f", invalid))
    with pytest.raises(NotFound):
        api.get(PODS, "web", namespace)


def test_connection_refused_names_the_server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = f"https://127.0.0.1:{port}"
    result = subprocess.run([str(KUBECTL), "--server", server, "--insecure-skip-tls-verify", "get", "pods"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert failed(result).startswith(f"The connection to the server {server} was refused - did you specify the "
                                     "right host or port?")


def test_watch_prints_rows_as_they_change(kubectl, apiserver, namespace):
    ok(kubectl("apply", "-f", "-", stdin=POD))
    argv = [str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "get", "pods", "-w", "-n", namespace]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as watcher:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in watcher.stdout], daemon=True).start()
        try:
            assert lines.get(timeout=20).split()[0] == "NAME"
            assert lines.get(timeout=20).split()[0] == "web"
            ok(kubectl("label", "pod", "web", "seen=yes"))
            assert lines.get(timeout=20).split()[:3] == ["web", "0/1", "Pending"]
        finally:
            watcher.terminate()
