"""ReplicaSets (apps): keep a number of pods from one template running."""

from __future__ import annotations

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource
from daemons.api.defaults import default_replica_set

COLUMNS = (
    Column("Desired", "integer", lambda o, _n: int(o.get("spec", {}).get("replicas", 1))),
    Column("Current", "integer", lambda o, _n: int((o.get("status") or {}).get("replicas") or 0)),
    Column("Ready", "integer", lambda o, _n: int((o.get("status") or {}).get("readyReplicas") or 0)),
    tables.AGE,
    Column("Containers", "string", lambda o, _n: tables.template_containers(o)[0], priority=1),
    Column("Images", "string", lambda o, _n: tables.template_containers(o)[1], priority=1),
    Column("Selector", "string", lambda o, _n: tables.selector_text(o), priority=1),
)


RESOURCE = Resource("ReplicaSet", "replicasets", models.ReplicaSet, group="apps", short_names=("rs",),
                    subresources=("status", "scale"), categories=("all",), columns=COLUMNS,
                    initial_status=lambda _obj: {"replicas": 0}, defaults=default_replica_set)
