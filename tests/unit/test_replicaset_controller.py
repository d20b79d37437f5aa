"""The ReplicaSet controller: its pure choices, and sync() against fake caches and a fake API."""

from __future__ import annotations

import copy
import itertools

import pytest

from daemons.api.errors import Forbidden, NotFound
from daemons.apiserver.patch import json_merge_patch, json_patch
from daemons.controllers.context import ControllerContext
from daemons.controllers.controllers import CONTROLLERS
from daemons.controllers.informers import InformerFactory
from daemons.controllers.ownership import controller_of
from daemons.controllers.replicaset import (
    BURST_REPLICAS,
    REPLICA_FAILURE,
    ReplicaSetController,
    ReplicationManager,
    burst_sizes,
    calculate_status,
    pods_to_delete,
    status_patch,
)
from daemons.machinery.controller import TemporaryError

pytestmark = pytest.mark.unit

REVISIONS = itertools.count(100)
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
UIDS = itertools.count(1)


def stamp(obj):
    obj["metadata"]["resourceVersion"] = str(next(REVISIONS))
    return obj


def at(seconds_ago: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(NOW - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def replicaset(name="web", replicas=3, min_ready=0, deleting=False, generation=1, status=None):
    metadata = {"name": name, "namespace": "ns", "uid": f"uid-rs-{name}", "generation": generation}
    if deleting:
        metadata["deletionTimestamp"] = at(0)
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name, "tier": "front"}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    if min_ready:
        spec["minReadySeconds"] = min_ready
    body = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata, "spec": spec}
    if status is not None:
        body["status"] = status
    return stamp(body)


def owner_ref(rs):
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
            "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def pod(name, owner=None, labels=None, node="n1", phase="Running", ready=True, ready_for=3600.0, age=3600.0,
        restarts=0, deleting=False):
    metadata = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": at(age),
                "labels": {"app": "web", "tier": "front"} if labels is None else labels}
    if owner is not None:
        metadata["ownerReferences"] = [owner_ref(owner)]
    if deleting:
        metadata["deletionTimestamp"] = at(0)
    status = {"phase": phase,
              "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                              "lastTransitionTime": at(ready_for)}],
              "containerStatuses": [{"name": "c", "restartCount": restarts}]}
    return stamp({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                  "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}, "status": status})


# --- pure pieces ------------------------------------------------------------------------------------


def test_bursts_double_from_one():
    assert burst_sizes(0) == []
    assert burst_sizes(1) == [1]
    assert burst_sizes(10) == [1, 2, 4, 3]
    assert burst_sizes(BURST_REPLICAS) == [1, 2, 4, 8, 16, 32, 64, 128, 245]


def test_scale_down_removes_the_pods_least_worth_keeping_first():
    pods = [
        pod("running-old", age=7200),
        pod("running-new", age=60, ready_for=60),
        pod("unscheduled", node="", phase="Pending", ready=False),
        pod("pending", phase="Pending", ready=False),
        pod("unknown", phase="Unknown", ready=False),
        pod("not-ready", ready=False),
        pod("restarting", restarts=5),
    ]
    order = [item["metadata"]["name"] for item in pods_to_delete(pods, len(pods))]
    assert order == ["unscheduled", "pending", "unknown", "not-ready", "running-new", "restarting", "running-old"]
    assert [item["metadata"]["name"] for item in pods_to_delete(pods, 2)] == ["unscheduled", "pending"]


def test_scale_down_treats_unknown_times_as_newest():
    untimed = pod("untimed")
    untimed["status"]["conditions"][0].pop("lastTransitionTime")
    unborn = pod("unborn", ready=False)
    unborn["metadata"].pop("creationTimestamp")
    pods = [pod("timed"), untimed, pod("old-not-ready", ready=False), unborn]
    assert [item["metadata"]["name"] for item in pods_to_delete(pods, 4)] == [
        "unborn", "old-not-ready", "untimed", "timed"]


def test_status_counts_ready_and_available_after_min_ready_seconds():
    rs = replicaset(replicas=4, min_ready=30, generation=3)
    pods = [pod("a", ready_for=100), pod("b", ready_for=10), pod("c", ready=False),
            pod("d", labels={"app": "web"})]  # matches the selector but lacks the template's tier label
    status, wait = calculate_status(rs, pods, None, "FailedCreate", NOW)
    assert status == {"replicas": 4, "fullyLabeledReplicas": 3, "readyReplicas": 3, "availableReplicas": 2,
                      "observedGeneration": 3}
    assert wait == pytest.approx(20.0)


def test_a_manage_error_sets_replica_failure_and_success_clears_it():
    rs = replicaset()
    status, _ = calculate_status(rs, [], "pods \"web-\" is forbidden: exceeded quota", "FailedCreate", NOW)
    assert status["conditions"] == [{"type": REPLICA_FAILURE, "status": "True", "reason": "FailedCreate",
                                     "message": "pods \"web-\" is forbidden: exceeded quota",
                                     "lastTransitionTime": at(0)}]
    failed = replicaset(status=status)
    again, _ = calculate_status(failed, [], "another error", "FailedCreate", NOW + 5)
    assert again["conditions"] == status["conditions"]  # kept as first reported
    cleared, _ = calculate_status(failed, [], None, "FailedCreate", NOW)
    assert "conditions" not in cleared


def test_status_is_written_only_when_it_changed():
    desired = {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 0, "availableReplicas": 0,
               "observedGeneration": 1}
    patch = status_patch(None, desired)
    assert patch == {"status": {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": None,
                                "availableReplicas": None, "observedGeneration": 1, "conditions": None}}
    stored = json_merge_patch({"status": {}}, patch)["status"]
    assert stored == {"replicas": 2, "fullyLabeledReplicas": 2, "observedGeneration": 1}
    assert status_patch(stored, desired) is None
    assert status_patch({"replicas": 0}, {**desired, "replicas": 0, "fullyLabeledReplicas": 0}) is not None


# --- sync against fake caches and a fake API --------------------------------------------------------


class FakeApi:
    """Keeps the pods and ReplicaSets written through it; the informers only see what a test feeds them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.create_error: Exception | None = None
        self.names = itertools.count(1)

    def create(self, resource, body, namespace=None, params=None):
        if resource.kind == "Event":
            return body
        if self.create_error is not None:
            self.calls.append(("create-failed", resource.kind))
            raise self.create_error
        obj = copy.deepcopy(body)
        metadata = obj["metadata"]
        metadata.setdefault("name", f"{metadata.pop('generateName', 'x-')}{next(self.names):05d}")
        metadata.update(namespace=namespace, uid=f"uid-{metadata['name']}-{next(UIDS)}", creationTimestamp=at(0))
        self.objects[(resource.kind, metadata["name"])] = stamp(obj)
        self.calls.append(("create", metadata["name"]))
        return copy.deepcopy(obj)

    def get(self, resource, name, namespace=None, subresource=None):
        if (resource.kind, name) not in self.objects:
            raise NotFound(f"{name} not found")
        return copy.deepcopy(self.objects[(resource.kind, name)])

    def delete(self, resource, name, namespace=None, **_):
        self.calls.append(("delete", name))
        if self.objects.pop((resource.kind, name), None) is None:
            raise NotFound(f"{name} not found")
        return {}

    def patch(self, resource, name, patch, namespace=None, patch_type="merge", subresource=None, **_):
        if resource.kind == "Event":
            return {}
        current = self.objects.get((resource.kind, name))
        if current is None:
            raise NotFound(f"{name} not found")
        patched = json_patch(current, patch) if patch_type == "json" else json_merge_patch(current, patch)
        self.objects[(resource.kind, name)] = stamp(patched)
        self.calls.append((f"patch-{subresource or patch_type}", name))
        return copy.deepcopy(patched)

    def verbs(self):
        return [verb for verb, _ in self.calls]


@pytest.fixture
def api():
    return FakeApi()


@pytest.fixture
def rsc(api):
    return ReplicaSetController(ControllerContext(api, InformerFactory(api), workers=1), clock=lambda: NOW)


def feed(informer, event_type, obj):
    informer.handle_event({"type": event_type, "object": copy.deepcopy(obj)})


def add_rs(api, rsc, rs):
    api.objects[("ReplicaSet", rs["metadata"]["name"])] = copy.deepcopy(rs)
    feed(rsc.replicasets, "ADDED", rs)


def created_pods(api):
    return [obj for (kind, _), obj in api.objects.items() if kind == "Pod"]


def deliver_created(api, rsc):
    """The pod informer catches up with every pod the API holds."""
    for obj in created_pods(api):
        if rsc.pods.store.get_by_key(f"ns/{obj['metadata']['name']}") is None:
            feed(rsc.pods, "ADDED", obj)


def test_the_replicaset_controller_is_registered():
    assert CONTROLLERS["replicaset"] is ReplicaSetController


def test_scale_up_creates_from_the_template_with_a_controller_reference(api, rsc):
    rs = replicaset(replicas=3)
    add_rs(api, rsc, rs)
    rsc.sync("ns/web")
    pods = created_pods(api)
    assert len(pods) == 3
    for created in pods:
        assert created["metadata"]["name"].startswith("web-")
        assert created["metadata"]["labels"] == {"app": "web", "tier": "front"}
        assert controller_of(created) == owner_ref(rs)
        assert created["spec"] == rs["spec"]["template"]["spec"]
    assert api.objects[("ReplicaSet", "web")]["status"]["replicas"] == 0  # the cache has not seen them yet


def test_expectations_hold_the_next_sync_back_until_the_pods_are_seen(api, rsc):
    add_rs(api, rsc, replicaset(replicas=3))
    rsc.sync("ns/web")
    rsc.sync("ns/web")  # the watch is slow: no pod seen yet, nothing more created
    assert api.verbs().count("create") == 3
    deliver_created(api, rsc)
    rsc.sync("ns/web")
    assert api.verbs().count("create") == 3
    assert api.objects[("ReplicaSet", "web")]["status"]["replicas"] == 3


def test_a_failing_create_stops_the_slow_start_and_reports_it(api, rsc):
    add_rs(api, rsc, replicaset(replicas=10))
    api.create_error = Forbidden("pods \"web-\" is forbidden: exceeded quota: compute")
    with pytest.raises(TemporaryError):
        rsc.sync("ns/web")
    assert api.verbs().count("create-failed") == 1  # the first burst of one failed: the other nine were skipped
    status = api.objects[("ReplicaSet", "web")]["status"]
    assert status["conditions"][0]["type"] == REPLICA_FAILURE
    assert status["conditions"][0]["reason"] == "FailedCreate"
    assert "exceeded quota" in status["conditions"][0]["message"]
    api.create_error = None
    feed(rsc.replicasets, "MODIFIED", api.objects[("ReplicaSet", "web")])
    rsc.sync("ns/web")  # nothing is awaited from the failed or skipped creates
    assert api.verbs().count("create") == 10


def test_a_namespace_being_deleted_is_no_failure(api, rsc):
    add_rs(api, rsc, replicaset(replicas=2))
    api.create_error = Forbidden("unable to create new content in namespace ns because it is being terminated",
                                 details={"causes": [{"type": "NamespaceTerminating", "field": "metadata.namespace"}]})
    rsc.sync("ns/web")
    assert api.verbs().count("create-failed") == 2
    assert "conditions" not in api.objects[("ReplicaSet", "web")]["status"]
    assert rsc.expectations.satisfied("ns/web")


def test_bursts_grow_while_creates_succeed(api, rsc):
    add_rs(api, rsc, replicaset(replicas=600))
    rsc.sync("ns/web")
    assert api.verbs().count("create") == BURST_REPLICAS
    assert rsc.expectations.pending("ns/web") == (BURST_REPLICAS, 0)


def test_scale_down_deletes_the_surplus_once(api, rsc):
    rs = replicaset(replicas=1)
    add_rs(api, rsc, rs)
    for item in (pod("keep", owner=rs), pod("pending", owner=rs, phase="Pending", ready=False),
                 pod("newer", owner=rs, age=10, ready_for=10)):
        api.objects[("Pod", item["metadata"]["name"])] = item
        feed(rsc.pods, "ADDED", item)
    rsc.sync("ns/web")
    assert sorted(name for verb, name in api.calls if verb == "delete") == ["newer", "pending"]
    rsc.sync("ns/web")  # deletions not seen yet: nothing deleted twice
    assert api.verbs().count("delete") == 2
    terminating = copy.deepcopy(rsc.pods.store.get_by_key("ns/pending"))
    terminating["metadata"]["deletionTimestamp"] = at(0)
    feed(rsc.pods, "MODIFIED", stamp(terminating))
    feed(rsc.pods, "DELETED", stamp(copy.deepcopy(rsc.pods.store.get_by_key("ns/newer"))))
    assert rsc.expectations.satisfied("ns/web")
    rsc.sync("ns/web")
    assert api.verbs().count("delete") == 2
    assert api.objects[("ReplicaSet", "web")]["status"]["replicas"] == 1


def test_a_victim_deleted_by_someone_else_first_does_not_hold_the_replicaset_back(api, rsc):
    rs = replicaset(replicas=1)
    add_rs(api, rsc, rs)
    for item in (pod("keep", owner=rs), pod("gone", owner=rs, age=10, ready_for=10)):
        api.objects[("Pod", item["metadata"]["name"])] = item
        feed(rsc.pods, "ADDED", item)
    del api.objects[("Pod", "gone")]  # deleted elsewhere; its DELETED event reached the cache before our delete
    rsc.sync("ns/web")
    assert ("delete", "gone") in api.calls
    assert rsc.expectations.satisfied("ns/web")


def test_matching_orphans_are_adopted_and_relabelled_pods_released(api, rsc):
    rs = replicaset(replicas=2)
    add_rs(api, rsc, rs)
    orphan, mine = pod("orphan"), pod("mine", owner=rs, labels={"app": "other"})
    theirs = pod("theirs")
    theirs["metadata"]["ownerReferences"] = [{**owner_ref(rs), "uid": "uid-another", "name": "another"}]
    for item in (orphan, mine, theirs):
        api.objects[("Pod", item["metadata"]["name"])] = item
        feed(rsc.pods, "ADDED", item)
    rsc.sync("ns/web")
    assert controller_of(api.objects[("Pod", "orphan")]) == owner_ref(rs)
    assert "ownerReferences" not in api.objects[("Pod", "mine")]["metadata"]
    assert controller_of(api.objects[("Pod", "theirs")])["uid"] == "uid-another"
    assert api.verbs().count("create") == 1  # the adopted orphan counts; the released pod does not


def test_a_replicaset_being_deleted_creates_nothing(api, rsc):
    add_rs(api, rsc, replicaset(replicas=3, deleting=True))
    feed(rsc.pods, "ADDED", pod("orphan"))
    rsc.sync("ns/web")
    assert "create" not in api.verbs()
    assert "patch-json" not in api.verbs()  # no adoption either


def test_a_gone_replicaset_forgets_its_expectations(api, rsc):
    rs = replicaset(replicas=2)
    add_rs(api, rsc, rs)
    rsc.sync("ns/web")
    assert not rsc.expectations.satisfied("ns/web")
    feed(rsc.replicasets, "DELETED", stamp(copy.deepcopy(rs)))
    assert rsc.expectations.pending("ns/web") == (0, 0)
    rsc.sync("ns/web")
    assert api.verbs().count("create") == 2


def test_pod_events_enqueue_the_owner_or_the_selecting_replicasets(api, rsc):
    rs = replicaset(replicas=1)
    add_rs(api, rsc, rs)
    other = replicaset("other", replicas=1)
    add_rs(api, rsc, other)
    while rsc.controller.process_next(timeout=0):
        pass
    feed(rsc.pods, "ADDED", pod("orphan", labels={"app": "other"}))
    assert rsc.controller.queue.get(timeout=0) == "ns/other"
    rsc.controller.queue.done("ns/other")
    relabelled = copy.deepcopy(rsc.pods.store.get_by_key("ns/orphan"))
    relabelled["metadata"]["labels"] = {"app": "web"}
    feed(rsc.pods, "MODIFIED", stamp(relabelled))
    assert rsc.controller.queue.get(timeout=0) == "ns/web"
    rsc.controller.queue.done("ns/web")
    owned = pod("owned", owner=rs, labels={"app": "whatever"})
    feed(rsc.pods, "ADDED", owned)
    assert rsc.controller.queue.get(timeout=0) == "ns/web"  # by its owner, whatever its labels


def test_a_replication_controller_selects_by_its_label_map_and_owns_what_it_makes(api):
    manager = ReplicationManager(ControllerContext(api, InformerFactory(api), workers=1), clock=lambda: NOW)
    assert CONTROLLERS["replicationcontroller"] is ReplicationManager
    rc = stamp({"apiVersion": "v1", "kind": "ReplicationController",
                "metadata": {"name": "web", "namespace": "ns", "uid": "uid-rc", "generation": 1},
                "spec": {"replicas": 2, "selector": {"app": "web"},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    api.objects[("ReplicationController", "web")] = copy.deepcopy(rc)
    feed(manager.replicasets, "ADDED", rc)
    same_named_rs = replicaset()
    taken = pod("taken", owner=same_named_rs)  # a ReplicaSet's pod, though the names match: not the RC's
    orphan = pod("orphan", labels={"app": "web"})
    for item in (taken, orphan):
        api.objects[("Pod", item["metadata"]["name"])] = item
        feed(manager.pods, "ADDED", item)
    assert len(manager.controller.queue) == 1  # the orphan enqueued the RC its labels match
    manager.sync("ns/web")
    ref = {"apiVersion": "v1", "kind": "ReplicationController", "name": "web", "uid": "uid-rc", "controller": True,
           "blockOwnerDeletion": True}
    assert controller_of(api.objects[("Pod", "orphan")]) == ref
    made = [obj for obj in created_pods(api) if obj["metadata"]["name"].startswith("web-")]
    assert [controller_of(obj) for obj in made] == [ref]
    assert controller_of(api.objects[("Pod", "taken")])["kind"] == "ReplicaSet"
