"""batch/v1 Job: pods run to completion, retried up to a back-off limit, within an optional deadline.

The apiserver generates the selector from the Job's uid (upstream's generateSelector): the template gets the
``controller-uid`` and ``job-name`` labels (plain and ``batch.kubernetes.io/``), and the selector matches the
uid, so a Job's pods can never be claimed by another Job. A user-supplied selector (manualSelector) is not
supported.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from daemons.api import models, tables
from daemons.api.bundle import Column, FieldError, Obj, Resource
from daemons.api.defaults import default_job
from daemons.api.times import human_duration, parse_time

# Labels the apiserver puts on a Job's template, as upstream (the legacy names and the batch.kubernetes.io ones).
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_RESTART_POLICIES = ("OnFailure", "Never")


class JobCondition(models.KubeModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_probe_time: str | None = None
    last_transition_time: str | None = None


class JobSpec(models.KubeModel):
    """Unset fields stay unset here: a Job gets upstream's defaults from its row's hook, while a CronJob's
    jobTemplate keeps what its author wrote, as upstream stores it."""

    parallelism: Annotated[int, Field(ge=0)] | None = None
    completions: Annotated[int, Field(ge=0)] | None = None
    active_deadline_seconds: Annotated[int, Field(ge=1)] | None = None
    backoff_limit: Annotated[int, Field(ge=0)] | None = None
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] | None = None
    completion_mode: Literal["NonIndexed", "Indexed"] | None = None
    suspend: bool | None = None
    manual_selector: bool | None = None
    selector: models.LabelSelector | None = None
    template: models.PodTemplateSpec
    pod_replacement_policy: Literal["TerminatingOrFailed", "Failed"] | None = None
    # Stored and served, not acted on by this controller.
    pod_failure_policy: dict[str, Any] | None = None
    success_policy: dict[str, Any] | None = None
    backoff_limit_per_index: Annotated[int, Field(ge=0)] | None = None
    max_failed_indexes: Annotated[int, Field(ge=0)] | None = None
    managed_by: str | None = None


class JobStatus(models.KubeModel):
    conditions: list[JobCondition] | None = None
    start_time: str | None = None
    completion_time: str | None = None
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    ready: int | None = None
    terminating: int | None = None
    completed_indexes: str | None = None


class Job(models.KubeObject):
    spec: JobSpec
    status: JobStatus | None = None


class JobTemplateSpec(models.KubeModel):
    metadata: models.ObjectMeta = Field(default_factory=models.ObjectMeta)
    spec: JobSpec


# --- hooks ------------------------------------------------------------------------------------------


def selector_labels(uid: str, name: str) -> dict[str, str]:
    """The labels a Job's pods carry, by which its generated selector finds them."""
    return {CONTROLLER_UID_LABEL: uid, LEGACY_CONTROLLER_UID_LABEL: uid, JOB_NAME_LABEL: name,
            LEGACY_JOB_NAME_LABEL: name}


def generate_selector(job: Obj) -> None:
    """Upstream's generateSelector on create: the template's labels gain the uid and name labels and the selector
    matches the uid. Any malformed part is left for validation to report."""
    metadata, spec = job.get("metadata"), job.get("spec")
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        return
    uid, name, template = metadata.get("uid"), metadata.get("name"), spec.get("template")
    if spec.get("selector") is not None or spec.get("manualSelector") or not isinstance(template, dict) \
            or not isinstance(uid, str) or not isinstance(name, str):
        return
    template_metadata = template.setdefault("metadata", {})
    labels = template_metadata.get("labels") if isinstance(template_metadata, dict) else None
    if not isinstance(template_metadata, dict) or not isinstance(labels, dict | None):
        return
    template_metadata["labels"] = {**(labels or {}), **selector_labels(uid, name)}
    spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}


def defaults(job: Obj) -> None:
    """The generated selector, then upstream's SetDefaults_Job, whose Job labels default to the template's and so
    carry the generated ones, as upstream's Jobs show."""
    generate_selector(job)
    default_job(job)


def check_job_spec(spec: Obj, path: str) -> list[FieldError]:
    """What upstream's ValidateJobSpec says beyond the model's types (shared with CronJob's jobTemplate)."""
    errors: list[FieldError] = []
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    policy = pod_spec.get("restartPolicy", "Always")
    if policy not in JOB_RESTART_POLICIES:
        errors.append(FieldError.not_supported(f"{path}.template.spec.restartPolicy", policy, JOB_RESTART_POLICIES))
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        errors.append(FieldError.required(f"{path}.completions",
                                          'when completion mode is "Indexed"'))
    if spec.get("manualSelector"):
        errors.append(FieldError.not_supported(f"{path}.manualSelector", True, ["false"]))
    return errors


def check(job: Obj, _current: Obj | None) -> list[FieldError]:
    return check_job_spec(job.get("spec") or {}, "spec")


IMMUTABLE = ("completions", "completionMode", "selector", "template")


def check_update(job: Obj, current: Obj) -> list[FieldError]:
    """Upstream forbids changing what the pods are made from once some may exist."""
    spec, old = job.get("spec") or {}, current.get("spec") or {}
    return [FieldError.invalid(f"spec.{name}", spec.get(name), "field is immutable")
            for name in IMMUTABLE if spec.get(name) != old.get(name)]


# --- columns (kubectl 1.33's printJob) --------------------------------------------------------------


def has_condition(job: Obj, kind: str) -> bool:
    return any(condition.get("type") == kind and condition.get("status") == "True"
               for condition in (job.get("status") or {}).get("conditions") or [])


def status_text(job: Obj, _now: datetime | None = None) -> str:
    """The STATUS column."""
    if has_condition(job, "Complete"):
        return "Complete"
    if has_condition(job, "Failed"):
        return "Failed"
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if has_condition(job, kind):
            return kind
    return "Running"


def completions_text(job: Obj, _now: datetime | None = None) -> str:
    spec = job.get("spec") or {}
    succeeded = int((job.get("status") or {}).get("succeeded") or 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism")
    if parallelism is not None and parallelism > 1:
        return f"{succeeded}/1 of {parallelism}"
    return f"{succeeded}/1"


def duration_text(job: Obj, now: datetime) -> str:
    status = job.get("status") or {}
    started = parse_time(status.get("startTime"))
    if started is None:
        return ""
    finished = parse_time(status.get("completionTime")) or now
    return human_duration((finished - started).total_seconds())


COLUMNS = (
    Column("Status", "string", status_text),
    Column("Completions", "string", completions_text),
    Column("Duration", "string", duration_text),
    tables.AGE,
    Column("Containers", "string", lambda o, _n: tables.template_containers(o)[0], priority=1),
    Column("Images", "string", lambda o, _n: tables.template_containers(o)[1], priority=1),
    Column("Selector", "string", lambda o, _n: tables.selector_text(o), priority=1),
)


RESOURCE = Resource("Job", "jobs", Job, group="batch", subresources=("status",), categories=("all",),
                    defaults=defaults, check=check, check_update=check_update, columns=COLUMNS)
