"""Choosing one node among those a pod fits on: pure functions ``(pod, nodes, usage, state) -> node name``.

``nodes`` is never empty. Ties go to the node whose name sorts first, so the
same cluster state always gives the same choice (``Random`` aside).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from daemons.scheduler.usage import NO_USAGE, NodeUsage, Obj, node_allocatable, node_name, pod_requests


@dataclass(frozen=True)
class StrategyState:
    """What a strategy may remember between pods: the last node chosen, and a random source."""

    last_node: str | None = None
    rng: random.Random = field(default_factory=random.Random, compare=False)


Strategy = Callable[[Obj, Sequence[Obj], Mapping[str, NodeUsage], StrategyState], str]


def _names(nodes: Sequence[Obj]) -> list[str]:
    return sorted(node_name(node) for node in nodes)


def round_robin(pod: Obj, nodes: Sequence[Obj], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    """The first node by name after the last one chosen, wrapping around.

    Going by name rather than by position keeps the rotation fair when the set of
    feasible nodes differs from pod to pod.
    """
    names = _names(nodes)
    later = [name for name in names if state.last_node is not None and name > state.last_node]
    return (later or names)[0]


def random_node(pod: Obj, nodes: Sequence[Obj], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    return state.rng.choice(_names(nodes))


def least_pods(pod: Obj, nodes: Sequence[Obj], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    return min(_names(nodes), key=lambda name: (usage.get(name, NO_USAGE).pods, name))


def _fraction(used: int, offered: int | None) -> float:
    """Share of a resource taken; a node with no figure for it counts as empty."""
    return used / offered if offered else 0.0


def _least_share(nodes: Sequence[Obj], usage: Mapping[str, NodeUsage], wanted: int, resource: str) -> str:
    """The node whose requested share of ``resource`` ("cpu" or "memory") is lowest once ``wanted`` is added."""

    def share(node: Obj) -> tuple[float, str]:
        name = node_name(node)
        used = getattr(usage.get(name, NO_USAGE).requested, resource) + wanted
        return _fraction(used, getattr(node_allocatable(node), resource)), name

    return min(share(node) for node in nodes)[1]


def least_cpu(pod: Obj, nodes: Sequence[Obj], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    return _least_share(nodes, usage, pod_requests(pod).cpu, "cpu")


def least_memory(pod: Obj, nodes: Sequence[Obj], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    return _least_share(nodes, usage, pod_requests(pod).memory, "memory")


STRATEGIES: dict[str, Strategy] = {
    "RoundRobin": round_robin,
    "Random": random_node,
    "LeastPods": least_pods,
    "LeastCPU": least_cpu,
    "LeastMemory": least_memory,
}
