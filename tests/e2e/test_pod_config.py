"""A pod's configuration on the installed cluster: ConfigMap and Secret volumes and env, the downward API, envFrom,
init containers preparing a shared volume, live ConfigMap updates, and a missing ConfigMap holding a container."""

import base64
import contextlib
import uuid
from collections.abc import Iterator

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import resolve
from tests.e2e.conftest import run_kubectl, wait_for

NAMESPACES = resolve("namespaces")
PODS = resolve("pods")
CONFIGMAPS = resolve("configmaps")
SECRETS = resolve("secrets")


@pytest.fixture(scope="module")
def namespace(cluster: ApiClient) -> Iterator[str]:
    name = f"e2e-config-{uuid.uuid4().hex[:8]}"
    cluster.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            cluster.delete(NAMESPACES, name)


def app_pod() -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "labels": {"tier": "web"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "initContainers": [
                {"name": "first", "image": "busybox", "command": ["sh", "-c", "echo one > /work/log"],
                 "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
                {"name": "second", "image": "busybox", "command": ["sh", "-c", "echo two >> /work/log"],
                 "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
            ],
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "3600"],
                "env": [
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                    {"name": "GREETING", "value": "$(CFG_greeting) from $(POD_NAME)"},
                ],
                "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
                "volumeMounts": [{"name": "work", "mountPath": "/work"},
                                 {"name": "settings", "mountPath": "/etc/settings"},
                                 {"name": "creds", "mountPath": "/etc/creds"}],
            }],
            "volumes": [{"name": "work", "emptyDir": {}},
                        {"name": "settings", "configMap": {"name": "settings",
                                                           "items": [{"key": "color", "path": "color.txt"}]}},
                        {"name": "creds", "secret": {"secretName": "creds"}}],
        },
    }


def exec_out(namespace: str, *command: str) -> str:
    return run_kubectl("-n", namespace, "exec", "app", "-c", "main", "--", *command).stdout.strip()


def test_a_pod_reads_its_configuration_and_sees_configmap_edits(cluster, namespace):
    cluster.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                                "data": {"color": "blue", "greeting": "hello"}}, namespace)
    cluster.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                             "data": {"password": base64.b64encode(b"s3cr3t").decode()}}, namespace)
    cluster.create(PODS, app_pod(), namespace)

    def running():
        status = cluster.get(PODS, "app", namespace).get("status") or {}
        containers = status.get("containerStatuses") or []
        return status.get("phase") == "Running" and bool(containers) and all(c.get("ready") for c in containers)

    wait_for(running, 90, what="pod app to run after its init containers")
    inits = cluster.get(PODS, "app", namespace)["status"]["initContainerStatuses"]
    assert [(s["name"], s["state"]["terminated"]["exitCode"]) for s in inits] == [("first", 0), ("second", 0)]
    assert run_kubectl("-n", namespace, "get", "pod", "app").stdout.splitlines()[1].split()[2] == "Running"

    assert exec_out(namespace, "cat", "/work/log").splitlines() == ["one", "two"]
    assert exec_out(namespace, "cat", "/etc/settings/color.txt") == "blue"
    assert exec_out(namespace, "cat", "/etc/creds/password") == "s3cr3t"
    assert "tmpfs" in exec_out(namespace, "sh", "-c", "grep ' /etc/creds ' /proc/mounts")
    assert exec_out(namespace, "sh", "-c", 'echo "$PASSWORD|$POD_NAME|$TIER|$CFG_color|$GREETING"') == (
        "s3cr3t|app|web|blue|hello from app")

    cluster.patch(CONFIGMAPS, "settings", {"data": {"color": "red"}}, namespace)
    wait_for(lambda: exec_out(namespace, "cat", "/etc/settings/color.txt") == "red", 90, interval=2,
             what="the ConfigMap edit to reach the mounted file")


def test_a_missing_configmap_holds_the_container_with_a_config_error(cluster, namespace):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "broken"},
           "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
               "name": "main", "image": "busybox", "command": ["sleep", "3600"],
               "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]}]}}
    cluster.create(PODS, pod, namespace)

    def waiting():
        statuses = (cluster.get(PODS, "broken", namespace).get("status") or {}).get("containerStatuses") or []
        return statuses and (statuses[0].get("state") or {}).get("waiting")

    state = wait_for(lambda: (found := waiting()) and found.get("reason") == "CreateContainerConfigError" and found,
                     60, what="pod broken to wait with CreateContainerConfigError")
    assert state["message"] == 'configmap "absent" not found'
    row = run_kubectl("-n", namespace, "get", "pod", "broken").stdout.splitlines()[1].split()
    assert row[2] == "CreateContainerConfigError"
