"""What the filters and strategies read of a node and of a pod, derived once rather than once per pair.

A node's facts (readiness, cordon, repelling taints, labels, allocatable) are
parsed when its event arrives and kept in the node cache; a pod's (requests,
tolerations, selector, required affinity) when it is placed. Judging one pod
against thousands of nodes then reads attributes instead of re-parsing quantities.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from daemons.api.tolerations import tolerates
from daemons.scheduler.usage import Allocatable, Obj, Resources, node_allocatable, node_name, pod_requests

# The taint a cordoned node carries in Kubernetes: a pod tolerating it may still go there.
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
REPELLING_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule only discourages


def ready_status(node: Obj) -> str | None:
    """The status ("True", "False", "Unknown") of the node's Ready condition; None before it reports one."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status")
    return None


@dataclass(frozen=True)
class NodeInfo:
    """The parts of a node scheduling depends on; equal for two versions that differ only by a heartbeat."""

    name: str
    labels: Mapping[str, str]
    ready: bool
    unschedulable: bool
    taints: tuple[Obj, ...]  # the NoSchedule and NoExecute ones, in the node's order
    allocatable: Allocatable
    open: bool  # Ready, not cordoned, untainted: whatever the pod, only its selector and resources can refuse it


def node_info(node: Obj) -> NodeInfo:
    spec = node.get("spec") or {}
    ready, unschedulable = ready_status(node) == "True", bool(spec.get("unschedulable"))
    taints = tuple(taint for taint in spec.get("taints") or [] if taint.get("effect") in REPELLING_EFFECTS)
    return NodeInfo(
        name=node_name(node),
        labels=dict((node.get("metadata") or {}).get("labels") or {}),
        ready=ready,
        unschedulable=unschedulable,
        taints=taints,
        allocatable=node_allocatable(node),
        open=ready and not unschedulable and not taints,
    )


@dataclass(frozen=True)
class PodInfo:
    """The parts of a pod the filters and strategies read."""

    requests: Resources
    tolerations: tuple[Obj, ...]
    node_selector: Mapping[str, str]
    required_terms: tuple[Obj, ...] | None  # None: no required node affinity
    tolerates_unschedulable: bool


def pod_info(pod: Obj) -> PodInfo:
    spec = pod.get("spec") or {}
    tolerations = tuple(spec.get("tolerations") or [])
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return PodInfo(
        requests=pod_requests(pod),
        tolerations=tolerations,
        node_selector=dict(spec.get("nodeSelector") or {}),
        required_terms=tuple(required.get("nodeSelectorTerms") or []) if required else None,
        tolerates_unschedulable=any(tolerates(item, UNSCHEDULABLE_TAINT) for item in tolerations),
    )
