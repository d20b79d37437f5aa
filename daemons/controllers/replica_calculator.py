"""The HorizontalPodAutoscaler's arithmetic, as upstream documents and implements it, with no I/O.

Usage and requests are integers in milli-units (millicores, milli-bytes), as
Kubernetes' metrics client hands them over, so the integer rounding matches.
desired = ceil(current x usage ratio), with no change while the ratio is within
the tolerance of 1; pods without metrics count as idle on a scale-up and as
exactly on target on a scale-down, not-yet-ready pods as idle on a scale-up, so
that missing data can only damp a change, never reverse it. The recommendation
of each sync then goes through the ``behavior``: stabilization windows over
recent recommendations and rate limits over recent scale events, both kept by
the caller in a ``History``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemons.api.models import HorizontalPodAutoscalerBehavior, HPAScalingRules
from daemons.api.phases import TERMINAL_PHASES
from daemons.api.quantity import parse_quantity
from daemons.controllers.replicaset import epoch_seconds, ready_condition

Obj = dict[str, Any]

TOLERANCE = 0.1
# A pod's CPU right after start is not representative: upstream's --horizontal-pod-autoscaler-cpu-initialization-period.
CPU_INITIALIZATION_PERIOD = 300.0
# A pod not ready within this long after start is taken as never ready yet (upstream's initial-readiness-delay).
INITIAL_READINESS_DELAY = 30.0


class MetricError(Exception):
    """No replica count can be computed from this metric; the message says why, as upstream words it."""


# --- which pods count -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodGroups:
    ready_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    ignored: frozenset[str]


def group_pods(pods: Sequence[Obj], metrics: Mapping[str, int], resource: str, now: float,
               metric_window: float) -> PodGroups:
    """Sort pods as upstream's groupPods: deleted or finished ones are ignored, pending ones unready, ones without a
    sample missing; for CPU, a pod in its first minutes whose sample predates its readiness is unready too."""
    ready_count = 0
    unready: set[str] = set()
    missing: set[str] = set()
    ignored: set[str] = set()
    for pod in pods:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        phase = status.get("phase")
        if pod["metadata"].get("deletionTimestamp") or phase in TERMINAL_PHASES:
            ignored.add(name)
            continue
        if phase == "Pending":
            unready.add(name)
            continue
        if name not in metrics:
            missing.add(name)
            continue
        if resource == "cpu":
            condition = ready_condition(pod)
            started = epoch_seconds(status.get("startTime"))
            if condition is None or started is None:
                is_unready = True
            else:
                transition = epoch_seconds(condition.get("lastTransitionTime")) or started
                if started + CPU_INITIALIZATION_PERIOD > now:
                    # the sample (taken now over the window) must lie wholly after the pod became ready
                    is_unready = condition.get("status") == "False" or now < transition + metric_window
                else:
                    is_unready = condition.get("status") == "False" and started + INITIAL_READINESS_DELAY > transition
            if is_unready:
                unready.add(name)
                continue
        ready_count += 1
    return PodGroups(ready_count, frozenset(unready), frozenset(missing), frozenset(ignored))


def pod_request(pod: Obj, resource: str) -> int:
    """The pod's request of ``resource`` summed over its containers, in milli-units; every container must have one."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        if resource not in requests:
            raise MetricError(f"missing request for {resource} in container {container.get('name')} of Pod "
                              f"{pod['metadata']['name']}")
        total += math.ceil(parse_quantity(requests[resource]) * 1000)
    return total


# --- one metric -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """A metric's replica count and what it measured: utilization (percent of requests) and the raw average."""

    replicas: int
    average: int  # milli-units per pod
    utilization: int | None = None


def utilization_ratio(metrics: Mapping[str, int], requests: Mapping[str, int],
                      target: int) -> tuple[float, int, int]:
    """Usage over requests of the pods with both, against ``target`` percent: (ratio, utilization %, raw average)."""
    used = requested = count = 0
    for name, value in metrics.items():
        if name in requests:
            used += value
            requested += requests[name]
            count += 1
    if requested == 0:
        raise MetricError("no metrics returned matched known pods")
    utilization = used * 100 // requested
    return utilization / target, utilization, used // count


def usage_ratio(metrics: Mapping[str, int], target: int) -> tuple[float, int]:
    """The pods' average usage against ``target`` (both milli-units): (ratio, average)."""
    average = sum(metrics.values()) // len(metrics)
    return average / target, average


def _replicas(current: int, metrics: dict[str, int], groups: PodGroups, ratio_of: Callable[[dict[str, int]], float],
              on_target: Callable[[str], int], tolerance: float) -> int:
    """Upstream's core: scale by the ratio, then re-check with the pods it could not measure filled in."""
    ratio = ratio_of(metrics)
    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * groups.ready_count)
    filled = dict(metrics)
    if ratio < 1.0:
        filled.update((name, on_target(name)) for name in groups.missing)
    elif ratio > 1.0:
        filled.update((name, 0) for name in groups.missing)
    if scale_up_with_unready:
        filled.update((name, 0) for name in groups.unready)
    new_ratio = ratio_of(filled)
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current  # filling in reversed or cancelled the change
    replicas = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


def _measured(pods: Sequence[Obj], metrics: Mapping[str, int], resource: str, now: float,
              metric_window: float) -> tuple[dict[str, int], PodGroups]:
    if not pods:
        raise MetricError("no pods returned by selector while calculating replica count")
    groups = group_pods(pods, metrics, resource, now, metric_window)
    names = {pod["metadata"]["name"] for pod in pods}
    kept = {name: value for name, value in metrics.items()
            if name in names and name not in groups.ignored and name not in groups.unready}
    if not kept:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    return kept, groups


def utilization_replicas(current: int, target: int, resource: str, pods: Sequence[Obj], metrics: Mapping[str, int],
                         now: float, metric_window: float, tolerance: float = TOLERANCE) -> Proposal:
    """Replicas for a ``Utilization`` target: usage as a percentage of the pods' requests."""
    kept, groups = _measured(pods, metrics, resource, now, metric_window)
    requests = {pod["metadata"]["name"]: pod_request(pod, resource) for pod in pods}
    _ratio, utilization, average = utilization_ratio(kept, requests, target)
    replicas = _replicas(current, kept, groups, lambda values: utilization_ratio(values, requests, target)[0],
                         lambda name: requests[name], tolerance)
    return Proposal(replicas, average, utilization)


def average_value_replicas(current: int, target: int, resource: str, pods: Sequence[Obj],
                           metrics: Mapping[str, int], now: float, metric_window: float,
                           tolerance: float = TOLERANCE) -> Proposal:
    """Replicas for an ``AverageValue`` target: the pods' mean usage against ``target`` milli-units."""
    kept, groups = _measured(pods, metrics, resource, now, metric_window)
    _ratio, average = usage_ratio(kept, target)
    replicas = _replicas(current, kept, groups, lambda values: usage_ratio(values, target)[0],
                         lambda _name: target, tolerance)
    return Proposal(replicas, average)


# --- behavior: stabilization and rate limits --------------------------------------------------------


@dataclass(frozen=True)
class Recommendation:
    replicas: int
    at: float


@dataclass(frozen=True)
class ScaleEvent:
    change: int  # replicas added (scale-up list) or removed (scale-down list)
    at: float


@dataclass
class History:
    """What one HPA's past syncs decided: recommendations for stabilization, scale events for the rate limits."""

    recommendations: list[Recommendation] = field(default_factory=list)
    scale_up: list[ScaleEvent] = field(default_factory=list)
    scale_down: list[ScaleEvent] = field(default_factory=list)


@dataclass(frozen=True)
class Limited:
    replicas: int
    reason: str
    message: str


def _window(rules: HPAScalingRules) -> int:
    return rules.stabilization_window_seconds or 0


def stabilize(history: History, current: int, desired: int, scale_up: HPAScalingRules, scale_down: HPAScalingRules,
              now: float) -> Limited:
    """The desired count held between the lowest recommendation of the scale-up window and the highest of the
    scale-down window; ``desired`` is recorded, replacing one older than both windows."""
    up_cutoff, down_cutoff = now - _window(scale_up), now - _window(scale_down)
    up, down = desired, desired
    stale: int | None = None
    for index, past in enumerate(history.recommendations):
        if past.at > up_cutoff:
            up = min(up, past.replicas)
        if past.at > down_cutoff:
            down = max(down, past.replicas)
        if past.at < up_cutoff and past.at < down_cutoff:
            stale = index
    recommendation = min(max(current, up), down)
    if stale is None:
        history.recommendations.append(Recommendation(desired, now))
    else:
        history.recommendations[stale] = Recommendation(desired, now)
    if desired >= current:
        return Limited(recommendation, "ScaleUpStabilized",
                       "recent recommendations were lower than current one, applying the lowest recent recommendation")
    return Limited(recommendation, "ScaleDownStabilized",
                   "recent recommendations were higher than current one, applying the highest recent recommendation")


def changed_within(events: Sequence[ScaleEvent], period: int, now: float) -> int:
    return sum(event.change for event in events if event.at > now - period)


def scale_up_limit(current: int, events: Sequence[ScaleEvent], rules: HPAScalingRules, now: float) -> int:
    """The most replicas the policies allow now, counting from where each policy's period began."""
    if rules.select_policy == "Disabled":
        return current
    pick = min if rules.select_policy == "Min" else max
    proposals = []
    for policy in rules.policies or []:
        start = current - changed_within(events, policy.period_seconds, now)
        if policy.type == "Pods":
            proposals.append(start + policy.value)
        else:
            proposals.append(math.ceil(start * (1 + policy.value / 100)))
    return pick(proposals) if proposals else current


def scale_down_limit(current: int, events: Sequence[ScaleEvent], rules: HPAScalingRules, now: float) -> int:
    """The fewest replicas the policies allow now; the ``Min`` policy is the smallest change, so the largest count."""
    if rules.select_policy == "Disabled":
        return current
    pick = max if rules.select_policy == "Min" else min
    proposals = []
    for policy in rules.policies or []:
        start = current + changed_within(events, policy.period_seconds, now)
        if policy.type == "Pods":
            proposals.append(start - policy.value)
        else:
            proposals.append(int(start * (1 - policy.value / 100)))
    return pick(proposals) if proposals else current


def rate_limit(history: History, current: int, desired: int, minimum: int, maximum: int,
               scale_up: HPAScalingRules, scale_down: HPAScalingRules, now: float) -> Limited:
    """``desired`` within [minimum, maximum] and the rate the policies allow, with the reason when it was cut."""
    if desired > current:
        limit = max(scale_up_limit(current, history.scale_up, scale_up, now), current)
        if maximum > limit:
            allowed, reason, message = limit, "ScaleUpLimit", \
                "the desired replica count is increasing faster than the maximum scale rate"
        else:
            allowed, reason, message = maximum, "TooManyReplicas", \
                "the desired replica count is more than the maximum replica count"
        if desired > allowed:
            return Limited(allowed, reason, message)
    elif desired < current:
        limit = min(scale_down_limit(current, history.scale_down, scale_down, now), current)
        if minimum < limit:
            allowed, reason, message = limit, "ScaleDownLimit", \
                "the desired replica count is decreasing faster than the maximum scale rate"
        else:
            allowed, reason, message = minimum, "TooFewReplicas", \
                "the desired replica count is less than the minimum replica count"
        if desired < allowed:
            return Limited(allowed, reason, message)
    return Limited(desired, "DesiredWithinRange", "the desired count is within the acceptable range")


def record_scale(history: History, behavior: HorizontalPodAutoscalerBehavior, previous: int, new: int,
                 now: float) -> None:
    """Note a rescale for the rate limits, forgetting events older than the longest policy period."""
    up = new > previous
    rules = behavior.scale_up if up else behavior.scale_down
    longest = max((policy.period_seconds for policy in (rules.policies if rules else None) or []), default=0)
    events = [event for event in (history.scale_up if up else history.scale_down) if event.at > now - longest]
    events.append(ScaleEvent(abs(new - previous), now))
    if up:
        history.scale_up = events
    else:
        history.scale_down = events


@dataclass(frozen=True)
class Normalized:
    replicas: int
    stabilized: Limited
    limited: Limited

    @property
    def limited_by_policy(self) -> bool:
        """Whether the rate limits or the bounds cut the stabilized recommendation (the ScalingLimited condition)."""
        return self.limited.replicas != self.stabilized.replicas


def normalize(history: History, behavior: HorizontalPodAutoscalerBehavior, current: int, desired: int,
              minimum: int, maximum: int, now: float) -> Normalized:
    """Upstream's normalizeDesiredReplicasWithBehaviors: stabilize, then apply the bounds and the rate limits."""
    scale_up = behavior.scale_up or HPAScalingRules()
    scale_down = behavior.scale_down or HPAScalingRules()
    stabilized = stabilize(history, current, desired, scale_up, scale_down, now)
    limited = rate_limit(history, current, stabilized.replicas, minimum, maximum, scale_up, scale_down, now)
    return Normalized(limited.replicas, stabilized, limited)
