"""The Endpoints controller: the subsets it computes, the selector index, and sync against a fake API."""

from __future__ import annotations

import copy
import itertools

import pytest

from daemons.api.errors import Conflict, NotFound
from daemons.controllers.context import ControllerContext
from daemons.controllers.controllers import check_selection, select_controllers
from daemons.controllers.endpoints import (
    CONTROLLER_NAME,
    HEADLESS_LABEL,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    SLICE_CONTROLLER_NAME,
    SLICE_MANAGED_BY_LABEL,
    EndpointsController,
    SelectorIndex,
    desired_slice,
    endpoint_subsets,
    endpoints_labels,
    slice_contents,
)
from daemons.controllers.informers import InformerFactory
from daemons.controllers.settings import ControllerManagerSettings
from daemons.machinery.controller import TemporaryError

pytestmark = pytest.mark.unit

REVISIONS = itertools.count(100)


def stamp(obj):
    obj["metadata"]["resourceVersion"] = str(next(REVISIONS))
    return obj


def service(name="web", selector=None, ports=None, namespace="ns", labels=None, **spec):
    selector = {"app": "web"} if selector is None else selector
    ports = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}] if ports is None else ports
    metadata = {"name": name, "namespace": namespace, "uid": f"uid-svc-{name}"}
    if labels:
        metadata["labels"] = labels
    return stamp({"apiVersion": "v1", "kind": "Service", "metadata": metadata,
                  "spec": {"selector": selector, "ports": ports, "clusterIP": "10.96.0.10", **spec}})


def pod(name, ip="10.1.0.1", ready=True, labels=None, namespace="ns", node="n1", phase="Running", ports=(),
        deleting=False, **spec):
    metadata = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                "labels": {"app": "web"} if labels is None else labels}
    if deleting:
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    container = {"name": "c", "image": "busybox", "ports": [dict(port) for port in ports]}
    return stamp({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                  "spec": {"nodeName": node, "containers": [container], **spec}, "status": status})


def address(name, ip, node="n1", namespace="ns"):
    return {"ip": ip, "nodeName": node,
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": name, "uid": f"uid-{name}"}}


HTTP = {"name": "http", "port": 80, "protocol": "TCP"}


# --- endpoint_subsets -------------------------------------------------------------------------------


def test_ready_and_not_ready_pods_are_listed_apart_sorted_by_ip():
    pods = [pod("b", "10.1.0.9"), pod("a", "10.1.0.2"), pod("c", "10.1.0.5", ready=False)]
    assert endpoint_subsets(service(), pods) == [{
        "addresses": [address("a", "10.1.0.2"), address("b", "10.1.0.9")],
        "notReadyAddresses": [address("c", "10.1.0.5")],
        "ports": [{**HTTP, "port": 8080}],
    }]


def test_pods_without_ip_finished_terminating_elsewhere_or_unselected_are_left_out():
    pods = [pod("no-ip", ip=None), pod("done", phase="Succeeded"), pod("failed", phase="Failed"),
            pod("leaving", deleting=True), pod("other-ns", namespace="other"), pod("other-app", labels={"app": "x"}),
            pod("kept", "10.1.0.7")]
    assert endpoint_subsets(service(), pods) == [{"addresses": [address("kept", "10.1.0.7")],
                                                  "ports": [{**HTTP, "port": 8080}]}]


def test_publish_not_ready_addresses_lists_every_pod_as_ready_even_terminating():
    pods = [pod("a", "10.1.0.1", ready=False), pod("b", "10.1.0.2", deleting=True)]
    subsets = endpoint_subsets(service(publishNotReadyAddresses=True), pods)
    assert subsets == [{"addresses": [address("a", "10.1.0.1"), address("b", "10.1.0.2")],
                        "ports": [{**HTTP, "port": 8080}]}]


def test_a_named_target_port_resolves_per_pod_and_groups_pods_by_their_ports():
    svc = service(ports=[{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"},
                         {"name": "metrics", "port": 9100, "targetPort": 9100, "protocol": "TCP"}])
    pods = [pod("old", "10.1.0.3", ports=[{"name": "web", "containerPort": 8080, "protocol": "TCP"}]),
            pod("new", "10.1.0.1", ports=[{"name": "web", "containerPort": 8081, "protocol": "TCP"}]),
            pod("new2", "10.1.0.2", ports=[{"name": "web", "containerPort": 8081}]),
            pod("unnamed", "10.1.0.4", ports=[{"containerPort": 8080}]),
            pod("udp", "10.1.0.5", ports=[{"name": "web", "containerPort": 8082, "protocol": "UDP"}])]
    metrics = {"name": "metrics", "port": 9100, "protocol": "TCP"}
    assert endpoint_subsets(svc, pods) == [
        {"addresses": [address("old", "10.1.0.3")], "ports": [{**HTTP, "port": 8080}, metrics]},
        {"addresses": [address("new", "10.1.0.1"), address("new2", "10.1.0.2")],
         "ports": [{**HTTP, "port": 8081}, metrics]},
        {"addresses": [address("unnamed", "10.1.0.4"), address("udp", "10.1.0.5")], "ports": [metrics]},
    ]


def test_a_pod_without_the_only_named_port_is_left_out():
    svc = service(ports=[{"port": 80, "targetPort": "web", "protocol": "TCP"}])
    pods = [pod("has", "10.1.0.1", ports=[{"name": "web", "containerPort": 8080}]), pod("lacks", "10.1.0.2")]
    assert endpoint_subsets(svc, pods) == [{"addresses": [address("has", "10.1.0.1")],
                                            "ports": [{"port": 8080, "protocol": "TCP"}]}]


def test_headless_without_ports_lists_addresses_only_and_a_portless_service_nothing():
    pods = [pod("a", "10.1.0.1", hostname="a", subdomain="web")]
    assert endpoint_subsets(service(ports=[], clusterIP="None"), pods) == [
        {"addresses": [{**address("a", "10.1.0.1"), "hostname": "a"}]}]
    assert endpoint_subsets(service(ports=[]), pods) == []


def test_a_service_without_selector_has_no_computed_subsets():
    assert endpoint_subsets(service(selector={}), [pod("a")]) == []


def test_output_does_not_depend_on_pod_order():
    pods = [pod(f"p{index}", f"10.1.0.{index}", ready=index % 2 == 0) for index in range(1, 8)]
    assert endpoint_subsets(service(), pods) == endpoint_subsets(service(), list(reversed(pods)))


def test_labels_copy_the_service_and_mark_headless_and_ours():
    assert endpoints_labels(service(labels={"tier": "front", HEADLESS_LABEL: ""})) == {
        "tier": "front", MANAGED_BY_LABEL: CONTROLLER_NAME}
    assert endpoints_labels(service(clusterIP="None")) == {HEADLESS_LABEL: "", MANAGED_BY_LABEL: CONTROLLER_NAME}


# --- the selector index -----------------------------------------------------------------------------


def test_the_index_finds_the_services_whose_whole_selector_a_pod_matches():
    index = SelectorIndex()
    index.set(service("web"))
    index.set(service("web-canary", selector={"app": "web", "track": "canary"}))
    index.set(service("db", selector={"app": "db"}))
    index.set(service("manual", selector={}))
    index.set(service("elsewhere", namespace="other"))
    assert index.matching(pod("p")) == {"ns/web"}
    assert index.matching(pod("p", labels={"app": "web", "track": "canary"})) == {"ns/web", "ns/web-canary"}
    index.set(service("web", selector={"app": "web2"}))
    assert index.matching(pod("p")) == set()
    index.remove("ns/web-canary")
    assert index.matching(pod("p", labels={"app": "web", "track": "canary"})) == set()


# --- sync against a fake API ------------------------------------------------------------------------


class FakeApi:
    """Stores the Endpoints and, apart, the EndpointSlices written through it; Endpoints errors can be scripted
    per verb."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.errors: dict[str, Exception] = {}
        self.slices: dict[str, dict] = {}
        self.slice_calls: list[tuple[str, str]] = []
        self.names = itertools.count()

    def _call(self, resource, verb, key):
        if resource.kind == "EndpointSlice":
            self.slice_calls.append((verb, key))
            return self.slices
        self.calls.append((verb, key))
        if verb in self.errors:
            raise self.errors.pop(verb)
        return self.objects

    def create(self, resource, body, namespace=None, params=None):
        body = stamp(copy.deepcopy(body))
        if "generateName" in body["metadata"]:
            body["metadata"]["name"] = f"{body['metadata'].pop('generateName')}{next(self.names)}"
        key = f"{namespace}/{body['metadata']['name']}"
        self._call(resource, "create", key)[key] = body
        return body

    def replace(self, resource, body, namespace=None, subresource=None):
        key = f"{namespace}/{body['metadata']['name']}"
        store = self._call(resource, "replace", key)
        store[key] = stamp(copy.deepcopy(body))
        return store[key]

    def delete(self, resource, name, namespace=None, **_):
        key = f"{namespace}/{name}"
        if self._call(resource, "delete", key).pop(key, None) is None:
            raise NotFound("gone")
        return {}


@pytest.fixture
def api():
    return FakeApi()


@pytest.fixture
def controller(api):
    return EndpointsController(ControllerContext(api, InformerFactory(api), workers=1))


def feed(informer, event_type, obj):
    informer.handle_event({"type": event_type, "object": obj})


def drain(controller):
    while controller.controller.process_next(timeout=0):
        pass


def test_a_service_gets_its_endpoints_and_unchanged_inputs_write_nothing(api, controller):
    feed(controller.pods, "ADDED", pod("a", "10.1.0.1"))
    feed(controller.services, "ADDED", service(labels={"tier": "front"}))
    drain(controller)
    assert api.calls == [("create", "ns/web")]
    stored = api.objects["ns/web"]
    assert stored["metadata"]["labels"] == {"tier": "front", MANAGED_BY_LABEL: CONTROLLER_NAME}
    assert stored["subsets"] == [{"addresses": [address("a", "10.1.0.1")], "ports": [{**HTTP, "port": 8080}]}]
    controller.sync("ns/web")  # the cache has not seen our write yet: compared with the write itself
    feed(controller.endpoints, "ADDED", copy.deepcopy(stored))
    drain(controller)
    controller.sync("ns/web")
    assert api.calls == [("create", "ns/web")]


def test_pod_changes_reach_the_endpoints_through_the_index(api, controller):
    ready = pod("a", "10.1.0.1")
    feed(controller.pods, "ADDED", ready)
    feed(controller.services, "ADDED", service())
    drain(controller)
    not_ready = stamp(copy.deepcopy(ready))
    not_ready["status"]["conditions"][0]["status"] = "False"
    feed(controller.pods, "MODIFIED", not_ready)
    drain(controller)
    assert api.objects["ns/web"]["subsets"][0] == {"notReadyAddresses": [address("a", "10.1.0.1")],
                                                   "ports": [{**HTTP, "port": 8080}]}
    relabelled = stamp(copy.deepcopy(not_ready))
    relabelled["metadata"]["labels"] = {"app": "other"}
    feed(controller.pods, "MODIFIED", relabelled)
    drain(controller)
    assert api.objects["ns/web"]["subsets"] == []
    assert [verb for verb, _ in api.calls] == ["create", "replace", "replace"]


def test_an_annotation_change_on_a_pod_enqueues_nothing(api, controller):
    original = pod("a")
    feed(controller.pods, "ADDED", original)
    feed(controller.services, "ADDED", service())
    drain(controller)
    annotated = stamp(copy.deepcopy(original))
    annotated["metadata"]["annotations"] = {"note": "x"}
    feed(controller.pods, "MODIFIED", annotated)
    assert len(controller.controller.queue) == 0


def test_a_service_without_selector_is_left_alone(api, controller):
    feed(controller.services, "ADDED", service("kubernetes", selector={}))
    manual = stamp({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "ns"},
                    "subsets": [{"addresses": [{"ip": "192.0.2.1"}], "ports": [{"port": 6443, "protocol": "TCP"}]}]})
    feed(controller.endpoints, "ADDED", manual)
    controller.sync("ns/kubernetes")
    feed(controller.services, "DELETED", stamp(copy.deepcopy(controller.services.store.get("ns", "kubernetes"))))
    assert len(controller.controller.queue) == 1
    drain(controller)
    assert api.calls == []


def test_a_deleted_service_takes_its_endpoints_with_it(api, controller):
    svc = service()
    feed(controller.services, "ADDED", svc)
    drain(controller)
    feed(controller.endpoints, "ADDED", copy.deepcopy(api.objects["ns/web"]))
    feed(controller.services, "DELETED", stamp(copy.deepcopy(svc)))
    drain(controller)
    assert api.calls == [("create", "ns/web"), ("delete", "ns/web")]
    assert "ns/web" not in api.objects


def test_our_endpoints_left_from_a_service_deleted_meanwhile_are_deleted_at_start(api, controller):
    ours = stamp({"apiVersion": "v1", "kind": "Endpoints", "metadata": {
        "name": "gone", "namespace": "ns", "labels": {MANAGED_BY_LABEL: CONTROLLER_NAME}}, "subsets": []})
    someone_elses = stamp({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "theirs", "namespace": "ns"}})
    api.objects["ns/gone"] = ours
    feed(controller.endpoints, "ADDED", ours)
    feed(controller.endpoints, "ADDED", someone_elses)
    drain(controller)
    assert api.calls == [("delete", "ns/gone")]


def test_deleted_endpoints_of_a_live_service_come_back(api, controller):
    feed(controller.services, "ADDED", service())
    drain(controller)
    stored = copy.deepcopy(api.objects.pop("ns/web"))
    feed(controller.endpoints, "ADDED", stored)
    feed(controller.endpoints, "DELETED", stamp(copy.deepcopy(stored)))
    drain(controller)
    assert api.calls == [("create", "ns/web"), ("create", "ns/web")]


def test_a_conflict_is_retried_and_a_vanished_object_is_a_temporary_error(api, controller):
    feed(controller.services, "ADDED", service())
    feed(controller.endpoints, "ADDED", stamp({"apiVersion": "v1", "kind": "Endpoints",
                                               "metadata": {"name": "web", "namespace": "ns"}}))
    api.errors["replace"] = Conflict("changed")
    with pytest.raises(Conflict):
        controller.sync("ns/web")
    api.errors["replace"] = NotFound("gone")
    with pytest.raises(TemporaryError):
        controller.sync("ns/web")
    controller.sync("ns/web")
    assert api.objects["ns/web"]["metadata"]["labels"] == {MANAGED_BY_LABEL: CONTROLLER_NAME}


# --- EndpointSlices ---------------------------------------------------------------------------------


def test_a_slice_lists_terminating_pods_with_their_conditions_and_names_unnamed_ports():
    pods = [pod("b", "10.1.0.2", ready=False), pod("a", "10.1.0.1"), pod("c", "10.1.0.3", deleting=True),
            pod("gone", "10.1.0.4", phase="Succeeded")]
    endpoints, ports = slice_contents(service(ports=[{"port": 80, "targetPort": 8080, "protocol": "TCP"}]), pods)
    assert [(e["addresses"], e["conditions"]) for e in endpoints] == [
        (["10.1.0.1"], {"ready": True, "serving": True, "terminating": False}),
        (["10.1.0.2"], {"ready": False, "serving": False, "terminating": False}),
        (["10.1.0.3"], {"ready": False, "serving": True, "terminating": True})]
    assert endpoints[0]["targetRef"] == {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"}
    assert endpoints[0]["nodeName"] == "n1"
    assert ports == [{"name": "", "port": 8080, "protocol": "TCP"}]


def test_a_new_slice_is_named_after_and_owned_by_its_service():
    created = desired_slice(service(labels={"tier": "front"}), [pod("a")], None)
    assert created["metadata"]["generateName"] == "web-"
    assert created["metadata"]["labels"] == {"tier": "front", SERVICE_NAME_LABEL: "web",
                                             SLICE_MANAGED_BY_LABEL: SLICE_CONTROLLER_NAME}
    assert created["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                                       "uid": "uid-svc-web", "controller": True,
                                                       "blockOwnerDeletion": True}]
    assert created["addressType"] == "IPv4"
    stored = stamp({**created, "metadata": {**created["metadata"], "name": "web-x"}})
    assert desired_slice(service(labels={"tier": "front"}), [pod("a")], stored) is None


def test_a_service_gets_one_slice_that_follows_its_pods_and_comes_back_when_deleted(api, controller):
    feed(controller.pods, "ADDED", pod("a", "10.1.0.1"))
    feed(controller.services, "ADDED", service())
    drain(controller)
    assert api.slice_calls == [("create", "ns/web-0")]
    controller.sync("ns/web")  # the cache has not seen the slice yet: no second one is created
    feed(controller.slices, "ADDED", copy.deepcopy(api.slices["ns/web-0"]))
    drain(controller)
    feed(controller.pods, "ADDED", pod("b", "10.1.0.2"))
    drain(controller)
    assert [e["addresses"] for e in api.slices["ns/web-0"]["endpoints"]] == [["10.1.0.1"], ["10.1.0.2"]]
    feed(controller.slices, "DELETED", api.slices.pop("ns/web-0"))
    drain(controller)
    assert api.slice_calls == [("create", "ns/web-0"), ("replace", "ns/web-0"), ("create", "ns/web-1")]


def test_a_deleted_service_takes_its_slice_and_a_duplicate_slice_goes(api, controller):
    svc = service()
    feed(controller.services, "ADDED", svc)
    drain(controller)
    first = api.slices["ns/web-0"]
    duplicate = stamp({**copy.deepcopy(first), "metadata": {**copy.deepcopy(first["metadata"]), "name": "web-z"}})
    api.slices["ns/web-z"] = duplicate
    feed(controller.slices, "ADDED", copy.deepcopy(first))
    feed(controller.slices, "ADDED", duplicate)
    drain(controller)
    assert "ns/web-z" not in api.slices
    feed(controller.services, "DELETED", stamp(copy.deepcopy(svc)))
    drain(controller)
    assert api.slices == {}


# --- choosing controllers ---------------------------------------------------------------------------


def test_controllers_are_chosen_as_kube_controller_manager_does():
    known = ["endpoints", "replicaset"]
    assert select_controllers(["*"], known) == known
    assert select_controllers(["*", "-endpoints"], known) == ["replicaset"]
    assert select_controllers(["endpoints"], known) == ["endpoints"]
    assert ControllerManagerSettings().controllers == ["*"]
    with pytest.raises(ValueError, match="unknown controller"):
        check_selection(["nope"], known)
