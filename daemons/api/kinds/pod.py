"""Pods: the unit the scheduler places and a kubelet runs; graceful deletion and a mostly immutable spec."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, FieldError, Resource
from daemons.api.defaults import default_pod
from daemons.api.times import human_duration, parse_time

Obj = dict[str, Any]


def pod_status_reason(pod: Obj) -> str:
    """The STATUS column: the phase, refined by container states and deletion, as kubectl shows it."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    init_statuses = status.get("initContainerStatuses") or []
    for index, container in enumerate(init_statuses):
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            reason = "Init:" + (terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{len(pod.get('spec', {}).get('initContainers') or [])}"
        break
    else:
        has_running = False
        for container in reversed(status.get("containerStatuses") or []):
            state = container.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif (state.get("terminated") or {}).get("reason"):
                reason = state["terminated"]["reason"]
            elif state.get("terminated"):
                terminated = state["terminated"]
                reason = (f"Signal:{terminated['signal']}" if terminated.get("signal")
                          else f"ExitCode:{terminated.get('exitCode')}")
            elif state.get("running") and container.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_ready(pod: Obj, _now: datetime) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len(pod.get("spec", {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_restarts(pod: Obj, now: datetime) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    last: datetime | None = None
    for container in statuses:
        finished = parse_time(((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if finished and (last is None or finished > last):
            last = finished
    if restarts and last:
        return f"{restarts} ({human_duration((now - last).total_seconds())} ago)"
    return str(restarts)

COLUMNS = (
    Column("Ready", "string", _pod_ready),
    Column("Status", "string", lambda o, _n: pod_status_reason(o)),
    Column("Restarts", "string", _pod_restarts),
    tables.AGE,
    Column("IP", "string", lambda o, _n: (o.get("status") or {}).get("podIP") or tables.NONE, priority=1),
    Column("Node", "string", lambda o, _n: o.get("spec", {}).get("nodeName") or tables.NONE, priority=1),
    Column("Nominated Node", "string",
           lambda o, _n: (o.get("status") or {}).get("nominatedNodeName") or tables.NONE, priority=1),
    Column("Readiness Gates", "string", lambda o, _n: tables.NONE, priority=1),
)

# What a pod update may change, as upstream's ValidatePodUpdate says it.
UPDATE_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`, "
                    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations` "
                    "(only additions to existing tolerations)")
DEFAULT_GRACE_SECONDS = 30


def _mutable_parts_removed(pod: Obj) -> Obj:
    spec = {key: value for key, value in (pod.get("spec") or {}).items()
            if key not in ("activeDeadlineSeconds", "tolerations")}
    for field in ("containers", "initContainers"):
        if isinstance(spec.get(field), list):
            spec[field] = [{k: v for k, v in container.items() if k != "image"} if isinstance(container, dict)
                           else container for container in spec[field]]
    return spec


def check_update(obj: Obj, current: Obj) -> list[FieldError]:
    """Pods are immutable but for images, activeDeadlineSeconds and added tolerations."""
    if _mutable_parts_removed(obj) != _mutable_parts_removed(current):
        return [FieldError.forbidden("spec", UPDATE_FORBIDDEN)]
    return []


def deletion_grace(obj: Obj, requested: int | None) -> int | None:
    """A pod bound to a node and still running gets its grace period for the kubelet to stop it."""
    if not (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("phase") in ("Succeeded",
                                                                                                  "Failed"):
        return None
    default = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    return default if requested is None else int(requested)


RESOURCE = Resource("Pod", "pods", models.Pod, short_names=("po",), subresources=("status", "binding", "log", "exec"),
                    categories=("all",), columns=COLUMNS, initial_status=lambda _obj: {"phase": "Pending"},
                    defaults=default_pod, check_update=check_update, deletion_grace=deletion_grace)
