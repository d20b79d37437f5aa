"""DaemonSets (apps): one pod from a template on every node that qualifies.

Which nodes qualify, how pods are replaced on a template change and what the status counts live in the
DaemonSet controller (daemons/controllers/daemonset.py); this row holds the API side: model, upstream's
defaults and validation, kubectl's columns, and the revision history both the controller and ``kubectl
rollout`` read.

ControllerRevisions are not served here. The controller labels each pod with its template's hash
(``controller-revision-hash``, as upstream) and keeps the templates it rolled out in the DaemonSet's
``HISTORY_ANNOTATION``: a JSON list, oldest first, of ``{"revision", "hash", "template"[, "changeCause"]}``.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal

from pydantic import Field

from daemons.api import models, tables
from daemons.api.bundle import Column, FieldError, Obj, Resource
from daemons.api.defaults import default_daemon_set
from daemons.api.kinds.replicationcontroller import go_map
from daemons.api.selectors import LabelSelectorQuery, SelectorError

STRATEGIES = ("OnDelete", "RollingUpdate")
HASH_LABEL = "controller-revision-hash"
HISTORY_ANNOTATION = "daemonset.minik8s.io/revision-history"
PERCENT = re.compile(r"^[0-9]+%$")


class RollingUpdateDaemonSet(models.KubeModel):
    max_unavailable: models.IntOrString | None = None
    max_surge: models.IntOrString | None = None


class DaemonSetUpdateStrategy(models.KubeModel):
    type: str | None = None
    rolling_update: RollingUpdateDaemonSet | None = None


class DaemonSetSpec(models.KubeModel):
    selector: models.LabelSelector
    template: models.PodTemplateSpec
    update_strategy: DaemonSetUpdateStrategy | None = None
    min_ready_seconds: int | None = None
    revision_history_limit: int | None = None


class DaemonSetCondition(models.KubeModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class DaemonSetStatus(models.KubeModel):
    current_number_scheduled: Annotated[int, Field(ge=0)] = 0
    number_misscheduled: Annotated[int, Field(ge=0)] = 0
    desired_number_scheduled: Annotated[int, Field(ge=0)] = 0
    number_ready: Annotated[int, Field(ge=0)] = 0
    observed_generation: int | None = None
    updated_number_scheduled: int | None = None
    number_available: int | None = None
    number_unavailable: int | None = None
    collision_count: int | None = None
    conditions: list[DaemonSetCondition] | None = None


class DaemonSet(models.KubeObject):
    spec: DaemonSetSpec
    status: DaemonSetStatus | None = None


def recorded_history(ds: Obj) -> list[Obj]:
    """The revisions the controller recorded, oldest first; none when the annotation is missing or unreadable."""
    text = ((ds.get("metadata") or {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    try:
        history = json.loads(text) if text else []
    except ValueError:
        return []
    if not isinstance(history, list):
        return []
    return [entry for entry in history if isinstance(entry, dict) and isinstance(entry.get("revision"), int)]


# --- hooks ------------------------------------------------------------------------------------------


def int_or_percent(value: object) -> int | None:
    """The number in an IntOrString (``3`` or ``"30%"``); None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and PERCENT.match(value):
        return int(value[:-1])
    return None


def _check_int_or_percent(path: str, value: object) -> list[FieldError]:
    """ValidatePositiveIntOrPercent and IsNotMoreThan100Percent, in upstream's words."""
    if isinstance(value, str) and not PERCENT.match(value):
        return [FieldError.invalid(path, value, "a valid percent string must be a numeric string followed by an "
                                   "ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")]
    number = int_or_percent(value)
    if number is None:
        return [FieldError.invalid(path, value, "must be an integer or percentage (e.g '5%')")]
    if number < 0:
        return [FieldError.invalid(path, value, "must be greater than or equal to 0")]
    if isinstance(value, str) and number > 100:
        return [FieldError.invalid(path, value, "must not be greater than 100%")]
    return []


def _check_strategy(strategy: Obj) -> list[FieldError]:
    kind = strategy.get("type")
    if kind not in STRATEGIES:
        return [FieldError.not_supported("spec.updateStrategy.type", kind, STRATEGIES)]
    if kind == "OnDelete":
        return []
    rolling = strategy.get("rollingUpdate")
    if not isinstance(rolling, dict):
        return [FieldError.required("spec.updateStrategy.rollingUpdate")]
    path = "spec.updateStrategy.rollingUpdate"
    unavailable, surge = rolling.get("maxUnavailable", 1), rolling.get("maxSurge", 0)
    errors = [*_check_int_or_percent(f"{path}.maxUnavailable", unavailable),
              *_check_int_or_percent(f"{path}.maxSurge", surge)]
    if errors:
        return errors
    has_unavailable, has_surge = int_or_percent(unavailable) != 0, int_or_percent(surge) != 0
    if has_unavailable and has_surge:
        return [FieldError.invalid(f"{path}.maxSurge", surge, "may not be set when maxUnavailable is non-zero")]
    if not has_unavailable and not has_surge:
        return [FieldError.invalid(f"{path}.maxUnavailable", unavailable, "cannot be 0 when maxSurge is 0")]
    return []


def check(obj: Obj, _current: Obj | None) -> list[FieldError]:
    """ValidateDaemonSetSpec: a non-empty selector matching a template that restarts Always, a valid strategy."""
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    selector = spec.get("selector") or {}
    template = spec.get("template") or {}
    try:
        query = LabelSelectorQuery.from_label_selector(selector)
    except SelectorError as error:
        errors.append(FieldError.invalid("spec.selector", str(selector), str(error)))
        query = None
    if query is not None and not query.requirements:
        errors.append(FieldError("FieldValueInvalid", "spec.selector",
                                 f"Invalid value: {go_map(selector.get('matchLabels') or {})}: empty selector is "
                                 "invalid for daemonset"))
    labels = (template.get("metadata") or {}).get("labels") or {}
    if query is not None and query.requirements and not query.matches(labels):
        errors.append(FieldError("FieldValueInvalid", "spec.template.metadata.labels",
                                 f"Invalid value: {go_map(labels)}: `selector` does not match template `labels`"))
    pod_spec = template.get("spec") or {}
    restart_policy = pod_spec.get("restartPolicy", "Always")
    if restart_policy != "Always":
        errors.append(FieldError.not_supported("spec.template.spec.restartPolicy", restart_policy, ("Always",)))
    if pod_spec.get("activeDeadlineSeconds") is not None:
        errors.append(FieldError.forbidden("spec.template.spec.activeDeadlineSeconds",
                                           "activeDeadlineSeconds in DaemonSet is not Supported"))
    for field in ("minReadySeconds", "revisionHistoryLimit"):
        value = spec.get(field)
        if isinstance(value, int) and value < 0:
            errors.append(FieldError.invalid(f"spec.{field}", value, "must be greater than or equal to 0"))
    errors += _check_strategy(spec.get("updateStrategy") or {})
    return errors


def check_update(obj: Obj, current: Obj) -> list[FieldError]:
    """The selector picks the pods a DaemonSet owns: upstream forbids changing it."""
    selector, old = (obj.get("spec") or {}).get("selector"), (current.get("spec") or {}).get("selector")
    if selector != old:
        return [FieldError.invalid("spec.selector", selector, "field is immutable")]
    return []


# --- columns (kubectl 1.33's printDaemonSet) --------------------------------------------------------


def _status(name: str, field: str) -> Column:
    return Column(name, "integer", lambda o, _n: int((o.get("status") or {}).get(field) or 0))


def node_selector_text(obj: Obj) -> str:
    """NODE SELECTOR: the template's nodeSelector as ``key=value`` pairs, sorted, as labels.FormatLabels."""
    selector = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items())) or tables.NONE


COLUMNS = (
    _status("Desired", "desiredNumberScheduled"),
    _status("Current", "currentNumberScheduled"),
    _status("Ready", "numberReady"),
    _status("Up-to-date", "updatedNumberScheduled"),
    _status("Available", "numberAvailable"),
    Column("Node Selector", "string", lambda o, _n: node_selector_text(o)),
    tables.AGE,
    Column("Containers", "string", lambda o, _n: tables.template_containers(o)[0], priority=1),
    Column("Images", "string", lambda o, _n: tables.template_containers(o)[1], priority=1),
    Column("Selector", "string", lambda o, _n: tables.selector_text(o), priority=1),
)

RESOURCE = Resource("DaemonSet", "daemonsets", DaemonSet, group="apps", short_names=("ds",),
                    subresources=("status",), categories=("all",), defaults=default_daemon_set, check=check,
                    check_update=check_update, columns=COLUMNS,
                    initial_status=lambda _obj: {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                                                 "desiredNumberScheduled": 0, "numberReady": 0})
