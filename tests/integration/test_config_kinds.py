"""ConfigMaps, Secrets, ServiceAccounts, EndpointSlices and ReplicationControllers against a real apiserver and
controller manager: through our kubectl, upstream kubectl 1.27 and 1.33, and the official Python client.

No scheduler or kubelet runs: the tests play the kubelet's part by writing a pod's status.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import Invalid
from daemons.api.resources import require
from tests.conftest import (
    ApiServerProcess,
    ControllerManagerProcess,
    Kubectl,
    RabbitMQProcess,
    parse_table,
    serving,
    wait_for,
)

pytestmark = pytest.mark.integration

CONFIGMAPS = require("v1", "ConfigMap")
SECRETS = require("v1", "Secret")
SERVICE_ACCOUNTS = require("v1", "ServiceAccount")
SERVICES = require("v1", "Service")
PODS = require("v1", "Pod")
ENDPOINT_SLICES = require("discovery.k8s.io/v1", "EndpointSlice")
RCS = require("v1", "ReplicationController")
OUR_KUBECTL = Path(sys.executable).with_name("kubectl")
IMMUTABLE = "Forbidden: field is immutable when `immutable` is set"


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
            rabbitmq: RabbitMQProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                       "--controllers", "serviceaccount,endpoints,replicationcontroller")
    with serving(process, rabbitmq):
        yield process


@pytest.fixture
def ours(apiserver: ApiServerProcess, namespace: str) -> Callable[..., str]:
    """Our kubectl in the test's namespace; it must succeed, and its stdout is returned."""
    def run(*args: str) -> str:
        result = subprocess.run([str(OUR_KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, *args],
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
        return result.stdout
    return run


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def decoded(data: dict[str, str]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def causes(error: Invalid) -> list[str]:
    return [f"{cause['field']}: {cause['message']}" for cause in error.causes]


def start_pod(api: ApiClient, namespace: str, name: str, labels: dict[str, str], ip: str) -> None:
    """A pod running and Ready at ``ip``, as its kubelet would report it."""
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                      "spec": {"containers": [{"name": "main", "image": "busybox"}]}}, namespace)
    api.patch(PODS, name, {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                                      "conditions": [{"type": "Ready", "status": "True"}]}}, namespace,
              subresource="status")


def web_service(name: str = "web") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}


def replication_controller(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": name},
            "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "main", "image": "busybox"}]}}}}


def active_pods_of(api: ApiClient, namespace: str, owner: dict[str, Any]) -> list[dict[str, Any]]:
    uid = owner["metadata"]["uid"]
    return [pod for pod in api.list(PODS, namespace)["items"] if not pod["metadata"].get("deletionTimestamp")
            and any(ref["uid"] == uid and ref.get("controller") for ref in pod["metadata"].get("ownerReferences", []))]


# --- the API's rules --------------------------------------------------------------------------------


def test_an_immutable_configmap_refuses_new_data_but_takes_new_labels(api, namespace):
    api.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "frozen"},
                            "data": {"a": "1"}, "immutable": True}, namespace)
    with pytest.raises(Invalid) as refused:
        api.patch(CONFIGMAPS, "frozen", {"data": {"a": "2"}}, namespace)
    assert refused.value.code == 422
    assert causes(refused.value) == [f"data: {IMMUTABLE}"]
    assert api.get(CONFIGMAPS, "frozen", namespace)["data"] == {"a": "1"}
    relabelled = api.patch(CONFIGMAPS, "frozen", {"metadata": {"labels": {"tier": "web"}}}, namespace)
    assert relabelled["metadata"]["labels"] == {"tier": "web"}
    with pytest.raises(Invalid) as bad_key:
        api.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"},
                                "data": {"a b": "1"}}, namespace)
    assert causes(bad_key.value)[0].startswith('data[a b]: Invalid value: "a b": a valid config key must consist')


def test_string_data_is_stored_as_data_and_a_secret_keeps_its_type(api, namespace):
    created = api.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                                   "data": {"user": b64("old")}, "stringData": {"user": "me", "pass": "pw"}},
                         namespace)
    stored = api.get(SECRETS, "creds", namespace)
    assert "stringData" not in created and "stringData" not in stored
    assert stored["type"] == "Opaque"
    assert decoded(stored["data"]) == {"user": "me", "pass": "pw"}
    with pytest.raises(Invalid) as retyped:
        api.patch(SECRETS, "creds", {"type": "example.com/custom"}, namespace)
    assert causes(retyped.value) == ['type: Invalid value: "example.com/custom": field is immutable']
    with pytest.raises(Invalid) as incomplete:
        api.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"},
                             "type": "kubernetes.io/tls", "data": {"tls.crt": b64("cert")}}, namespace)
    assert causes(incomplete.value) == ["data[tls.key]: Required value"]


# --- controllers ------------------------------------------------------------------------------------


def test_every_namespace_gets_a_default_service_account_back_after_deletion(manager, api, namespace):
    read = lambda: [sa["metadata"]["name"] for sa in api.list(SERVICE_ACCOUNTS, namespace)["items"]]  # noqa: E731
    wait_for(read, ["default"], manager)
    first = api.get(SERVICE_ACCOUNTS, "default", namespace)["metadata"]["uid"]
    api.delete(SERVICE_ACCOUNTS, "default", namespace)
    wait_for(lambda: (api.list(SERVICE_ACCOUNTS, namespace)["items"] or [{"metadata": {"uid": first}}])[0]
             ["metadata"]["uid"] != first, True, manager)


def test_a_service_gets_an_endpoint_slice_beside_its_endpoints(manager, api, namespace):
    service = api.create(SERVICES, web_service(), namespace)
    start_pod(api, namespace, "web-1", {"app": "web"}, "10.244.1.5")

    def slices() -> list[dict[str, Any]]:
        return api.list(ENDPOINT_SLICES, namespace, label_selector="kubernetes.io/service-name=web")["items"]

    [endpoint_slice] = wait_for(slices, lambda found: len(found) == 1 and found[0]["endpoints"], manager)
    metadata = endpoint_slice["metadata"]
    assert metadata["name"].startswith("web-")
    assert metadata["labels"]["endpointslice.kubernetes.io/managed-by"] == "endpointslice-controller.k8s.io"
    assert [(ref["kind"], ref["uid"]) for ref in metadata["ownerReferences"]] == [("Service",
                                                                                 service["metadata"]["uid"])]
    assert endpoint_slice["addressType"] == "IPv4"
    assert endpoint_slice["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    [endpoint] = endpoint_slice["endpoints"]
    assert endpoint["addresses"] == ["10.244.1.5"]
    assert endpoint["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert endpoint["targetRef"]["name"] == "web-1"
    api.delete(SERVICES, "web", namespace)
    wait_for(slices, [], manager)


def test_a_replication_controller_keeps_its_replicas_of_pods_it_owns(manager, api, namespace):
    rc = api.create(RCS, replication_controller("web", 2), namespace)
    assert rc["spec"]["selector"] == {"app": "web"}  # defaulted from the template's labels
    wait_for(lambda: len(active_pods_of(api, namespace, rc)), 2, manager)
    wait_for(lambda: (api.get(RCS, "web", namespace).get("status") or {}).get("replicas"), 2, manager)
    [ref] = active_pods_of(api, namespace, rc)[0]["metadata"]["ownerReferences"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("v1", "ReplicationController", "web")
    assert api.get(RCS, "web", namespace, subresource="scale")["status"] == {"replicas": 2, "selector": "app=web"}
    api.patch(RCS, "web", {"spec": {"replicas": 1}}, namespace, subresource="scale")
    wait_for(lambda: len(active_pods_of(api, namespace, rc)), 1, manager)


# --- our kubectl ------------------------------------------------------------------------------------


def test_our_kubectl_creates_configmaps_secrets_and_service_accounts_from_flags(ours, api, namespace, tmp_path):
    (tmp_path / "app.properties").write_text("color=blue\n")
    (tmp_path / "app.env").write_text("# settings\nMODE=fast\n")
    assert ours("create", "configmap", "app", "--from-literal=greeting=hello", f"--from-file={tmp_path}/app.properties",
                f"--from-env-file={tmp_path}/app.env") == "configmap/app created\n"
    assert api.get(CONFIGMAPS, "app", namespace)["data"] == {"app.properties": "color=blue\n", "greeting": "hello",
                                                             "MODE": "fast"}
    assert ours("create", "secret", "generic", "creds", "--from-literal=user=me") == "secret/creds created\n"
    assert decoded(api.get(SECRETS, "creds", namespace)["data"]) == {"user": "me"}
    (tmp_path / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    (tmp_path / "tls.key").write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    assert ours("create", "secret", "tls", "site", f"--cert={tmp_path}/tls.crt",
                f"--key={tmp_path}/tls.key") == "secret/site created\n"
    assert ours("create", "secret", "docker-registry", "pull", "--docker-server=registry.example",
                "--docker-username=me", "--docker-password=pw") == "secret/pull created\n"
    assert ours("create", "serviceaccount", "robot") == "serviceaccount/robot created\n"
    columns, rows = parse_table(ours("get", "secrets"))
    assert columns == ["NAME", "TYPE", "DATA", "AGE"]
    assert {(row["NAME"], row["TYPE"], row["DATA"]) for row in rows} == {
        ("creds", "Opaque", "1"), ("site", "kubernetes.io/tls", "2"), ("pull", "kubernetes.io/dockerconfigjson", "1")}
    columns, rows = parse_table(ours("get", "cm"))
    assert columns == ["NAME", "DATA", "AGE"]
    assert [(row["NAME"], row["DATA"]) for row in rows] == [("app", "3")]


# --- upstream kubectl -------------------------------------------------------------------------------


def test_upstream_kubectl_creates_and_lists_configmaps_and_secrets(kubectl: Kubectl, api, namespace):
    assert kubectl("create", "configmap", "app", "--from-literal=a=1", "--from-literal=b=2") == \
        "configmap/app created\n"
    assert kubectl("create", "secret", "generic", "creds", "--from-literal=user=me") == "secret/creds created\n"
    assert decoded(api.get(SECRETS, "creds", namespace)["data"]) == {"user": "me"}
    columns, rows = parse_table(kubectl("get", "cm"))
    assert columns == ["NAME", "DATA", "AGE"]
    assert [(row["NAME"], row["DATA"]) for row in rows] == [("app", "2")]
    columns, rows = parse_table(kubectl("get", "secret", "creds"))
    assert columns == ["NAME", "TYPE", "DATA", "AGE"]
    assert [(row["NAME"], row["TYPE"], row["DATA"]) for row in rows] == [("creds", "Opaque", "1")]


def test_upstream_kubectl_describes_a_service_with_its_endpoints(manager, kubectl: Kubectl, api, namespace):
    api.create(SERVICES, web_service(), namespace)
    start_pod(api, namespace, "web-1", {"app": "web"}, "10.244.1.7")
    wait_for(lambda: [[endpoint["addresses"] for endpoint in item["endpoints"]]
                      for item in api.list(ENDPOINT_SLICES, namespace)["items"]], [[["10.244.1.7"]]], manager)
    described = kubectl("describe", "service", "web")
    [line] = [line for line in described.splitlines() if line.startswith("Endpoints:")]
    assert line.split() == ["Endpoints:", "10.244.1.7:8080"]


def test_upstream_kubectl_scales_a_replication_controller(manager, kubectl: Kubectl, api, namespace):
    rc = api.create(RCS, replication_controller("web", 1), namespace)
    wait_for(lambda: len(active_pods_of(api, namespace, rc)), 1, manager)
    assert kubectl("scale", "rc", "web", "--replicas=3") == "replicationcontroller/web scaled\n"
    wait_for(lambda: len(active_pods_of(api, namespace, rc)), 3, manager)
    wait_for(lambda: parse_table(kubectl("get", "rc"))[1][0]["CURRENT"], "3", manager)
    assert parse_table(kubectl("get", "rc"))[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]


# --- the official Python client ---------------------------------------------------------------------


def test_python_client_creates_reads_lists_and_watches_configmaps(core, namespace):
    seen: list[tuple[str, str | None]] = []
    watching = threading.Event()

    def watch() -> None:
        """Without a resourceVersion the stream starts with the ConfigMaps already there, so the create is seen
        whether it comes before or after the watch starts."""
        watcher = kubernetes.watch.Watch()
        for event in watcher.stream(core.list_namespaced_config_map, namespace, timeout_seconds=30):
            seen.append((event["type"], (event["object"].data or {}).get("a")))
            watching.set()
            if event["type"] == "DELETED":
                watcher.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    body = kubernetes.client.V1ConfigMap(metadata=kubernetes.client.V1ObjectMeta(name="py-cm"), data={"a": "1"})
    created = core.create_namespaced_config_map(namespace, body)
    assert created.data == {"a": "1"}
    assert core.read_namespaced_config_map("py-cm", namespace).data == {"a": "1"}
    assert [item.metadata.name for item in core.list_namespaced_config_map(namespace).items] == ["py-cm"]
    assert watching.wait(30), "the watch saw no event within 30 s"  # it has the create: now change it
    core.patch_namespaced_config_map("py-cm", namespace, {"data": {"a": "2"}})
    core.delete_namespaced_config_map("py-cm", namespace)
    thread.join(40)
    assert not thread.is_alive(), f"the watch did not see the deletion; saw {seen}"
    assert seen == [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "2")]
    with pytest.raises(kubernetes.client.rest.ApiException) as missing:
        core.read_namespaced_config_map("py-cm", namespace)
    assert missing.value.status == 404
