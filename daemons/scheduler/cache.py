"""The scheduler's caches: node facts kept from node events, and what the pods on each node request.

After a bind is chosen the informer takes a moment to deliver the bound pod;
until then the pod is *assumed* on its node, so a burst of pods is spread by
what has really been placed rather than all landing on the node that looked
emptiest before the first of them. Usage per node is kept as a running total,
so placing a pod costs nothing per pod already placed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from daemons.machinery.keys import key_of
from daemons.scheduler.facts import NodeInfo, node_info
from daemons.scheduler.usage import (
    NO_USAGE,
    NodeUsage,
    Obj,
    Resources,
    assigned_node,
    counts_against_node,
    node_name,
    pod_requests,
)


@dataclass(frozen=True)
class Placement:
    node: str
    requests: Resources


class NodeCache:
    """Each node's facts, in the order of their names; thread-safe.

    The order is rebuilt only when a node comes, goes or changes its facts, and
    lazily, so a burst of registrations costs one sort.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._infos: dict[str, NodeInfo] = {}
        self._order: tuple[NodeInfo, ...] | None = ()
        self._positions: dict[str, int] = {}

    def update(self, node: Obj) -> bool:
        """Take in a node's current state; True when it changed anything a pod's fit depends on."""
        info = node_info(node)
        with self._lock:
            if self._infos.get(info.name) == info:
                return False
            self._infos[info.name] = info
            self._order = None
            return True

    def remove(self, node: Obj) -> None:
        with self._lock:
            if self._infos.pop(node_name(node), None) is not None:
                self._order = None

    def _ordered_locked(self) -> tuple[NodeInfo, ...]:
        if self._order is None:
            self._order = tuple(sorted(self._infos.values(), key=lambda info: info.name))
            self._positions = {info.name: index for index, info in enumerate(self._order)}
        return self._order

    def nodes(self) -> tuple[NodeInfo, ...]:
        """Every node's facts, sorted by name."""
        with self._lock:
            return self._ordered_locked()

    def position(self, name: str) -> int | None:
        """Where the node ``name`` stands in ``nodes()``; None when it is not cached."""
        with self._lock:
            self._ordered_locked()
            return self._positions.get(name)


class UsageCache:
    """Placements of bound and assumed pods by pod key, and their sum per node; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bound: dict[str, Placement] = {}
        self._assumed: dict[str, Placement] = {}
        self._usage: dict[str, NodeUsage] = {}

    def _count(self, placement: Placement) -> None:
        self._usage[placement.node] = self._usage.get(placement.node, NO_USAGE).plus(placement.requests)

    def _uncount(self, placement: Placement | None) -> bool:
        """Take a placement off its node's total; False when there was none."""
        if placement is None:
            return False
        left = self._usage[placement.node].minus(placement.requests)
        if left.pods:
            self._usage[placement.node] = left
        else:
            del self._usage[placement.node]
        return True

    def observe(self, pod: Obj) -> bool:
        """Take in a pod's current state; True when it stopped holding resources (finished), freeing room."""
        key = key_of(pod)
        with self._lock:
            # Once the pod is seen bound, the binding speaks for itself.
            assumed = self._uncount(self._assumed.pop(key, None)) if assigned_node(pod) else False
            bound = self._uncount(self._bound.pop(key, None))
            if counts_against_node(pod):
                placement = Placement(assigned_node(pod), pod_requests(pod))
                self._bound[key] = placement
                self._count(placement)
                return False
            return bound or assumed

    def remove(self, pod: Obj) -> bool:
        """Forget a deleted pod; True when it was holding resources."""
        key = key_of(pod)
        with self._lock:
            self._uncount(self._assumed.pop(key, None))
            return self._uncount(self._bound.pop(key, None))

    def assume(self, key: str, node: str, requests: Resources) -> None:
        """Count a pod on ``node`` from the moment it is chosen, before the binding is seen."""
        with self._lock:
            self._uncount(self._assumed.pop(key, None))
            placement = Placement(node, requests)
            self._assumed[key] = placement
            self._count(placement)

    def forget(self, key: str) -> None:
        """Drop an assumption whose binding failed."""
        with self._lock:
            self._uncount(self._assumed.pop(key, None))

    def is_assumed(self, key: str) -> bool:
        with self._lock:
            return key in self._assumed

    def snapshot(self) -> dict[str, NodeUsage]:
        """Usage per node name, bound and assumed pods together; nodes with no pod are absent."""
        with self._lock:
            return dict(self._usage)
