"""The Job controller: runs each Job's pods to completion, as Kubernetes' job controller.

A sync counts the Job's pods (those it controls, by owner uid), decides from the counts alone whether the Job
is finished (Complete; Failed with BackoffLimitExceeded or DeadlineExceeded), how many pods should run
(parallelism, the completions left, and for Indexed Jobs which indexes), and writes the status. Failed pods
are replaced after upstream's exponential back-off (10 s doubling per failure since the last success, at most
6 min); the sync requeues itself for the end of a back-off, the active deadline, or a finished Job's TTL, so
nothing polls. A suspended Job keeps no pods. Every decision is a pure function of the Job, its pods and now.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from daemons.api.errors import APIError, ConnectionFailed, NotFound
from daemons.api.kinds.job import COMPLETION_INDEX_ANNOTATION, selector_labels
from daemons.api.resources import require
from daemons.api.times import parse_time, rfc3339
from daemons.controllers.context import ControllerContext
from daemons.controllers.ownership import ChildControl, controller_of, is_being_deleted
from daemons.machinery.controller import Controller, Expectations, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.keys import key_of, make_key, split_key

log = logging.getLogger(__name__)

Obj = dict[str, Any]

JOBS = require("batch/v1", "Job")
PODS = require("v1", "Pod")
COMPONENT = "job-controller"
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 360.0
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
MESSAGES = {BACKOFF_LIMIT_EXCEEDED: "Job has reached the specified backoff limit",
            DEADLINE_EXCEEDED: "Job was active longer than specified deadline"}


# --- pure decisions ---------------------------------------------------------------------------------


def backoff_seconds(failures: int) -> float:
    """How long after the last failure a replacement pod waits: 0 without failures, then 10 s, 20 s, ... 6 min."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_BASE_SECONDS * 2 ** min(failures - 1, 16), BACKOFF_MAX_SECONDS)


def finish_time(pod: Obj) -> datetime | None:
    """When a finished pod's last container terminated (its start or creation when the kubelet did not say)."""
    status = pod.get("status") or {}
    ends = [parse_time(((item.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for item in status.get("containerStatuses") or []]
    known = [moment for moment in ends if moment is not None]
    if known:
        return max(known)
    return parse_time(status.get("startTime")) or parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def completion_index(pod: Obj) -> int | None:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def is_ready(pod: Obj) -> bool:
    return any(condition.get("type") == "Ready" and condition.get("status") == "True"
               for condition in (pod.get("status") or {}).get("conditions") or [])


@dataclass
class PodCounts:
    """A Job's pods sorted by what they mean for it."""

    active: list[Obj] = field(default_factory=list)
    succeeded: int = 0
    failed: int = 0
    ready: int = 0
    succeeded_indexes: set[int] = field(default_factory=set)
    # Failures since the last success, and when the latest of them finished: the back-off's input.
    recent_failures: int = 0
    last_failure: datetime | None = None
    restarts: int = 0


def count_pods(pods: Iterable[Obj], completions: int | None = None) -> PodCounts:
    """Counts of a Job's pods; an Indexed Job's success counts once per index below ``completions``."""
    counts = PodCounts()
    successes: list[datetime] = []
    failures: list[datetime] = []
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        moment = finish_time(pod) or datetime.min.replace(tzinfo=UTC)
        if phase == "Succeeded":
            counts.succeeded += 1
            successes.append(moment)
            index = completion_index(pod)
            if index is not None and (completions is None or index < completions):
                counts.succeeded_indexes.add(index)
        elif phase == "Failed":
            counts.failed += 1
            failures.append(moment)
        elif not is_being_deleted(pod):
            counts.active.append(pod)
            counts.ready += is_ready(pod)
            counts.restarts += sum(int(item.get("restartCount") or 0)
                                   for item in (pod.get("status") or {}).get("containerStatuses") or [])
    last_success = max(successes, default=None)
    recent = [moment for moment in failures if last_success is None or moment > last_success]
    counts.recent_failures = len(recent)
    counts.last_failure = max(recent, default=None)
    return counts


def failure_reason(spec: Obj, counts: PodCounts, started: datetime | None, now: datetime) -> str | None:
    """Why the Job has failed, if it has: more failed pods than backoffLimit (or, with restartPolicy OnFailure,
    as many container restarts), or active past activeDeadlineSeconds since it started."""
    limit = int(spec.get("backoffLimit", 6))
    on_failure = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure"
    if counts.failed > limit or (on_failure and limit >= 0 and counts.restarts > 0 and counts.restarts >= limit):
        return BACKOFF_LIMIT_EXCEEDED
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and started is not None and (now - started).total_seconds() >= int(deadline):
        return DEADLINE_EXCEEDED
    return None


def is_complete(spec: Obj, counts: PodCounts) -> bool:
    """Done: every completion reached (every index, for Indexed), or without completions a success and no pod
    still running."""
    completions = spec.get("completions")
    if completions is None:
        return counts.succeeded > 0 and not counts.active
    if spec.get("completionMode") == "Indexed":
        return len(counts.succeeded_indexes) >= int(completions)
    return counts.succeeded >= int(completions)


def wanted_active(spec: Obj, counts: PodCounts) -> int:
    """How many pods should run now (upstream's wantActive)."""
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    if completions is None:
        return len(counts.active) if counts.succeeded > 0 else parallelism
    if spec.get("completionMode") == "Indexed":
        return min(parallelism, int(completions) - len(counts.succeeded_indexes))
    return max(0, min(parallelism, int(completions) - counts.succeeded))


def indexes_to_start(spec: Obj, counts: PodCounts, room: int) -> list[int]:
    """The lowest ``room`` indexes neither succeeded nor running, for an Indexed Job."""
    running = {index for index in map(completion_index, counts.active) if index is not None}
    missing = [index for index in range(int(spec.get("completions") or 0))
               if index not in counts.succeeded_indexes and index not in running]
    return missing[:max(room, 0)]


def format_indexes(indexes: Iterable[int]) -> str:
    """status.completedIndexes: sorted, consecutive runs as ranges (``1,3-5,7``)."""
    runs: list[list[int]] = []
    for index in sorted(set(indexes)):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)


def backoff_remaining(counts: PodCounts, now: datetime) -> float:
    """Seconds before a replacement for the recent failures may be created; 0 when it may now."""
    if counts.recent_failures == 0 or counts.last_failure is None:
        return 0.0
    ready_at = counts.last_failure.timestamp() + backoff_seconds(counts.recent_failures)
    return max(0.0, ready_at - now.timestamp())


def condition(conditions: list[Obj], kind: str) -> Obj | None:
    return next((item for item in conditions if item.get("type") == kind), None)


def set_condition(conditions: list[Obj], kind: str, status: str, reason: str, message: str, now: datetime) -> None:
    """Add or update a condition in place; its transition time moves only when its status does."""
    stamp = rfc3339(now)
    current = condition(conditions, kind)
    if current is None:
        conditions.append({"type": kind, "status": status, "reason": reason, "message": message,
                           "lastProbeTime": stamp, "lastTransitionTime": stamp})
        return
    if current.get("status") != status:
        current["lastTransitionTime"] = stamp
    current.update({"status": status, "reason": reason, "message": message, "lastProbeTime": stamp})


def finished_at(job: Obj) -> datetime | None:
    """When a finished Job finished (its Complete or Failed condition's transition); None while it runs."""
    for item in (job.get("status") or {}).get("conditions") or []:
        if item.get("type") in ("Complete", "Failed") and item.get("status") == "True":
            return parse_time(item.get("lastTransitionTime"))
    return None


def ttl_remaining(job: Obj, now: datetime) -> float | None:
    """Seconds until a finished Job with ttlSecondsAfterFinished is to be deleted (0: now); None: never."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    finished = finished_at(job)
    if ttl is None or finished is None:
        return None
    return max(0.0, finished.timestamp() + int(ttl) - now.timestamp())


@dataclass
class Plan:
    """What one sync does: the new status, pods to create (indexes for Indexed, else None each), pods to delete,
    events to record, and when to look again."""

    status: Obj
    create: list[int | None] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    requeue_after: float | None = None


def plan(job: Obj, pods: list[Obj], now: datetime) -> Plan:
    """The whole decision for one Job from its pods and the time, without I/O."""
    spec = job.get("spec") or {}
    old = job.get("status") or {}
    conditions = [dict(item) for item in old.get("conditions") or []]
    status: Obj = {key: value for key, value in old.items() if key in ("startTime", "completionTime")}
    indexed = spec.get("completionMode") == "Indexed"
    counts = count_pods(pods, spec.get("completions") if indexed else None)
    result = Plan(status)
    if finished_at(job) is not None:
        result.delete = list(counts.active)
        result.requeue_after = ttl_remaining(job, now)
    elif spec.get("suspend"):
        result.delete = list(counts.active)
        status.pop("startTime", None)
        if (condition(conditions, "Suspended") or {}).get("status") != "True":
            set_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended", now)
            result.events.append(("Normal", "Suspended", "Job suspended"))
    else:
        if (condition(conditions, "Suspended") or {}).get("status") == "True":
            set_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed", now)
            result.events.append(("Normal", "Resumed", "Job resumed"))
        status.setdefault("startTime", rfc3339(now))
        started = parse_time(status["startTime"])
        reason = failure_reason(spec, counts, started, now)
        if reason is not None:
            set_condition(conditions, "FailureTarget", "True", reason, MESSAGES[reason], now)
            set_condition(conditions, "Failed", "True", reason, MESSAGES[reason], now)
            result.events.append(("Warning", reason, MESSAGES[reason]))
            result.delete = list(counts.active)
        elif is_complete(spec, counts):
            set_condition(conditions, "SuccessCriteriaMet", "True", "CompletionsReached",
                          "Reached expected number of succeeded pods", now)
            set_condition(conditions, "Complete", "True", "CompletionsReached",
                          "Reached expected number of succeeded pods", now)
            status["completionTime"] = rfc3339(now)
            result.events.append(("Normal", "Completed", "Job completed"))
            result.delete = list(counts.active)
        else:
            _plan_pods(spec, counts, now, result)
            deadline = spec.get("activeDeadlineSeconds")
            if deadline is not None and started is not None:
                until = max(0.0, started.timestamp() + int(deadline) - now.timestamp())
                result.requeue_after = until if result.requeue_after is None else min(result.requeue_after, until)
        if finished_at({"status": {"conditions": conditions}}) is not None:
            result.requeue_after = ttl_remaining({"spec": spec, "status": {"conditions": conditions}}, now)
    deleted = {id(pod) for pod in result.delete}
    active = [pod for pod in counts.active if id(pod) not in deleted]
    status.update({"active": len(active) + len(result.create), "succeeded": counts.succeeded,
                   "failed": counts.failed, "ready": sum(is_ready(pod) for pod in active)})
    if indexed:
        status["completedIndexes"] = format_indexes(counts.succeeded_indexes)
    if conditions:
        status["conditions"] = conditions
    return result


def _plan_pods(spec: Obj, counts: PodCounts, now: datetime, result: Plan) -> None:
    """Pods to create or delete for a running Job, holding creations back during a failure back-off."""
    want = wanted_active(spec, counts)
    surplus = len(counts.active) - want
    if surplus > 0:
        # The newest go first: they have done the least work.
        newest = sorted(counts.active, key=lambda pod: (pod.get("metadata") or {}).get("creationTimestamp") or "",
                        reverse=True)
        result.delete = newest[:surplus]
        return
    room = want - len(counts.active)
    if room <= 0:
        return
    wait = backoff_remaining(counts, now)
    if wait > 0:
        result.requeue_after = wait
        return
    if spec.get("completionMode") == "Indexed":
        result.create = list(indexes_to_start(spec, counts, room))
    else:
        result.create = [None] * room


def pod_for(job: Obj, index: int | None) -> Obj:
    """A pod body from the Job's template, labelled for its selector; for an index, its annotation, label,
    JOB_COMPLETION_INDEX and hostname ``<job>-<index>``."""
    metadata = job.get("metadata") or {}
    name, uid = metadata.get("name") or "", metadata.get("uid") or ""
    template = (job.get("spec") or {}).get("template") or {}
    template_metadata = template.get("metadata") or {}
    labels = {**(template_metadata.get("labels") or {}), **selector_labels(uid, name)}
    annotations = dict(template_metadata.get("annotations") or {})
    spec = dict(template.get("spec") or {})
    prefix = f"{name}-"
    if index is not None:
        prefix = f"{name}-{index}-"
        annotations[COMPLETION_INDEX_ANNOTATION] = str(index)
        labels[COMPLETION_INDEX_LABEL] = str(index)
        spec["hostname"] = f"{name}-{index}"
        spec["containers"] = [
            {**container, "env": [*(container.get("env") or []),
                                  {"name": COMPLETION_INDEX_ENV, "value": str(index)}]}
            for container in spec.get("containers") or []]
    body_metadata: Obj = {"generateName": prefix, "labels": labels}
    if annotations:
        body_metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": body_metadata, "spec": spec}


def status_changed(current: Obj | None, desired: Obj) -> bool:
    current = current or {}
    return any(current.get(key) != desired.get(key) for key in {*current, *desired})


# --- the controller ---------------------------------------------------------------------------------


class JobController:
    """Syncs Job keys (``namespace/name``): their pods, status, and deletion after ttlSecondsAfterFinished."""

    name = "job"

    def __init__(self, context: ControllerContext, clock: Callable[[], datetime] | None = None) -> None:
        self.client = context.client
        self.controller = Controller(self.name, self.sync, context.workers)
        self.expectations = Expectations()
        self.recorder = EventRecorder(context.client, COMPONENT)
        self.pod_control = ChildControl(context.client, PODS, self.recorder)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.jobs = context.informers.informer(JOBS)
        self.pods = context.informers.informer(PODS)
        self.jobs.add_handlers(self.controller.enqueue_object, lambda _old, new: self.controller.enqueue_object(new),
                               self._job_deleted)
        self.pods.add_handlers(self._pod_added, lambda _old, new: self._pod_changed(new), self._pod_deleted)

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def _job_deleted(self, job: Obj) -> None:
        self.expectations.delete(key_of(job))

    def _owner_key(self, pod: Obj) -> str | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != JOBS.kind or ref.get("apiVersion") != JOBS.api_version:
            return None
        return make_key((pod.get("metadata") or {}).get("namespace"), ref.get("name") or "")

    def _pod_added(self, pod: Obj) -> None:
        owner = self._owner_key(pod)
        if owner is not None:
            self.expectations.creation_observed(owner)
            self.controller.enqueue(owner)

    def _pod_changed(self, pod: Obj) -> None:
        owner = self._owner_key(pod)
        if owner is not None:
            self.controller.enqueue(owner)

    def _pod_deleted(self, pod: Obj) -> None:
        owner = self._owner_key(pod)
        if owner is not None:
            self.expectations.deletion_observed(owner, key_of(pod))
            self.controller.enqueue(owner)

    def _owned_pods(self, job: Obj) -> list[Obj]:
        metadata = job.get("metadata") or {}
        return [pod for pod in self.pods.store.list(metadata.get("namespace"))
                if (controller_of(pod) or {}).get("uid") == metadata.get("uid")]

    def sync(self, key: str) -> None:
        """Converge the Job ``key``: finish it, run or stop pods, write its status, or delete it after its TTL."""
        job = self.jobs.store.get_by_key(key)
        if job is None:
            self.expectations.delete(key)
            return
        if is_being_deleted(job) or not self.expectations.satisfied(key):
            return
        now = self.clock()
        result = plan(job, self._owned_pods(job), now)
        if result.requeue_after == 0.0 and finished_at(job) is not None:
            self._expire(key, job)
            return
        for kind, reason, message in result.events:
            self.recorder.record(job, kind, reason, message)
        self._delete_pods(key, job, result.delete)
        self._create_pods(key, job, result.create)
        if status_changed(job.get("status"), result.status):
            self._write_status(key, job, result.status)
        if result.requeue_after is not None:
            self.controller.enqueue_after(key, result.requeue_after)

    def _create_pods(self, key: str, job: Obj, indexes: list[int | None]) -> None:
        if not indexes:
            return
        self.expectations.expect_creations(key, len(indexes))
        log.info("%s: creating %d pods", key, len(indexes))
        for position, index in enumerate(indexes):
            try:
                self.pod_control.create(job, JOBS, pod_for(job, index))
            except (APIError, ConnectionFailed) as error:
                for _ in indexes[position:]:
                    self.expectations.creation_observed(key)
                raise TemporaryError(f"{key}: creating a pod failed: {error}") from error

    def _delete_pods(self, key: str, job: Obj, pods: list[Obj]) -> None:
        if not pods:
            return
        self.expectations.expect_deletions(key, [key_of(pod) for pod in pods])
        log.info("%s: deleting %d active pods", key, len(pods))
        for pod in pods:
            try:
                if not self.pod_control.delete(job, pod):
                    self.expectations.deletion_observed(key, key_of(pod))
            except (APIError, ConnectionFailed) as error:
                self.expectations.deletion_observed(key, key_of(pod))
                raise TemporaryError(f"{key}: deleting pod failed: {error}") from error

    def _write_status(self, key: str, job: Obj, status: Obj) -> None:
        metadata = job.get("metadata") or {}
        body = {**job, "status": status}
        try:
            self.client.replace(JOBS, body, metadata.get("namespace"), subresource="status")
        except NotFound:
            return
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: writing status failed: {error}") from error
        log.info("%s: status active=%d succeeded=%d failed=%d", key, status["active"], status["succeeded"],
                 status["failed"])

    def _expire(self, key: str, job: Obj) -> None:
        """Delete a finished Job whose ttlSecondsAfterFinished has passed, with its pods (foreground, as the TTL
        controller), guarded by its uid so a newer Job of the same name is safe."""
        namespace, name = split_key(key)
        try:
            fresh = self.client.get(JOBS, name, namespace)
        except NotFound:
            return
        if (fresh.get("metadata") or {}).get("uid") != (job.get("metadata") or {}).get("uid"):
            return
        remaining = ttl_remaining(fresh, self.clock())
        if remaining is None or remaining > 0:
            if remaining is not None:
                self.controller.enqueue_after(key, remaining)
            return
        log.info("%s: finished and past ttlSecondsAfterFinished, deleting", key)
        try:
            self.client.delete(JOBS, name, namespace, propagation_policy="Foreground")
        except NotFound:
            return
