"""What a pod asks of a node and what a node offers, in millicores, bytes and pod slots.

Kept as plain arithmetic over API dicts so the predicates, the strategies and
the usage cache count resources in exactly the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemons.api.phases import TERMINAL_PHASES
from daemons.api.quantity import cpu_millis, memory_bytes, parse_quantity

Obj = dict[str, Any]



@dataclass(frozen=True)
class Resources:
    """CPU in millicores and memory in bytes."""

    cpu: int = 0
    memory: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory)

    def at_least(self, other: Resources) -> Resources:
        """The larger of each resource, as an init container's turn is sized."""
        return Resources(max(self.cpu, other.cpu), max(self.memory, other.memory))


@dataclass(frozen=True)
class Allocatable:
    """What a node offers to pods; ``None`` where the node reports no figure, which leaves it unconstrained."""

    cpu: int | None = None
    memory: int | None = None
    pods: int | None = None


@dataclass(frozen=True)
class NodeUsage:
    """The requests of the pods counted against one node, and how many they are."""

    requested: Resources = Resources()
    pods: int = 0

    def plus(self, requests: Resources) -> NodeUsage:
        return NodeUsage(self.requested + requests, self.pods + 1)

    def minus(self, requests: Resources) -> NodeUsage:
        return NodeUsage(self.requested - requests, self.pods - 1)


NO_USAGE = NodeUsage()


def container_requests(container: Obj) -> Resources:
    """A container's requests; a resource with only a limit requests its limit, as Kubernetes defaults it."""
    resources = container.get("resources") or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    cpu = cpu_millis(wanted["cpu"]) if "cpu" in wanted else 0
    memory = memory_bytes(wanted["memory"]) if "memory" in wanted else 0
    return Resources(cpu, memory)


def pod_requests(pod: Obj) -> Resources:
    """The sum of the containers' requests, raised to the largest init container's, since those run one at a time."""
    spec = pod.get("spec") or {}
    total = Resources()
    for container in spec.get("containers") or []:
        total += container_requests(container)
    for container in spec.get("initContainers") or []:
        total = total.at_least(container_requests(container))
    return total


def node_allocatable(node: Obj) -> Allocatable:
    """``status.allocatable``, falling back to ``status.capacity`` per resource."""
    status = node.get("status") or {}
    offered = {**(status.get("capacity") or {}), **(status.get("allocatable") or {})}
    return Allocatable(
        cpu=cpu_millis(offered["cpu"]) if "cpu" in offered else None,
        memory=memory_bytes(offered["memory"]) if "memory" in offered else None,
        pods=int(parse_quantity(offered["pods"])) if "pods" in offered else None,
    )


def node_name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def assigned_node(pod: Obj) -> str:
    """The node a pod is bound to, or ``""``."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def counts_against_node(pod: Obj) -> bool:
    """Whether a pod holds resources on a node: bound and not finished (a terminating pod still runs)."""
    return bool(assigned_node(pod)) and not is_terminal(pod)
