"""The CronJob controller: creates a Job at each scheduled time, as Kubernetes' cronjob controller (v2).

A sync reads the CronJob and the Jobs it controls, and decides without I/O (``plan``): which of its Jobs are
still active, when one last succeeded, which finished Jobs fall beyond the history limits, and whether a
scheduled time has come that no Job was made for yet. After an outage only the most recent missed time runs,
and none when it is older than startingDeadlineSeconds; more than 100 missed times also get a warning event.
concurrencyPolicy Forbid skips a time while a Job runs, Replace deletes the running Jobs first. The sync then
requeues the key for the next scheduled time, so the controller never polls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from daemons.api.errors import AlreadyExists, APIError, ConnectionFailed, NotFound
from daemons.api.kinds.cronjob import Schedule, ScheduleError, parse_schedule, zone_of
from daemons.api.resources import require
from daemons.api.times import parse_time, rfc3339
from daemons.controllers.context import ControllerContext
from daemons.controllers.job import finished_at
from daemons.controllers.ownership import ChildControl, controller_of, is_being_deleted
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.keys import make_key

log = logging.getLogger(__name__)

Obj = dict[str, Any]

CRONJOBS = require("batch/v1", "CronJob")
JOBS = require("batch/v1", "Job")
COMPONENT = "cronjob-controller"
SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
MANY_MISSED = 100
# Upstream requeues a little after the scheduled time, so the time has surely passed when the sync runs.
REQUEUE_SLACK_SECONDS = 0.1


# --- pure decisions ---------------------------------------------------------------------------------


def most_recent_time(schedule: Schedule, earliest: datetime, now: datetime) -> tuple[datetime | None, int]:
    """The latest scheduled time in (earliest, now] and how many there were (counted up to MANY_MISSED + 1).

    Times are computed in ``earliest``'s zone. Past MANY_MISSED the count stops and the latest time is found by
    searching back from ``now`` in growing windows, so a long outage costs little.
    """
    latest: datetime | None = None
    count = 0
    moment = schedule.next_after(earliest)
    while moment is not None and moment <= now:
        latest, count = moment, count + 1
        if count > MANY_MISSED:
            return _latest_before(schedule, earliest, now), count
        moment = schedule.next_after(moment)
    return latest, count


def _latest_before(schedule: Schedule, earliest: datetime, now: datetime) -> datetime | None:
    window = timedelta(hours=1)
    while True:
        start = max(earliest, now - window)
        moment = schedule.next_after(start)
        if moment is not None and moment <= now:
            latest = moment
            while (moment := schedule.next_after(moment)) is not None and moment <= now:
                latest = moment
            return latest
        if start == earliest:
            return None
        window *= 2


def job_name(cronjob_name: str, scheduled: datetime) -> str:
    """``<cronjob>-<scheduled time in minutes since the epoch>``: one name per scheduled time, so a time runs once."""
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"


def is_failed(job: Obj) -> bool:
    return any(item.get("type") == "Failed" and item.get("status") == "True"
               for item in (job.get("status") or {}).get("conditions") or [])


def job_reference(job: Obj) -> Obj:
    metadata = job.get("metadata") or {}
    return {"kind": "Job", "namespace": metadata.get("namespace"), "name": metadata.get("name"),
            "uid": metadata.get("uid"), "apiVersion": "batch/v1"}


def _started(job: Obj) -> str:
    return (job.get("status") or {}).get("startTime") or (job.get("metadata") or {}).get("creationTimestamp") or ""


def beyond_history(jobs: list[Obj], limit: int) -> list[Obj]:
    """The oldest finished Jobs past ``limit`` (by start time), to delete."""
    ordered = sorted(jobs, key=_started)
    return ordered[:max(0, len(ordered) - limit)]


@dataclass
class CronPlan:
    """One sync's decision: the status, Jobs to delete, the scheduled time to create a Job for, events, and
    when to look again."""

    status: Obj
    delete: list[Obj] = field(default_factory=list)
    create: datetime | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)
    requeue_after: float | None = None


def plan(cronjob: Obj, jobs: list[Obj], now: datetime, local: tzinfo) -> CronPlan:
    """Everything a sync of ``cronjob`` decides, given the Jobs it controls and the time; ``local`` is the zone
    of a CronJob without timeZone (the controller manager's)."""
    spec, old = cronjob.get("spec") or {}, cronjob.get("status") or {}
    status: Obj = {key: old[key] for key in ("lastScheduleTime", "lastSuccessfulTime") if old.get(key)}
    running = [job for job in jobs if finished_at(job) is None]
    succeeded = [job for job in jobs if finished_at(job) is not None and not is_failed(job)]
    failed = [job for job in jobs if is_failed(job)]
    result = CronPlan(status)
    completions = [moment for moment in (parse_time((job.get("status") or {}).get("completionTime"))
                                         for job in succeeded) if moment is not None]
    last_success = max([*completions, *filter(None, [parse_time(status.get("lastSuccessfulTime"))])], default=None)
    if last_success is not None:
        status["lastSuccessfulTime"] = rfc3339(last_success)
    result.delete = [*beyond_history(succeeded, int(spec.get("successfulJobsHistoryLimit", 3))),
                     *beyond_history(failed, int(spec.get("failedJobsHistoryLimit", 1)))]
    try:
        schedule = parse_schedule(spec.get("schedule") or "")
        zone = zone_of(spec.get("timeZone")) or local
    except (ScheduleError, ValueError) as error:
        result.events.append(("Warning", "InvalidSchedule", f"invalid schedule: {spec.get('schedule')} : {error}"))
        status["active"] = [job_reference(job) for job in running]
        return result
    now_local = now.astimezone(zone)
    if not spec.get("suspend"):
        scheduled = _due(cronjob, schedule, now_local, result)
        if scheduled is not None:
            names = {(job.get("metadata") or {}).get("name") for job in jobs}
            policy = spec.get("concurrencyPolicy", "Allow")
            if job_name(_name(cronjob), scheduled) in names:
                # This time's Job exists already: made by a sync whose status write this cache has not seen yet.
                # Record the time again, or this write would put the stale lastScheduleTime back.
                status["lastScheduleTime"] = rfc3339(scheduled)
            elif policy == "Forbid" and running:
                result.events.append(("Normal", "JobAlreadyActive", "Not starting job because prior execution is "
                                      "running and concurrency policy is Forbid"))
            else:
                if policy == "Replace":
                    result.delete += running
                    running = []
                result.create = scheduled
                status["lastScheduleTime"] = rfc3339(scheduled)
    status["active"] = [job_reference(job) for job in running]
    following = schedule.next_after(now_local)
    if following is not None:
        result.requeue_after = (following - now_local).total_seconds() + REQUEUE_SLACK_SECONDS
    return result


def _due(cronjob: Obj, schedule: Schedule, now: datetime, result: CronPlan) -> datetime | None:
    """The scheduled time a Job is due for now, by upstream's missed-run rule, recording its events."""
    spec, status = cronjob.get("spec") or {}, cronjob.get("status") or {}
    earliest = parse_time(status.get("lastScheduleTime")) or parse_time(
        (cronjob.get("metadata") or {}).get("creationTimestamp")) or now
    deadline = spec.get("startingDeadlineSeconds")
    if deadline is not None:
        earliest = max(earliest, now - timedelta(seconds=int(deadline)))
    earliest = earliest.astimezone(now.tzinfo)
    if earliest > now:
        return None
    scheduled, missed = most_recent_time(schedule, earliest, now)
    if scheduled is None:
        return None
    if missed > MANY_MISSED:
        result.events.append(("Warning", "TooManyMissedTimes", "too many missed start times. Set or decrease "
                              ".spec.startingDeadlineSeconds or check clock skew"))
    if deadline is not None and scheduled + timedelta(seconds=int(deadline)) < now:
        result.events.append(("Warning", "MissSchedule", "Missed scheduled time to start a job: "
                              + scheduled.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")))
        return None
    return scheduled


def job_for(cronjob: Obj, scheduled: datetime) -> Obj:
    """The Job body for ``scheduled`` from the CronJob's jobTemplate."""
    template = (cronjob.get("spec") or {}).get("jobTemplate") or {}
    template_metadata = template.get("metadata") or {}
    annotations = {**(template_metadata.get("annotations") or {}),
                   SCHEDULED_TIMESTAMP_ANNOTATION: scheduled.isoformat(timespec="seconds").replace("+00:00", "Z")}
    metadata: Obj = {"name": job_name(_name(cronjob), scheduled), "annotations": annotations}
    if template_metadata.get("labels"):
        metadata["labels"] = dict(template_metadata["labels"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": dict(template.get("spec") or {})}


def _name(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


# --- the controller ---------------------------------------------------------------------------------


class CronJobController:
    """Syncs CronJob keys (``namespace/name``): makes their Jobs on schedule, trims their history."""

    name = "cronjob"

    def __init__(self, context: ControllerContext, clock: Callable[[], datetime] | None = None) -> None:
        self.client = context.client
        self.controller = Controller(self.name, self.sync, context.workers)
        self.recorder = EventRecorder(context.client, COMPONENT)
        self.job_control = ChildControl(context.client, JOBS, self.recorder)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.cronjobs = context.informers.informer(CRONJOBS)
        self.jobs = context.informers.informer(JOBS)
        self.cronjobs.add_handlers(self.controller.enqueue_object,
                                   lambda _old, new: self.controller.enqueue_object(new), lambda _obj: None)
        self.jobs.add_handlers(self._job_changed, lambda _old, new: self._job_changed(new), self._job_changed)

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def _job_changed(self, job: Obj) -> None:
        ref = controller_of(job)
        if ref is not None and ref.get("kind") == CRONJOBS.kind and ref.get("apiVersion") == CRONJOBS.api_version:
            self.controller.enqueue(make_key((job.get("metadata") or {}).get("namespace"), ref.get("name") or ""))

    def sync(self, key: str) -> None:
        """Converge the CronJob ``key`` and requeue it for its next scheduled time."""
        cronjob = self.cronjobs.store.get_by_key(key)
        if cronjob is None or is_being_deleted(cronjob):
            return
        metadata = cronjob.get("metadata") or {}
        jobs = [job for job in self.jobs.store.list(metadata.get("namespace"))
                if (controller_of(job) or {}).get("uid") == metadata.get("uid")]
        local = datetime.now().astimezone().tzinfo or UTC
        result = plan(cronjob, jobs, self.clock(), local)
        for kind, reason, message in result.events:
            self.recorder.record(cronjob, kind, reason, message)
        for job in result.delete:
            try:
                self.client.delete(JOBS, _name(job), metadata.get("namespace"), propagation_policy="Background")
            except NotFound:
                continue
            except (APIError, ConnectionFailed) as error:
                raise TemporaryError(f"{key}: deleting job {_name(job)} failed: {error}") from error
            log.info("%s: deleted job %s", key, _name(job))
            self.recorder.record(cronjob, "Normal", "SuccessfulDelete", f"Deleted job {_name(job)}")
        if result.create is not None:
            self._create(key, cronjob, result.create, result.status)
        if any((result.status.get(name) or None) != ((cronjob.get("status") or {}).get(name) or None)
               for name in ("active", "lastScheduleTime", "lastSuccessfulTime")):
            self._write_status(key, cronjob, result.status)
        if result.requeue_after is not None:
            self.controller.enqueue_after(key, result.requeue_after)

    def _create(self, key: str, cronjob: Obj, scheduled: datetime, status: Obj) -> None:
        """Create the Job for ``scheduled`` and list it in ``status``'s active Jobs."""
        try:
            job = self.job_control.create(cronjob, CRONJOBS, job_for(cronjob, scheduled))
        except AlreadyExists:
            return  # made by an earlier sync whose Job the cache has not shown yet
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: creating the job for {scheduled} failed: {error}") from error
        status["active"] = [*status.get("active", []), job_reference(job)]

    def _write_status(self, key: str, cronjob: Obj, status: Obj) -> None:
        patch = {"status": {"active": status.get("active") or None,
                            "lastScheduleTime": status.get("lastScheduleTime"),
                            "lastSuccessfulTime": status.get("lastSuccessfulTime")}}
        metadata = cronjob.get("metadata") or {}
        try:
            self.client.patch(CRONJOBS, metadata["name"], patch, metadata.get("namespace"), subresource="status")
        except NotFound:
            return
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: writing status failed: {error}") from error
        log.info("%s: status active=%d lastScheduleTime=%s", key, len(status.get("active") or []),
                 status.get("lastScheduleTime"))

