"""The DaemonSet controller's decisions: which nodes run a daemon pod, what a rolling update replaces, the status."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime

import pytest

from daemons.api.kinds.daemonset import HASH_LABEL, HISTORY_ANNOTATION, recorded_history
from daemons.controllers.controllers import CONTROLLERS
from daemons.controllers.daemonset import (
    AUTOMATIC_TOLERATIONS,
    DaemonSetController,
    Placement,
    calculate_status,
    daemon_pod,
    manage_plan,
    next_history,
    placement,
    pods_by_node,
    rolling_plan,
    status_patch,
)
from daemons.controllers.rollout import template_hash

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
NAMES = itertools.count(1)


def at(seconds_ago: float) -> str:
    return datetime.fromtimestamp(NOW - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, labels: dict | None = None, taints: list | None = None, unschedulable: bool = False) -> dict:
    spec: dict = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def daemonset(pod_spec: dict | None = None, strategy: dict | None = None, min_ready: int = 0,
              history_limit: int | None = None) -> dict:
    spec: dict = {"selector": {"matchLabels": {"app": "agent"}},
                  "template": {"metadata": {"labels": {"app": "agent"}},
                               "spec": {"containers": [{"name": "agent", "image": "agent:1"}], **(pod_spec or {})}},
                  "updateStrategy": strategy or {"type": "RollingUpdate",
                                                 "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}}
    if min_ready:
        spec["minReadySeconds"] = min_ready
    if history_limit is not None:
        spec["revisionHistoryLimit"] = history_limit
    return {"metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-uid", "generation": 3},
            "spec": spec}


HASH = template_hash(daemonset()["spec"]["template"])


def pod(node_name: str, revision: str = HASH, ready: bool = True, age: float = 100, phase: str = "Running",
        deleting: bool = False, ready_for: float = 100) -> dict:
    metadata: dict = {"name": f"agent-{next(NAMES)}", "namespace": "kube-system", "creationTimestamp": at(age),
                      "labels": {"app": "agent", HASH_LABEL: revision}}
    if deleting:
        metadata["deletionTimestamp"] = at(0)
    return {"metadata": metadata, "spec": {"nodeName": node_name},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                                       "lastTransitionTime": at(ready_for)}]}}


def names(pods: list[dict]) -> list[str]:
    return [item["metadata"]["name"] for item in pods]


# --- placement ---------------------------------------------------------------------------------------


def test_node_selector_picks_the_nodes():
    ds = daemonset({"nodeSelector": {"disk": "ssd"}})
    assert placement(ds, node("a", {"disk": "ssd"})) == Placement(True, True)
    assert placement(ds, node("b", {"disk": "hdd"})) == Placement(False, False)
    assert placement(ds, node("c")) == Placement(False, False)


@pytest.mark.parametrize(("operator", "values", "runs_on"), [
    ("In", ["x", "y"], {"a", "b"}),
    ("NotIn", ["x"], {"b", "c"}),
    ("Exists", None, {"a", "b"}),
    ("DoesNotExist", None, {"c"}),
])
def test_required_node_affinity_picks_the_nodes(operator, values, runs_on):
    expression = {"key": "zone", "operator": operator, **({"values": values} if values else {})}
    ds = daemonset({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}}})
    nodes = [node("a", {"zone": "x"}), node("b", {"zone": "y"}), node("c")]
    assert {item["metadata"]["name"] for item in nodes if placement(ds, item).should_run} == runs_on


def test_untolerated_no_schedule_taint_keeps_new_pods_away_but_lets_a_running_one_stay():
    tainted = node("a", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])
    assert placement(daemonset(), tainted) == Placement(False, True)
    tolerating = daemonset({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db",
                                             "effect": "NoSchedule"}]})
    assert placement(tolerating, tainted) == Placement(True, True)


def test_untolerated_no_execute_taint_evicts():
    assert placement(daemonset(), node("a", taints=[{"key": "dedicated", "effect": "NoExecute"}])) == \
        Placement(False, False)


@pytest.mark.parametrize("taint", [
    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
])
def test_daemon_pods_tolerate_node_conditions_and_cordons(taint):
    assert placement(daemonset(), node("a", taints=[taint])).should_run


def test_a_cordoned_node_keeps_its_daemon():
    assert placement(daemonset(), node("a", unschedulable=True)).should_run


def test_template_node_name_pins_the_daemon_to_that_node():
    ds = daemonset({"nodeName": "b"})
    assert [placement(ds, node(name)).should_run for name in ("a", "b")] == [False, True]


def test_daemon_pod_is_bound_labelled_and_tolerant():
    ds = daemonset({"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 5}], "hostNetwork": True})
    body = daemon_pod(ds, "node-1", HASH)
    assert body["spec"]["nodeName"] == "node-1"
    assert body["metadata"]["generateName"] == "agent-"
    assert body["metadata"]["labels"] == {"app": "agent", HASH_LABEL: HASH}
    keys = [(item["key"], item["effect"]) for item in body["spec"]["tolerations"]]
    assert len(keys) == len(set(keys)) == len(AUTOMATIC_TOLERATIONS) + 1  # the template's one is kept, not doubled
    assert body["spec"]["tolerations"][0]["tolerationSeconds"] == 5
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in keys
    assert "nodeName" not in ds["spec"]["template"]["spec"]


# --- manage: one pod per node ------------------------------------------------------------------------


def test_manage_creates_on_nodes_without_a_pod_and_deletes_where_it_may_not_stay():
    ds = daemonset({"nodeSelector": {"role": "worker"}})
    nodes = [node("a", {"role": "worker"}), node("b", {"role": "worker"}), node("c")]
    on_c, on_gone = pod("c"), pod("gone")
    plan = manage_plan(ds, nodes, pods_by_node([pod("a"), on_c, on_gone]), HASH)
    assert plan.create_on == ["b"]
    assert names(plan.delete) == names([on_c, on_gone])


def test_manage_waits_for_a_terminating_pod_and_replaces_a_failed_one():
    ds = daemonset()
    failed = pod("b", phase="Failed")
    plan = manage_plan(ds, [node("a"), node("b")], pods_by_node([pod("a", deleting=True), failed]), HASH)
    assert plan.create_on == []
    assert names(plan.delete) == names([failed])


def test_manage_keeps_the_oldest_of_duplicate_pods():
    older, newer = pod("a", age=200), pod("a", age=10)
    plan = manage_plan(daemonset(), [node("a")], pods_by_node([newer, older]), HASH)
    assert names(plan.delete) == names([newer])


def test_manage_mid_surge_keeps_a_ready_old_pod_until_its_replacement_is_ready():
    ds = daemonset(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    old = pod("a", revision="old", age=200)
    waiting = manage_plan(ds, [node("a")], pods_by_node([old, pod("a", ready=False, age=5)]), HASH)
    assert not waiting
    done = manage_plan(ds, [node("a")], pods_by_node([old, pod("a", age=5)]), HASH)
    assert names(done.delete) == names([old])


# --- rolling updates ---------------------------------------------------------------------------------


def test_rolling_update_replaces_max_unavailable_nodes_at_a_time():
    ds = daemonset(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}})
    nodes = [node(name) for name in "abcd"]
    olds = [pod(name, revision="old") for name in "abcd"]
    plan = rolling_plan(ds, nodes, pods_by_node(olds), HASH, NOW)
    assert names(plan.delete) == names(olds[:2]) and plan.create_on == []
    # a: replaced and ready, b: replacement not ready yet: one more may go
    pods = [pod("a"), pod("b", ready=False), *olds[2:]]
    assert names(rolling_plan(ds, nodes, pods_by_node(pods), HASH, NOW).delete) == names(olds[2:3])


def test_rolling_update_percentage_rounds_up_and_unavailable_old_pods_go_at_once():
    ds = daemonset(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}})
    nodes = [node(name) for name in "abc"]
    broken = pod("c", revision="old", ready=False)
    olds = [pod("a", revision="old"), pod("b", revision="old"), broken]
    plan = rolling_plan(ds, nodes, pods_by_node(olds), HASH, NOW)
    assert names(plan.delete) == names([broken, olds[0]])


def test_rolling_update_counts_min_ready_seconds():
    ds = daemonset(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}, min_ready=30)
    olds = [pod("b", revision="old")]
    fresh = [pod("a", ready_for=5), *olds]  # ready for 5 s of the 30 needed: not available yet
    assert not rolling_plan(ds, [node("a"), node("b")], pods_by_node(fresh), HASH, NOW)
    seasoned = [pod("a", ready_for=60), *olds]
    assert names(rolling_plan(ds, [node("a"), node("b")], pods_by_node(seasoned), HASH, NOW).delete) == names(olds)


def test_rolling_update_with_surge_starts_new_pods_beside_old_ones():
    ds = daemonset(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    nodes = [node(name) for name in "abc"]
    olds = [pod(name, revision="old") for name in "abc"]
    plan = rolling_plan(ds, nodes, pods_by_node(olds), HASH, NOW)
    assert plan.create_on == ["a"] and plan.delete == []
    surging = [*olds, pod("a", ready=False)]
    assert not rolling_plan(ds, nodes, pods_by_node(surging), HASH, NOW)
    ready = [*olds, pod("a")]
    plan = rolling_plan(ds, nodes, pods_by_node(ready), HASH, NOW)
    assert names(plan.delete) == names(olds[:1]) and plan.create_on == ["b"]


def test_on_delete_rolls_nothing_but_new_pods_use_the_new_template():
    ds = daemonset(strategy={"type": "OnDelete"})
    plan = manage_plan(ds, [node("a"), node("b")], pods_by_node([pod("a", revision="old")]), HASH)
    assert plan.create_on == ["b"] and plan.delete == []
    assert daemon_pod(ds, "b", HASH)["metadata"]["labels"][HASH_LABEL] == HASH


# --- status ------------------------------------------------------------------------------------------


def test_status_counts_per_node():
    ds = daemonset({"nodeSelector": {"role": "worker"}})
    nodes = [node(name, {"role": "worker"}) for name in "abcd"] + [node("e")]
    pods = [pod("a"), pod("b", ready=False), pod("c", revision="old"), pod("e")]
    status, wait = calculate_status(ds, nodes, pods_by_node(pods), HASH, NOW)
    assert status == {"desiredNumberScheduled": 4, "currentNumberScheduled": 3, "numberReady": 2,
                      "numberAvailable": 2, "numberUnavailable": 2, "updatedNumberScheduled": 2,
                      "numberMisscheduled": 1, "observedGeneration": 3}
    assert wait is None


def test_status_waits_for_min_ready_seconds():
    status, wait = calculate_status(daemonset(min_ready=30), [node("a")], pods_by_node([pod("a", ready_for=10)]),
                                    HASH, NOW)
    assert (status["numberReady"], status["numberAvailable"], wait) == (1, 0, 20)


def test_status_patch_only_on_change():
    status, _ = calculate_status(daemonset(), [node("a")], pods_by_node([pod("a")]), HASH, NOW)
    assert status_patch(None, status) == {"status": status}
    assert status_patch(status, status) is None


# --- revision history --------------------------------------------------------------------------------


def with_history(ds: dict, history: list[dict]) -> dict:
    ds["metadata"]["annotations"] = {HISTORY_ANNOTATION: json.dumps(history)}
    return ds


def test_history_records_each_new_template_once():
    ds = daemonset()
    first = next_history(ds, HASH)
    assert [(entry["revision"], entry["hash"]) for entry in first] == [(1, HASH)]
    assert next_history(with_history(ds, first), HASH) is None


def test_history_renumbers_a_template_rolled_back_to_and_keeps_the_limit():
    history = [{"revision": number, "hash": f"h{number}", "template": {}} for number in (1, 2, 3)]
    ds = with_history(daemonset(history_limit=1), history)
    assert [(entry["revision"], entry["hash"]) for entry in next_history(ds, "h1")] == [(3, "h3"), (4, "h1")]
    ds = with_history(daemonset(history_limit=0), history)
    assert [entry["revision"] for entry in next_history(ds, "h9")] == [4]


def test_unreadable_history_reads_as_none():
    assert recorded_history(with_history(daemonset(), [])) == []
    ds = daemonset()
    ds["metadata"]["annotations"] = {HISTORY_ANNOTATION: "{not json"}
    assert recorded_history(ds) == []


def test_controller_is_registered():
    assert CONTROLLERS["daemonset"] is DaemonSetController
