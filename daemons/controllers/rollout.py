"""The arithmetic of Deployment rollouts, without I/O: what Kubernetes' deployment controller decides, step by step.

Which ReplicaSet is new (its template equals the Deployment's, ignoring the
pod-template-hash label), how it is named, which revision it carries, how far the
new one may grow and the old ones shrink under maxSurge / maxUnavailable, how a
resize spreads over ReplicaSets mid-rollout, which old ones history pruning removes,
and what the Deployment's status and conditions say. ``deployment.py`` applies it.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from daemons.api.phases import TERMINAL_PHASES
from daemons.api.times import parse_time, rfc3339

Obj = dict[str, Any]

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
CHANGE_CAUSE = "kubernetes.io/change-cause"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Deployment annotations that are not copied onto its ReplicaSets (as upstream's annotationsToSkip).
NOT_COPIED = frozenset({LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS,
                        "deprecated.deployment.rollback.to"})
# upstream's rand.SafeEncodeString alphabet: no vowels, no 0/1/3 that could spell words or look alike.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

PROGRESSING = "Progressing"
AVAILABLE = "Available"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
RS_UPDATED = "ReplicaSetUpdated"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"


# --- reading objects ------------------------------------------------------------------------------------


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def name_of(obj: Obj) -> str:
    return str(_meta(obj).get("name"))


def replicas(obj: Obj) -> int:
    """``spec.replicas`` (defaulted to 1 as the API does)."""
    value = _spec(obj).get("replicas")
    return 1 if value is None else int(value)


def available(rs: Obj) -> int:
    return int(_status(rs).get("availableReplicas") or 0)


def int_annotation(obj: Obj, name: str) -> int | None:
    value = (_meta(obj).get("annotations") or {}).get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def revision(rs: Obj) -> int:
    """The ReplicaSet's revision annotation, 0 when missing or not a number."""
    return int_annotation(rs, REVISION) or 0


def by_age(rses: Iterable[Obj]) -> list[Obj]:
    """Oldest first; the name breaks ties, as upstream's ReplicaSetsByCreationTimestamp."""
    return sorted(rses, key=lambda rs: (_meta(rs).get("creationTimestamp") or "", name_of(rs)))


def active(rses: Iterable[Obj | None]) -> list[Obj]:
    """ReplicaSets asked for at least one pod."""
    return [rs for rs in rses if rs is not None and replicas(rs) > 0]


def total_replicas(rses: Iterable[Obj | None]) -> int:
    return sum(replicas(rs) for rs in rses if rs is not None)


def total_available(rses: Iterable[Obj | None]) -> int:
    return sum(available(rs) for rs in rses if rs is not None)


def _status_sum(rses: Iterable[Obj | None], field: str) -> int:
    return sum(int(_status(rs).get(field) or 0) for rs in rses if rs is not None)


# --- the new ReplicaSet: template, hash, name -----------------------------------------------------------


def semantic(value: Any) -> Any:
    """``value`` without nulls, empty maps and empty lists: what Go's zero values make equal to absent fields.

    Upstream kubectl sends a template back (``rollout undo``) with ``resources: {}`` and the
    like; it is the same template as the one stored without them.
    """
    if isinstance(value, dict):
        cleaned = {key: semantic(item) for key, item in value.items()}
        return {key: item for key, item in cleaned.items() if item is not None and item != {} and item != []}
    if isinstance(value, list):
        return [semantic(item) for item in value]
    return value


def without_hash(template: Obj) -> Obj:
    """The template with the pod-template-hash label removed, in its semantic form."""
    template = copy.deepcopy(template or {})
    labels = (template.get("metadata") or {}).get("labels")
    if labels is not None:
        labels.pop(HASH_LABEL, None)
    return semantic(template)


def same_template(rs_template: Obj, deployment_template: Obj) -> bool:
    """Upstream's EqualIgnoreHash: the templates agree once the pod-template-hash label is set aside."""
    return without_hash(rs_template) == without_hash(deployment_template)


def fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """upstream's rand.SafeEncodeString: each character mapped into an alphabet that cannot spell bad words."""
    return "".join(SAFE_ALPHABET[ord(char) % len(SAFE_ALPHABET)] for char in text)


def template_hash(template: Obj, collision_count: int | None = None) -> str:
    """A stable hash of the template (FNV-32a of its canonical semantic JSON, plus the collision count), encoded."""
    data = json.dumps(semantic(template), sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += collision_count.to_bytes(4, "little")
    return safe_encode(str(fnv32a(data)))


def find_new(deployment: Obj, rses: Iterable[Obj]) -> Obj | None:
    """The oldest ReplicaSet whose template is the Deployment's."""
    template = _spec(deployment).get("template") or {}
    return next((rs for rs in by_age(rses) if same_template(_spec(rs).get("template") or {}, template)), None)


def new_replica_set(deployment: Obj, collision_count: int | None) -> Obj:
    """The ReplicaSet that runs the Deployment's template, named ``<deploy>-<hash>``, without owner or replicas."""
    spec = _spec(deployment)
    template = copy.deepcopy(spec.get("template") or {})
    pod_hash = template_hash(template, collision_count)
    template.setdefault("metadata", {})
    template["metadata"]["labels"] = {**(template["metadata"].get("labels") or {}), HASH_LABEL: pod_hash}
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: pod_hash}
    rs_spec: Obj = {"replicas": 0, "selector": selector, "template": template}
    if spec.get("minReadySeconds") is not None:
        rs_spec["minReadySeconds"] = spec["minReadySeconds"]
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{name_of(deployment)}-{pod_hash}", "namespace": _meta(deployment).get("namespace"),
                         "labels": dict(template["metadata"]["labels"])},
            "spec": rs_spec}


# --- fenceposts ---------------------------------------------------------------------------------------


def scaled_value(value: int | str | None, total: int, round_up: bool) -> int:
    """An int-or-percent against ``total``: ``25%`` of 10 is 3 rounding up, 2 rounding down."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.endswith("%"):
        return int(text)
    fraction = int(text[:-1]) * total / 100
    return math.ceil(fraction) if round_up else math.floor(fraction)


def is_rolling(deployment: Obj) -> bool:
    return ((_spec(deployment).get("strategy") or {}).get("type") or "RollingUpdate") == "RollingUpdate"


def fenceposts(deployment: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as numbers of pods: surge rounds up, unavailable down; never both 0."""
    rolling = (_spec(deployment).get("strategy") or {}).get("rollingUpdate") or {}
    desired = replicas(deployment)
    surge = scaled_value(rolling.get("maxSurge", "25%"), desired, round_up=True)
    unavailable = scaled_value(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_surge(deployment: Obj) -> int:
    return fenceposts(deployment)[0] if is_rolling(deployment) else 0


def max_unavailable(deployment: Obj) -> int:
    if not is_rolling(deployment) or replicas(deployment) == 0:
        return 0
    return min(fenceposts(deployment)[1], replicas(deployment))


# --- revisions and annotations --------------------------------------------------------------------------


def next_revision(old_rses: Iterable[Obj]) -> int:
    """One more than the highest revision among the old ReplicaSets."""
    return max((revision(rs) for rs in old_rses), default=0) + 1


def replica_set_annotations(deployment: Obj, rs: Obj, new_revision: int, exists: bool) -> dict[str, str]:
    """The annotations the new ReplicaSet should carry (upstream's SetNewReplicaSetAnnotations).

    The Deployment's own annotations (change-cause among them) are copied; the revision
    only ever goes up, and the revision it replaces joins the revision history; a ReplicaSet
    being created also records the sizes it was made for.
    """
    annotations = dict(_meta(rs).get("annotations") or {})
    for key, value in (_meta(deployment).get("annotations") or {}).items():
        if key not in NOT_COPIED:
            annotations[key] = value
    old = annotations.get(REVISION)
    old_number = int(old) if old and old.isdigit() else 0
    if old_number < new_revision:
        annotations[REVISION] = str(new_revision)
        if old and exists:
            history = [item for item in annotations.get(REVISION_HISTORY, "").split(",") if item]
            annotations[REVISION_HISTORY] = ",".join([*history, old])
    if not exists:
        annotations.update(size_annotations(deployment))
    return annotations


def size_annotations(deployment: Obj) -> dict[str, str]:
    """desired-replicas and max-replicas: the Deployment's size when the ReplicaSet was last scaled for it."""
    return {DESIRED_REPLICAS: str(replicas(deployment)),
            MAX_REPLICAS: str(replicas(deployment) + max_surge(deployment))}


# --- how far each ReplicaSet goes -----------------------------------------------------------------------


def new_rs_replicas(deployment: Obj, all_rses: list[Obj], new_rs: Obj) -> int:
    """The new ReplicaSet's next size: all at once for Recreate; within replicas + maxSurge for RollingUpdate."""
    desired = replicas(deployment)
    if not is_rolling(deployment):
        return desired
    current = total_replicas(all_rses)
    ceiling = desired + max_surge(deployment)
    if current >= ceiling:
        return replicas(new_rs)
    return replicas(new_rs) + max(0, min(ceiling - current, desired - replicas(new_rs)))


def old_rs_scale_down(deployment: Obj, new_rs: Obj, old_rses: list[Obj]) -> dict[str, int]:
    """New sizes for old ReplicaSets (by name) under RollingUpdate, keeping replicas - maxUnavailable available.

    As upstream's reconcileOldReplicaSets: unhealthy old pods (asked for but not available)
    go first, oldest ReplicaSet first, as far as the total allows; then available old pods
    go while more than the minimum stays available.
    """
    old_rses = by_age(active(old_rses))
    if total_replicas(old_rses) == 0:
        return {}
    desired = replicas(deployment)
    min_available = desired - max_unavailable(deployment)
    new_unavailable = replicas(new_rs) - available(new_rs)
    sizes = {name_of(rs): replicas(rs) for rs in old_rses}
    budget = total_replicas([*old_rses, new_rs]) - min_available - new_unavailable
    if budget <= 0:
        return {}
    cleaned = 0
    for rs in old_rses:
        if cleaned >= budget:
            break
        unhealthy = sizes[name_of(rs)] - available(rs)
        if sizes[name_of(rs)] == 0 or unhealthy <= 0:
            continue
        step = min(budget - cleaned, unhealthy)
        sizes[name_of(rs)] -= step
        cleaned += step
    available_now = total_available([*old_rses, new_rs])
    if available_now > min_available:
        allowed = available_now - min_available
        scaled = 0
        for rs in old_rses:
            if scaled >= allowed:
                break
            if sizes[name_of(rs)] == 0:
                continue
            step = min(sizes[name_of(rs)], allowed - scaled)
            sizes[name_of(rs)] -= step
            scaled += step
    return {name: size for name, size in sizes.items()
            if size != replicas(next(rs for rs in old_rses if name_of(rs) == name))}


def is_scaling_event(deployment: Obj, rses: Iterable[Obj | None]) -> bool:
    """Whether some active ReplicaSet was last sized for another Deployment size (the user scaled)."""
    for rs in active(rses):
        desired = int_annotation(rs, DESIRED_REPLICAS)
        if desired is not None and desired != replicas(deployment):
            return True
    return False


def _newer_first(rs: Obj) -> tuple[str, str]:
    return _meta(rs).get("creationTimestamp") or "", name_of(rs)


def proportional_sizes(deployment: Obj, new_rs: Obj | None, old_rses: list[Obj]) -> dict[str, int]:
    """New sizes (by name) when the Deployment was resized, as upstream's ``scale``; every ReplicaSet named is
    rewritten with the new size annotations even where its size stays.

    With one active ReplicaSet (or none) that one (or the newest) takes the new size; a
    saturated new ReplicaSet sends the old ones to 0; mid-rollout each active ReplicaSet
    gets its share of the change in proportion to its size, the rounding leftover going
    to the largest (for growth: the newest of the largest).
    """
    desired = replicas(deployment)
    everyone = [rs for rs in [*old_rses, new_rs] if rs is not None]
    actives = active(everyone)
    if len(actives) <= 1:
        target = actives[0] if actives else new_rs or (sorted(old_rses, key=_newer_first, reverse=True) or [None])[0]
        return {} if target is None else {name_of(target): desired}
    if new_rs is not None and int_annotation(new_rs, DESIRED_REPLICAS) == desired \
            and replicas(new_rs) == desired and available(new_rs) == desired:
        return {name_of(rs): 0 for rs in active(old_rses)}
    allowed = desired + max_surge(deployment) if desired > 0 else 0
    to_add = allowed - total_replicas(actives)
    if not is_rolling(deployment) or to_add == 0:
        # Sizes stay; the ReplicaSets are still rewritten with the new Deployment size in their annotations,
        # or every later sync would take this for a resize again and the rollout would never go on.
        return {name_of(rs): replicas(rs) for rs in actives}
    if to_add > 0:
        ordered = sorted(actives, key=lambda rs: (replicas(rs), *_newer_first(rs)), reverse=True)
    else:
        ordered = sorted(actives, key=lambda rs: (-replicas(rs), *_newer_first(rs)))
    sizes: dict[str, int] = {}
    added = 0
    for rs in ordered:
        share = _proportion(deployment, rs, to_add, added)
        sizes[name_of(rs)] = replicas(rs) + share
        added += share
    first = name_of(ordered[0])
    sizes[first] = max(0, sizes[first] + to_add - added)
    return sizes


def _proportion(deployment: Obj, rs: Obj, to_add: int, added: int) -> int:
    """The share of ``to_add`` pods this ReplicaSet takes (upstream's GetProportion)."""
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    desired = replicas(deployment)
    if desired == 0:
        fraction = -replicas(rs)
    else:
        before = int_annotation(rs, MAX_REPLICAS)
        if not before:
            fraction = 0
        else:
            exact = replicas(rs) * (desired + max_surge(deployment)) / before
            fraction = math.floor(exact + 0.5) - replicas(rs)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def history_to_delete(deployment: Obj, old_rses: list[Obj]) -> list[Obj]:
    """Old ReplicaSets beyond revisionHistoryLimit, lowest revision first, that are scaled to 0 and settled."""
    limit = _spec(deployment).get("revisionHistoryLimit")
    limit = 10 if limit is None else int(limit)
    alive = [rs for rs in old_rses if not _meta(rs).get("deletionTimestamp")]
    excess = len(alive) - limit
    if excess <= 0:
        return []
    ordered = sorted(alive, key=lambda rs: (revision(rs), _meta(rs).get("creationTimestamp") or "", name_of(rs)))
    return [rs for rs in ordered[:excess]
            if replicas(rs) == 0 and int(_status(rs).get("replicas") or 0) == 0
            and int(_meta(rs).get("generation") or 0) <= int(_status(rs).get("observedGeneration") or 0)]


def old_pods_running(old_rses: Iterable[Obj], pods: Iterable[Obj]) -> bool:
    """Whether Recreate must still wait: an old ReplicaSet reports pods, or an old pod has not finished."""
    old = list(old_rses)
    if _status_sum(old, "replicas") > 0:
        return True
    uids = {_meta(rs).get("uid") for rs in old}
    for pod in pods:
        owner = next((ref for ref in _meta(pod).get("ownerReferences") or [] if ref.get("controller")), None)
        if owner is not None and owner.get("uid") in uids \
                and _status(pod).get("phase") not in TERMINAL_PHASES:
            return True
    return False


# --- status and conditions ------------------------------------------------------------------------------


def condition(status: Obj, kind: str) -> Obj | None:
    return next((item for item in status.get("conditions") or [] if item.get("type") == kind), None)


def make_condition(kind: str, state: str, reason: str, message: str, now: datetime) -> Obj:
    stamp = rfc3339(now)
    return {"type": kind, "status": state, "reason": reason, "message": message,
            "lastUpdateTime": stamp, "lastTransitionTime": stamp}


def set_condition(status: Obj, new: Obj) -> None:
    """Upstream's SetDeploymentCondition: no change for the same status and reason; a transition keeps its time."""
    current = condition(status, new["type"])
    if current is not None and current.get("status") == new["status"] and current.get("reason") == new["reason"]:
        return
    if current is not None and current.get("status") == new["status"]:
        new = {**new, "lastTransitionTime": current.get("lastTransitionTime")}
    status["conditions"] = [*(item for item in status.get("conditions") or [] if item.get("type") != new["type"]),
                            new]


def counts(deployment: Obj, all_rses: list[Obj], new_rs: Obj | None) -> Obj:
    """The replica counts and availability condition of the status (upstream's calculateStatus)."""
    everyone = [rs for rs in all_rses if rs is not None]
    available_count = total_available(everyone)
    status: Obj = {
        "observedGeneration": int(_meta(deployment).get("generation") or 0),
        "replicas": _status_sum(everyone, "replicas"),
        "updatedReplicas": _status_sum([new_rs] if new_rs is not None else [], "replicas"),
        "readyReplicas": _status_sum(everyone, "readyReplicas"),
        "availableReplicas": available_count,
        "unavailableReplicas": max(0, total_replicas(everyone) - available_count),
    }
    collisions = _status(deployment).get("collisionCount")
    if collisions is not None:
        status["collisionCount"] = collisions
    status["conditions"] = copy.deepcopy(_status(deployment).get("conditions") or [])
    return status


def availability(deployment: Obj, status: Obj, now: datetime) -> None:
    if status["availableReplicas"] >= replicas(deployment) - max_unavailable(deployment):
        set_condition(status, make_condition(AVAILABLE, "True", MIN_AVAILABLE, "Deployment has minimum availability.",
                                             now))
    else:
        set_condition(status, make_condition(AVAILABLE, "False", MIN_UNAVAILABLE,
                                             "Deployment does not have minimum availability.", now))


def is_complete(deployment: Obj, status: Obj) -> bool:
    """Every replica is updated and available, and the status is for the current generation."""
    desired = replicas(deployment)
    return (status.get("updatedReplicas") == desired and status.get("replicas") == desired
            and status.get("availableReplicas") == desired
            and int(status.get("observedGeneration") or 0) >= int(_meta(deployment).get("generation") or 0))


def has_progressed(old: Obj, new: Obj) -> bool:
    """More updated, ready or available pods, or fewer old ones, than the stored status said."""
    old_old = int(old.get("replicas") or 0) - int(old.get("updatedReplicas") or 0)
    new_old = new["replicas"] - new["updatedReplicas"]
    return (new["updatedReplicas"] > int(old.get("updatedReplicas") or 0) or new_old < old_old
            or new["readyReplicas"] > int(old.get("readyReplicas") or 0)
            or new["availableReplicas"] > int(old.get("availableReplicas") or 0))


def timed_out(deployment: Obj, status: Obj, now: datetime) -> bool:
    """No progress recorded for progressDeadlineSeconds."""
    current = condition(status, PROGRESSING)
    if current is None or current.get("reason") == NEW_RS_AVAILABLE:
        return False
    if current.get("reason") == TIMED_OUT:
        return True
    since = parse_time(current.get("lastUpdateTime"))
    deadline = int(_spec(deployment).get("progressDeadlineSeconds") or 600)
    return since is not None and since + timedelta(seconds=deadline) < now


def rollout_status(deployment: Obj, all_rses: list[Obj], new_rs: Obj | None, now: datetime,
                   created: bool = False) -> Obj:
    """The Deployment's whole status after a sync (calculateStatus plus syncRolloutStatus' Progressing)."""
    status = counts(deployment, all_rses, new_rs)
    availability(deployment, status, now)
    new_name = name_of(new_rs) if new_rs is not None else None
    if created and new_name:
        set_condition(status, make_condition(PROGRESSING, "True", NEW_RS_CREATED,
                                             f'Created new replica set "{new_name}"', now))
    elif new_name and condition(status, PROGRESSING) is None:
        set_condition(status, make_condition(PROGRESSING, "True", FOUND_NEW_RS,
                                             f'Found new replica set "{new_name}"', now))
    current = condition(status, PROGRESSING)
    if current is not None and current.get("reason") == NEW_RS_AVAILABLE \
            and status["replicas"] == status["updatedReplicas"]:
        return status
    subject = f'ReplicaSet "{new_name}"' if new_name else f'Deployment "{name_of(deployment)}"'
    if is_complete(deployment, status):
        set_condition(status, make_condition(PROGRESSING, "True", NEW_RS_AVAILABLE,
                                             f"{subject} has successfully progressed.", now))
    elif has_progressed(_status(deployment), status):
        progress = make_condition(PROGRESSING, "True", RS_UPDATED, f"{subject} is progressing.", now)
        if current is not None and current.get("status") == "True":
            progress["lastTransitionTime"] = current.get("lastTransitionTime")
        status["conditions"] = [*(item for item in status["conditions"] if item.get("type") != PROGRESSING),
                                progress]
    elif timed_out(deployment, status, now):
        set_condition(status, make_condition(PROGRESSING, "False", TIMED_OUT, f"{subject} has timed out progressing.",
                                             now))
    return status


def paused_status(deployment: Obj, all_rses: list[Obj], new_rs: Obj | None, now: datetime) -> Obj:
    """The status of a paused Deployment: counts, availability, and Progressing Unknown (DeploymentPaused)."""
    status = counts(deployment, all_rses, new_rs)
    availability(deployment, status, now)
    set_condition(status, make_condition(PROGRESSING, "Unknown", PAUSED, "Deployment is paused", now))
    return status


def resumed(status: Obj, now: datetime) -> None:
    """A Deployment no longer paused says so until the next progress (DeploymentResumed)."""
    current = condition(status, PROGRESSING)
    if current is not None and current.get("reason") == PAUSED:
        set_condition(status, make_condition(PROGRESSING, "Unknown", RESUMED, "Deployment is resumed", now))


def deadline_remaining(deployment: Obj, status: Obj, now: datetime) -> float | None:
    """Seconds until an in-progress rollout would pass its deadline; None when none is running."""
    current = condition(status, PROGRESSING)
    if current is None or current.get("status") != "True" or current.get("reason") == NEW_RS_AVAILABLE:
        return None
    since = parse_time(current.get("lastUpdateTime"))
    if since is None:
        return None
    deadline = int(_spec(deployment).get("progressDeadlineSeconds") or 600)
    return max(0.0, (since + timedelta(seconds=deadline) - now).total_seconds())

