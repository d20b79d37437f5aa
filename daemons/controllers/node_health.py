"""What the node lifecycle controller decides, as pure functions: silence, the Unknown condition, taints, evictions.

Silence is judged on the controller's own monotonic clock, from when it *saw* a
node's heartbeat change, never from the timestamp the kubelet wrote: clocks of
nodes differ, and a controller that could not see the API for a while must not
blame the nodes for it. The taint's ``timeAdded`` is wall-clock time, as in
Kubernetes, because it is stored and outlives the controller.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from daemons.api.times import parse_time, rfc3339
from daemons.api.tolerations import tolerates

Obj = dict[str, Any]

UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
UNREACHABLE_EFFECT = "NoExecute"
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


# What changes at each beat of a kubelet: (its Ready condition's lastHeartbeatTime, its Lease's renewTime).
Heartbeat = tuple[str | None, str | None]


@dataclass(frozen=True)
class Observation:
    """The last heartbeat value seen for a node and the monotonic time the controller first saw it."""

    heartbeat: Heartbeat
    at: float


def ready_condition(node: Obj) -> Obj | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return None


def heartbeat(node: Obj, lease: Obj | None) -> Heartbeat:
    """What changes at each beat: the Lease's renewTime, and the Ready condition's lastHeartbeatTime when the
    kubelet posts its status (which it does only on a change, or every few minutes)."""
    return ((ready_condition(node) or {}).get("lastHeartbeatTime"), ((lease or {}).get("spec") or {}).get("renewTime"))


def observe(previous: Observation | None, node: Obj, now: float, lease: Obj | None = None) -> Observation:
    """The node's observation after seeing ``node`` (and its Lease) at ``now``: new when either heartbeat changed
    (or at first sight)."""
    beat = heartbeat(node, lease)
    if previous is not None and previous.heartbeat == beat:
        return previous
    return Observation(beat, now)


def is_silent(observed_at: float, view_since: float, now: float, grace: float) -> bool:
    """Whether a node has been silent for ``grace`` seconds.

    ``view_since`` is when the controller's view of the API last (re)started (its own
    start, the return of the API after an outage): it counts as an observation of
    every node, so that time the controller could not see is never held against one.
    """
    return now - max(observed_at, view_since) >= grace


def silent_since(observed_at: float, view_since: float, grace: float) -> float:
    """The monotonic time at which the node became (or will become) silent."""
    return max(observed_at, view_since) + grace


def unknown_status(node: Obj, now: datetime) -> Obj | None:
    """The node's status with Ready turned Unknown; None when it already says so.

    lastHeartbeatTime stays as the kubelet wrote it (so this write is no heartbeat);
    lastTransitionTime is now.
    """
    status = copy.deepcopy(node.get("status") or {})
    conditions = status.setdefault("conditions", [])
    current = next((condition for condition in conditions if condition.get("type") == "Ready"), None)
    if current is not None and current.get("status") == "Unknown":
        return None
    updated: Obj = {"type": "Ready", "status": "Unknown", "reason": UNKNOWN_REASON, "message": UNKNOWN_MESSAGE,
                    "lastTransitionTime": rfc3339(now)}
    if current is not None and current.get("lastHeartbeatTime"):
        updated["lastHeartbeatTime"] = current["lastHeartbeatTime"]
    status["conditions"] = [updated if condition is current else condition for condition in conditions]
    if current is None:
        status["conditions"].append(updated)
    return status


def is_unreachable_taint(taint: Obj) -> bool:
    return taint.get("key") == UNREACHABLE_TAINT_KEY and taint.get("effect") == UNREACHABLE_EFFECT


def unreachable_taint(node: Obj) -> Obj | None:
    """The node's unreachable NoExecute taint, if it carries one."""
    return next((taint for taint in (node.get("spec") or {}).get("taints") or [] if is_unreachable_taint(taint)),
                None)


def with_unreachable_taint(taints: list[Obj] | None, now: datetime) -> list[Obj] | None:
    """``taints`` plus the unreachable taint stamped ``now``; None when it is there already."""
    current = list(taints or [])
    if any(is_unreachable_taint(taint) for taint in current):
        return None
    return [*current, {"key": UNREACHABLE_TAINT_KEY, "effect": UNREACHABLE_EFFECT, "timeAdded": rfc3339(now)}]


def without_unreachable_taint(taints: list[Obj] | None) -> list[Obj] | None:
    """``taints`` less the unreachable taint, every other taint as it was; None when there is none to remove."""
    current = list(taints or [])
    kept = [taint for taint in current if not is_unreachable_taint(taint)]
    return None if len(kept) == len(current) else kept


def eviction_deadline(pod: Obj, taint: Obj, default_timeout: float) -> datetime | None:
    """When the pod is to be deleted because of the NoExecute ``taint``; None for never.

    The tolerations matching the taint decide: the shortest tolerationSeconds among
    them, or never when none of them gives seconds; with no matching toleration the
    default timeout applies. Time runs from the taint's timeAdded (the epoch when missing).
    """
    matching = [toleration for toleration in (pod.get("spec") or {}).get("tolerations") or []
                if tolerates(toleration, taint)]
    if matching:
        seconds = [float(toleration["tolerationSeconds"]) for toleration in matching
                   if toleration.get("tolerationSeconds") is not None]
        if not seconds:
            return None
        wait = max(min(seconds), 0.0)
    else:
        wait = default_timeout
    added = parse_time(taint.get("timeAdded")) or datetime.fromtimestamp(0, UTC)
    return added + timedelta(seconds=wait)


def evictions(pods: Iterable[Obj], taint: Obj, now: datetime,
              default_timeout: float) -> tuple[list[Obj], datetime | None]:
    """The pods due for deletion at ``now``, and the earliest deadline still ahead (None if there is none).

    Pods already being deleted are left out.
    """
    due: list[Obj] = []
    upcoming: datetime | None = None
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        deadline = eviction_deadline(pod, taint, default_timeout)
        if deadline is None:
            continue
        if deadline <= now:
            due.append(pod)
        elif upcoming is None or deadline < upcoming:
            upcoming = deadline
    return due, upcoming


def all_silent(verdicts: Iterable[bool]) -> bool:
    """Whether every node is silent (and there is at least one): then the control plane is the likely fault."""
    verdicts = list(verdicts)
    return bool(verdicts) and all(verdicts)
