"""v1 ReplicationController: ReplicaSet's predecessor, selecting its pods by a plain label map.

Served by the ReplicaSet controller. Defaults as upstream: the selector, and the object's labels, come from
the template's labels when left out.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import Field

from daemons.api import tables
from daemons.api.bundle import Column, FieldError, Obj, Resource
from daemons.api.defaults import default_replication_controller
from daemons.api.models import KubeModel, KubeObject, PodTemplateSpec, ReplicaSetStatus
from daemons.api.selectors import LabelSelectorQuery


class ReplicationControllerSpec(KubeModel):
    replicas: Annotated[int, Field(ge=0)] = 1
    min_ready_seconds: Annotated[int, Field(ge=0)] | None = None
    selector: dict[str, str] | None = None
    template: PodTemplateSpec | None = None


class ReplicationController(KubeObject):
    spec: ReplicationControllerSpec = Field(default_factory=ReplicationControllerSpec)
    status: ReplicaSetStatus | None = None


def go_map(labels: dict[str, str]) -> str:
    """A label map as Go's ``%#v`` prints it in a field error."""
    return "map[string]string{" + ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in labels.items()) + "}"


def check(obj: Obj, current: Obj | None) -> list[FieldError]:
    """ValidateReplicationControllerSpec: a non-empty selector that matches a template that restarts Always."""
    spec = obj.get("spec") or {}
    selector = spec.get("selector") or {}
    template = spec.get("template")
    errors: list[FieldError] = []
    if not selector:
        errors.append(FieldError.required("spec.selector"))
    if not template:
        return [*errors, FieldError.required("spec.template")]
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector and not LabelSelectorQuery.from_map(selector).matches(labels):
        errors.append(FieldError("FieldValueInvalid", "spec.template.metadata.labels",
                                 f"Invalid value: {go_map(labels)}: `selector` does not match template `labels`"))
    restart_policy = (template.get("spec") or {}).get("restartPolicy", "Always")
    if restart_policy != "Always":
        errors.append(FieldError.not_supported("spec.template.spec.restartPolicy", restart_policy, ("Always",)))
    return errors


def selector_cell(obj: Obj) -> str:
    return str(LabelSelectorQuery.from_map((obj.get("spec") or {}).get("selector"))) or tables.NONE


COLUMNS = (
    Column("Desired", "integer", lambda o, _n: int((o.get("spec") or {}).get("replicas", 1))),
    Column("Current", "integer", lambda o, _n: int((o.get("status") or {}).get("replicas") or 0)),
    Column("Ready", "integer", lambda o, _n: int((o.get("status") or {}).get("readyReplicas") or 0)),
    tables.AGE,
    Column("Containers", "string", lambda o, _n: tables.template_containers(o)[0], priority=1),
    Column("Images", "string", lambda o, _n: tables.template_containers(o)[1], priority=1),
    Column("Selector", "string", lambda o, _n: selector_cell(o), priority=1),
)

RESOURCE = Resource(
    "ReplicationController", "replicationcontrollers", ReplicationController, short_names=("rc",),
    subresources=("status", "scale"), categories=("all",), defaults=default_replication_controller, check=check,
    columns=COLUMNS, initial_status=lambda _obj: {"replicas": 0},
)
