"""Node filters: pure functions saying why a pod cannot go to a node, in kubectl's words.

Each predicate takes ``(pod, node, usage)`` (the pod's and the node's facts, see
``facts``) and returns the reasons the node does not fit (empty when it does).
As in Kubernetes, a node is judged by the first predicate that refuses it, and
the refusals of all nodes add up to the FailedScheduling message
("0/3 nodes are available: 1 node(s) ..., 2 Insufficient cpu.").

Like kube-scheduler's ``percentageOfNodesToScore``, a pod need not be judged
against every node of a large cluster: ``filter_nodes`` walks the nodes from a
given start, wrapping around, and stops once it has found enough that fit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from daemons.api.tolerations import tolerates
from daemons.scheduler.facts import NodeInfo, PodInfo
from daemons.scheduler.usage import NO_USAGE, NodeUsage, Obj

Reasons = tuple[str, ...]
Predicate = Callable[[PodInfo, NodeInfo, NodeUsage], Reasons]

NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
INSUFFICIENT_CPU = "Insufficient cpu"
INSUFFICIENT_MEMORY = "Insufficient memory"
NO_NODES = "no nodes available to schedule pods"

# kube-scheduler's bounds on sampling: below this many nodes every node is judged, and never under this share.
MIN_FEASIBLE_NODES = 100
MIN_ADAPTIVE_PERCENTAGE = 5
ADAPTIVE_BASE_PERCENTAGE = 50
NODES_PER_PERCENT = 125  # the adaptive share drops one point per this many nodes


def untolerated_taint(pod: PodInfo, node: NodeInfo) -> Obj | None:
    """The first NoSchedule or NoExecute taint of the node that none of the pod's tolerations matches."""
    for taint in node.taints:
        if not any(tolerates(item, taint) for item in pod.tolerations):
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


def term_matches(term: Obj, node: NodeInfo) -> bool:
    """A node selector term: all its label expressions and field expressions hold; an empty term selects nothing."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    node_fields = {"metadata.name": node.name}
    return all(expression_matches(item, node.labels) for item in expressions) and all(
        expression_matches(item, node_fields) for item in fields
    )


def required_affinity_matches(pod: PodInfo, node: NodeInfo) -> bool:
    """``requiredDuringSchedulingIgnoredDuringExecution``: any one of its terms matches (none given: any node)."""
    if pod.required_terms is None:
        return True
    return any(term_matches(term, node) for term in pod.required_terms)


# --- predicates ----------------------------------------------------------------------------------------


def node_ready(pod: PodInfo, node: NodeInfo, usage: NodeUsage) -> Reasons:
    """Only a node whose Ready condition is True runs pods."""
    return () if node.ready else (NOT_READY,)


def node_schedulable(pod: PodInfo, node: NodeInfo, usage: NodeUsage) -> Reasons:
    """A cordoned node (``spec.unschedulable``) takes only pods tolerating the unschedulable taint."""
    return (UNSCHEDULABLE,) if node.unschedulable and not pod.tolerates_unschedulable else ()


def taints_tolerated(pod: PodInfo, node: NodeInfo, usage: NodeUsage) -> Reasons:
    taint = untolerated_taint(pod, node) if node.taints else None
    if taint is None:
        return ()
    return (f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}",)


def node_selector_matches(pod: PodInfo, node: NodeInfo, usage: NodeUsage) -> Reasons:
    """Every ``nodeSelector`` label is on the node, and the required node affinity holds."""
    labels = node.labels
    if all(labels.get(key) == value for key, value in pod.node_selector.items()) and required_affinity_matches(
        pod, node
    ):
        return ()
    return (SELECTOR_MISMATCH,)


def resources_fit(pod: PodInfo, node: NodeInfo, usage: NodeUsage) -> Reasons:
    """The pod's requests fit in what the node offers minus what its pods already requested; one reason per shortage."""
    offered, wanted = node.allocatable, pod.requests
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
# Those passing every pod on an open node (``NodeInfo.open``), so not asked there.
NODE_STATE_PREDICATES = (node_ready, node_schedulable, taints_tolerated)


def predicates_for(pod: PodInfo) -> tuple[Predicate, ...]:
    """The predicates that can refuse a node to ``pod``, in order: without a selector or required affinity,
    node selection passes everywhere and is not asked."""
    if pod.node_selector or pod.required_terms is not None:
        return PREDICATES
    return tuple(predicate for predicate in PREDICATES if predicate is not node_selector_matches)


def unfit_reasons(pod: PodInfo, node: NodeInfo, usage: NodeUsage,
                  predicates: tuple[Predicate, ...] = PREDICATES) -> Reasons:
    """The reasons of the first predicate that refuses the node; empty when the node fits."""
    for predicate in predicates:
        reasons = predicate(pod, node, usage)
        if reasons:
            return reasons
    return ()


def feasible_nodes_to_find(total: int, percentage: int) -> int:
    """How many fitting nodes to look for among ``total``, as kube-scheduler's ``numFeasibleNodesToFind``.

    ``percentage`` 0 is adaptive: 50 % of a small cluster, one point less per 125 nodes, never under 5 %;
    whatever the share, at least 100 nodes (all of a smaller cluster); 100 means every node.
    """
    if total < MIN_FEASIBLE_NODES or percentage >= 100:
        return total
    share = percentage or max(MIN_ADAPTIVE_PERCENTAGE, ADAPTIVE_BASE_PERCENTAGE - total // NODES_PER_PERCENT)
    return max(MIN_FEASIBLE_NODES, total * share // 100)


@dataclass(frozen=True)
class Filtered:
    """The nodes found fitting, in the order judged, and the refusals of those judged that did not fit."""

    feasible: list[NodeInfo]
    refusals: Counter[str]


def filter_nodes(pod: PodInfo, nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage], start: int = 0,
                 wanted: int | None = None) -> Filtered:
    """Judge the nodes from index ``start`` on, wrapping around, until ``wanted`` fit (default: judge them all).

    When fewer than ``wanted`` fit, every node has been judged, so a pod that fits
    nowhere gets refusals counted over the whole cluster.
    """
    feasible: list[NodeInfo] = []
    refusals: Counter[str] = Counter()
    total = len(nodes)
    wanted = total if wanted is None else wanted
    predicates = predicates_for(pod)
    on_open_nodes = tuple(predicate for predicate in predicates if predicate not in NODE_STATE_PREDICATES)
    for offset in range(total):
        node = nodes[(start + offset) % total]
        reasons = unfit_reasons(pod, node, usage.get(node.name, NO_USAGE), on_open_nodes if node.open else predicates)
        if reasons:
            refusals.update(reasons)
            continue
        feasible.append(node)
        if len(feasible) >= wanted:
            break
    return Filtered(feasible, refusals)


def failure_message(total_nodes: int, refusals: Mapping[str, int]) -> str:
    """kubectl's FailedScheduling wording, reasons counted and sorted as Kubernetes sorts them."""
    if total_nodes == 0:
        return NO_NODES
    parts = sorted(f"{count} {reason}" for reason, count in refusals.items())
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."
