"""The horizontal pod autoscaling controller: each HPA's target is resized from its pods' usage in Prometheus.

As Kubernetes' controller: every sync period (and when an HPA's spec changes) it
reads the target's ``scale`` subresource, whose selector names the pods, takes
their CPU and memory usage from Prometheus (the queries ``daemons.api.usage``
shares with the metrics API), lets ``replica_calculator`` turn each metric into
a replica count, keeps the highest, passes it through the ``behavior``, writes
the new size to the scale subresource and reports what it saw in the HPA's
status and events. The recommendation and scale-event history lives in memory,
per HPA uid, as upstream keeps it: after a restart the windows start empty.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from daemons.api.errors import APIError, Conflict, ConnectionFailed, NotFound
from daemons.api.models import HorizontalPodAutoscalerBehavior, HorizontalPodAutoscalerSpec, MetricSpec
from daemons.api.quantity import format_cpu, format_memory, parse_quantity
from daemons.api.resources import Resource, by_kind, require, resolve
from daemons.api.selectors import LabelSelectorQuery, SelectorError
from daemons.api.times import rfc3339
from daemons.api.usage import WINDOW_SECONDS, PrometheusClient, PrometheusError, Usage, pod_usage
from daemons.controllers.context import ControllerContext
from daemons.controllers.replica_calculator import (
    History,
    MetricError,
    Proposal,
    average_value_replicas,
    normalize,
    record_scale,
    utilization_replicas,
)
from daemons.machinery.controller import Controller, PermanentError, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.keys import key_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PodUsage = dict[tuple[str, str], dict[str, Usage]]
MetricsSource = Callable[[str], PodUsage]

HPAS = require("autoscaling/v2", "HorizontalPodAutoscaler")
PODS = require("v1", "Pod")
COMPONENT = "horizontal-pod-autoscaler"
MEASURED = ("cpu", "memory")


def now_text(now: float) -> str:
    return rfc3339(datetime.fromtimestamp(now, UTC))


def prometheus_source(url: str | None) -> MetricsSource:
    """Per-pod usage of a namespace from Prometheus at ``url``; without one every read fails, saying so."""
    if not url:
        def unconfigured(_namespace: str) -> PodUsage:
            raise MetricError("no metrics source: the controller manager runs without --prometheus-url")

        return unconfigured
    prometheus = PrometheusClient(url)

    def read(namespace: str) -> PodUsage:
        try:
            return pod_usage(prometheus, namespace)
        except (ConnectionFailed, PrometheusError) as error:
            raise MetricError(str(error)) from error

    return read


# --- conditions and status (pure) -------------------------------------------------------------------


def set_condition(conditions: list[Obj], kind: str, status: bool, reason: str, message: str, now: float) -> None:
    """Set one condition in place, keeping its transition time while its status stays the same."""
    text = "True" if status else "False"
    for condition in conditions:
        if condition.get("type") == kind:
            if condition.get("status") != text:
                condition["lastTransitionTime"] = now_text(now)
            condition.update(status=text, reason=reason, message=message)
            return
    conditions.append({"type": kind, "status": text, "lastTransitionTime": now_text(now), "reason": reason,
                       "message": message})


class MetricProblem(Exception):
    """A metric gave no replica count: the ScalingActive reason and the message for the condition and event."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def milli_usage(usage: Mapping[str, Mapping[str, Usage]], resource: str) -> dict[str, int]:
    """pod name → usage of ``resource`` summed over its containers, in milli-units."""
    return {pod: round(sum(getattr(container, resource) for container in containers.values()) * 1000)
            for pod, containers in usage.items()}


def format_milli(resource: str, milli: int) -> str:
    return format_cpu(milli) if resource == "cpu" else format_memory(milli // 1000)


def metric_replicas(metric: MetricSpec, current: int, pods: list[Obj],
                    usage: Mapping[str, Mapping[str, Usage]] | MetricError, now: float) -> tuple[int, str, Obj]:
    """One metric's replica count, its name for events, and its ``currentMetrics`` entry; ``MetricProblem`` if
    none can be computed."""
    if metric.type != "Resource" or metric.resource is None:
        raise MetricProblem("InvalidMetricSourceType", f"the HPA was unable to compute the replica count: metric "
                                                       f"source type {metric.type!r} is not supported")
    name, target = metric.resource.name, metric.resource.target
    failure = f"failed to get {name} {'utilization' if target.type == 'Utilization' else 'usage'}"
    if name not in MEASURED:
        raise MetricProblem("FailedGetResourceMetric", f"{failure}: unable to get metrics for resource {name}: "
                                                       f"only {' and '.join(MEASURED)} are measured")
    if isinstance(usage, MetricError):
        raise MetricProblem("FailedGetResourceMetric",
                            f"{failure}: unable to get metrics for resource {name}: {usage}")
    samples = milli_usage(usage, name)
    try:
        if target.type == "Utilization":
            proposal: Proposal = utilization_replicas(current, target.average_utilization or 0, name, pods, samples,
                                                      now, WINDOW_SECONDS)
            label = f"{name} resource utilization (percentage of request)"
        else:
            wanted = round(parse_quantity(target.average_value or 0) * 1000)
            proposal = average_value_replicas(current, wanted, name, pods, samples, now, WINDOW_SECONDS)
            label = f"{name} resource"
    except MetricError as error:
        raise MetricProblem("FailedGetResourceMetric", f"{failure}: {error}") from error
    measured: Obj = {"averageValue": format_milli(name, proposal.average)}
    if proposal.utilization is not None:
        measured["averageUtilization"] = proposal.utilization
    return proposal.replicas, label, {"type": "Resource", "resource": {"name": name, "current": measured}}


def unmeasured(metric: MetricSpec) -> Obj:
    """The ``currentMetrics`` entry of a metric without data, so entries stay aligned with ``spec.metrics``."""
    if metric.type == "Resource" and metric.resource is not None:
        return {"type": "Resource", "resource": {"name": metric.resource.name, "current": {}}}
    return {"type": metric.type}


class MetricsFailed(Exception):
    """No metric gave a usable count (or some failed and the rest would scale down): nothing is scaled."""

    def __init__(self, problem: MetricProblem, statuses: list[Obj], invalid: int, total: int) -> None:
        super().__init__(f"invalid metrics ({invalid} invalid out of {total}), first error is: {problem}")
        self.problem = problem
        self.statuses = statuses


def replicas_for_metrics(metrics: list[MetricSpec], current: int, pods: list[Obj],
                         usage: Mapping[str, Mapping[str, Usage]] | MetricError, now: float,
                         ) -> tuple[int, str, list[Obj], list[MetricProblem]]:
    """The highest proposal over ``metrics``, its metric's name, the statuses, and each failure on the way.

    As upstream: failures are tolerated only while the others propose scaling up.
    """
    replicas, label, statuses, problems = 0, "", [], []
    for metric in metrics:
        try:
            proposal, name, status = metric_replicas(metric, current, pods, usage, now)
        except MetricProblem as problem:
            problems.append(problem)
            statuses.append(unmeasured(metric))
            continue
        statuses.append(status)
        if replicas == 0 or proposal > replicas:
            replicas, label = proposal, name
    if problems and (len(problems) == len(metrics) or replicas < current):
        raise MetricsFailed(problems[0], statuses, len(problems), len(metrics))
    return replicas, label, statuses, problems


# --- the controller ---------------------------------------------------------------------------------


class HorizontalPodAutoscalingController:
    """Resizes each HPA's target every sync period, syncing HPA keys (``namespace/name``)."""

    name = "horizontalpodautoscaling"

    def __init__(self, context: ControllerContext, metrics: MetricsSource | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = context.client
        self.sync_period = context.horizontal_pod_autoscaler_sync_period
        self.metrics = metrics or prometheus_source(context.prometheus_url)
        self.clock = clock
        self.controller = Controller(self.name, self.sync, context.workers)
        self.recorder = EventRecorder(context.client, COMPONENT)
        self.histories: dict[str, History] = {}
        self._histories_lock = threading.Lock()
        self.hpas = context.informers.informer(HPAS)
        self.pods = context.informers.informer(PODS)
        self.hpas.add_handlers(self.controller.enqueue_object, self._hpa_updated, self._hpa_deleted)

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def _hpa_updated(self, old: Obj, new: Obj) -> None:
        # Our own status writes come back here; only a changed spec is worth a sync before the period ends.
        if old.get("spec") != new.get("spec"):
            self.controller.enqueue_object(new)

    def _hpa_deleted(self, hpa: Obj) -> None:
        with self._histories_lock:
            self.histories.pop(str(hpa["metadata"].get("uid")), None)

    def _history(self, hpa: Obj) -> History:
        with self._histories_lock:
            return self.histories.setdefault(str(hpa["metadata"].get("uid")), History())

    # --- syncing one HPA ----------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Reconcile the HPA ``key`` once, and come back to it after the sync period."""
        hpa = self.hpas.store.get_by_key(key)
        if hpa is None:
            return
        try:
            self.reconcile(copy.deepcopy(hpa))
        finally:
            self.controller.enqueue_after(key, self.sync_period)

    def reconcile(self, hpa: Obj) -> None:
        key = key_of(hpa)
        namespace = hpa["metadata"]["namespace"]
        try:
            spec = HorizontalPodAutoscalerSpec.model_validate(hpa.get("spec") or {})
        except ValidationError as error:
            raise PermanentError(f"{key}: invalid spec: {error}") from error
        now = self.clock()
        original = hpa.get("status") or {}
        status: Obj = copy.deepcopy(original)
        conditions: list[Obj] = status.setdefault("conditions", [])
        reference = spec.scale_target_ref
        described = f"{reference.kind}/{reference.name}"

        target = by_kind(reference.api_version, reference.kind) if reference.api_version else resolve(reference.kind)
        try:
            if target is None or "scale" not in target.subresources:
                raise NotFound(f"no scale subresource for {reference.api_version or ''} {reference.kind}".strip())
            scale = self.client.get(target, reference.name, namespace, subresource="scale")
        except (APIError, ConnectionFailed) as error:
            message = f"the HPA controller was unable to get the target's current scale: {error}"
            set_condition(conditions, "AbleToScale", False, "FailedGetScale", message, now)
            self.recorder.record(hpa, "Warning", "FailedGetScale", str(error))
            self._write_status(hpa, original, status)
            log.info("%s: cannot read the scale of %s: %s", key, described, error)
            return
        assert target is not None
        set_condition(conditions, "AbleToScale", True, "SucceededGetScale",
                      "the HPA controller was able to get the target's current scale", now)
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        desired, reason, statuses = current, "", status.get("currentMetrics") or []
        if current == 0:
            set_condition(conditions, "ScalingActive", False, "ScalingDisabled",
                          "scaling is disabled since the replica count of the target is zero", now)
        elif current > spec.max_replicas:
            desired, reason = spec.max_replicas, "Current number of replicas above Spec.MaxReplicas"
        elif current < spec.min_replicas:
            desired, reason = spec.min_replicas, "Current number of replicas below Spec.MinReplicas"
        else:
            try:
                proposal, label, statuses = self._from_metrics(hpa, spec, scale, current, conditions, now)
            except MetricsFailed as failed:
                status.update(currentReplicas=current, currentMetrics=failed.statuses)
                self.recorder.record(hpa, "Warning", "FailedComputeMetricsReplicas", str(failed))
                self._write_status(hpa, original, status)
                log.info("%s: no replica count for %s: %s", key, described, failed)
                return
            reason = f"{label} above target" if proposal > current else "All metrics below target"
            behavior = spec.behavior or HorizontalPodAutoscalerBehavior()
            normalized = normalize(self._history(hpa), behavior, current, proposal, spec.min_replicas,
                                   spec.max_replicas, now)
            if normalized.stabilized.replicas != proposal:
                set_condition(conditions, "AbleToScale", True, normalized.stabilized.reason,
                              normalized.stabilized.message, now)
            else:
                set_condition(conditions, "AbleToScale", True, "ReadyForNewScale",
                              "recommended size matches current size", now)
            set_condition(conditions, "ScalingLimited", normalized.limited_by_policy, normalized.limited.reason,
                          normalized.limited.message, now)
            desired = normalized.replicas
        if desired != current:
            self._rescale(hpa, spec, target, current, desired, reason, conditions, status, now)
        status.update(observedGeneration=hpa["metadata"].get("generation"), currentReplicas=current,
                      desiredReplicas=desired, currentMetrics=statuses or None)
        self._write_status(hpa, original, status)

    def _from_metrics(self, hpa: Obj, spec: HorizontalPodAutoscalerSpec, scale: Obj, current: int,
                      conditions: list[Obj], now: float) -> tuple[int, str, list[Obj]]:
        """The metrics' proposal; each failing metric gets its Warning event and, if nothing works, the condition."""
        namespace = hpa["metadata"]["namespace"]
        selector = (scale.get("status") or {}).get("selector")
        try:
            if not selector:
                raise SelectorError("the HPA target's scale is missing a selector")
            query = LabelSelectorQuery.parse(selector)
        except SelectorError as error:
            problem = MetricProblem("InvalidSelector", f"the HPA target's scale has an unusable selector: {error}")
            set_condition(conditions, "ScalingActive", False, problem.reason, str(problem), now)
            raise MetricsFailed(problem, [], len(spec.metrics or []), len(spec.metrics or [])) from error
        pods = [pod for pod in self.pods.store.list(namespace) if query.matches(pod["metadata"].get("labels"))]
        usage: Mapping[str, Mapping[str, Usage]] | MetricError
        try:
            usage = {pod: containers for (pod_namespace, pod), containers in self.metrics(namespace).items()
                     if pod_namespace == namespace}
        except MetricError as error:
            usage = error
        try:
            proposal, label, statuses, problems = replicas_for_metrics(spec.metrics or [], current, pods, usage, now)
        except MetricsFailed as failed:
            problems = [failed.problem]
            set_condition(conditions, "ScalingActive", False, failed.problem.reason,
                          f"the HPA was unable to compute the replica count: {failed.problem}", now)
            self.recorder.record(hpa, "Warning", failed.problem.reason, str(failed.problem))
            raise
        for problem in problems:
            self.recorder.record(hpa, "Warning", problem.reason, str(problem))
        set_condition(conditions, "ScalingActive", True, "ValidMetricFound",
                      f"the HPA was able to successfully calculate a replica count from {label}", now)
        return proposal, label, statuses

    def _rescale(self, hpa: Obj, spec: HorizontalPodAutoscalerSpec, target: Resource, current: int, desired: int,
                 reason: str, conditions: list[Obj], status: Obj, now: float) -> None:
        """Write the new size to the target's scale subresource, with the event and condition upstream gives."""
        key, name = key_of(hpa), spec.scale_target_ref.name
        try:
            self.client.patch(target, name, {"spec": {"replicas": desired}}, hpa["metadata"]["namespace"],
                              subresource="scale")
        except (APIError, ConnectionFailed) as error:
            self.recorder.record(hpa, "Warning", "FailedRescale",
                                 f"New size: {desired}; reason: {reason}; error: {error}")
            set_condition(conditions, "AbleToScale", False, "FailedUpdateScale",
                          f"the HPA controller was unable to update the target scale: {error}", now)
            status["currentReplicas"] = current
            self._write_status(hpa, hpa.get("status") or {}, status)
            raise TemporaryError(f"{key}: failed to rescale {spec.scale_target_ref.kind}/{name}: {error}") from error
        record_scale(self._history(hpa), spec.behavior or HorizontalPodAutoscalerBehavior(), current, desired, now)
        set_condition(conditions, "AbleToScale", True, "SucceededRescale",
                      f"the HPA controller was able to update the target scale to {desired}", now)
        self.recorder.record(hpa, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}")
        status["lastScaleTime"] = now_text(now)
        log.info("%s: scaled %s/%s from %d to %d: %s", key, spec.scale_target_ref.kind, name, current, desired,
                 reason)

    def _write_status(self, hpa: Obj, original: Obj, status: Obj) -> None:
        """PUT the status through ``/status`` when it differs from what is stored."""
        status = {field: value for field, value in status.items() if value is not None}
        if status == original:
            return
        try:
            self.client.update_status(HPAS, {**hpa, "status": status})
        except Conflict:
            raise  # the controller retries at once with the newer object from the cache
        except NotFound:
            return  # deleted meanwhile
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key_of(hpa)}: writing the status failed: {error}") from error
