"""Scheduler node filters: readiness, cordons, taints and tolerations, node selection, resource fit, the message."""

from __future__ import annotations

import pytest

from daemons.api.tolerations import tolerates
from daemons.scheduler.facts import node_info, pod_info
from daemons.scheduler.predicates import (
    INSUFFICIENT_CPU,
    INSUFFICIENT_MEMORY,
    NOT_READY,
    SELECTOR_MISMATCH,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    failure_message,
    filter_nodes,
    node_ready,
    node_schedulable,
    node_selector_matches,
    resources_fit,
    taints_tolerated,
    unfit_reasons,
    untolerated_taint,
)
from daemons.scheduler.usage import NO_USAGE, NodeUsage, Resources

pytestmark = pytest.mark.unit

GI = 2**30


def node_obj(name="n1", *, ready="True", labels=None, taints=None, unschedulable=None, cpu="2", memory="4Gi",
         pods="110", status=True):
    spec = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    obj = {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}
    if status:
        allocatable = {key: value for key, value in (("cpu", cpu), ("memory", memory), ("pods", pods)) if value}
        conditions = [{"type": "Ready", "status": ready}] if ready else []
        obj["status"] = {"allocatable": allocatable, "conditions": conditions}
    return obj


def node(name="n1", **fields):
    return node_info(node_obj(name, **fields))


def pod(*, cpu=None, memory=None, selector=None, tolerations=None, affinity=None):
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value}
    spec = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}]}
    if selector is not None:
        spec["nodeSelector"] = selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if affinity is not None:
        spec["affinity"] = affinity
    return pod_info({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})


# --- tolerations --------------------------------------------------------------------------------------

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(("toleration", "expected"), [
    ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
    ({"key": "dedicated", "value": "gpu"}, True),  # operator defaults to Equal, no effect means every effect
    ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),
    ({"key": "dedicated", "operator": "Exists"}, True),
    ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
    ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
    ({"operator": "Exists", "effect": "NoSchedule"}, True),
    ({"operator": "Exists", "effect": "NoExecute"}, False),
])
def test_toleration_matching(toleration, expected):
    assert tolerates(toleration, TAINT) is expected


def test_equal_toleration_matches_a_taint_without_value():
    assert tolerates({"key": "k", "operator": "Equal", "effect": "NoSchedule"}, {"key": "k", "effect": "NoSchedule"})


def test_only_no_schedule_and_no_execute_taints_repel():
    soft = node(taints=[{"key": "a", "effect": "PreferNoSchedule"}])
    assert untolerated_taint(pod(), soft) is None
    hard = node(taints=[{"key": "a", "effect": "PreferNoSchedule"}, {"key": "b", "value": "x", "effect": "NoExecute"}])
    assert untolerated_taint(pod(), hard) == {"key": "b", "value": "x", "effect": "NoExecute"}


def test_taint_predicate_names_the_first_untolerated_taint():
    tainted = node(taints=[TAINT, {"key": "zone", "effect": "NoSchedule"}])
    assert taints_tolerated(pod(), tainted, NO_USAGE) == ("node(s) had untolerated taint {dedicated: gpu}",)
    one_tolerated = pod(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert taints_tolerated(one_tolerated, tainted, NO_USAGE) == ("node(s) had untolerated taint {zone: }",)
    assert taints_tolerated(pod(tolerations=[{"operator": "Exists"}]), tainted, NO_USAGE) == ()


# --- readiness and cordons ------------------------------------------------------------------------------


@pytest.mark.parametrize(("ready", "expected"), [("True", ()), ("False", (NOT_READY,)), ("Unknown", (NOT_READY,)),
                                                 (None, (NOT_READY,))])
def test_only_ready_nodes_pass(ready, expected):
    assert node_ready(pod(), node(ready=ready), NO_USAGE) == expected


def test_a_node_without_status_is_not_ready():
    assert node_ready(pod(), node(status=False), NO_USAGE) == (NOT_READY,)


def test_cordoned_node_refuses_pods_unless_they_tolerate_the_unschedulable_taint():
    cordoned = node(unschedulable=True)
    assert node_schedulable(pod(), cordoned, NO_USAGE) == (UNSCHEDULABLE,)
    tolerating = pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                   "effect": "NoSchedule"}])
    assert node_schedulable(tolerating, cordoned, NO_USAGE) == ()
    assert node_schedulable(pod(), node(unschedulable=False), NO_USAGE) == ()


# --- node selection -------------------------------------------------------------------------------------


def test_node_selector_needs_every_label():
    labelled = node(labels={"disk": "ssd", "zone": "a"})
    assert node_selector_matches(pod(selector={"disk": "ssd"}), labelled, NO_USAGE) == ()
    assert node_selector_matches(pod(selector={"disk": "ssd", "zone": "a"}), labelled, NO_USAGE) == ()
    assert node_selector_matches(pod(selector={"disk": "hdd"}), labelled, NO_USAGE) == (SELECTOR_MISMATCH,)
    assert node_selector_matches(pod(selector={"gpu": "yes"}), labelled, NO_USAGE) == (SELECTOR_MISMATCH,)
    assert node_selector_matches(pod(), labelled, NO_USAGE) == ()


def required(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(("expression", "expected"), [
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
    ({"key": "zone", "operator": "In", "values": ["c"]}, False),
    ({"key": "zone", "operator": "NotIn", "values": ["c"]}, True),
    ({"key": "missing", "operator": "NotIn", "values": ["c"]}, True),
    ({"key": "zone", "operator": "Exists"}, True),
    ({"key": "missing", "operator": "Exists"}, False),
    ({"key": "missing", "operator": "DoesNotExist"}, True),
    ({"key": "cores", "operator": "Gt", "values": ["4"]}, True),
    ({"key": "cores", "operator": "Lt", "values": ["4"]}, False),
    ({"key": "zone", "operator": "Gt", "values": ["4"]}, False),  # not a number
    ({"key": "zone", "operator": "Bogus", "values": ["a"]}, False),
])
def test_required_node_affinity_expressions(expression, expected):
    labelled = node(labels={"zone": "a", "cores": "8"})
    reasons = node_selector_matches(pod(affinity=required({"matchExpressions": [expression]})), labelled, NO_USAGE)
    assert (reasons == ()) is expected


def test_node_affinity_terms_are_ored_and_match_fields_read_the_node_name():
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    by_zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    affinity = pod(affinity=required(by_name, by_zone))
    assert node_selector_matches(affinity, node("n2", labels={"zone": "b"}), NO_USAGE) == ()
    assert node_selector_matches(affinity, node("n1", labels={"zone": "a"}), NO_USAGE) == ()
    assert node_selector_matches(affinity, node("n3", labels={"zone": "b"}), NO_USAGE) == (SELECTOR_MISMATCH,)
    assert node_selector_matches(pod(affinity=required({})), node(), NO_USAGE) == (SELECTOR_MISMATCH,)


# --- resources ------------------------------------------------------------------------------------------


def used(cpu=0, memory=0, pods=0):
    return NodeUsage(Resources(cpu, memory), pods)


def test_requests_fit_what_is_left():
    assert resources_fit(pod(cpu="500m", memory="1Gi"), node(), used(1500, 3 * GI, 3)) == ()
    assert resources_fit(pod(cpu="501m"), node(), used(1500, 0, 3)) == (INSUFFICIENT_CPU,)
    assert resources_fit(pod(cpu="1", memory="2Gi"), node(), used(1500, 3 * GI, 3)) == (INSUFFICIENT_CPU,
                                                                                       INSUFFICIENT_MEMORY)


def test_pod_count_is_limited_by_allocatable_pods():
    assert resources_fit(pod(), node(pods="3"), used(pods=2)) == ()
    assert resources_fit(pod(), node(pods="3"), used(pods=3)) == (TOO_MANY_PODS,)


def test_a_pod_without_requests_fits_a_full_node():
    assert resources_fit(pod(), node(), used(2000, 4 * GI, 5)) == ()


def test_a_resource_the_node_does_not_report_is_not_limited():
    assert resources_fit(pod(cpu="64", memory="1Ti"), node(cpu=None, memory=None, pods=None), used(pods=500)) == ()


def test_allocatable_falls_back_to_capacity():
    bare = node_obj(cpu=None)
    bare["status"]["capacity"] = {"cpu": "1"}
    assert resources_fit(pod(cpu="2"), node_info(bare), NO_USAGE) == (INSUFFICIENT_CPU,)


# --- combining ------------------------------------------------------------------------------------------


def test_a_node_is_judged_by_the_first_predicate_that_refuses_it():
    bad = node(ready="False", unschedulable=True, labels={}, cpu="1")
    assert unfit_reasons(pod(cpu="2", selector={"a": "b"}), bad, NO_USAGE) == (NOT_READY,)
    assert unfit_reasons(pod(), node(), NO_USAGE) == ()


def test_filter_counts_reasons_and_the_message_reads_like_kubectl():
    nodes = [node("a", labels={"disk": "hdd"}), node("b", labels={"disk": "ssd"}), node("c", labels={"disk": "ssd"})]
    found = filter_nodes(pod(cpu="3", selector={"disk": "ssd"}), nodes, {})
    assert found.feasible == []
    assert failure_message(len(nodes), found.refusals) == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu."
    )


def test_filter_uses_each_nodes_own_usage():
    nodes = [node("a"), node("b")]
    found = filter_nodes(pod(cpu="1"), nodes, {"a": used(1500, 0, 1)})
    assert [item.name for item in found.feasible] == ["b"]
    assert found.refusals == {INSUFFICIENT_CPU: 1}


def test_the_message_counts_a_node_once_per_shortage_and_sorts_reasons():
    nodes = [node("a", ready="False"), node("b", cpu="1", memory="1Gi"), node("c", unschedulable=True)]
    refusals = filter_nodes(pod(cpu="2", memory="2Gi"), nodes, {}).refusals
    assert failure_message(3, refusals) == ("0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
                                            "1 node(s) were not ready, 1 node(s) were unschedulable.")


def test_no_nodes_at_all():
    assert failure_message(0, {}) == "no nodes available to schedule pods"
