"""Deployments (apps): roll a pod template out through ReplicaSets."""

from __future__ import annotations

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource
from daemons.api.defaults import default_deployment

COLUMNS = (
    Column("Ready", "string", lambda o, _n: f"{(o.get('status') or {}).get('readyReplicas') or 0}/"
                                           f"{o.get('spec', {}).get('replicas', 1)}"),
    Column("Up-to-date", "integer", lambda o, _n: int((o.get("status") or {}).get("updatedReplicas") or 0)),
    Column("Available", "integer", lambda o, _n: int((o.get("status") or {}).get("availableReplicas") or 0)),
    tables.AGE,
    Column("Containers", "string", lambda o, _n: tables.template_containers(o)[0], priority=1),
    Column("Images", "string", lambda o, _n: tables.template_containers(o)[1], priority=1),
    Column("Selector", "string", lambda o, _n: tables.selector_text(o), priority=1),
)

RESOURCE = Resource("Deployment", "deployments", models.Deployment, group="apps", short_names=("deploy",),
                    subresources=("status", "scale"), categories=("all",), columns=COLUMNS,
                    initial_status=lambda _obj: {}, defaults=default_deployment)
