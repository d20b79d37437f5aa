"""Deletion propagation: the apiserver's policy rules, the collector's decisions, and its syncs against a fake API."""

from __future__ import annotations

import copy
import itertools

import pytest

from cli.session import CLIError
from cli.verbs.delete import propagation_policy as cascade_policy
from daemons.api import errors
from daemons.api.resources import require
from daemons.apiserver.patch import PatchError, json_patch
from daemons.apiserver.registry import Registry, deletion_finalizers, propagation_policy
from daemons.controllers.context import ControllerContext
from daemons.controllers.controllers import select_controllers
from daemons.controllers.garbagecollector import (
    FOREGROUND_FINALIZER,
    ORPHAN_FINALIZER,
    DependentsIndex,
    GarbageCollector,
    OwnerState,
    Verdict,
    finalizer_duty,
    guarded,
    item_of,
    judge_dependent,
    owner_item,
    ownership_changed,
    watched_resources,
    without_finalizer,
    without_owners,
)
from daemons.controllers.informers import InformerFactory
from daemons.machinery.controller import TemporaryError

pytestmark = pytest.mark.unit

PODS = require("v1", "Pod")
REPLICASETS = require("apps/v1", "ReplicaSet")
DEPLOYMENTS = require("apps/v1", "Deployment")
NODES = require("v1", "Node")
LEASES = require("coordination.k8s.io/v1", "Lease")
REVISIONS = itertools.count(100)


def stamp(obj):
    obj["metadata"]["resourceVersion"] = str(next(REVISIONS))
    return obj


def ref(kind="ReplicaSet", name="web", uid="uid-rs", api_version="apps/v1"):
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def obj(kind="Pod", name="web-1", uid=None, owners=(), finalizers=None, deleting=False, namespace="ns"):
    api_version = "v1" if kind == "Pod" else "apps/v1"
    metadata = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    if owners:
        metadata["ownerReferences"] = [dict(owner) for owner in owners]
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if deleting:
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        metadata["deletionGracePeriodSeconds"] = 0
    return stamp({"apiVersion": api_version, "kind": kind, "metadata": metadata})


# --- the apiserver's side ---------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "policy"), [
    ({}, None),
    ({"propagationPolicy": "Foreground"}, "Foreground"),
    ({"propagationPolicy": "Background"}, "Background"),
    ({"propagationPolicy": "Orphan"}, "Orphan"),
    ({"orphanDependents": True}, "Orphan"),
    ({"orphanDependents": False}, "Background"),
])
def test_delete_options_name_a_policy(options, policy):
    assert propagation_policy(options) == policy


def test_an_unknown_policy_or_both_spellings_are_invalid_and_name_the_field():
    with pytest.raises(errors.Invalid) as unknown:
        propagation_policy({"propagationPolicy": "Sideways"})
    assert unknown.value.causes == [{"reason": "FieldValueNotSupported", "field": "propagationPolicy",
                                     "message": 'Unsupported value: "Sideways": supported values: "Foreground", '
                                                '"Background", "Orphan"'}]
    with pytest.raises(errors.Invalid) as both:
        propagation_policy({"propagationPolicy": "Orphan", "orphanDependents": True})
    assert both.value.causes[0]["field"] == "propagationPolicy"


def test_a_policy_replaces_the_collectors_finalizer_and_keeps_the_others():
    assert deletion_finalizers(["example.com/keep"], "Foreground") == ["example.com/keep", FOREGROUND_FINALIZER]
    assert deletion_finalizers([FOREGROUND_FINALIZER, "example.com/keep"], "Orphan") == ["example.com/keep",
                                                                                          ORPHAN_FINALIZER]
    assert deletion_finalizers([ORPHAN_FINALIZER], "Background") == []
    assert deletion_finalizers([ORPHAN_FINALIZER], None) == [ORPHAN_FINALIZER]


def test_background_removes_at_once_while_foreground_and_orphan_mark_the_object():
    replicaset = obj("ReplicaSet", "web")
    assert Registry._deletion_state(REPLICASETS, replicaset, None, "Background") is None
    assert Registry._deletion_state(REPLICASETS, replicaset, None, None) is None
    for policy, finalizer in (("Foreground", FOREGROUND_FINALIZER), ("Orphan", ORPHAN_FINALIZER)):
        marked = Registry._deletion_state(REPLICASETS, replicaset, None, policy)
        assert marked["metadata"]["finalizers"] == [finalizer]
        assert marked["metadata"]["deletionTimestamp"]
        assert marked["metadata"]["deletionGracePeriodSeconds"] == 0


def test_deleting_again_with_the_same_policy_changes_nothing_and_background_lets_it_go():
    marked = Registry._deletion_state(REPLICASETS, obj("ReplicaSet", "web"), None, "Foreground")
    assert Registry._deletion_state(REPLICASETS, marked, None, "Foreground") == marked
    assert Registry._deletion_state(REPLICASETS, marked, None, None) == marked
    assert Registry._deletion_state(REPLICASETS, marked, None, "Background") is None


def test_a_bound_pod_deleted_in_the_foreground_stays_graceful():
    pod = obj("Pod", "web-1")
    pod["spec"] = {"nodeName": "n1", "terminationGracePeriodSeconds": 30}
    marked = Registry._deletion_state(PODS, pod, None, "Foreground")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert marked["metadata"]["finalizers"] == [FOREGROUND_FINALIZER]


def test_namespaces_ignore_the_policy():
    namespaces = require("v1", "Namespace")
    namespace = stamp({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "uid": "u"}})
    assert Registry._deletion_state(namespaces, namespace, None, "Foreground") is None


# --- kubectl --cascade ------------------------------------------------------------------------------


@pytest.mark.parametrize(("cascade", "policy", "warned"), [
    ("background", "Background", False), ("foreground", "Foreground", False), ("orphan", "Orphan", False),
    ("true", "Background", True), ("false", "Orphan", True), ("Orphan", "Orphan", False),
])
def test_cascade_values_map_to_policies(cascade, policy, warned):
    chosen, warning = cascade_policy(cascade)
    assert chosen == policy
    assert (warning is not None) == warned


def test_an_unknown_cascade_value_is_refused():
    with pytest.raises(CLIError, match="invalid cascade value"):
        cascade_policy("sometimes")


# --- decisions --------------------------------------------------------------------------------------


def test_the_collector_watches_namespaced_kinds_but_events_and_nodes_as_owners():
    kinds = {resource.kind for resource in watched_resources()}
    assert {"Pod", "ReplicaSet", "Deployment", "Service", "Endpoints", "Lease", "Node"} <= kinds
    assert not kinds & {"Event", "Namespace"}
    assert "garbagecollector" in select_controllers(["*"])


def test_finalizer_duty_needs_a_deletion_timestamp():
    assert finalizer_duty(obj(finalizers=[FOREGROUND_FINALIZER])) is None
    assert finalizer_duty(obj(finalizers=[FOREGROUND_FINALIZER], deleting=True)) == "foreground"
    assert finalizer_duty(obj(finalizers=[ORPHAN_FINALIZER], deleting=True)) == "orphan"
    assert finalizer_duty(obj(finalizers=["example.com/x"], deleting=True)) is None


def test_a_dependent_goes_only_when_every_owner_is_gone():
    one, two = ref(uid="a"), ref(kind="Deployment", uid="b")
    pod = obj(owners=[one, two])
    assert judge_dependent(pod, {"a": OwnerState.ABSENT, "b": OwnerState.ABSENT}) == Verdict("delete")
    assert judge_dependent(pod, {"a": OwnerState.ABSENT, "b": OwnerState.PRESENT}) == Verdict("drop", ("a",))
    assert judge_dependent(pod, {"a": OwnerState.PRESENT, "b": OwnerState.PRESENT}).action == "keep"


def test_unknown_owners_objects_being_deleted_and_orphans_are_left_alone():
    assert judge_dependent(obj(owners=[ref(uid="a")]), {"a": OwnerState.UNKNOWN}).action == "keep"
    assert judge_dependent(obj(owners=[ref(uid="a"), ref(uid="b")]),
                           {"a": OwnerState.ABSENT, "b": OwnerState.UNKNOWN}).action == "keep"
    assert judge_dependent(obj(owners=[ref(uid="a")], deleting=True), {"a": OwnerState.ABSENT}).action == "keep"
    assert judge_dependent(obj(), {}).action == "keep"


def test_patches_remove_exactly_the_named_references_and_finalizer():
    pod = obj(owners=[ref(uid="a"), ref(uid="b"), ref(uid="a2")], finalizers=["x", ORPHAN_FINALIZER, "y"])
    stripped = json_patch(pod, guarded(pod, without_owners(pod, ("a", "a2"))))
    assert [owner["uid"] for owner in stripped["metadata"]["ownerReferences"]] == ["b"]
    finalized = json_patch(pod, guarded(pod, without_finalizer(pod, ORPHAN_FINALIZER)))
    assert finalized["metadata"]["finalizers"] == ["x", "y"]
    assert without_finalizer(pod, FOREGROUND_FINALIZER) == []


def test_patches_fail_on_a_recreated_or_changed_object():
    pod = obj(owners=[ref(uid="a"), ref(uid="b")])
    ops = guarded(pod, without_owners(pod, ("b",)))
    recreated = copy.deepcopy(pod)
    recreated["metadata"]["uid"] = "another"
    with pytest.raises(PatchError):
        json_patch(recreated, ops)
    reordered = copy.deepcopy(pod)
    reordered["metadata"]["ownerReferences"].reverse()
    with pytest.raises(PatchError):
        json_patch(reordered, ops)


def test_owner_items_follow_the_table_and_the_dependents_namespace():
    pod = obj(owners=[ref()])
    assert owner_item(pod, ref()) == "replicasets.apps:ns/web"
    assert owner_item(pod, ref(kind="Node", name="n1", api_version="v1")) == "nodes:n1"
    assert owner_item(pod, ref(kind="Widget", api_version="example.com/v1")) is None


def test_the_index_follows_reference_changes():
    index = DependentsIndex()
    index.set("pods:ns/a", obj(owners=[ref(uid="x")]))
    index.set("pods:ns/b", obj(owners=[ref(uid="x"), ref(uid="y")]))
    assert index.dependents_of("x") == {"pods:ns/a", "pods:ns/b"}
    index.set("pods:ns/b", obj(owners=[ref(uid="y")]))
    index.remove("pods:ns/a")
    assert index.dependents_of("x") == set()
    assert index.dependents_of("y") == {"pods:ns/b"}


# --- syncs against a fake API -----------------------------------------------------------------------


class FakeApi:
    """Objects by (plural, namespace, name); DELETE honours the uid precondition and the policy's finalizer."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple[str, str]] = []

    def put(self, item: dict) -> dict:
        metadata = item["metadata"]
        self.objects[(item["kind"], metadata.get("namespace"), metadata["name"])] = copy.deepcopy(item)
        return item

    def _find(self, resource, name, namespace):
        found = self.objects.get((resource.kind, namespace, name))
        if found is None:
            raise errors.NotFound(f"{resource.plural} {name} not found")
        return found

    def get(self, resource, name, namespace=None, subresource=None):
        return copy.deepcopy(self._find(resource, name, namespace))

    def list(self, resource, namespace=None, all_namespaces=False, **_):
        return {"items": [copy.deepcopy(item) for (kind, item_namespace, _name), item in self.objects.items()
                          if kind == resource.kind and (all_namespaces or item_namespace == namespace)]}

    def patch(self, resource, name, patch, namespace=None, patch_type="merge", **_):
        self.calls.append(("patch", f"{resource.kind} {name}"))
        current = self._find(resource, name, namespace)
        try:
            patched = stamp(json_patch(current, patch))
        except PatchError as error:
            raise errors.Invalid(str(error)) from None
        return self.put(patched)

    def request(self, method, path, json=None, **_):
        namespace, plural, name = path.split("/")[-3:]
        kind = next(resource.kind for resource in (PODS, REPLICASETS, DEPLOYMENTS, LEASES) if resource.plural == plural)
        self.calls.append((f"delete {json['propagationPolicy']}", f"{kind} {name}"))
        current = self.objects.get((kind, namespace, name))
        if current is None:
            raise errors.NotFound("gone")
        if current["metadata"]["uid"] != json["preconditions"]["uid"]:
            raise errors.Conflict("Precondition failed")
        del self.objects[(kind, namespace, name)]
        return current


@pytest.fixture
def api():
    return FakeApi()


@pytest.fixture
def gc(api):
    return GarbageCollector(ControllerContext(api, InformerFactory(api), workers=1))


def informer(gc, resource):
    return gc.watched[resource.qualified_name][1]


def feed(gc, resource, event_type, item):
    informer(gc, resource).handle_event({"type": event_type, "object": copy.deepcopy(item)})


def drain(gc):
    while gc.controller.process_next(timeout=0):
        pass


def test_pods_of_a_deleted_replicaset_are_deleted_in_the_background(api, gc):
    replicaset = api.put(obj("ReplicaSet", "web", uid="uid-rs"))
    pods = [api.put(obj(name=f"web-{n}", owners=[ref()])) for n in (1, 2)]
    feed(gc, REPLICASETS, "ADDED", replicaset)
    for pod in pods:
        feed(gc, PODS, "ADDED", pod)
    drain(gc)
    assert api.calls == []  # the owner is in the cache: no deletion, not even a GET is needed

    del api.objects[("ReplicaSet", "ns", "web")]
    feed(gc, REPLICASETS, "DELETED", stamp(copy.deepcopy(replicaset)))
    drain(gc)
    assert sorted(api.calls) == [("delete Background", "Pod web-1"), ("delete Background", "Pod web-2")]


def test_an_owner_missing_from_the_cache_but_alive_keeps_its_dependents(api, gc):
    api.put(obj("ReplicaSet", "web", uid="uid-rs"))
    feed(gc, PODS, "ADDED", api.put(obj(owners=[ref()])))
    drain(gc)
    assert api.calls == []


def test_an_owner_recreated_under_its_name_does_not_save_the_old_dependents(api, gc):
    newer = api.put(obj("ReplicaSet", "web", uid="uid-new"))
    feed(gc, REPLICASETS, "ADDED", newer)
    feed(gc, PODS, "ADDED", api.put(obj(owners=[ref(uid="uid-old")])))
    drain(gc)
    assert api.calls == [("delete Background", "Pod web-1")]


def test_a_dependent_of_an_unwatched_kind_going_enqueues_nothing_unsyncable(api, gc):
    node_owned = api.put(obj(owners=[ref(kind="Node", name="n1", uid="uid-n1", api_version="v1")]))
    feed(gc, PODS, "ADDED", node_owned)
    feed(gc, PODS, "DELETED", stamp(copy.deepcopy(node_owned)))
    while (item := gc.controller.queue.get(timeout=0)) is not None:
        gc.sync(item)  # raises for an item the collector has no informer for
        gc.controller.queue.done(item)


def test_a_reference_of_unknown_kind_keeps_the_dependent(api, gc):
    feed(gc, PODS, "ADDED", api.put(obj(owners=[ref(kind="Widget", api_version="example.com/v1")])))
    drain(gc)
    assert api.calls == []


def test_foreground_deletes_the_dependents_then_drops_the_finalizer(api, gc):
    deleting = api.put(obj("ReplicaSet", "web", uid="uid-rs", finalizers=[FOREGROUND_FINALIZER], deleting=True))
    pod = api.put(obj(owners=[ref()]))
    feed(gc, PODS, "ADDED", pod)
    feed(gc, REPLICASETS, "ADDED", deleting)
    drain(gc)
    assert api.calls == [("delete Foreground", "Pod web-1")]
    assert ("ReplicaSet", "ns", "web") in api.objects

    feed(gc, PODS, "DELETED", stamp(copy.deepcopy(pod)))
    drain(gc)
    assert api.calls[-1] == ("patch", "ReplicaSet web")
    assert api.objects[("ReplicaSet", "ns", "web")]["metadata"]["finalizers"] == []


def test_foreground_keeps_a_dependent_that_has_another_owner_without_the_reference(api, gc):
    deleting = api.put(obj("ReplicaSet", "web", uid="uid-rs", finalizers=[FOREGROUND_FINALIZER], deleting=True))
    other = ref(kind="Deployment", name="front", uid="uid-deploy")
    api.put(obj("Deployment", "front", uid="uid-deploy"))
    feed(gc, PODS, "ADDED", api.put(obj(owners=[ref(), other])))
    feed(gc, REPLICASETS, "ADDED", deleting)
    drain(gc)
    assert ("patch", "Pod web-1") in api.calls
    assert not any(call[0].startswith("delete") for call in api.calls), api.calls
    assert api.objects[("Pod", "ns", "web-1")]["metadata"]["ownerReferences"] == [other]


def test_orphan_strips_the_reference_then_drops_the_finalizer(api, gc):
    deleting = api.put(obj("ReplicaSet", "web", uid="uid-rs", finalizers=[ORPHAN_FINALIZER], deleting=True))
    other = ref(kind="Deployment", name="front", uid="uid-deploy")
    api.put(obj("Deployment", "front", uid="uid-deploy"))
    feed(gc, PODS, "ADDED", api.put(obj(owners=[ref(), other])))
    feed(gc, REPLICASETS, "ADDED", deleting)
    drain(gc)
    assert api.calls == [("patch", "Pod web-1"), ("patch", "ReplicaSet web")]
    assert api.objects[("Pod", "ns", "web-1")]["metadata"]["ownerReferences"] == [other]
    assert api.objects[("ReplicaSet", "ns", "web")]["metadata"]["finalizers"] == []


def test_a_patch_that_loses_a_race_retries(api, gc):
    deleting = api.put(obj("ReplicaSet", "web", uid="uid-rs", finalizers=[ORPHAN_FINALIZER], deleting=True))
    feed(gc, REPLICASETS, "ADDED", deleting)
    original_get = api.get

    def stale_get(resource, name, namespace=None, subresource=None):
        found = original_get(resource, name, namespace)
        api.objects[(resource.kind, namespace, name)]["metadata"]["finalizers"] = ["example.com/first",
                                                                                   ORPHAN_FINALIZER]
        return found

    api.get = stale_get
    with pytest.raises(TemporaryError):
        gc.sync(item_of(REPLICASETS, "ns/web"))


def test_orphaning_reaches_a_dependent_the_cache_has_not_seen_yet_and_it_survives(api, gc):
    deleting = api.put(obj("ReplicaSet", "web", uid="uid-rs", finalizers=[ORPHAN_FINALIZER], deleting=True))
    created_just_before = api.put(obj(owners=[ref()]))  # its ADDED event is still on its way
    feed(gc, REPLICASETS, "ADDED", deleting)
    drain(gc)
    assert api.objects[("Pod", "ns", "web-1")]["metadata"]["ownerReferences"] == []

    del api.objects[("ReplicaSet", "ns", "web")]
    feed(gc, REPLICASETS, "DELETED", stamp(copy.deepcopy(deleting)))
    feed(gc, PODS, "ADDED", created_just_before)  # as created: still referencing the owner
    drain(gc)
    assert ("Pod", "ns", "web-1") in api.objects
    assert not any(call[0].startswith("delete") for call in api.calls), api.calls


def test_a_dependent_is_judged_as_stored_before_it_is_deleted(api, gc):
    cached = obj(owners=[ref()])
    api.put(obj())  # stored without the reference: orphaned after the cache saw it
    feed(gc, PODS, "ADDED", cached)
    drain(gc)
    assert ("Pod", "ns", "web-1") in api.objects
    assert api.calls == []


def test_only_updates_that_touch_ownership_are_looked_at_again(api, gc):
    pod = obj(owners=[ref()])
    status_only = {**copy.deepcopy(pod), "status": {"phase": "Running"}}
    assert not ownership_changed(pod, status_only)
    for name, value in (("ownerReferences", []), ("finalizers", ["x"]), ("deletionTimestamp", "2030-01-01T00:00:00Z"),
                        ("uid", "uid-other")):
        changed = copy.deepcopy(pod)
        changed["metadata"][name] = value
        assert ownership_changed(pod, changed), name

    feed(gc, PODS, "ADDED", api.put(pod))
    drain(gc)
    informer(gc, PODS).handle_event({"type": "MODIFIED", "object": stamp(status_only)})
    assert gc.controller.queue.get(timeout=0) is None


def test_a_deleted_nodes_lease_goes_with_it(api, gc):
    node = api.put(stamp({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-n1"}}))
    lease = api.put(obj("Lease", "n1", namespace="kube-node-lease",
                        owners=[ref(kind="Node", name="n1", uid="uid-n1", api_version="v1")]))
    feed(gc, NODES, "ADDED", node)
    feed(gc, LEASES, "ADDED", lease)
    drain(gc)
    assert api.calls == []

    del api.objects[("Node", None, "n1")]
    feed(gc, NODES, "DELETED", stamp(copy.deepcopy(node)))
    drain(gc)
    assert api.calls == [("delete Background", "Lease n1")]
