"""The Deployment controller: rollout arithmetic, and sync() driven step by step against a fake API."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from daemons.api.errors import AlreadyExists, NotFound
from daemons.controllers import rollout
from daemons.controllers.context import ControllerContext
from daemons.controllers.deployment import DeploymentController
from daemons.controllers.informers import InformerFactory

pytestmark = pytest.mark.unit

REVISIONS = itertools.count(100)
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def template(image="web:1", **annotations):
    metadata = {"labels": {"app": "web"}}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": {"containers": [{"name": "web", "image": image}]}}


def deployment(replicas=3, image="web:1", strategy=None, name="web", **spec):
    strategy = strategy or {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1,
                         "resourceVersion": str(next(REVISIONS))},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template(image),
                     "strategy": strategy, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600, **spec},
            "status": {}}


def replica_set(name, replicas, available=None, revision=1, created="2026-01-01T00:00:00Z", image="web:1",
                desired=3, max_replicas=4, status_replicas=None):
    available = replicas if available is None else available
    status_replicas = replicas if status_replicas is None else status_replicas
    labels = {"app": "web", rollout.HASH_LABEL: name}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": created,
                         "generation": 1, "labels": labels,
                         "annotations": {rollout.REVISION: str(revision), rollout.DESIRED_REPLICAS: str(desired),
                                         rollout.MAX_REPLICAS: str(max_replicas)}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {**template(image), "metadata": {"labels": labels}}},
            "status": {"replicas": status_replicas, "readyReplicas": available, "availableReplicas": available,
                       "observedGeneration": 1}}


# --- hashes, names, fenceposts ----------------------------------------------------------------------


def test_the_template_hash_is_stable_safe_encoded_and_changes_with_the_collision_count():
    first = rollout.template_hash(template())
    assert first == rollout.template_hash(copy.deepcopy(template()))
    assert set(first) <= set(rollout.SAFE_ALPHABET)
    assert rollout.template_hash(template(), 1) != first
    assert rollout.template_hash(template("web:2")) != first
    assert rollout.safe_encode("0123") == "4567"


def test_fields_left_empty_do_not_make_another_template():
    sent_back = template()
    sent_back["metadata"]["creationTimestamp"] = None
    sent_back["spec"]["containers"][0]["resources"] = {}
    assert rollout.same_template(sent_back, template())
    assert rollout.template_hash(sent_back) == rollout.template_hash(template())


def test_a_new_replica_set_carries_the_hash_in_name_labels_and_selector():
    rs = rollout.new_replica_set(deployment(minReadySeconds=5), None)
    pod_hash = rollout.template_hash(template())
    assert rs["metadata"]["name"] == f"web-{pod_hash}"
    assert rs["metadata"]["labels"] == {"app": "web", rollout.HASH_LABEL: pod_hash}
    assert rs["spec"]["selector"] == {"matchLabels": {"app": "web", rollout.HASH_LABEL: pod_hash}}
    assert rs["spec"]["template"]["metadata"]["labels"][rollout.HASH_LABEL] == pod_hash
    assert rs["spec"]["minReadySeconds"] == 5
    assert rollout.same_template(rs["spec"]["template"], template())


@pytest.mark.parametrize(("surge", "unavailable", "replicas", "expected"), [
    ("25%", "25%", 10, (3, 2)),
    ("25%", "25%", 1, (1, 0)),
    (0, 0, 3, (0, 1)),
    ("50%", 1, 3, (2, 1)),
])
def test_percent_surge_rounds_up_and_unavailable_down(surge, unavailable, replicas, expected):
    d = deployment(replicas, strategy={"type": "RollingUpdate",
                                       "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
    assert rollout.fenceposts(d) == expected


def test_recreate_neither_surges_nor_counts_unavailability():
    d = deployment(strategy={"type": "Recreate"})
    assert (rollout.max_surge(d), rollout.max_unavailable(d)) == (0, 0)


# --- revisions and history ----------------------------------------------------------------------------


def test_an_old_replica_set_that_becomes_new_again_gets_the_next_revision_and_history():
    d = deployment()
    d["metadata"]["annotations"] = {rollout.CHANGE_CAUSE: "back to 1", rollout.LAST_APPLIED: "{}"}
    old = [replica_set("a", 0, revision=2), replica_set("b", 0, revision=3)]
    returning = replica_set("c", 0, revision=1)
    annotations = rollout.replica_set_annotations(d, returning, rollout.next_revision(old), exists=True)
    assert annotations[rollout.REVISION] == "4"
    assert annotations[rollout.REVISION_HISTORY] == "1"
    assert annotations[rollout.CHANGE_CAUSE] == "back to 1"
    assert rollout.LAST_APPLIED not in annotations


def test_history_pruning_removes_the_lowest_revisions_scaled_to_zero_only():
    d = deployment(revisionHistoryLimit=1)
    old = [replica_set("r3", 0, revision=3), replica_set("r1", 0, revision=1), replica_set("r2", 2, revision=2)]
    assert [rs["metadata"]["name"] for rs in rollout.history_to_delete(d, old)] == ["r1"]


# --- how far each ReplicaSet goes ---------------------------------------------------------------------


def test_rolling_update_with_surge_one_and_no_unavailability_moves_one_pod_at_a_time():
    d = deployment(3)
    old = replica_set("old", 3)
    new = replica_set("new", 0, revision=2, created="2026-01-01T00:01:00Z", image="web:2")
    assert rollout.new_rs_replicas(d, [old, new], new) == 1
    new = replica_set("new", 1, available=0, revision=2, image="web:2")
    assert rollout.new_rs_replicas(d, [old, new], new) == 1  # at replicas + surge
    assert rollout.old_rs_scale_down(d, new, [old]) == {}  # the new pod is not available yet
    new = replica_set("new", 1, revision=2, image="web:2")
    assert rollout.old_rs_scale_down(d, new, [old]) == {"old": 2}


def test_unhealthy_old_pods_go_first_within_the_budget():
    d = deployment(4, strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
    old = replica_set("old", 4, available=2)
    new = replica_set("new", 0, revision=2, image="web:2")
    # 3 must stay available, 2 are: only one unhealthy pod may go, and no available one.
    assert rollout.old_rs_scale_down(d, new, [old]) == {"old": 3}


def test_a_resize_mid_rollout_is_spread_in_proportion():
    # Mid-rollout at 10 replicas + 3 surge: 8 old and 5 new pods. Scaled to 15, 18 are allowed: 5 more pods,
    # 8 * 18 / 13 = 11.1 for the old one and 5 * 18 / 13 = 6.9 for the new one.
    d = deployment(15, strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}})
    old = replica_set("old", 8, desired=10, max_replicas=13, created="2026-01-01T00:00:00Z")
    new = replica_set("new", 5, available=0, revision=2, desired=10, max_replicas=13,
                      created="2026-01-01T00:01:00Z", image="web:2")
    assert rollout.is_scaling_event(d, [old, new])
    assert rollout.proportional_sizes(d, new, [old]) == {"old": 11, "new": 7}
    d["spec"]["replicas"] = 5  # 5 + 3 surge = 8 allowed: 5 pods fewer, shared the same way
    assert rollout.proportional_sizes(d, new, [old]) == {"old": 5, "new": 3}
    old_only = replica_set("only", 3, desired=3)
    assert rollout.proportional_sizes(deployment(5), None, [old_only]) == {"only": 5}


def test_a_resize_that_adds_nothing_still_rewrites_the_size_annotations():
    # 4 replicas + 1 surge mid-rollout (3 old, 1 new) scaled to 3: 4 are allowed and 4 run, so no size changes,
    # but both ReplicaSets are named so that they are rewritten for 3 and the rollout goes on.
    d = deployment(3, strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    old = replica_set("old", 3, desired=4, max_replicas=5)
    new = replica_set("new", 1, available=0, revision=2, desired=4, max_replicas=5, image="web:2")
    assert rollout.is_scaling_event(d, [old, new])
    assert rollout.proportional_sizes(d, new, [old]) == {"old": 3, "new": 1}
    settled = replica_set("only", 3, desired=4)
    assert rollout.proportional_sizes(deployment(3), settled, []) == {"only": 3}


def test_status_conditions_follow_the_rollout():
    d = deployment(2)
    new = replica_set("new", 2, available=0, status_replicas=0)
    status = rollout.rollout_status(d, [new], new, NOW, created=True)
    assert rollout.condition(status, "Progressing")["reason"] == rollout.NEW_RS_CREATED
    assert rollout.condition(status, "Available")["status"] == "False"
    d["status"] = status
    done = replica_set("new", 2)
    status = rollout.rollout_status(d, [done], done, NOW)
    assert rollout.condition(status, "Progressing")["reason"] == rollout.NEW_RS_AVAILABLE
    assert rollout.condition(status, "Available")["reason"] == rollout.MIN_AVAILABLE
    assert (status["replicas"], status["updatedReplicas"], status["availableReplicas"]) == (2, 2, 2)


def test_no_progress_past_the_deadline_times_out():
    d = deployment(2, progressDeadlineSeconds=60)
    stuck = replica_set("new", 2, available=0)
    d["status"] = rollout.rollout_status(d, [stuck], stuck, NOW)
    status = rollout.rollout_status(d, [stuck], stuck, NOW + timedelta(seconds=61))
    progressing = rollout.condition(status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", rollout.TIMED_OUT)


# --- sync against a fake API ----------------------------------------------------------------------------


class FakeApi:
    """Keeps what the controller writes, and hands every write back to the controller's caches as a watch would."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.events: list[dict] = []
        self.writes: list[tuple[str, str]] = []
        self.controller: DeploymentController | None = None
        self.clock = itertools.count(1)

    def _store(self, kind, body, event):
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(next(REVISIONS))
        self.objects[(kind, body["metadata"]["name"])] = body
        informer = {"Deployment": self.controller.deployments, "ReplicaSet": self.controller.replicasets}[kind]
        informer.handle_event({"type": event, "object": copy.deepcopy(body)})
        return copy.deepcopy(body)

    def create(self, resource, body, namespace=None, params=None):
        if resource.kind == "Event":
            self.events.append(body)
            return body
        self.writes.append(("create", body["metadata"]["name"]))
        if (resource.kind, body["metadata"]["name"]) in self.objects:
            raise AlreadyExists(f"{body['metadata']['name']} already exists")
        body = copy.deepcopy(body)
        tick = next(self.clock)
        body["metadata"].update(uid=f"uid-{body['metadata']['name']}", generation=1,
                                creationTimestamp=f"2026-01-01T01:{tick // 60:02d}:{tick % 60:02d}Z")
        body["status"] = {"replicas": 0}
        return self._store(resource.kind, body, "ADDED")

    def get(self, resource, name, namespace=None):
        return copy.deepcopy(self.objects[(resource.kind, name)])

    def replace(self, resource, body, namespace=None, subresource=None):
        self.writes.append(("status" if subresource else "replace", body["metadata"]["name"]))
        return self._store(resource.kind, body, "MODIFIED")

    def update_status(self, resource, body):
        return self.replace(resource, body, subresource="status")

    def delete(self, resource, name, namespace=None, **_):
        self.writes.append(("delete", name))
        obj = self.objects.pop((resource.kind, name), None)
        if obj is None:
            raise NotFound("gone")
        self.controller.replicasets.handle_event({"type": "DELETED", "object": obj})
        return {}

    # --- what the ReplicaSet controller and the kubelets would do ----------------------------------------

    def replica_sets(self):
        return {name: obj for (kind, name), obj in self.objects.items() if kind == "ReplicaSet"}

    def sizes(self):
        return {name: obj["spec"]["replicas"] for name, obj in sorted(self.replica_sets().items())}

    def run_pods(self, available=True):
        """Every ReplicaSet gets the pods it asks for, available (or not)."""
        for obj in list(self.replica_sets().values()):
            count = obj["spec"]["replicas"]
            status = {"replicas": count, "readyReplicas": count if available else 0,
                      "availableReplicas": count if available else 0, "observedGeneration": 1}
            if obj["status"] != status:
                self._store("ReplicaSet", {**obj, "status": status}, "MODIFIED")


@pytest.fixture
def api():
    return FakeApi()


@pytest.fixture
def controller(api):
    made = DeploymentController(ControllerContext(api, InformerFactory(api), workers=1), clock=lambda: NOW)
    api.controller = made
    return made


def drain(controller):
    while controller.controller.process_next(timeout=0):
        pass


def apply(api, controller, d):
    """The user creates or changes the Deployment (the API bumps the generation when the spec changes)."""
    current = api.objects.get(("Deployment", d["metadata"]["name"]))
    if current is not None:
        d = {**copy.deepcopy(current), "spec": d["spec"]}
        if d["spec"] != current["spec"]:
            d["metadata"]["generation"] += 1
    api._store("Deployment", d, "MODIFIED" if current else "ADDED")
    drain(controller)


def settle(api, controller, available=True, steps=20):
    """Let pods come up and the controller react until nothing changes; return each step's sizes."""
    history = []
    for _ in range(steps):
        api.run_pods(available)
        drain(controller)
        sizes = api.sizes()
        if history and history[-1] == sizes:
            break
        history.append(sizes)
    return history


def stored(api, name="web"):
    return api.objects[("Deployment", name)]


def test_a_first_rollout_creates_one_replica_set_and_completes(api, controller):
    apply(api, controller, deployment(3))
    pod_hash = rollout.template_hash(template())
    rs = api.replica_sets()[f"web-{pod_hash}"]
    assert rs["spec"]["replicas"] == 3
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "uid-web"
    assert rs["metadata"]["annotations"][rollout.REVISION] == "1"
    assert rs["metadata"]["annotations"][rollout.DESIRED_REPLICAS] == "3"
    assert rs["metadata"]["annotations"][rollout.MAX_REPLICAS] == "4"
    assert [(e["reason"], e["message"]) for e in api.events] == [
        ("ScalingReplicaSet", f"Scaled up replica set web-{pod_hash} to 3")]
    settle(api, controller)
    status = stored(api)["status"]
    assert (status["replicas"], status["updatedReplicas"], status["availableReplicas"],
            status["observedGeneration"]) == (3, 3, 3, 1)
    assert rollout.condition(status, "Progressing")["reason"] == rollout.NEW_RS_AVAILABLE
    assert stored(api)["metadata"]["annotations"][rollout.REVISION] == "1"
    writes = len(api.writes)
    controller.sync("ns/web")
    assert len(api.writes) == writes  # converged: nothing more to write


def test_an_image_change_rolls_one_pod_at_a_time_with_surge_one_and_no_unavailability(api, controller):
    apply(api, controller, deployment(3))
    settle(api, controller)
    old = f"web-{rollout.template_hash(template())}"
    new = f"web-{rollout.template_hash(template('web:2'))}"
    apply(api, controller, deployment(3, image="web:2"))
    steps = [api.sizes(), *settle(api, controller)]
    assert steps[0] == {old: 3, new: 1}
    assert steps[-1] == {old: 0, new: 3}
    for sizes in steps:
        assert sum(sizes.values()) <= 4
        assert sizes[old] + max(0, sizes[new] - 1) >= 3 or sizes == steps[-1]
    assert api.replica_sets()[new]["metadata"]["annotations"][rollout.REVISION] == "2"
    messages = [e["message"] for e in api.events]
    assert f"Scaled down replica set {old} to 2 from 3" in messages
    assert f"Scaled up replica set {new} to 2 from 1" in messages
    assert stored(api)["metadata"]["annotations"][rollout.REVISION] == "2"


def test_undo_to_the_old_template_reuses_its_replica_set_with_the_next_revision(api, controller):
    apply(api, controller, deployment(2))
    settle(api, controller)
    apply(api, controller, deployment(2, image="web:2"))
    settle(api, controller)
    apply(api, controller, deployment(2, image="web:1"))
    settle(api, controller)
    first = f"web-{rollout.template_hash(template())}"
    assert api.sizes() == {first: 2, f"web-{rollout.template_hash(template('web:2'))}": 0}
    annotations = api.replica_sets()[first]["metadata"]["annotations"]
    assert (annotations[rollout.REVISION], annotations[rollout.REVISION_HISTORY]) == ("3", "1")


def test_recreate_empties_the_old_replica_set_and_waits_for_its_pods(api, controller):
    apply(api, controller, deployment(2, strategy={"type": "Recreate"}))
    settle(api, controller)
    old = f"web-{rollout.template_hash(template())}"
    apply(api, controller, deployment(2, image="web:2", strategy={"type": "Recreate"}))
    assert api.sizes() == {old: 0}  # no new ReplicaSet while old pods still run
    settle(api, controller)
    assert api.sizes() == {old: 0, f"web-{rollout.template_hash(template('web:2'))}": 2}


def test_scaling_without_a_rollout_resizes_the_one_replica_set(api, controller):
    apply(api, controller, deployment(3))
    settle(api, controller)
    apply(api, controller, deployment(5))
    rs = next(iter(api.replica_sets().values()))
    assert rs["spec"]["replicas"] == 5
    assert rs["metadata"]["annotations"][rollout.DESIRED_REPLICAS] == "5"


def test_history_beyond_the_limit_is_deleted_once_the_rollout_completes(api, controller):
    apply(api, controller, deployment(1, revisionHistoryLimit=1))
    settle(api, controller)
    for image in ("web:2", "web:3"):
        apply(api, controller, deployment(1, image=image, revisionHistoryLimit=1))
        settle(api, controller)
    assert api.sizes() == {f"web-{rollout.template_hash(template('web:2'))}": 0,
                           f"web-{rollout.template_hash(template('web:3'))}": 1}


def test_a_paused_deployment_resizes_but_does_not_roll(api, controller):
    apply(api, controller, deployment(2))
    settle(api, controller)
    sizes = api.sizes()
    apply(api, controller, deployment(2, image="web:2", paused=True))
    assert api.sizes() == sizes
    assert rollout.condition(stored(api)["status"], "Progressing")["reason"] == rollout.PAUSED
    apply(api, controller, deployment(4, image="web:2", paused=True))
    drain(controller)
    assert sorted(api.sizes().values()) == [4], "a paused Deployment still resizes"
    apply(api, controller, deployment(4, image="web:2"))
    settle(api, controller)
    assert sorted(api.sizes().values()) == [0, 4]


def test_a_name_taken_by_another_owner_bumps_the_collision_count_and_the_hash(api, controller):
    foreign = replica_set(f"web-{rollout.template_hash(template())}", 1)
    foreign["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "other",
                                              "uid": "uid-other", "controller": True}]
    api._store("ReplicaSet", foreign, "ADDED")
    apply(api, controller, deployment(2))
    assert stored(api)["status"]["collisionCount"] == 1
    ours = f"web-{rollout.template_hash(template(), 1)}"
    assert api.sizes() == {foreign["metadata"]["name"]: 1, ours: 2}
    assert api.replica_sets()[ours]["metadata"]["ownerReferences"][0]["uid"] == "uid-web"
