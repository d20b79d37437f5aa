"""The controller manager as it runs in production (the console script) against the real apiserver.

Every test runs twice: with the daemon's informers fed by RabbitMQ, and following the
apiserver's HTTP watch. No kubelet runs here: the tests play its part and write the
pods' status (IP, Ready condition) through the status subresource.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import resolve
from tests.conftest import ApiServerProcess, ControllerManagerProcess, RabbitMQProcess, serving, wait_for

PODS = resolve("pods")
SERVICES = resolve("services")
ENDPOINTS = resolve("endpoints")
NODE = "cm-test-node"


@pytest.fixture(scope="module", params=["rabbitmq", "http-watch"])
def manager(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
            rabbitmq: RabbitMQProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver, "--controllers",
                                       "endpoints")
    with serving(process, rabbitmq if request.param == "rabbitmq" else None):
        yield process


# --- objects ----------------------------------------------------------------------------------------


def service(name: str, selector: dict[str, str] | None = None, ports: list[dict] | None = None,
            **spec: Any) -> dict:
    ports = [{"name": "http", "port": 80, "targetPort": 8080}] if ports is None else ports
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"team": "shop"}},
            "spec": {"ports": ports, **spec}}
    if selector is not None:
        body["spec"]["selector"] = selector
    return body


def pod(name: str, labels: dict[str, str], ports: list[dict] | None = None) -> dict:
    """A pod already placed on a node (which need not exist: no kubelet runs here)."""
    container = {"name": "main", "image": "busybox", **({"ports": ports} if ports else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": NODE, "containers": [container]}}


def set_status(api: ApiClient, namespace: str, name: str, ip: str | None, ready: bool) -> None:
    """Report the pod running with ``ip`` (if any) and Ready as given, as the kubelet would."""
    status: dict[str, Any] = {"phase": "Running",
                              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    api.patch(PODS, name, {"status": status}, namespace, subresource="status")


def start_pod(api: ApiClient, namespace: str, name: str, labels: dict[str, str], ip: str | None, ready: bool = True,
              ports: list[dict] | None = None) -> None:
    api.create(PODS, pod(name, labels, ports), namespace)
    set_status(api, namespace, name, ip, ready)


# --- reading Endpoints --------------------------------------------------------------------------------


def get_endpoints(api: ApiClient, namespace: str, name: str) -> dict | None:
    try:
        return api.get(ENDPOINTS, name, namespace)
    except NotFound:
        return None


def listed(endpoints: dict | None) -> dict[str, list[str]]:
    """``{"ready": [...], "not_ready": [...]}``: the pod names the Endpoints list, sorted."""
    ready: list[str] = []
    not_ready: list[str] = []
    for subset in (endpoints or {}).get("subsets") or []:
        ready += [item["targetRef"]["name"] for item in subset.get("addresses") or []]
        not_ready += [item["targetRef"]["name"] for item in subset.get("notReadyAddresses") or []]
    return {"ready": sorted(ready), "not_ready": sorted(not_ready)}


def wait_listed(api: ApiClient, namespace: str, name: str, manager: ControllerManagerProcess,
                ready: list[str], not_ready: list[str] = ()) -> None:
    wait_for(lambda: listed(get_endpoints(api, namespace, name)),
             {"ready": sorted(ready), "not_ready": sorted(not_ready)}, manager)


# --- tests --------------------------------------------------------------------------------------------


def test_pods_move_between_ready_and_not_ready_addresses(manager, api, namespace):
    api.create(SERVICES, service("web", {"app": "web"}), namespace)
    start_pod(api, namespace, "a", {"app": "web"}, "10.244.1.10")
    start_pod(api, namespace, "b", {"app": "web"}, "10.244.1.11", ready=False)
    start_pod(api, namespace, "no-ip-yet", {"app": "web"}, None)
    start_pod(api, namespace, "other", {"app": "db"}, "10.244.1.12")
    wait_listed(api, namespace, "web", manager, ready=["a"], not_ready=["b"])

    endpoints = get_endpoints(api, namespace, "web")
    assert endpoints["metadata"]["labels"]["team"] == "shop"
    assert endpoints["subsets"] == [{
        "addresses": [{"ip": "10.244.1.10", "nodeName": NODE, "targetRef": {
            "kind": "Pod", "namespace": namespace, "name": "a",
            "uid": api.get(PODS, "a", namespace)["metadata"]["uid"]}}],
        "notReadyAddresses": [{"ip": "10.244.1.11", "nodeName": NODE, "targetRef": {
            "kind": "Pod", "namespace": namespace, "name": "b",
            "uid": api.get(PODS, "b", namespace)["metadata"]["uid"]}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }]

    set_status(api, namespace, "a", "10.244.1.10", ready=False)
    set_status(api, namespace, "b", "10.244.1.11", ready=True)
    set_status(api, namespace, "no-ip-yet", "10.244.1.13", ready=True)
    wait_listed(api, namespace, "web", manager, ready=["b", "no-ip-yet"], not_ready=["a"])
    metrics = httpx.get(manager.metrics_url, timeout=5).text
    assert 'minik8s_controller_syncs_total{controller="endpoints",result="success"}' in metrics


def test_a_named_target_port_resolves_per_pod(manager, api, namespace):
    api.create(SERVICES, service("api", {"app": "api"}, ports=[{"name": "web", "port": 80, "targetPort": "http"}]),
               namespace)
    start_pod(api, namespace, "v1", {"app": "api"}, "10.244.2.10", ports=[{"name": "http", "containerPort": 8080}])
    start_pod(api, namespace, "v2", {"app": "api"}, "10.244.2.11", ports=[{"name": "http", "containerPort": 9090}])
    start_pod(api, namespace, "unnamed", {"app": "api"}, "10.244.2.12", ports=[{"containerPort": 8080}])
    wait_listed(api, namespace, "api", manager, ready=["v1", "v2"])
    by_port = {subset["ports"][0]["port"]: [item["ip"] for item in subset["addresses"]]
               for subset in get_endpoints(api, namespace, "api")["subsets"]}
    assert by_port == {8080: ["10.244.2.10"], 9090: ["10.244.2.11"]}


def test_a_pod_leaves_when_relabelled_or_terminating(manager, api, namespace):
    api.create(SERVICES, service("web", {"app": "web"}), namespace)
    for index, name in enumerate(("stays", "relabelled", "deleted")):
        start_pod(api, namespace, name, {"app": "web"}, f"10.244.3.{10 + index}")
    wait_listed(api, namespace, "web", manager, ready=["deleted", "relabelled", "stays"])
    api.patch(PODS, "relabelled", {"metadata": {"labels": {"app": "retired"}}}, namespace)
    api.delete(PODS, "deleted", namespace)  # graceful: it stays, terminating, until a kubelet would remove it
    assert api.get(PODS, "deleted", namespace)["metadata"].get("deletionTimestamp")
    wait_listed(api, namespace, "web", manager, ready=["stays"])
    api.patch(PODS, "relabelled", {"metadata": {"labels": {"app": "web"}}}, namespace)
    wait_listed(api, namespace, "web", manager, ready=["relabelled", "stays"])


def test_deleting_a_service_deletes_its_endpoints(manager, api, namespace):
    api.create(SERVICES, service("web", {"app": "web"}), namespace)
    start_pod(api, namespace, "a", {"app": "web"}, "10.244.4.10")
    wait_listed(api, namespace, "web", manager, ready=["a"])
    api.delete(SERVICES, "web", namespace)
    wait_for(lambda: get_endpoints(api, namespace, "web"), None, manager)


def test_endpoints_of_a_service_without_selector_are_left_to_the_user(manager, api, namespace):
    api.create(SERVICES, service("external", ports=[{"port": 5432}]), namespace)
    manual = api.create(ENDPOINTS, {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "external"},
                                    "subsets": [{"addresses": [{"ip": "192.0.2.7"}], "ports": [{"port": 5432}]}]},
                        namespace)
    # A Service the controller does manage, created after: once its Endpoints appear, the
    # controller has gone past the selector-less one.
    api.create(SERVICES, service("marker", {"app": "marker"}), namespace)
    wait_for(lambda: get_endpoints(api, namespace, "marker") is not None, True, manager)
    assert get_endpoints(api, namespace, "external") == manual

    api.delete(SERVICES, "external", namespace)
    api.delete(SERVICES, "marker", namespace)
    wait_for(lambda: get_endpoints(api, namespace, "marker"), None, manager)
    assert get_endpoints(api, namespace, "external") == manual


def test_changes_made_while_the_manager_was_killed_converge_after_restart(manager, api, namespace):
    api.create(SERVICES, service("kept", {"app": "kept"}), namespace)
    api.create(SERVICES, service("doomed", {"app": "doomed"}), namespace)
    start_pod(api, namespace, "k1", {"app": "kept"}, "10.244.5.10")
    start_pod(api, namespace, "d1", {"app": "doomed"}, "10.244.5.11")
    wait_listed(api, namespace, "kept", manager, ready=["k1"])
    wait_listed(api, namespace, "doomed", manager, ready=["d1"])

    manager.kill()
    try:
        set_status(api, namespace, "k1", "10.244.5.10", ready=False)
        start_pod(api, namespace, "k2", {"app": "kept"}, "10.244.5.12")
        api.delete(SERVICES, "doomed", namespace)
        api.create(SERVICES, service("born", {"app": "kept"}, clusterIP="None"), namespace)
    finally:
        manager.start()

    wait_listed(api, namespace, "kept", manager, ready=["k2"], not_ready=["k1"])
    wait_for(lambda: get_endpoints(api, namespace, "doomed"), None, manager)
    wait_listed(api, namespace, "born", manager, ready=["k2"], not_ready=["k1"])
    assert get_endpoints(api, namespace, "born")["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
