"""The node-usage cache: what the pods on each node request, including pods bound but not yet seen bound.

After a successful bind the informer takes a moment to deliver the bound pod;
until then the pod is *assumed* on its node, so a burst of pods is spread by
what has really been placed rather than all landing on the node that looked
emptiest before the first of them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from daemons.machinery.keys import key_of
from daemons.scheduler.usage import (
    NO_USAGE,
    NodeUsage,
    Obj,
    Resources,
    assigned_node,
    counts_against_node,
    pod_requests,
)


@dataclass(frozen=True)
class Placement:
    node: str
    requests: Resources


class UsageCache:
    """Placements of bound and assumed pods by pod key; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bound: dict[str, Placement] = {}
        self._assumed: dict[str, Placement] = {}

    def observe(self, pod: Obj) -> bool:
        """Take in a pod's current state; True when it stopped holding resources (finished), freeing room."""
        key = key_of(pod)
        with self._lock:
            # Once the pod is seen bound, the binding speaks for itself.
            assumed = self._assumed.pop(key, None) if assigned_node(pod) else None
            if counts_against_node(pod):
                self._bound[key] = Placement(assigned_node(pod), pod_requests(pod))
                return False
            return self._bound.pop(key, None) is not None or assumed is not None

    def remove(self, pod: Obj) -> bool:
        """Forget a deleted pod; True when it was holding resources."""
        key = key_of(pod)
        with self._lock:
            self._assumed.pop(key, None)
            return self._bound.pop(key, None) is not None

    def assume(self, key: str, node: str, requests: Resources) -> None:
        """Count a pod on ``node`` from the moment it is chosen, before the binding is seen."""
        with self._lock:
            self._assumed[key] = Placement(node, requests)

    def forget(self, key: str) -> None:
        """Drop an assumption whose binding failed."""
        with self._lock:
            self._assumed.pop(key, None)

    def is_assumed(self, key: str) -> bool:
        with self._lock:
            return key in self._assumed

    def snapshot(self) -> dict[str, NodeUsage]:
        """Usage per node name, bound and assumed pods together."""
        with self._lock:
            placements = [*self._bound.values(), *self._assumed.values()]
        usage: dict[str, NodeUsage] = {}
        for placement in placements:
            usage[placement.node] = usage.get(placement.node, NO_USAGE).plus(placement.requests)
        return usage
