"""Controller references, how a controller claims children, and the writes ChildControl makes."""

from __future__ import annotations

import copy

import pytest

from daemons.api.errors import Invalid, NotFound
from daemons.api.resources import require
from daemons.api.selectors import LabelSelectorQuery
from daemons.apiserver.patch import PatchError, json_patch
from daemons.controllers.ownership import (
    ChildControl,
    adoption_patch,
    claim,
    controller_of,
    controller_reference,
    is_controlled_by,
    release_patch,
)

pytestmark = pytest.mark.unit

REPLICASETS = require("apps/v1", "ReplicaSet")
PODS = require("v1", "Pod")
WEB = LabelSelectorQuery.from_map({"app": "web"})


def owner(name="web", uid="uid-rs", deleting=False):
    metadata = {"name": name, "namespace": "ns", "uid": uid}
    if deleting:
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata}


def child(name, labels=None, owners=(), deleting=False, namespace="ns"):
    metadata = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "7",
                "labels": {"app": "web"} if labels is None else labels}
    if owners:
        metadata["ownerReferences"] = list(owners)
    if deleting:
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}


def ref(uid="uid-rs", controller=True, name="web"):
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid, "controller": controller}


def names(objs):
    return [obj["metadata"]["name"] for obj in objs]


def test_controller_reference_names_the_owner_as_controller():
    assert controller_reference(owner(), REPLICASETS) == {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "uid-rs",
        "controller": True, "blockOwnerDeletion": True}


def test_controller_of_is_the_reference_marked_controller():
    pod = child("a", owners=[ref("other", controller=False), ref()])
    assert controller_of(pod) == ref()
    assert controller_of(child("b", owners=[ref(controller=False)])) is None
    assert is_controlled_by(pod, owner())
    assert not is_controlled_by(pod, owner(uid="uid-someone-else"))
    assert not is_controlled_by(child("c"), owner())


def test_claim_keeps_adopts_releases_and_leaves_others_alone():
    candidates = [
        child("mine", owners=[ref()]),
        child("mine-relabelled", labels={"app": "other"}, owners=[ref()]),
        child("orphan"),
        child("orphan-unmatched", labels={"app": "other"}),
        child("orphan-deleting", deleting=True),
        child("orphan-elsewhere", namespace="other"),
        child("theirs", owners=[ref("uid-other", name="other")]),
        child("orphan-with-plain-owner", owners=[ref("uid-x", controller=False)]),
    ]
    result = claim(owner(), WEB, candidates)
    assert names(result.owned) == ["mine"]
    assert names(result.adopt) == ["orphan", "orphan-with-plain-owner"]
    assert names(result.release) == ["mine-relabelled"]


def test_an_owner_being_deleted_adopts_and_releases_nothing():
    candidates = [child("mine", owners=[ref()]), child("mine-relabelled", labels={"app": "x"}, owners=[ref()]),
                  child("orphan")]
    result = claim(owner(deleting=True), WEB, candidates)
    assert names(result.owned) == ["mine"]
    assert result.adopt == [] and result.release == []


def test_adoption_patch_adds_the_reference_and_keeps_others():
    pod = child("a", owners=[ref("uid-x", controller=False)])
    patched = json_patch(pod, adoption_patch(owner(), REPLICASETS, pod))
    assert patched["metadata"]["ownerReferences"] == [ref("uid-x", controller=False),
                                                      controller_reference(owner(), REPLICASETS)]
    orphan = child("b")
    assert json_patch(orphan, adoption_patch(owner(), REPLICASETS, orphan))["metadata"]["ownerReferences"] == [
        controller_reference(owner(), REPLICASETS)]


def test_patches_fail_on_a_different_object_of_the_same_name():
    seen = child("a")
    recreated = copy.deepcopy(seen)
    recreated["metadata"]["uid"] = "uid-new"
    with pytest.raises(PatchError):
        json_patch(recreated, adoption_patch(owner(), REPLICASETS, seen))
    changed = copy.deepcopy(seen)
    changed["metadata"]["resourceVersion"] = "8"
    with pytest.raises(PatchError):
        json_patch(changed, release_patch(owner(), seen))


def test_release_patch_removes_only_the_owner():
    pod = child("a", owners=[ref("uid-x", controller=False), ref()])
    assert json_patch(pod, release_patch(owner(), pod))["metadata"]["ownerReferences"] == [
        ref("uid-x", controller=False)]
    only = child("b", owners=[ref()])
    assert "ownerReferences" not in json_patch(only, release_patch(owner(), only))["metadata"]


class FakeApi:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.error: Exception | None = None

    def _call(self, *call):
        self.calls.append(call)
        if self.error is not None:
            raise self.error

    def create(self, resource, body, namespace=None, params=None):
        self._call("create", namespace, copy.deepcopy(body))
        return {**body, "metadata": {**body["metadata"], "name": "web-x1"}}

    def delete(self, resource, name, namespace=None, **_):
        self._call("delete", namespace, name)
        return {}

    def patch(self, resource, name, patch, namespace=None, patch_type="merge", **_):
        self._call("patch", namespace, name, patch_type, patch)
        return {}


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def record(self, obj, event_type, reason, message, field_path=None):
        self.events.append((obj["metadata"]["name"], event_type, reason, message))


@pytest.fixture
def api():
    return FakeApi()


@pytest.fixture
def recorder():
    return FakeRecorder()


@pytest.fixture
def control(api, recorder):
    return ChildControl(api, PODS, recorder)


def test_create_sets_namespace_and_controller_reference_and_records_it(api, recorder, control):
    created = control.create(owner(), REPLICASETS, {"metadata": {"generateName": "web-", "labels": {"app": "web"}},
                                                    "spec": {}})
    _, namespace, body = api.calls[0]
    assert namespace == "ns"
    assert body["metadata"]["ownerReferences"] == [controller_reference(owner(), REPLICASETS)]
    assert body["metadata"]["namespace"] == "ns"
    assert created["metadata"]["name"] == "web-x1"
    assert recorder.events == [("web", "Normal", "SuccessfulCreate", "Created pod: web-x1")]


def test_a_failed_create_records_the_error_and_raises(api, recorder, control):
    api.error = Invalid("pods \"web-\" is forbidden: exceeded quota")
    with pytest.raises(Invalid):
        control.create(owner(), REPLICASETS, {"metadata": {"generateName": "web-"}, "spec": {}})
    assert recorder.events == [("web", "Warning", "FailedCreate",
                                "Error creating: pods \"web-\" is forbidden: exceeded quota")]


def test_delete_records_it_and_ignores_a_child_already_gone(api, recorder, control):
    control.delete(owner(), child("a"))
    api.error = NotFound("gone")
    control.delete(owner(), child("b"))
    assert [call[:3] for call in api.calls] == [("delete", "ns", "a"), ("delete", "ns", "b")]
    assert recorder.events == [("web", "Normal", "SuccessfulDelete", "Deleted pod: a")]


def test_adopt_and_release_send_guarded_json_patches(api, control):
    orphan, mine = child("a"), child("b", owners=[ref()])
    control.adopt(owner(), REPLICASETS, orphan)
    control.release(owner(), mine)
    api.error = NotFound("gone")
    control.release(owner(), mine)  # already gone: nothing to release
    assert api.calls[0] == ("patch", "ns", "a", "json", adoption_patch(owner(), REPLICASETS, orphan))
    assert api.calls[1] == ("patch", "ns", "b", "json", release_patch(owner(), mine))
    assert api.calls[1][4][0] == {"op": "test", "path": "/metadata/uid", "value": "uid-b"}
