"""A pod's status as the kubelet reports it, computed from observed containers (no I/O here).

The worker writes the result through ``pods/<name>/status`` only when it
differs from what the API holds, and keeps each condition's
``lastTransitionTime`` while its status stays the same, so an unchanged pod
costs no write at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from daemons.api.models import PodStatus
from daemons.kubelet.decisions import ObservedContainer

# The status fields the kubelet owns; a merge patch sets each of them (null removes one).
OWNED_FIELDS = ("phase", "conditions", "hostIP", "podIP", "podIPs", "startTime", "containerStatuses",
                "initContainerStatuses", "reason", "message")
TERMINAL_PHASES = ("Succeeded", "Failed")


def rfc3339(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reported_ready(pod: Mapping[str, Any] | None, container_id: str) -> bool:
    """Whether the pod's status in the API already calls the container with Docker id ``container_id`` ready."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return any(status.get("containerID") == f"docker://{container_id}" and status.get("ready") is True
               for status in statuses)


def terminated_state(observed: ObservedContainer) -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": observed.exit_code if observed.exit_code is not None else -1,
        "reason": observed.terminated_reason,
        "startedAt": rfc3339(observed.started_at),
        "finishedAt": rfc3339(observed.finished_at),
        "containerID": f"docker://{observed.id}",
    }
    if observed.error:
        state["message"] = observed.error
    return {"terminated": {key: value for key, value in state.items() if value is not None}}


def waiting_state(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def container_status(
    container: Mapping[str, Any],
    observed: ObservedContainer | None,
    previous: ObservedContainer | None,
    *,
    waiting: tuple[str, str] | None = None,
    ready: bool = False,
) -> dict[str, Any]:
    """One entry of ``containerStatuses``.

    ``observed`` is the newest Docker container of the spec container, ``previous``
    the one before it; ``waiting`` (reason, message) says why nothing runs now
    (ContainerCreating, CrashLoopBackOff, ErrImagePull, ...).
    """
    status: dict[str, Any] = {"name": container["name"], "image": container["image"], "imageID": "",
                              "ready": False, "started": False, "restartCount": 0, "state": {}, "lastState": {}}
    if observed is None:
        status["state"] = waiting_state(*(waiting or ("ContainerCreating", "")))
        return status
    status.update(imageID=f"docker://{observed.image_id}" if observed.image_id else "",
                  containerID=f"docker://{observed.id}", restartCount=observed.restart_count)
    older = terminated_state(previous) if previous is not None else {}
    if observed.state == "running":
        status.update(state={"running": {"startedAt": rfc3339(observed.started_at)}}, lastState=older,
                      started=True, ready=ready)
    elif observed.state == "exited" and waiting is not None:
        status.update(state=waiting_state(*waiting), lastState=terminated_state(observed))
    elif observed.state == "exited":
        status.update(state=terminated_state(observed), lastState=older)
    else:
        status.update(state=waiting_state(*(waiting or ("ContainerCreating", ""))), lastState=older)
    return status


def incomplete(init_statuses: Sequence[Mapping[str, Any]]) -> list[str]:
    """The init containers that have not exited 0 yet."""
    return [status["name"] for status in init_statuses
            if ((status.get("state") or {}).get("terminated") or {}).get("exitCode") != 0]


def compute_phase(pod: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]],
                  init_statuses: Sequence[Mapping[str, Any]] = (), initialized: bool = True) -> str:
    """Pending / Running / Succeeded / Failed from the container statuses, by Kubernetes' rules.

    While init containers run the pod is Pending; one that failed under restartPolicy Never fails it.
    """
    restart_policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
    if not initialized:
        failed = any(((status.get("state") or {}).get("terminated") or {}).get("exitCode") not in (None, 0)
                     for status in init_statuses)
        return "Failed" if failed and restart_policy == "Never" else "Pending"
    waiting = running = stopped = succeeded = 0
    for status in statuses:
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode") == 0
        elif "terminated" in last:
            stopped += 1  # waiting to be restarted after it ran
        else:
            waiting += 1
    if not statuses or waiting:
        return "Pending"
    if running:
        return "Running"
    if restart_policy == "Always":
        return "Running"  # every container stopped, each about to be restarted
    if stopped == succeeded:
        return "Succeeded"
    return "Failed" if restart_policy == "Never" else "Running"


def _condition(old: Mapping[str, Mapping[str, Any]], kind: str, ok: bool, now: str, reason: str = "",
               message: str = "") -> dict[str, Any]:
    status = "True" if ok else "False"
    previous = old.get(kind) or {}
    since = previous.get("lastTransitionTime") if previous.get("status") == status else None
    condition: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": since or now}
    if not ok and reason:
        condition["reason"] = reason
        if message:
            condition["message"] = message
    return condition


def pod_conditions(old_conditions: Sequence[Mapping[str, Any]] | None, phase: str,
                   statuses: Sequence[Mapping[str, Any]], now: str,
                   not_initialized: Sequence[str] = ()) -> list[dict[str, Any]]:
    """PodScheduled, Initialized, ContainersReady and Ready, each keeping its transition time while unchanged."""
    old = {condition.get("type", ""): condition for condition in old_conditions or []}
    waiting_init = f"containers with incomplete status: [{' '.join(not_initialized)}]"
    unready = [status["name"] for status in statuses if not status.get("ready")]
    if phase == "Succeeded":
        reason, message = "PodCompleted", ""
    else:
        reason, message = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
    ready = not unready and phase == "Running"
    return [
        _condition(old, "PodScheduled", True, now),
        _condition(old, "Initialized", not not_initialized, now, "ContainersNotInitialized", waiting_init),
        _condition(old, "ContainersReady", ready, now, reason, message),
        _condition(old, "Ready", ready, now, reason, message),
    ]


def build_pod_status(
    pod: Mapping[str, Any],
    statuses: Sequence[Mapping[str, Any]],
    *,
    host_ip: str,
    pod_ip: str,
    now: datetime,
    init_statuses: Sequence[Mapping[str, Any]] = (),
    initialized: bool = True,
) -> dict[str, Any]:
    """The pod's whole status (the fields the kubelet owns), given its (init) container statuses."""
    old = pod.get("status") or {}
    stamp = rfc3339(now) or ""
    phase = compute_phase(pod, statuses, init_statuses, initialized)
    pending_init = [] if initialized else incomplete(init_statuses)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": pod_conditions(old.get("conditions"), phase, statuses, stamp, pending_init),
        "hostIP": host_ip,
        "startTime": old.get("startTime") or stamp,
        "containerStatuses": list(statuses),
    }
    if init_statuses:
        status["initContainerStatuses"] = list(init_statuses)
    if pod_ip:
        status.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
    return status


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch that turns the kubelet's fields of ``old`` into ``new``; None when nothing changed.

    Both sides are compared in the form the apiserver stores (defaults filled, no nulls), so a
    status that only differs in spelling is no change.
    """
    old_wire = PodStatus.model_validate(old or {}).wire()
    new_wire = PodStatus.model_validate(new).wire()
    patch = {field: new_wire.get(field) for field in OWNED_FIELDS if old_wire.get(field) != new_wire.get(field)}
    return patch or None
