"""Node filters: pure functions saying why a pod cannot go to a node, in kubectl's words.

Each predicate takes ``(pod, node, usage)`` and returns the reasons the node
does not fit (empty when it does). As in Kubernetes, a node is judged by the
first predicate that refuses it, and the refusals of all nodes add up to the
FailedScheduling message ("0/3 nodes are available: 1 node(s) ..., 2 Insufficient cpu.").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from daemons.api.tolerations import tolerates
from daemons.scheduler.usage import NO_USAGE, NodeUsage, Obj, node_allocatable, node_name, pod_requests

Reasons = tuple[str, ...]
Predicate = Callable[[Obj, Obj, NodeUsage], Reasons]

NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
INSUFFICIENT_CPU = "Insufficient cpu"
INSUFFICIENT_MEMORY = "Insufficient memory"
NO_NODES = "no nodes available to schedule pods"

# The taint a cordoned node carries in Kubernetes: a pod tolerating it may still go there.
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
REPELLING_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule only discourages


def _labels(node: Obj) -> dict[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _tolerations(pod: Obj) -> list[Obj]:
    return (pod.get("spec") or {}).get("tolerations") or []


def untolerated_taint(pod: Obj, node: Obj) -> Obj | None:
    """The first NoSchedule or NoExecute taint of the node that none of the pod's tolerations matches."""
    tolerations = _tolerations(pod)
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in REPELLING_EFFECTS and not any(tolerates(item, taint) for item in tolerations):
            return taint
    return None


def _compares(value: str, bounds: list[str], operator: str) -> bool:
    """``Gt``/``Lt``: the label and the single bound both read as integers."""
    try:
        actual, bound = int(value), int(bounds[0])
    except (ValueError, IndexError):
        return False
    return actual > bound if operator == "Gt" else actual < bound


def expression_matches(expression: Obj, labels: Mapping[str, str]) -> bool:
    """One node selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against labels."""
    key, values = expression.get("key"), expression.get("values") or []
    present = key in labels
    match expression.get("operator"):
        case "In":
            return present and labels[key] in values
        case "NotIn":
            return not present or labels[key] not in values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt" as operator:
            return present and _compares(labels[key], values, operator)
    return False


def term_matches(term: Obj, node: Obj) -> bool:
    """A node selector term: all its label expressions and field expressions hold; an empty term selects nothing."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels, node_fields = _labels(node), {"metadata.name": node_name(node)}
    return all(expression_matches(item, labels) for item in expressions) and all(
        expression_matches(item, node_fields) for item in fields
    )


def required_affinity_matches(pod: Obj, node: Obj) -> bool:
    """``requiredDuringSchedulingIgnoredDuringExecution``: any one of its terms matches (none given: any node)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(term_matches(term, node) for term in required.get("nodeSelectorTerms") or [])


def ready_status(node: Obj) -> str | None:
    """The status ("True", "False", "Unknown") of the node's Ready condition; None before it reports one."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status")
    return None


# --- predicates ----------------------------------------------------------------------------------------


def node_ready(pod: Obj, node: Obj, usage: NodeUsage) -> Reasons:
    """Only a node whose Ready condition is True runs pods."""
    return () if ready_status(node) == "True" else (NOT_READY,)


def node_schedulable(pod: Obj, node: Obj, usage: NodeUsage) -> Reasons:
    """A cordoned node (``spec.unschedulable``) takes only pods tolerating the unschedulable taint."""
    if not (node.get("spec") or {}).get("unschedulable"):
        return ()
    if any(tolerates(toleration, UNSCHEDULABLE_TAINT) for toleration in _tolerations(pod)):
        return ()
    return (UNSCHEDULABLE,)


def taints_tolerated(pod: Obj, node: Obj, usage: NodeUsage) -> Reasons:
    taint = untolerated_taint(pod, node)
    if taint is None:
        return ()
    return (f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}",)


def node_selector_matches(pod: Obj, node: Obj, usage: NodeUsage) -> Reasons:
    """Every ``nodeSelector`` label is on the node, and the required node affinity holds."""
    labels = _labels(node)
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if all(labels.get(key) == value for key, value in selector.items()) and required_affinity_matches(pod, node):
        return ()
    return (SELECTOR_MISMATCH,)


def resources_fit(pod: Obj, node: Obj, usage: NodeUsage) -> Reasons:
    """The pod's requests fit in what the node offers minus what its pods already requested; one reason per shortage."""
    offered, wanted = node_allocatable(node), pod_requests(pod)
    reasons = []
    if offered.pods is not None and usage.pods + 1 > offered.pods:
        reasons.append(TOO_MANY_PODS)
    if wanted.cpu and offered.cpu is not None and usage.requested.cpu + wanted.cpu > offered.cpu:
        reasons.append(INSUFFICIENT_CPU)
    if wanted.memory and offered.memory is not None and usage.requested.memory + wanted.memory > offered.memory:
        reasons.append(INSUFFICIENT_MEMORY)
    return tuple(reasons)


PREDICATES: tuple[Predicate, ...] = (node_ready, node_schedulable, taints_tolerated, node_selector_matches,
                                     resources_fit)


def unfit_reasons(pod: Obj, node: Obj, usage: NodeUsage) -> Reasons:
    """The reasons of the first predicate that refuses the node; empty when the node fits."""
    for predicate in PREDICATES:
        reasons = predicate(pod, node, usage)
        if reasons:
            return reasons
    return ()


def filter_nodes(pod: Obj, nodes: Iterable[Obj], usage: Mapping[str, NodeUsage]) -> tuple[list[Obj], Counter[str]]:
    """The nodes the pod fits on, and how many nodes were refused for each reason."""
    feasible: list[Obj] = []
    refusals: Counter[str] = Counter()
    for node in nodes:
        reasons = unfit_reasons(pod, node, usage.get(node_name(node), NO_USAGE))
        if reasons:
            refusals.update(reasons)
        else:
            feasible.append(node)
    return feasible, refusals


def failure_message(total_nodes: int, refusals: Mapping[str, int]) -> str:
    """kubectl's FailedScheduling wording, reasons counted and sorted as Kubernetes sorts them."""
    if total_nodes == 0:
        return NO_NODES
    parts = sorted(f"{count} {reason}" for reason, count in refusals.items())
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."
