"""Choosing one node among those a pod fits on: pure functions ``(pod, nodes, usage, state) -> node name``.

``nodes`` (those found fitting: all of them, or a sample on a large cluster) is
never empty. Ties go to the node whose name sorts first, so the same cluster
state always gives the same choice (``Random`` aside).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from daemons.scheduler.facts import NodeInfo, PodInfo
from daemons.scheduler.usage import NO_USAGE, NodeUsage


@dataclass(frozen=True)
class StrategyState:
    """What a strategy may remember between pods: the last node chosen, and a random source."""

    last_node: str | None = None
    rng: random.Random = field(default_factory=random.Random, compare=False)


Strategy = Callable[[PodInfo, Sequence[NodeInfo], Mapping[str, NodeUsage], StrategyState], str]


def round_robin(pod: PodInfo, nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    """The first node by name after the last one chosen, wrapping around.

    Going by name rather than by position keeps the rotation fair when the set of
    feasible nodes differs from pod to pod.
    """
    names = [node.name for node in nodes]
    last = state.last_node
    later = [name for name in names if name > last] if last is not None else names
    return min(later or names)


def random_node(pod: PodInfo, nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    return state.rng.choice(sorted(node.name for node in nodes))


def least_pods(pod: PodInfo, nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    return min((usage.get(node.name, NO_USAGE).pods, node.name) for node in nodes)[1]


def _fraction(used: int, offered: int | None) -> float:
    """Share of a resource taken; a node with no figure for it counts as empty."""
    return used / offered if offered else 0.0


def _least_share(nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage], wanted: int, resource: str) -> str:
    """The node whose requested share of ``resource`` ("cpu" or "memory") is lowest once ``wanted`` is added."""

    def share(node: NodeInfo) -> tuple[float, str]:
        used = getattr(usage.get(node.name, NO_USAGE).requested, resource) + wanted
        return _fraction(used, getattr(node.allocatable, resource)), node.name

    return min(share(node) for node in nodes)[1]


def least_cpu(pod: PodInfo, nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage], state: StrategyState) -> str:
    return _least_share(nodes, usage, pod.requests.cpu, "cpu")


def least_memory(pod: PodInfo, nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage],
                 state: StrategyState) -> str:
    return _least_share(nodes, usage, pod.requests.memory, "memory")


STRATEGIES: dict[str, Strategy] = {
    "RoundRobin": round_robin,
    "Random": random_node,
    "LeastPods": least_pods,
    "LeastCPU": least_cpu,
    "LeastMemory": least_memory,
}
